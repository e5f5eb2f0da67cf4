#pragma once
// What the `hotcold worker` tests share (docs/distributed.md): small files made once, workers'
// addresses from their logs, a server's requests until they fail or pass.
#include <fstream>
#include <iterator>
#include <optional>

#include "tests/server/serve_process.hpp"

namespace hotcold::test {

// The address a worker on port 0 prints once it listens ("" when it ended first, with its log).
inline std::string worker_address(server_process& w) {
  const std::string mark = "listening on ";
  for (int i = 0; i < 1200; ++i) {
    const std::string log = w.log();
    if (const auto at = log.find(mark); at != std::string::npos) {
      const auto end = log.find(' ', at + mark.size());
      return log.substr(at + mark.size(), end - at - mark.size());
    }
    if (w.ended()) {
      ADD_FAILURE() << "the worker ended before listening:\n" << log;
      return {};
    }
    std::this_thread::sleep_for(50ms);
  }
  ADD_FAILURE() << "the worker did not listen within a minute:\n" << w.log();
  return {};
}

struct workers_files {
  std::string dense, q4, sparse, other, gemma2;
};
// A 4-layer ReLU llama (F16), the same in Q4_0, its sparse file (predictors), another seed's, and a
// Gemma 2 file of the same shape.
inline const workers_files& files() {
  static const workers_files f = [] {
    const auto dir = fs::temp_directory_path() / ("hotcold-workers-" + std::to_string(getpid()));
    fs::create_directories(dir);
    workers_files w{(dir / "dense.gguf").string(), (dir / "q4.gguf").string(), (dir / "sparse.gguf").string(), (dir / "other.gguf").string(),
                    (dir / "gemma2.gguf").string()};
    const std::string gen = std::string(HOTCOLD_BIN) + " gen-model --vocab " HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf --embd 128 --layers 4 --ffn 512 "
                                                       "--heads 4 --kv-heads 2 ";
    EXPECT_EQ(std::system((gen + "-o '" + w.dense + "' >/dev/null 2>&1").c_str()), 0);
    EXPECT_EQ(std::system((gen + "--type q4_0 -o '" + w.q4 + "' >/dev/null 2>&1").c_str()), 0);
    EXPECT_EQ(std::system((gen + "--seed 2 -o '" + w.other + "' >/dev/null 2>&1").c_str()), 0);
    // Gemma 2 with a window the tests' prompts pass.
    EXPECT_EQ(std::system((gen + "--arch gemma2 --act gelu --sliding-window 4 -o '" + w.gemma2 + "' >/dev/null 2>&1").c_str()), 0);
    EXPECT_EQ(std::system((std::string(HOTCOLD_BIN) + " prepare -m '" + w.dense + "' -o '" + w.sparse + "' --tokens 128 -t 2 -c 64 >/dev/null 2>&1").c_str()), 0);
    return w;
  }();
  return f;
}

inline std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// eval's logits at every position of a prompt batch through `workers` against one process's: within
// 1e-5 of the largest (or of 1).
inline void expect_one_processs_logits(const std::string& file, const std::string& workers) {
  const std::string here = (fs::temp_directory_path() / ("hotcold-workers-logits-" + std::to_string(getpid()))).string();
  const std::vector<std::string> eval{"eval", "-m", file, "-p", "The cat sat on the mat and looked", "-c", "64", "-t", "1", "--pipeline", "actors"};
  auto one = eval, two = eval;
  one.insert(one.end(), {"--logits-out", here + ".one"});
  two.insert(two.end(), {"--logits-out", here + ".two", "--workers", workers});
  run_stdout(one), run_stdout(two);
  const auto x = read_floats(here + ".one"), y = read_floats(here + ".two");
  ASSERT_FALSE(x.empty());
  ASSERT_EQ(x.size(), y.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(double(x[i]) - y[i])), scale = std::max(scale, std::fabs(double(x[i])));
  EXPECT_LE(worst, 1e-5 * std::max(1.0, scale));
}

// A run through a pair's workers (a long greedy generation) whose second worker gets `signal` while
// it generates: the run's exit status, the seconds from the signal to its end, and its log.
struct run_after_signal {
  int code = 0;
  double seconds = 0;
  std::string log;
};

// Two workers on loopback (port 0) for a file, a thread each (the second with b_more's flags too),
// and the addresses they print.
inline std::vector<std::string> worker_args(const std::string& file, const std::vector<std::string>& more = {}) {
  std::vector<std::string> args{"--listen", "tcp://127.0.0.1:0", "-m", file, "-t", "1"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}
struct worker_pair {
  server_process a, b;
  std::string wa, wb;
  explicit worker_pair(const std::string& file, const std::vector<std::string>& b_more = {})
      : a(worker_args(file), "worker"),
        b(worker_args(file, b_more), "worker"),
        wa(worker_address(a)),
        wb(worker_address(b)) {}
  bool listening() const { return !wa.empty() && !wb.empty(); }
};

// Waits until a worker's log says a coordinator assigned it layers.
inline bool assigned(server_process& w) {
  for (int i = 0; i < 600 && !w.ended(); ++i, std::this_thread::sleep_for(50ms))
    if (w.log().find("runs layers") != std::string::npos) return true;
  return false;
}

// Waits until a process's log has `text` (false if not within `limit`).
inline bool log_says(server_process& p, const std::string& text, std::chrono::milliseconds limit) {
  for (auto t = 0ms; t < limit; t += 50ms, std::this_thread::sleep_for(50ms))
    if (p.log().find(text) != std::string::npos) return true;
  return false;
}

// The port of a worker's address (tcp://HOST:PORT).
inline uint16_t port_of(const std::string& address) { return static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))); }

// Generates on the server until the request ends with an error (its text), for at most `limit`.
inline std::string first_error(hotcold::clients::client& c, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    const auto g = c.generate({{"prompt", "The cat"}, {"n_predict", 4}, {"sampling", {{"temperature", 0}}}});
    if (g.done.finish == "error") return g.done.error.value_or("(no error text)");
    std::this_thread::sleep_for(50ms);
  }
  return {};
}

// Generates on the server until a request completes (its text), for at most `limit`.
inline std::optional<std::string> first_success(hotcold::clients::client& c, const nlohmann::json& request, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    const auto g = c.generate(request);
    if (g.done.finish != "error") return g.text;
    std::this_thread::sleep_for(100ms);
  }
  return std::nullopt;
}

inline run_after_signal signal_mid_generation(const std::string& file, worker_pair& pair, int signal) {
  server_process run({"-m", file, "-p", "Hello", "-n", "100000", "--temp", "0", "-c", "4096", "-t", "1", "--workers", pair.wa + "," + pair.wb}, "run");
  EXPECT_TRUE(assigned(pair.b)) << pair.b.log() << run.log();
  std::this_thread::sleep_for(300ms);  // (generating)
  kill(pair.b.pid(), signal);
  const auto t0 = std::chrono::steady_clock::now();
  run_after_signal out;
  out.code = run.wait_exit(10s);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.log = run.log();
  return out;
}

}  // namespace hotcold::test
