// serve's queue shared among clients, and its record file on a disk that fills up.
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "tests/server/serve_process.hpp"
#include "clients/client.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using namespace hotcold::test;

// A ZeroMQ client that sends many generates at once and counts the replies as they come.
struct flooder {
  zmq::context_t ctx;
  zmq::socket_t sock{ctx, zmq::socket_type::dealer};
  std::atomic<int> accepted{0}, busy{0}, done{0};
  std::string last_busy;
  std::atomic<bool> stop{false};
  std::thread reader;
  explicit flooder(const std::string& ep) {
    sock.set(zmq::sockopt::linger, 0);
    sock.set(zmq::sockopt::rcvtimeo, 100);
    sock.connect(ep);
  }
  void send(int n, int n_predict) {
    for (int i = 0; i < n; ++i)
      sock.send(zmq::buffer(json{{"v", 1}, {"type", "generate"}, {"id", "f" + std::to_string(i)}, {"prompt", "Once upon a time"}, {"n_predict", n_predict},
                                 {"stream", false}}.dump()),
                zmq::send_flags::none);
    reader = std::thread([this] {
      while (!stop) {
        zmq::message_t m;
        if (!sock.recv(m)) continue;
        const json r = json::parse(m.to_string(), nullptr, false);
        const std::string type = r.value("type", "");
        if (type == "accepted") ++accepted;
        if (type == "done") ++done;
        if (type == "error" && r.value("code", "") == "busy") {
          if (busy++ == 0) last_busy = r.value("message", "");
        }
      }
    });
  }
  ~flooder() {
    stop = true;
    if (reader.joinable()) reader.join();
  }
};

// A client that floods the queue (300 generates) does not hold up a polite one: with its share as
// large as the queue, the polite client's one request starts at the next free slot, so hardly any of
// the flood's requests finish before it (first come, first served: all 300 did). /metrics shows the
// flood's depth by client meanwhile.
TEST(ServeFairness, APoliteClientStartsBesideAFlood) {
  const std::string ep = tcp_endpoint();
  const int port = free_port() + 1;
  server_process server({"--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "-t", "2", "--parallel", "1", "--max-queue", "1000",
                         "--max-queued-per-client", "1000"});
  wait_ready(ep, &server);
  flooder flood(ep);
  flood.send(300, 12);
  for (int i = 0; i < 500 && flood.accepted < 300; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(flood.accepted, 300);
  const std::string metrics = http_get(port, "/metrics");
  const auto depth_at = metrics.find("hotcold_client_queue_depth{client=\"zmq:");
  double depth = -1;
  if (depth_at != std::string::npos) depth = std::stod(metrics.substr(metrics.find(' ', depth_at) + 1));
  EXPECT_GT(depth, 200) << "the flood's queue depth in /metrics:\n" << metrics;

  hotcold::clients::client polite(ep, 30s);
  const int done_before = flood.done;
  const auto g = polite.generate({{"prompt", "Hello world"}, {"n_predict", 12}, {"sampling", {{"temperature", 0}}}});
  const int flood_done_meanwhile = flood.done - done_before;
  EXPECT_EQ(g.done.generated_tokens, 12);
  EXPECT_LE(flood_done_meanwhile, 3) << "of the flood's requests finished while the polite one waited";
  std::printf("while the polite request ran, %d of the flood's finished (%d before it came; %d waiting then)\n", flood_done_meanwhile, done_before,
              static_cast<int>(depth));
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// Each client has a share of the queue (a quarter of --max-queue by default): past it, its requests
// get `busy` naming the flag, while another client's are still queued and served.
TEST(ServeFairness, AClientPastItsShareIsBusyAndOthersAreNot) {
  const std::string ep = tcp_endpoint();
  server_process server({"--zmq", ep, "-t", "2", "--parallel", "1", "--max-queue", "8"});
  wait_ready(ep, &server);
  flooder flood(ep);
  flood.send(12, 200);  // one runs, two wait (a quarter of 8), nine are busy
  for (int i = 0; i < 500 && flood.accepted + flood.busy < 12; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(flood.accepted, 3);
  EXPECT_EQ(flood.busy, 9);
  EXPECT_NE(flood.last_busy.find("--max-queued-per-client 2"), std::string::npos) << flood.last_busy;
  hotcold::clients::client polite(ep, 30s);
  const auto g = polite.generate({{"prompt", "Hello world"}, {"n_predict", 4}, {"sampling", {{"temperature", 0}}}});
  EXPECT_EQ(g.done.generated_tokens, 4);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// --record on a disk that fills up (the server's file-size limit lowered from outside, then raised:
// the disk freed): one record is cut short, the next ones are lost and counted, the error is logged
// once for the outage; once there is room, records go on, each on its own line, and the file
// replays every whole record.
TEST(ServeFairness, ARecordFileOnAFullDisk) {
  const std::string ep = tcp_endpoint();
  const int port = free_port() + 1;
  const std::string path = (fs::temp_directory_path() / ("hotcold-full-disk-" + std::to_string(getpid()) + ".jsonl")).string();
  fs::remove(path);
  server_process server({"--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "-t", "2", "--record", path});
  wait_ready(ep, &server);
  hotcold::clients::client c(ep, 30s);
  const std::string prompt(1500, 'a');
  auto one = [&] { c.generate({{"prompt", prompt}, {"n_predict", 4}, {"sampling", {{"temperature", 0}}}}); };
  one();
  one();
  const auto two = static_cast<rlim_t>(fs::file_size(path));
  rlimit full{};
  ASSERT_EQ(prlimit(server.pid(), RLIMIT_FSIZE, nullptr, &full), 0);
  const rlimit unlimited = full;
  full.rlim_cur = two + two * 3 / 4;  // room for one more record and a half
  ASSERT_EQ(prlimit(server.pid(), RLIMIT_FSIZE, &full, nullptr), 0);
  for (int i = 0; i < 4; ++i) one();  // whole, cut short, lost, lost
  ASSERT_EQ(prlimit(server.pid(), RLIMIT_FSIZE, &unlimited, nullptr), 0);
  one();
  one();
  EXPECT_EQ(metric(http_get(port, "/metrics"), "hotcold_record_write_errors_total"), 3);
  EXPECT_EQ(server.stop(), 0) << server.log();

  int whole = 0, torn = 0;
  for (const auto& line : lines_of(path)) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      ++torn;
    } else {
      ++whole;
      EXPECT_EQ(j["request"]["prompt"], prompt);
    }
  }
  EXPECT_EQ(whole, 5);
  EXPECT_EQ(torn, 1);
  const std::string log = server.log();
  size_t said = 0;
  for (size_t at = 0; (at = log.find("cannot write", at)) != std::string::npos; ++at) ++said;
  EXPECT_EQ(said, 1u) << log;
  EXPECT_NE(log.find("writing again; 3 records were lost"), std::string::npos) << log;
  fs::remove(path);
}

}  // namespace
