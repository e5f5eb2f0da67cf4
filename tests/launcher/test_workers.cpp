// hotcold worker and --workers (docs/distributed.md): the layers of a file in stage processes on
// loopback, the coordinator keeping the embeddings, the head and sampling.
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <mutex>

#include "tests/server/serve_process.hpp"

namespace hotcold::test {
namespace {

// The address a worker on port 0 prints once it listens ("" when it ended first, with its log).
std::string worker_address(server_process& w) {
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
  std::string dense, q4, sparse, other;
};
// A 4-layer ReLU llama (F16), the same in Q4_0, its sparse file (predictors), and another seed's.
const workers_files& files() {
  static const workers_files f = [] {
    const auto dir = fs::temp_directory_path() / ("hotcold-workers-" + std::to_string(getpid()));
    fs::create_directories(dir);
    workers_files w{(dir / "dense.gguf").string(), (dir / "q4.gguf").string(), (dir / "sparse.gguf").string(), (dir / "other.gguf").string()};
    const std::string gen = std::string(HOTCOLD_BIN) + " gen-model --vocab " HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf --embd 128 --layers 4 --ffn 512 "
                                                       "--heads 4 --kv-heads 2 ";
    EXPECT_EQ(std::system((gen + "-o '" + w.dense + "' >/dev/null 2>&1").c_str()), 0);
    EXPECT_EQ(std::system((gen + "--type q4_0 -o '" + w.q4 + "' >/dev/null 2>&1").c_str()), 0);
    EXPECT_EQ(std::system((gen + "--seed 2 -o '" + w.other + "' >/dev/null 2>&1").c_str()), 0);
    EXPECT_EQ(std::system((std::string(HOTCOLD_BIN) + " prepare -m '" + w.dense + "' -o '" + w.sparse + "' --tokens 128 -t 2 -c 64 >/dev/null 2>&1").c_str()), 0);
    return w;
  }();
  return f;
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// Two workers hold a file's layers (an uneven split and the even one): greedy text (a prompt batch,
// then decoding) is one process's, and every prompt position's logits are within 1e-5 of its, for
// dense and sparse files, F16 and Q4_0.
TEST(Workers, TwoStagesGiveOneProcesssTokensAndLogits) {
  const auto& f = files();
  for (const std::string& file : {f.dense, f.q4, f.sparse}) {
    SCOPED_TRACE(file);
    server_process a({"--listen", "tcp://127.0.0.1:0", "-m", file, "-t", "1"}, "worker"),
        b({"--listen", "tcp://127.0.0.1:0", "-m", file, "-t", "1"}, "worker");
    const std::string wa = worker_address(a), wb = worker_address(b);
    ASSERT_FALSE(wa.empty() || wb.empty());
    const std::string workers = wa + "," + wb;
    const std::vector<std::string> gen{"run", "-m", file, "-p", "Once upon a time there was", "-n", "16", "--temp", "0", "-c", "64", "-t", "1"};
    const std::string alone = run_stdout(gen);
    ASSERT_FALSE(alone.empty());
    for (const std::string split : {"1,3", "auto"}) {
      auto args = gen;
      args.insert(args.end(), {"--workers", workers, "--split", split});
      EXPECT_EQ(run_stdout(args), alone) << "--split " << split << "\n" << a.log() << b.log();
    }
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
    EXPECT_NE(a.log().find("runs layers 0-1 of 4"), std::string::npos) << a.log();  // (the even split, last)
    EXPECT_EQ(a.stop(), 0) << a.log();  // SIGTERM: a clean end
    EXPECT_EQ(b.stop(), 0) << b.log();
  }
}

// The value of the exposition's first line starting with `series` (-1 when none).
double metric(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

// Several sequences at once over two stages: a server's steps go in micro-batches of whole sequences
// (--micro-batches 2: stage 1 works on one while stage 2 works on the other), and each request's greedy
// text is one process's alone, for a dense and a sparse file; bench compares 1 and 2 micro-batches.
TEST(Workers, SequencesInMicroBatchesGiveOneProcesssText) {
  const auto& f = files();
  for (const std::string& file : {f.dense, f.sparse}) {
    SCOPED_TRACE(file);
    server_process a({"--listen", "tcp://127.0.0.1:0", "-m", file, "-t", "1"}, "worker"),
        b({"--listen", "tcp://127.0.0.1:0", "-m", file, "-t", "1"}, "worker");
    const std::string wa = worker_address(a), wb = worker_address(b);
    ASSERT_FALSE(wa.empty() || wb.empty());
    const std::string ep = tcp_endpoint();
    const int port = free_port();
    server_process serve({"-m", file, "-c", "128", "-t", "1", "--parallel", "4", "--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "--workers",
                          wa + "," + wb, "--split", "1,3", "--micro-batches", "2"});
    wait_ready(ep, &serve);
    const std::vector<std::string> prompts{"Once upon a time", "The cat sat on the mat", "Hello", "In the beginning there was"};
    std::vector<std::string> got(prompts.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < prompts.size(); ++i)
      clients.emplace_back([&, i] {
        hotcold::tools::client c(ep, 60s);
        got[i] = c.generate({{"prompt", prompts[i]}, {"n_predict", 12}, {"sampling", {{"temperature", 0}}}}).text;
      });
    for (auto& t : clients) t.join();
    // Steps of several sequences went in two groups: more trips through a stage than steps.
    const std::string m = http_get(port, "/metrics");
    EXPECT_GT(metric(m, "hotcold_stage_hop_seconds_count{stage=\"1\",worker=\"" + wa + "\",layers=\"0-0\"}"), metric(m, "hotcold_steps_total")) << m;
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(got[i] + "\n", run_stdout({"run", "-m", file, "-p", prompts[i], "-n", "12", "--temp", "0", "-c", "128", "-t", "1"})) << prompts[i];
    const std::string bench = run_capture(std::string(HOTCOLD_BIN) + " bench -m '" + file + "' -p 8 -n 8 -r 1 -t 1 --parallel 4 --micro-batches 1 --vs-micro-batches 2 --workers " + wa +
                                          "," + wb + " 2>&1");
    EXPECT_NE(bench.find("2 micro-batches vs 1, interleaved"), std::string::npos) << bench;
  }
}

// Waits until a worker's log says a coordinator assigned it layers.
bool assigned(server_process& w) {
  for (int i = 0; i < 600 && !w.ended(); ++i, std::this_thread::sleep_for(50ms))
    if (w.log().find("runs layers") != std::string::npos) return true;
  return false;
}

// kill -9 of a worker while a run generates: the run ends within 2 s with an error naming the stage
// (CAF's down message for the worker's proxy: the link broke), and does not wait for ever. A server
// over the same workers stays up: its request ends with that error, new ones are refused with it,
// health answers.
TEST(Workers, AWorkerKilledMidGenerationEndsItsRequestsNamingTheStage) {
  const auto& f = files();
  {
    server_process a({"--listen", "tcp://127.0.0.1:0", "-m", f.dense, "-t", "1"}, "worker"),
        b({"--listen", "tcp://127.0.0.1:0", "-m", f.dense, "-t", "1"}, "worker");
    const std::string wa = worker_address(a), wb = worker_address(b);
    ASSERT_FALSE(wa.empty() || wb.empty());
    server_process run({"-m", f.dense, "-p", "Hello", "-n", "100000", "--temp", "0", "-c", "4096", "-t", "1", "--workers", wa + "," + wb}, "run");
    ASSERT_TRUE(assigned(b)) << b.log() << run.log();
    std::this_thread::sleep_for(300ms);  // (generating)
    kill(b.pid(), SIGKILL);
    const auto t0 = std::chrono::steady_clock::now();
    const int code = run.wait_exit(10s);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(code, 1) << run.log();
    EXPECT_LT(seconds, 2.0) << run.log();
    EXPECT_NE(run.log().find("stage " + wb + " (layers 2-3): its worker is gone"), std::string::npos) << run.log();
  }
  server_process a({"--listen", "tcp://127.0.0.1:0", "-m", f.dense, "-t", "1"}, "worker"),
      b({"--listen", "tcp://127.0.0.1:0", "-m", f.dense, "-t", "1"}, "worker");
  const std::string wa = worker_address(a), wb = worker_address(b);
  ASSERT_FALSE(wa.empty() || wb.empty());
  const std::string ep = tcp_endpoint();
  server_process serve({"-m", f.dense, "-c", "256", "-t", "1", "--parallel", "2", "--zmq", ep, "--workers", wa + "," + wb});
  wait_ready(ep, &serve);
  hotcold::tools::client c(ep, 30s);
  const auto first = c.generate({{"prompt", "Once upon a time"}, {"n_predict", 8}, {"sampling", {{"temperature", 0}}}});
  EXPECT_EQ(first.done.finish, "length");
  EXPECT_EQ(first.text + "\n", run_stdout({"run", "-m", f.dense, "-p", "Once upon a time", "-n", "8", "--temp", "0", "-c", "256", "-t", "1"}));
  EXPECT_NE(a.log().find("runs layers 0-1 of 4"), std::string::npos) << a.log();
  kill(a.pid(), SIGKILL);
  std::string why;
  for (int i = 0; i < 40 && why.empty(); ++i) {
    const auto g = c.generate({{"prompt", "The cat"}, {"n_predict", 4}});
    if (g.done.finish == "error") why = g.done.error.value_or("(no error text)");
    else std::this_thread::sleep_for(50ms);  // (the down message may come a moment later)
  }
  EXPECT_NE(why.find("stage " + wa + " (layers 0-1): its worker is gone"), std::string::npos) << why << "\n" << serve.log();
  EXPECT_FALSE(serve.ended()) << serve.log();
  EXPECT_NO_THROW(c.call("health"));
}

// The port of a worker's address (tcp://HOST:PORT).
uint16_t port_of(const std::string& address) { return static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))); }

// Generates on the server until the request ends with an error (its text), for at most `limit`.
std::string first_error(hotcold::tools::client& c, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    const auto g = c.generate({{"prompt", "The cat"}, {"n_predict", 4}, {"sampling", {{"temperature", 0}}}});
    if (g.done.finish == "error") return g.done.error.value_or("(no error text)");
    std::this_thread::sleep_for(50ms);
  }
  return {};
}

// Generates on the server until a request completes (its text), for at most `limit`.
std::optional<std::string> first_success(hotcold::tools::client& c, const nlohmann::json& request, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    const auto g = c.generate(request);
    if (g.done.finish != "error") return g.text;
    std::this_thread::sleep_for(100ms);
  }
  return std::nullopt;
}

// A worker that stops answering (SIGSTOP: its connection stays open) is noticed by the heartbeat:
// a run ends within 2 s naming the stage. A server over workers refuses work while a stage is gone
// or silent and admits it again when it answers (SIGCONT) or a new worker listens at its address
// (after kill -9): the text is then one process's again, on fresh caches.
TEST(Workers, AHungWorkerIsNoticedAndAStageThatComesBackIsAdmittedAgain) {
  const auto& f = files();
  server_process a({"--listen", "tcp://127.0.0.1:0", "-m", f.dense, "-t", "1"}, "worker"),
      b({"--listen", "tcp://127.0.0.1:0", "-m", f.dense, "-t", "1"}, "worker");
  const std::string wa = worker_address(a), wb = worker_address(b);
  ASSERT_FALSE(wa.empty() || wb.empty());
  {
    server_process run({"-m", f.dense, "-p", "Hello", "-n", "100000", "--temp", "0", "-c", "4096", "-t", "1", "--workers", wa + "," + wb}, "run");
    ASSERT_TRUE(assigned(b)) << b.log() << run.log();
    std::this_thread::sleep_for(300ms);  // (generating)
    kill(b.pid(), SIGSTOP);
    const auto t0 = std::chrono::steady_clock::now();
    const int code = run.wait_exit(10s);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    kill(b.pid(), SIGCONT);
    EXPECT_EQ(code, 1) << run.log();
    EXPECT_LT(seconds, 2.0) << run.log();
    EXPECT_NE(run.log().find("stage " + wb + " (layers 2-3): no answer to a heartbeat"), std::string::npos) << run.log();
  }
  const std::string ep = tcp_endpoint();
  server_process serve({"-m", f.dense, "-c", "256", "-t", "1", "--parallel", "2", "--zmq", ep, "--workers", wa + "," + wb});
  wait_ready(ep, &serve);
  hotcold::tools::client c(ep, 30s);
  const nlohmann::json request{{"prompt", "Once upon a time"}, {"n_predict", 8}, {"sampling", {{"temperature", 0}}}};
  const std::string alone = run_stdout({"run", "-m", f.dense, "-p", "Once upon a time", "-n", "8", "--temp", "0", "-c", "256", "-t", "1"});
  EXPECT_EQ(c.generate(request).text + "\n", alone);

  kill(b.pid(), SIGSTOP);
  const std::string silent = first_error(c, 5s);
  EXPECT_NE(silent.find("stage " + wb + " (layers 2-3): no answer to a heartbeat"), std::string::npos) << silent << "\n" << serve.log();
  kill(b.pid(), SIGCONT);
  const auto back = first_success(c, request, 10s);
  ASSERT_TRUE(back.has_value()) << serve.log();
  EXPECT_EQ(*back + "\n", alone);
  EXPECT_NE(serve.log().find("stage " + wb + " (layers 2-3): back"), std::string::npos) << serve.log();

  kill(a.pid(), SIGKILL);
  const std::string gone = first_error(c, 5s);
  EXPECT_NE(gone.find("stage " + wa + " (layers 0-1): its worker is gone"), std::string::npos) << gone << "\n" << serve.log();
  server_process again({"--listen", wa, "-m", f.dense, "-t", "1"}, "worker");
  ASSERT_EQ(worker_address(again), wa);
  const auto readmitted = first_success(c, request, 10s);
  ASSERT_TRUE(readmitted.has_value()) << serve.log() << again.log();
  EXPECT_EQ(*readmitted + "\n", alone);
  EXPECT_NE(again.log().find("runs layers 0-1 of 4"), std::string::npos) << again.log();
  EXPECT_FALSE(serve.ended()) << serve.log();
  EXPECT_NO_THROW(c.call("health"));
  EXPECT_EQ(serve.stop(), 0) << serve.log();
}

// Per-stage telemetry: /metrics has each stage's state, busy ratio, compute, a histogram of hops
// (one a step) and the bytes a token costs its link (a 128-wide file: 128 floats each way and a
// slot and position, 1040 bytes, whatever the step); promtool accepts it; /api/stats carries the
// same for the dashboard, which draws a row a stage; a silent worker reads 0 and gone; --trace-out
// has each stage's hops and layers, one a step.
TEST(Workers, StagesShowInMetricsStatsAndTraces) {
  const auto& f = files();
  server_process a({"--listen", "tcp://127.0.0.1:0", "-m", f.dense, "-t", "1"}, "worker"),
      b({"--listen", "tcp://127.0.0.1:0", "-m", f.dense, "-t", "1"}, "worker");
  const std::string wa = worker_address(a), wb = worker_address(b);
  ASSERT_FALSE(wa.empty() || wb.empty());
  const std::string ep = tcp_endpoint();
  const int port = free_port();
  server_process serve({"-m", f.dense, "-c", "256", "-t", "1", "--parallel", "2", "--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "--workers",
                        wa + "," + wb});
  wait_ready(ep, &serve);
  hotcold::tools::client c(ep, 30s);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.generate({{"prompt", "Once upon a time"}, {"n_predict", 5}}).done.finish, "length");
  const std::string m = http_get(port, "/metrics");
  const std::string s1 = "{stage=\"1\",worker=\"" + wa + "\",layers=\"0-1\"}", s2 = "{stage=\"2\",worker=\"" + wb + "\",layers=\"2-3\"}";
  const double steps = metric(m, "hotcold_steps_total");
  EXPECT_GE(steps, 6);
  for (const auto& s : {s1, s2}) {
    EXPECT_EQ(metric(m, "hotcold_stage_up" + s), 1) << m;
    EXPECT_EQ(metric(m, "hotcold_stage_hop_seconds_count" + s), steps) << m;
    EXPECT_EQ(metric(m, "hotcold_stage_bytes_per_token" + s), 2 * 128 * 4 + 16) << m;
    EXPECT_GT(metric(m, "hotcold_stage_compute_seconds_total" + s), 0) << m;
    EXPECT_GE(metric(m, "hotcold_stage_busy_ratio" + s), 0) << m;
    double heartbeat = 0;  // (every 250 ms)
    for (int i = 0; i < 40 && heartbeat <= 0; ++i, std::this_thread::sleep_for(50ms)) heartbeat = metric(http_get(port, "/metrics"), "hotcold_stage_heartbeat_seconds" + s);
    EXPECT_GT(heartbeat, 0) << m;
  }
  const double tokens = metric(m, "hotcold_step_tokens_total");
  auto sent = s1;
  sent.insert(sent.size() - 1, ",direction=\"sent\"");
  EXPECT_EQ(metric(m, "hotcold_stage_bytes_total" + sent), tokens * (128 * 4 + 16)) << m;
  if (std::system("command -v promtool >/dev/null 2>&1") == 0) {
    const auto path = fs::temp_directory_path() / ("hotcold-stage-metrics-" + std::to_string(getpid()));
    std::ofstream(path) << m.substr(m.find("\r\n\r\n") + 4);
    EXPECT_EQ(std::system(("promtool check metrics < '" + path.string() + "'").c_str()), 0);
    fs::remove(path);
  }
  const auto stats_of = [&] {
    const std::string st = http_get(port, "/api/stats");
    return nlohmann::json::parse(st.substr(st.find("\r\n\r\n") + 4));
  };
  auto stats = stats_of();
  ASSERT_EQ(stats["pipeline"]["stages"].size(), 2u) << stats.dump();
  EXPECT_EQ(stats["pipeline"]["stages"][1]["where"], wb + " (layers 2-3)");
  EXPECT_EQ(stats["pipeline"]["stages"][1]["bytes_per_token"], 1040.0);
  EXPECT_TRUE(stats["pipeline"]["stages"][1]["up"].get<bool>());

  kill(b.pid(), SIGSTOP);
  bool gone = false;
  for (int i = 0; i < 60 && !gone; ++i, std::this_thread::sleep_for(100ms)) gone = metric(http_get(port, "/metrics"), "hotcold_stage_up" + s2) == 0;
  EXPECT_TRUE(gone);
  // The dashboard (headless Chromium, while the second stage is silent): a row a stage, its state.
  if (const std::string chromium = run_capture("command -v chromium || command -v chromium-browser"); !chromium.empty()) {
    const auto profile = fs::temp_directory_path() / ("hotcold-stage-dashboard-" + std::to_string(getpid()));
    const std::string dom = run_capture("timeout 120 " + chromium.substr(0, chromium.find('\n')) +
                                        " --headless --no-sandbox --disable-gpu --disable-background-networking --user-data-dir='" + profile.string() +
                                        "' --virtual-time-budget=4000 --window-size=1200,900 --dump-dom 'http://127.0.0.1:" + std::to_string(port) +
                                        "/?frames=1&period_ms=200' 2>/dev/null");
    fs::remove_all(profile);
    EXPECT_EQ(dom.find("id=\"stages-card\" hidden"), std::string::npos) << dom.substr(0, 2000);
    EXPECT_NE(dom.find("<tr id=\"stage-1\"><td>1</td><td>" + wa + "</td><td>0-1</td><td>up</td>"), std::string::npos) << dom;
    EXPECT_NE(dom.find("<tr id=\"stage-2\" class=\"off\"><td>2</td><td>" + wb + "</td><td>2-3</td><td>gone</td>"), std::string::npos) << dom;
    EXPECT_NE(dom.find("<td>1.0 kB</td>"), std::string::npos);  // (1040 bytes a token)
  }
  kill(b.pid(), SIGCONT);

  const std::string trace = (fs::temp_directory_path() / ("hotcold-stage-trace-" + std::to_string(getpid()) + ".json")).string();
  const std::string one = run_capture(std::string(HOTCOLD_BIN) + " run -m '" + f.dense + "' -p 'Once upon a time' -n 4 -c 64 -t 1 --workers " + wa + "," + wb +
                                      " --split 1,3 --trace-out '" + trace + "' 2>&1 >/dev/null");
  std::ifstream in(trace);
  ASSERT_TRUE(in.good()) << one;
  const auto events = nlohmann::json::parse(in)["traceEvents"];
  std::map<std::pair<std::string, int64_t>, int> count;
  for (const auto& e : events)
    if (e["ph"] == "X") ++count[{e["name"].get<std::string>(), e["args"]["layer"].get<int64_t>()}];
  EXPECT_EQ(count[std::make_pair(std::string("stage_layers"), int64_t{0})], 4) << one;  // a prompt step and three decoded tokens
  EXPECT_EQ(count[std::make_pair(std::string("stage_layers"), int64_t{1})], 4);
  EXPECT_EQ(count[std::make_pair(std::string("stage_hop"), int64_t{1})], 8);
  fs::remove(trace);
}

// A TCP relay on loopback that keeps every byte passing through it, both ways.
class recording_relay {
 public:
  explicit recording_relay(uint16_t to) : to_(to) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK), a.sin_port = 0;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    socklen_t n = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n);
    port_ = ntohs(a.sin_port);
    accepting_ = std::thread([this] { accept_all(); });
  }
  ~recording_relay() {
    shutdown(fd_, SHUT_RDWR);
    accepting_.join();
    close(fd_);
    {
      std::lock_guard lock(mutex_);
      for (int s : sockets_) shutdown(s, SHUT_RDWR);
    }
    for (auto& t : pumps_) t.join();
    for (int s : sockets_) close(s);
  }
  std::string address() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
  std::string bytes() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }

 private:
  void accept_all() {
    for (;;) {
      const int in = accept(fd_, nullptr, nullptr);
      if (in < 0) return;
      const int out = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK), a.sin_port = htons(to_);
      if (connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(in), close(out);
        continue;
      }
      std::lock_guard lock(mutex_);
      sockets_.push_back(in), sockets_.push_back(out);
      pumps_.emplace_back([this, in, out] { pump(in, out); });
      pumps_.emplace_back([this, in, out] { pump(out, in); });
    }
  }
  void pump(int from, int to) {
    char buf[65536];
    for (ssize_t n; (n = read(from, buf, sizeof buf)) > 0;) {
      {
        std::lock_guard lock(mutex_);
        seen_.append(buf, static_cast<size_t>(n));
      }
      for (ssize_t sent = 0; sent < n;) {
        const ssize_t w = write(to, buf + sent, static_cast<size_t>(n - sent));
        if (w <= 0) return;
        sent += w;
      }
    }
    shutdown(to, SHUT_WR);
  }
  uint16_t to_, port_ = 0;
  int fd_ = -1;
  std::thread accepting_;
  mutable std::mutex mutex_;
  std::vector<std::thread> pumps_;
  std::vector<int> sockets_;
  std::string seen_;
};

// Links beyond loopback: a worker listening for other hosts needs --allow-remote and --tls, a
// coordinator linking to another host --workers-tls. Over TLS (certificates of hotcold keygen --tls
// on both sides) the text is one process's and nothing of the protocol passes in clear, where a
// plain link shows it; a coordinator with another authority's certificate, or none, is refused.
TEST(Workers, TlsLinksAdmitOnlyTheirAuthorityAndCarryNothingInClear) {
  const auto& f = files();
  const auto dir = fs::temp_directory_path() / ("hotcold-tls-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string c1 = (dir / "c1").string(), c2 = (dir / "c2").string(), other = (dir / "other").string();
  const auto keygen = [](const std::string& args) { return run_capture(std::string(HOTCOLD_BIN) + " keygen " + args + " 2>&1; echo rc=$?"); };
  EXPECT_NE(keygen("--tls " + c1).find("rc=0"), std::string::npos);
  EXPECT_NE(keygen("--tls " + c2 + " --ca " + c1).find("rc=0"), std::string::npos);
  EXPECT_NE(keygen("--tls " + other).find("rc=0"), std::string::npos);
  EXPECT_NE(keygen("--tls " + c2 + " --ca " + c1).find("already there"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "c1" / "ca.key"));
  EXPECT_FALSE(fs::exists(dir / "c2" / "ca.key"));  // (the authority's key stays where it was made)
  EXPECT_EQ(fs::status(dir / "c2" / "member.key").permissions() & (fs::perms::group_all | fs::perms::others_all), fs::perms::none);

  server_process w({"--listen", "tcp://0.0.0.0:0", "--allow-remote", "--tls", c1, "-m", f.dense, "-t", "1"}, "worker");
  const std::string addr = worker_address(w);
  ASSERT_FALSE(addr.empty());
  const std::vector<std::string> gen{"run", "-m", f.dense, "-p", "Once upon a time there was", "-n", "12", "--temp", "0", "-c", "64", "-t", "1"};
  const std::string alone = run_stdout(gen);
  ASSERT_FALSE(alone.empty());
  {
    recording_relay relay(port_of(addr));
    auto args = gen;
    args.insert(args.end(), {"--workers", relay.address(), "--workers-tls", c2});
    EXPECT_EQ(run_stdout(args), alone) << w.log();
    const std::string seen = relay.bytes();
    EXPECT_GT(seen.size(), 12u * 128 * 4);  // (the residual streams passed)
    EXPECT_EQ(seen.find("stage protocol"), std::string::npos);
  }
  {  // The same through a plain link shows the handshake's versions: the check above can fail.
    server_process plain({"--listen", "tcp://127.0.0.1:0", "-m", f.dense, "-t", "1"}, "worker");
    const std::string paddr = worker_address(plain);
    ASSERT_FALSE(paddr.empty());
    recording_relay relay(port_of(paddr));
    auto args = gen;
    args.insert(args.end(), {"--workers", relay.address()});
    EXPECT_EQ(run_stdout(args), alone);
    EXPECT_NE(relay.bytes().find("stage protocol"), std::string::npos);
  }
  const std::string local = "tcp://127.0.0.1:" + std::to_string(port_of(addr));
  const std::string run = std::string(HOTCOLD_BIN) + " run -m '" + f.dense + "' -p Hello -n 2 -c 64 -t 1 --workers " + local;
  const std::string stranger = run_capture(run + " --workers-tls '" + other + "' 2>&1 >/dev/null");
  EXPECT_NE(stranger.find("cannot connect"), std::string::npos) << stranger;
  const std::string clear = run_capture(run + " 2>&1 >/dev/null");
  EXPECT_NE(clear.find("one side speaks TLS and the other not"), std::string::npos) << clear;
  EXPECT_EQ(w.log().find("said hello"), w.log().rfind("said hello")) << w.log();  // (one coordinator got in)

  const std::string remote = run_capture(std::string(HOTCOLD_BIN) + " run -m '" + f.dense + "' -p Hello -n 2 --workers tcp://192.0.2.1:7001 2>&1");
  EXPECT_NE(remote.find("give --workers-tls DIR"), std::string::npos) << remote;
  server_process bare({"--listen", "tcp://0.0.0.0:0", "--allow-remote", "-m", f.dense}, "worker");
  EXPECT_EQ(bare.wait_exit(30s), 2);
  EXPECT_NE(bare.log().find("give --tls DIR"), std::string::npos) << bare.log();
  fs::permissions(dir / "c2" / "member.key", fs::perms::others_read, fs::perm_options::add);
  const std::string loose = run_capture(run + " --workers-tls '" + c2 + "' 2>&1");
  EXPECT_NE(loose.find("others may read this private key"), std::string::npos) << loose;
  EXPECT_EQ(w.stop(), 0) << w.log();
  fs::remove_all(dir);
}

// Network namespaces with a delay between them (ip netns, veth pairs, tc netem), torn down after.
class netns_lab {
 public:
  // n namespaces, each with a veth pair to this one: 10.77.K.1 here, 10.77.K.2 there (K from 1), and
  // `delay` of netem on both ends (each way). ok() is false where the machine does not allow the
  // namespaces; delayed() where its kernel has no netem (the links then have no added delay).
  netns_lab(int n, const std::string& delay) {
    const std::string tag = std::to_string(getpid() % 100000);
    for (int k = 1; k <= n; ++k) {
      const std::string ns = "hc" + tag + "n" + std::to_string(k), here = "hc" + tag + "h" + std::to_string(k), there = "hc" + tag + "t" + std::to_string(k);
      const std::string net = "10.77." + std::to_string(k) + ".";
      names_.push_back(ns), links_.push_back(here);
      const std::string script = "ip netns add " + ns + " && ip link add " + here + " type veth peer name " + there + " && ip link set " + there + " netns " + ns +
                                 " && ip addr add " + net + "1/24 dev " + here + " && ip link set " + here + " up && ip netns exec " + ns + " ip addr add " + net +
                                 "2/24 dev " + there + " && ip netns exec " + ns + " ip link set " + there + " up && ip netns exec " + ns +
                                 " ip link set lo up";
      if (std::system(("(" + script + ") >/dev/null 2>&1").c_str()) != 0) {
        why_ = "cannot make network namespaces here (needs root and ip): " + script;
        return;
      }
      const std::string netem = "tc qdisc add dev " + here + " root netem delay " + delay + " && ip netns exec " + ns + " tc qdisc add dev " + there +
                                " root netem delay " + delay;
      delayed_ = (k == 1 || delayed_) && std::system(("(" + netem + ") >/dev/null 2>&1").c_str()) == 0;
    }
    ok_ = true;
  }
  ~netns_lab() {
    for (size_t k = 0; k < names_.size(); ++k)
      std::system(("ip link del " + links_[k] + " >/dev/null 2>&1; ip netns del " + names_[k] + " >/dev/null 2>&1").c_str());
  }
  bool ok() const { return ok_; }
  bool delayed() const { return delayed_; }
  const std::string& why() const { return why_; }
  const std::string& ns(int k) const { return names_[static_cast<size_t>(k - 1)]; }

 private:
  std::vector<std::string> names_, links_;
  bool ok_ = false, delayed_ = false;
  std::string why_;
};

// A command run in a namespace in the background, its stderr in a file; SIGTERM at the end.
class netns_process {
 public:
  netns_process(const std::string& ns, const std::string& args) {
    log_ = (fs::temp_directory_path() / ("hotcold-netns-" + std::to_string(getpid()) + "-" + ns + ".err")).string();
    pid_ = std::stoi(run_capture("ip netns exec " + ns + " " + HOTCOLD_BIN + " " + args + " >/dev/null 2>'" + log_ + "' & echo $!"));
  }
  ~netns_process() {
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100 && running(); ++i) std::this_thread::sleep_for(50ms);
    kill(pid_, SIGKILL);
    fs::remove(log_);
  }
  std::string log() const {
    std::ifstream in(log_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  int pid() const { return pid_; }
  // Not ended (nor ended and waiting to be reaped: it is not this process's child).
  bool running() const {
    std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
    std::string pid, name, state;
    return stat >> pid >> name >> state && state != "Z";
  }

 private:
  std::string log_;
  int pid_ = -1;
};

// Two workers in network namespaces of their own, 1 ms of netem delay each way on their links, over
// TLS (addresses beyond loopback): the text is one process's, every trip to a stage takes at least
// the 2 ms the delay adds (the hop the trace records: the round trip less the worker's compute), and
// a worker killed there ends the run naming its stage. Skips where namespaces cannot be made; where
// the kernel has no netem the links have no delay and its check is left out (said on stdout).
TEST(Workers, StagesInNetworkNamespacesWithADelay) {
  netns_lab lab(2, "1ms");
  if (!lab.ok()) GTEST_SKIP() << lab.why();
  const auto& f = files();
  const auto dir = fs::temp_directory_path() / ("hotcold-netns-tls-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string ca = (dir / "ca").string(), one = (dir / "one").string(), two = (dir / "two").string();
  for (const std::string args : {"--tls " + ca, "--tls " + one + " --ca " + ca, "--tls " + two + " --ca " + ca})
    ASSERT_EQ(std::system((std::string(HOTCOLD_BIN) + " keygen " + args + " >/dev/null 2>&1").c_str()), 0);
  netns_process a(lab.ns(1), "worker --listen tcp://10.77.1.2:7001 --allow-remote --tls '" + one + "' -m '" + f.dense + "' -t 1");
  netns_process b(lab.ns(2), "worker --listen tcp://10.77.2.2:7001 --allow-remote --tls '" + two + "' -m '" + f.dense + "' -t 1");
  for (auto* w : {&a, &b})
    for (int i = 0; i < 600 && w->log().find("listening on") == std::string::npos; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_NE(b.log().find("listening on tcp://10.77.2.2:7001"), std::string::npos) << a.log() << b.log();
  const std::string workers = "tcp://10.77.1.2:7001,tcp://10.77.2.2:7001";
  const std::string trace = (dir / "trace.json").string();
  const std::vector<std::string> gen{"run", "-m", f.dense, "-p", "Once upon a time there was", "-n", "8", "--temp", "0", "-c", "64", "-t", "1"};
  auto args = gen;
  args.insert(args.end(), {"--workers", workers, "--workers-tls", ca, "--trace-out", trace});
  EXPECT_EQ(run_stdout(args), run_stdout(gen)) << a.log() << b.log();
  std::ifstream in(trace);
  ASSERT_TRUE(in.good());
  int trips = 0;
  double shortest = 1e9;
  std::map<std::pair<int64_t, int64_t>, double> hop_us;  // (step, first layer): both halves
  const auto events = nlohmann::json::parse(in)["traceEvents"];
  for (const auto& e : events)
    if (e["name"] == "stage_hop") hop_us[{e["args"]["step"].get<int64_t>(), e["args"]["layer"].get<int64_t>()}] += e["dur"].get<double>();
  for (const auto& [key, us] : hop_us) ++trips, shortest = std::min(shortest, us);
  EXPECT_EQ(trips, 2 * 8);  // (8 steps: the prompt and seven tokens, through two stages)
  if (lab.delayed()) EXPECT_GE(shortest, 2000.0);  // 1 ms each way
  else std::cout << "(no netem in this kernel: the namespaces' links have no delay; shortest hop " << shortest << " us)\n";
  // A worker gone there: the run ends naming the stage.
  server_process run({"-m", f.dense, "-p", "Hello", "-n", "100000", "--temp", "0", "-c", "4096", "-t", "1", "--workers", workers, "--workers-tls", ca, "--split", "2,2"},
                     "run");
  for (int i = 0; i < 600 && b.log().find("runs layers") == std::string::npos; ++i) std::this_thread::sleep_for(50ms);
  std::this_thread::sleep_for(300ms);
  kill(b.pid(), SIGKILL);
  EXPECT_EQ(run.wait_exit(10s), 1) << run.log();
  EXPECT_NE(run.log().find("stage tcp://10.77.2.2:7001 (layers 2-3)"), std::string::npos) << run.log();
  fs::remove_all(dir);
}

// The handshake refuses a worker with another file (same shape, other weights), naming both
// identities; a worker asked to listen beyond loopback refuses to start; a coordinator with a bad
// --split says what is wrong.
TEST(Workers, TheHandshakeRefusesAnotherFile) {
  const auto& f = files();
  server_process w({"--listen", "tcp://127.0.0.1:0", "-m", f.other, "-t", "1"}, "worker");
  const std::string addr = worker_address(w);
  ASSERT_FALSE(addr.empty());
  const std::string err = run_capture(std::string(HOTCOLD_BIN) + " run -m '" + f.dense + "' -p Hello -n 2 -c 64 -t 1 --workers " + addr + " 2>&1 >/dev/null");
  EXPECT_NE(err.find("refused: this worker's file"), std::string::npos) << err;
  EXPECT_NE(err.find("not the same file"), std::string::npos) << err;
  EXPECT_NE(w.log().find("refused a coordinator"), std::string::npos) << w.log();
  server_process open({"--listen", "tcp://0.0.0.0:0", "-m", f.dense}, "worker");
  EXPECT_EQ(open.wait_exit(30s), 2);
  EXPECT_NE(open.log().find("loopback"), std::string::npos) << open.log();
  const std::string bad = run_capture(std::string(HOTCOLD_BIN) + " run -m '" + f.dense + "' -p Hello -n 2 --workers " + addr + " --split 2,3 2>&1");
  EXPECT_NE(bad.find("--split 2,3"), std::string::npos) << bad;
  const std::string ref = run_capture(std::string(HOTCOLD_BIN) + " run -m '" + f.dense + "' -p Hello -n 2 --workers " + addr + " --pipeline reference 2>&1");
  EXPECT_NE(ref.find("actors pipeline"), std::string::npos) << ref;
}

}  // namespace
}  // namespace hotcold::test
