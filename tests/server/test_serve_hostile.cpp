// `hotcold serve` against clients that misbehave on purpose: one that never reads its replies, one
// whose replies pile up in memory, long tokenize requests beside token streams, a stop signal while
// work is still queued. Whatever one client does, the others are served and the server stops cleanly.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "tests/server/serve_process.hpp"
#include "clients/client.hpp"

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using namespace hotcold::test;
using steady = std::chrono::steady_clock;


// About `bytes` of English-like words (a token or two each in the Llama vocabulary).
std::string words(size_t bytes) {
  static const char* w[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "world", "once", "upon", "a", "time"};
  std::string s;
  for (size_t i = 0; s.size() < bytes; ++i) (s += w[(i * 7 + i / 3) % 14]) += ' ';
  return s;
}

// A DEALER that sends and never reads: ZeroMQ keeps one reply on its side, the kernel a few KiB.
struct reader_less_client {
  zmq::context_t ctx;
  zmq::socket_t sock{ctx, zmq::socket_type::dealer};
  explicit reader_less_client(const std::string& ep) {
    sock.set(zmq::sockopt::rcvhwm, 1);
    sock.set(zmq::sockopt::rcvbuf, 4096);
    sock.set(zmq::sockopt::linger, 0);
    sock.connect(ep);
  }
  void send(const json& j) { sock.send(zmq::buffer(j.dump()), zmq::send_flags::none); }
};

// A client that sends generates and large tokenize requests and never reads its replies is cut off
// (its requests cancelled, counted in /metrics); meanwhile another client's greedy text arrives,
// exact, within seconds; a SIGTERM then ends the server with 0 at once. (Before: the server blocked
// in zmq_send once that client's queue was full, answered nobody, and a SIGTERM hung or exited 1.)
TEST(ServeHostile, AClientThatStopsReadingIsCutOffAndOthersAreServed) {
  const std::string ep = tcp_endpoint();
  const int port = free_port();
  server_process server({"--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "-t", "2", "--parallel", "4", "--max-queue", "64"});
  wait_ready(ep, &server);
  const std::string want = run_stdout({"run", "-p", "Once upon a time", "-n", "24", "--temp", "0", "-t", "2"});
  ASSERT_FALSE(want.empty());

  // Large replies first (they fill the connection's kernel buffers at once), then three long token
  // streams: the server's queue for this client fills within a second.
  reader_less_client flood(ep);
  const std::string text = words(500 << 10);
  for (int i = 0; i < 8; ++i) flood.send({{"v", 1}, {"type", "tokenize"}, {"id", "t" + std::to_string(i)}, {"text", text}});
  for (int i = 0; i < 3; ++i)
    flood.send({{"v", 1}, {"type", "generate"}, {"id", "g" + std::to_string(i)}, {"prompt", "Once upon a time"}, {"n_predict", 4096}});
  std::this_thread::sleep_for(3s);

  for (int round = 0; round < 3; ++round) {
    hotcold::clients::client c(ep, 5s);
    const auto t0 = steady::now();
    std::string got;
    try {
      got = c.generate({{"prompt", "Once upon a time"}, {"n_predict", 24}, {"sampling", {{"temperature", 0}}}}).text + "\n";
    } catch (const hotcold::clients::client_error& e) {
      FAIL() << "round " << round << ": " << e.what() << "\n" << server.log();
    }
    EXPECT_EQ(got, want) << "round " << round;
    EXPECT_LT(steady::now() - t0, 5s);
  }
  const std::string m = http_get(port, "/metrics");
  EXPECT_GE(metric(m, "hotcold_clients_cut_off_total"), 1) << m;
  EXPECT_NE(m.find("hotcold_requests_total{outcome=\"cut_off\"}"), std::string::npos) << m;

  const auto t0 = steady::now();
  EXPECT_EQ(server.stop(), 0) << server.log();
  EXPECT_LT(steady::now() - t0, 3s);
  EXPECT_NE(server.log().find("cut off"), std::string::npos) << server.log();
}

// Replies left unread are bounded in bytes per client (--max-client-buffer): 120 tokenize replies of
// about 600 KiB each, never read, leave the server's memory within a few tens of MiB of where it
// was. (Before: ZeroMQ queued them all, 155 MiB for 60.)
TEST(ServeHostile, UnreadRepliesAreBoundedInBytes) {
  const std::string ep = tcp_endpoint();
  const int port = free_port();
  server_process server({"--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "-t", "2", "--max-client-buffer", std::to_string(4 << 20)});
  wait_ready(ep, &server);
  const std::string text = words(500 << 10);
  hotcold::clients::client c(ep, 30s);
  const size_t reply_bytes = c.call("tokenize", {{"text", text}}).dump().size();
  ASSERT_GT(reply_bytes, 400u << 10);
  const int64_t before = server.rss_bytes();
  ASSERT_GT(before, 0);

  reader_less_client hog(ep);
  for (int i = 0; i < 120; ++i) {  // eight at a time: within the tokenizer queue's bound per client
    hog.send({{"v", 1}, {"type", "tokenize"}, {"id", "t" + std::to_string(i)}, {"text", text}});
    if (i % 8 == 7) std::this_thread::sleep_for(300ms);
  }
  // Until the server has dealt with them all (the others' requests still answered meanwhile).
  double cut = -1;
  for (int i = 0; i < 100 && cut < 1; ++i) {
    std::this_thread::sleep_for(100ms);
    cut = metric(http_get(port, "/metrics"), "hotcold_clients_cut_off_total");
  }
  EXPECT_GE(cut, 1);
  EXPECT_EQ(c.call("health")["status"], "ok");
  std::this_thread::sleep_for(500ms);
  const int64_t after = server.rss_bytes();
  const double queued = metric(http_get(port, "/metrics"), "hotcold_reply_bytes_queued");
  EXPECT_LE(queued, double(4 << 20) + double(reply_bytes));
  EXPECT_LT(after - before, int64_t{48} << 20) << "resident memory grew from " << before << " to " << after << " bytes";
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// Tokenizing long texts runs beside the token streams, not in their way: a client sends sixteen
// 500 KiB tokenize requests and then, on the same connection, a short greedy generate; the
// generate's done comes back before the last tokenize reply. (Before: the loop tokenized each text
// before it read the next frame, so the generate began after the sixteenth reply.)
TEST(ServeHostile, LongTokenizeRequestsDoNotHoldTokenStreams) {
  const std::string ep = tcp_endpoint();
  server_process server({"--zmq", ep, "-t", "2"});
  wait_ready(ep, &server);
  const std::string text = words(500 << 10);
  hotcold::clients::client c(ep, 60s);
  const int n = 16;
  for (int i = 0; i < n; ++i) c.send_raw(json{{"v", 1}, {"type", "tokenize"}, {"id", "t" + std::to_string(i)}, {"text", text}}.dump());
  c.send_raw(json{{"v", 1}, {"type", "generate"}, {"id", "g"}, {"prompt", "Once upon a time"}, {"n_predict", 8}, {"stream", false},
                  {"sampling", {{"temperature", 0}}}}.dump());
  int tokens_replies = 0, before_done = -1;
  for (auto r = c.next_reply(60s); r; r = tokens_replies < n || before_done < 0 ? c.next_reply(60s) : std::nullopt) {
    if ((*r)["type"] == "tokens") ++tokens_replies;
    else if ((*r)["type"] == "done") {
      EXPECT_EQ((*r)["generated_tokens"], 8);
      before_done = tokens_replies;
    } else {
      EXPECT_EQ((*r)["type"], "accepted") << r->dump().substr(0, 300);
    }
  }
  EXPECT_EQ(tokens_replies, n);
  EXPECT_GE(before_done, 0) << "no done for the generate";
  EXPECT_LT(before_done, n) << "the generate waited for every tokenize request";
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// While it stops (SIGTERM with tokenize work still queued), health says `stopping`, every queued
// request is answered (what the second after the signal did not reach, with shutting_down), and the
// process exits with 0 within seconds. (Before: health said `ok`.)
TEST(ServeHostile, HealthSaysStoppingWhileItStops) {
  const std::string ep = tcp_endpoint();
  server_process server({"--zmq", ep, "-t", "2"});
  wait_ready(ep, &server);
  const std::string text = words(500 << 10);
  // Three clients, sixteen 500 KiB tokenize requests each: about two seconds of work queued.
  std::vector<std::unique_ptr<hotcold::clients::client>> heavy;
  const int n = 16;
  for (int k = 0; k < 3; ++k) {
    heavy.push_back(std::make_unique<hotcold::clients::client>(ep, 30s));
    for (int i = 0; i < n; ++i) heavy.back()->send_raw(json{{"v", 1}, {"type", "tokenize"}, {"id", "t" + std::to_string(i)}, {"text", text}}.dump());
  }
  hotcold::clients::client probe(ep, 10s);
  std::this_thread::sleep_for(100ms);
  const auto t0 = steady::now();
  kill(server.pid(), SIGTERM);
  std::this_thread::sleep_for(50ms);
  json h;
  try {
    h = probe.call("health");
  } catch (const hotcold::clients::client_error& e) {
    FAIL() << e.what() << "\n" << server.log();
  }
  EXPECT_EQ(h["status"], "stopping") << h.dump();
  EXPECT_THROW(probe.generate({{"prompt", "Once"}, {"n_predict", 2}}), hotcold::clients::client_error);  // shutting_down
  // Each queued request is answered: tokenized within the second a stop grants, else shutting_down.
  int replies = 0, tokenized = 0;
  for (auto& c : heavy) {
    int mine = 0;
    for (auto r = c->next_reply(10s); r; r = mine < n ? c->next_reply(10s) : std::nullopt) {
      ++replies, ++mine;
      tokenized += (*r)["type"] == "tokens";
      if ((*r)["type"] != "tokens") {
        EXPECT_EQ((*r)["code"], "shutting_down") << r->dump();
      }
    }
  }
  EXPECT_EQ(replies, 3 * n) << "queued work was lost in the stop";
  EXPECT_GE(tokenized, 1);
  EXPECT_EQ(server.wait_exit(5000ms), 0) << server.log();
  EXPECT_LT(steady::now() - t0, 3s) << "a stop took longer than a second or two";
}

// A port that cannot be bound is named with its flag: --zmq's endpoint (it said a bare "Address already
// in use") and --http's address.
TEST(ServeHostile, BindErrorsNameTheirFlagAndEndpoint) {
  const std::string ep = tcp_endpoint();
  const int port = free_port();
  server_process first({"--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "-t", "1"});
  wait_ready(ep, &first);
  server_process zmq_taken({"--zmq", ep, "-t", "1"});
  EXPECT_NE(zmq_taken.wait_exit(30s), 0);
  EXPECT_NE(zmq_taken.log().find("--zmq " + ep + ": cannot bind: Address already in use"), std::string::npos) << zmq_taken.log();
  server_process http_taken({"--http", "127.0.0.1:" + std::to_string(port), "-t", "1"});
  EXPECT_NE(http_taken.wait_exit(30s), 0);
  EXPECT_NE(http_taken.log().find("--http 127.0.0.1:" + std::to_string(port) + ": cannot bind"), std::string::npos) << http_taken.log();
  EXPECT_EQ(first.stop(), 0) << first.log();
}

// The loopback names docs/commands.md documents bind and answer: localhost and [::1].
TEST(ServeHostile, LocalhostAndIpv6LoopbackEndpoints) {
  const int port = free_port();
  for (const std::string& ep : {"tcp://localhost:" + std::to_string(port), "tcp://[::1]:" + std::to_string(port + 1)}) {
    server_process server({"--zmq", ep, "-t", "2"});
    wait_ready(ep, &server);
    hotcold::clients::client c(ep, 10s);
    EXPECT_EQ(c.call("health")["status"], "ok") << ep;
    EXPECT_EQ(c.generate({{"prompt", "Once"}, {"n_predict", 3}}).done.generated_tokens, 3) << ep;
    EXPECT_EQ(server.stop(), 0) << server.log();
  }
}

// Out of descriptors (ulimit -n 256, 400 connections held open), the HTTP acceptor logs the error,
// backs off and keeps accepting: once the connections close, /health answers again. (Before: the
// first EMFILE ended accepting for good.)
TEST(ServeHostile, HttpAcceptorOutlivesRunningOutOfDescriptors) {
  const std::string ep = tcp_endpoint();
  const int port = free_port();
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  server_process server({"--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "-t", "2"});  // inherits the limit
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  wait_ready(ep, &server);
  ASSERT_NE(http_get(port, "/health").find("200 OK"), std::string::npos);

  std::vector<int> held;
  for (int i = 0; i < 400; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) held.push_back(fd);
    else if (fd >= 0) close(fd);
  }
  EXPECT_GT(held.size(), 256u);
  std::this_thread::sleep_for(1s);  // the server accepts until it runs out
  for (int fd : held) close(fd);
  std::string health;
  for (const auto until = steady::now() + 8s; health.find("200 OK") == std::string::npos && steady::now() < until;) {
    std::this_thread::sleep_for(100ms);
    health = http_get(port, "/health");
  }
  EXPECT_NE(health.find("\"status\":\"ok\""), std::string::npos) << "HTTP stopped accepting\n" << server.log();
  EXPECT_NE(server.log().find("HTTP accept failed"), std::string::npos) << server.log();
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// HTTP for other machines is its own opt-in (--allow-remote-http; --allow-remote is ZeroMQ's) and
// needs bearer tokens; with a token file every route asks for one. (Before: --allow-remote with
// CURVE keys served the dashboard and /metrics on 0.0.0.0 to anyone.)
TEST(ServeHostile, RemoteHttpNeedsItsOwnOptInAndATokenForEveryRequest) {
  const fs::path dir = fs::temp_directory_path() / ("hotcold-http-auth-" + std::to_string(getpid()));
  fs::create_directories(dir);
  ASSERT_EQ(std::system((std::string(HOTCOLD_BIN) + " keygen -o '" + (dir / "server").string() + "' >/dev/null 2>&1").c_str()), 0);
  ASSERT_EQ(std::system((std::string(HOTCOLD_BIN) + " keygen -o '" + (dir / "alice").string() + "' >/dev/null 2>&1").c_str()), 0);
  fs::copy_file(dir / "alice.pub", dir / "allowed", fs::copy_options::overwrite_existing);
  const std::string token = "s3cret-token-for-the-dashboard";
  std::ofstream(dir / "tokens") << "# who may read the dashboard\n" << token << "\n";
  const int port = free_port();
  const std::string http_any = "0.0.0.0:" + std::to_string(port);

  // ZeroMQ's opt-in and keys do not open HTTP to other machines.
  server_process zmq_only({"--zmq", "tcp://0.0.0.0:" + std::to_string(port + 1), "--allow-remote", "--curve-key", (dir / "server.key").string(),
                           "--curve-clients", (dir / "allowed").string(), "--http", http_any, "-t", "2"});
  EXPECT_EQ(zmq_only.wait_exit(20s), 2) << zmq_only.log();  // a usage error
  EXPECT_NE(zmq_only.log().find("--allow-remote-http"), std::string::npos) << zmq_only.log();
  // Its own opt-in without tokens is refused too.
  server_process no_tokens({"--zmq", tcp_endpoint(), "--http", http_any, "--allow-remote-http"});
  EXPECT_EQ(no_tokens.wait_exit(20s), 2) << no_tokens.log();
  EXPECT_NE(no_tokens.log().find("--http-token-file"), std::string::npos) << no_tokens.log();

  const std::string ep = tcp_endpoint();
  server_process server({"--zmq", ep, "--http", http_any, "--allow-remote-http", "--http-token-file", (dir / "tokens").string(), "-t", "2"});
  wait_ready(ep, &server);
  for (const char* route : {"/metrics", "/api/stats", "/health", "/", "/api/events?frames=1"}) {
    EXPECT_NE(http_get(port, route).find("401"), std::string::npos) << route;
    EXPECT_NE(http_get(port, route, "Authorization: Bearer wrong-token-of-some-length\r\n").find("401"), std::string::npos) << route;
    EXPECT_NE(http_get(port, route, "Authorization: Bearer " + token + "\r\n").find("200 OK"), std::string::npos) << route;
  }
  const std::string page = http_get(port, "/?token=" + token);
  EXPECT_NE(page.find("200 OK"), std::string::npos);
  EXPECT_NE(page.find("Set-Cookie: hotcold_token=" + token), std::string::npos) << page.substr(0, 400);
  EXPECT_NE(http_get(port, "/api/stats", "Cookie: theme=dark; hotcold_token=" + token + "\r\n").find("200 OK"), std::string::npos);
  EXPECT_NE(http_get(port, "/api/stats", "Cookie: hotcold_token=nope\r\n").find("401"), std::string::npos);
  EXPECT_EQ(server.stop(), 0) << server.log();
  fs::remove_all(dir);
}

}  // namespace
