// hotcold worker and --workers (docs/distributed.md): the layers of a file in stage processes on
// loopback, the coordinator keeping the embeddings, the head and sampling.
#include <fstream>
#include <iterator>

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
