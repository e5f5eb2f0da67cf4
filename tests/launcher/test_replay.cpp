// `hotcold replay` and `serve --record` as files and processes: a long trace against a fast stand-in
// server (a ROUTER socket here answering every generate at once) in bounded memory; a record file cut
// short mid-line; a dead endpoint.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "protocol/messages.hpp"
#include "tests/server/serve_process.hpp"
#include "clients/client.hpp"

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using namespace hotcold::test;
namespace proto = hotcold::protocol;

// A server that answers health, and every generate with accepted, one token and done, at once.
class instant_server {
 public:
  explicit instant_server(const std::string& ep) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.bind(ep);
    thread_ = std::thread([this] { loop(); });
  }
  ~instant_server() {
    stop_ = true;
    thread_.join();
  }
  int64_t generates() const { return generates_; }

 private:
  void loop() {
    while (!stop_) {
      zmq::pollitem_t items[] = {{sock_.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 1, std::chrono::milliseconds(20));
      std::vector<zmq::message_t> f;
      while (zmq::recv_multipart(sock_, std::back_inserter(f), zmq::recv_flags::dontwait)) {
        const json req = json::parse(f.back().to_string(), nullptr, false);
        const std::string id = req.value("id", "");
        auto reply = [&](const std::string& payload) {
          sock_.send(zmq::buffer(f.front().to_string()), zmq::send_flags::sndmore);
          sock_.send(zmq::buffer(payload), zmq::send_flags::none);
        };
        if (req.value("type", "") == "health") reply(proto::encode_health(id, "ok", 0, 0));
        if (req.value("type", "") == "generate") {
          ++generates_;
          reply(proto::encode_accepted(id, 1, 1));
          reply(proto::encode_token(id, 0, 42, "x", 0.1));
          reply(proto::encode_done(id, "length", 1, 1, {}));
        }
        f.clear();
      }
    }
  }
  zmq::context_t ctx_;
  zmq::socket_t sock_{ctx_, zmq::socket_type::router};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> generates_{0};
  std::thread thread_;
};

struct child_result {
  int status = -1;
  int64_t max_rss_bytes = 0;
  std::string err;
};

// Runs hotcold with `args`, waits, and reports its exit status and peak resident memory.
child_result run_hotcold(const std::vector<std::string>& args) {
  std::vector<std::string> all{HOTCOLD_BIN};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string err = (fs::temp_directory_path() / ("hotcold-replay-" + std::to_string(getpid()) + ".err")).string();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  child_result r;
  if (posix_spawn(&pid, HOTCOLD_BIN, &fa, nullptr, argv.data(), environ) != 0) return r;
  posix_spawn_file_actions_destroy(&fa);
  rusage ru{};
  int status = 0;
  wait4(pid, &status, 0, &ru);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.max_rss_bytes = static_cast<int64_t>(ru.ru_maxrss) * 1024;
  std::ifstream in(err);
  r.err.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

// 100,000 records replayed as fast as the stand-in answers: every one sent and answered, with a
// bounded number of threads and connections, in bounded memory. (Before: a thread per record, never
// joined: +8 MB of address space each, and libzmq aborted near the 32,000th.)
TEST(Replay, HundredThousandRecordsInBoundedMemory) {
  const std::string ep = tcp_endpoint();
  instant_server server(ep);
  const fs::path dir = fs::temp_directory_path() / ("hotcold-replay-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const int n = 100000;
  {
    std::ofstream trace(dir / "trace.jsonl");
    for (int i = 0; i < n; ++i)
      trace << json{{"arrival_s", i * 1e-5}, {"request", {{"prompt", "Once"}, {"n_predict", 1}}}, {"finish", "length"}, {"generated_tokens", 1}}.dump()
            << "\n";
  }
  const auto r = run_hotcold({"replay", "--trace", (dir / "trace.jsonl").string(), "--endpoint", ep, "--report", (dir / "report.json").string(),
                              "--max-concurrency", "32"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(dir / "report.json");
  const json report = json::parse(in);
  EXPECT_EQ(report["requests"], n);
  EXPECT_EQ(report["failed"], 0);
  EXPECT_EQ(report["ttft_s"]["n"], n);
  EXPECT_EQ(server.generates(), n);
  EXPECT_LT(r.max_rss_bytes, int64_t{256} << 20) << "peak resident memory";
  fs::remove_all(dir);
}

// A record cut short (the recorder killed between writing a record's bytes) is skipped with a
// warning naming its line; the records after it are replayed.
TEST(Replay, SkipsARecordCutShort) {
  const std::string ep = tcp_endpoint();
  instant_server server(ep);
  const fs::path dir = fs::temp_directory_path() / ("hotcold-replay-torn-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string whole = json{{"arrival_s", 0.0}, {"request", {{"prompt", "Once"}, {"n_predict", 1}}}}.dump();
  std::ofstream(dir / "trace.jsonl") << whole << "\n" << whole.substr(0, whole.size() / 2) << "\n" << whole << "\n";
  const auto r = run_hotcold({"replay", "--trace", (dir / "trace.jsonl").string(), "--endpoint", ep, "--report", (dir / "report.json").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("trace.jsonl:2:"), std::string::npos) << r.err;
  std::ifstream in(dir / "report.json");
  const json report = json::parse(in);
  EXPECT_EQ(report["requests"], 2);
  EXPECT_EQ(report["skipped_lines"], 1);
  fs::remove_all(dir);
}

// Against an endpoint where nobody listens, replay says so within seconds instead of waiting ten
// minutes per request; a directory given as the trace is named as such.
TEST(Replay, DeadEndpointAndDirectoryTraceAreClearErrors) {
  const fs::path dir = fs::temp_directory_path() / ("hotcold-replay-dead-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "trace.jsonl") << json{{"arrival_s", 0.0}, {"request", {{"prompt", "Once"}, {"n_predict", 1}}}}.dump() << "\n";
  const auto t0 = std::chrono::steady_clock::now();
  const auto dead = run_hotcold({"replay", "--trace", (dir / "trace.jsonl").string(), "--endpoint", "tcp://127.0.0.1:9", "--report",
                                 (dir / "report.json").string(), "--connect-timeout", "1"});
  EXPECT_EQ(dead.status, 1) << dead.err;
  EXPECT_NE(dead.err.find("no server answered"), std::string::npos) << dead.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  const auto directory = run_hotcold({"replay", "--trace", dir.string(), "--endpoint", "tcp://127.0.0.1:9", "--report", (dir / "report.json").string()});
  EXPECT_NE(directory.status, 0);
  EXPECT_NE(directory.err.find("directory"), std::string::npos) << directory.err;
  fs::remove_all(dir);
}

// serve --record appends to a file cut short mid-line on a new line, one whole record per line, each
// written by one write(2) even when it is longer than a page (checked with strace where it runs).
TEST(Record, RecordsAreWholeLinesAfterATornOne) {
  const fs::path dir = fs::temp_directory_path() / ("hotcold-record-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path rec = dir / "rec.jsonl";
  std::ofstream(rec) << R"({"arrival_s":0.5,"request":{"prompt":"cut sh)";  // no newline: a torn record
  const std::string ep = tcp_endpoint();
  const bool strace = std::system("strace -V >/dev/null 2>&1") == 0;
  const fs::path log = dir / "strace.log";
  {
    std::vector<std::string> args{"--zmq", ep, "-t", "2", "--record", rec.string()};
    server_process server(args);
    wait_ready(ep, &server);
    hotcold::clients::client c(ep, 30s);
    std::string long_prompt;
    while (long_prompt.size() < 6000) long_prompt += "Once upon a time there was a model. ";
    c.generate({{"prompt", long_prompt}, {"n_predict", 3}, {"sampling", {{"temperature", 0}}}});
    c.generate({{"prompt", "Hello"}, {"n_predict", 2}});
    EXPECT_EQ(server.stop(), 0) << server.log();
  }
  std::ifstream in(rec);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(json::parse(lines[0], nullptr, false).is_discarded());  // the torn one, left alone
  for (size_t i = 1; i < 3; ++i) {
    const json j = json::parse(lines[i], nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << lines[i].substr(0, 200);
    EXPECT_TRUE(j.contains("arrival_s"));
  }
  EXPECT_GT(lines[1].size(), 4096u);

  // One write a record: under strace, every write that starts a record ends with its newline.
  if (!strace) GTEST_SKIP() << "no strace here: the single write is not checked";
  fs::remove(rec);
  {
    const std::string cmd = "strace -f -qq -e trace=write -e signal=none -s 100000 -o '" + log.string() + "' " + HOTCOLD_BIN + " serve --zmq " + ep +
                            " -t 2 --record '" + rec.string() + "' >/dev/null 2>&1 & echo $!";
    const pid_t pid = std::stoi(run_capture(cmd));
    wait_ready(ep);
    hotcold::clients::client c(ep, 30s);
    std::string long_prompt;
    while (long_prompt.size() < 6000) long_prompt += "Once upon a time there was a model. ";
    c.generate({{"prompt", long_prompt}, {"n_predict", 3}, {"sampling", {{"temperature", 0}}}});
    // The server is strace's child: signalled itself (a signal to strace only detaches it, and both
    // went on running after the suite), it ends, and strace with it.
    const auto children = [](pid_t parent) {
      std::vector<pid_t> out;
      for (const auto& e : fs::directory_iterator("/proc")) {
        const std::string name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream stat(e.path() / "stat");
        std::string line;
        std::getline(stat, line);
        const auto close = line.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream rest(line.substr(close + 2));
        char state;
        pid_t ppid = 0;
        rest >> state >> ppid;
        if (ppid == parent) out.push_back(static_cast<pid_t>(std::stoi(name)));
      }
      return out;
    };
    for (pid_t child : children(pid)) kill(child, SIGTERM);
    for (int i = 0; i < 200 && kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(50ms);
    if (kill(pid, 0) == 0) {  // nothing may outlive the test
      for (pid_t child : children(pid)) kill(child, SIGKILL);
      kill(pid, SIGKILL);
      ADD_FAILURE() << "the traced server did not stop on SIGTERM";
    }
    waitpid(pid, nullptr, WNOHANG);
  }
  std::ifstream s(log);
  int record_writes = 0;
  for (std::string l; std::getline(s, l);) {
    const auto at = l.find("write(");
    if (at == std::string::npos || l.find("\"{\\\"arrival_s\\\"") == std::string::npos) continue;
    ++record_writes;
    EXPECT_NE(l.find("}\\n\", "), std::string::npos) << "a record written in pieces: " << l.substr(0, 200);
  }
  EXPECT_EQ(record_writes, 1);
  fs::remove_all(dir);
}

}  // namespace
