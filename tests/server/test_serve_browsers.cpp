// serve's HTTP side against what a web page can make a browser send (docs/openai-api.md,
// "Browsers"), and against request framing that smuggles: a keyless server answers only requests
// addressed to this machine, and only pages of this machine (or of --cors-origins); /v1 takes JSON
// bodies only; a key is checked before a client is asked for its body; a transfer coding other than
// chunked, or one beside a length, is refused. Requests without Origin (curl, SDKs) are served as before.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/server/serve_process.hpp"

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using namespace hotcold::test;

const std::string key = "sk-hotcold-test-0123456789";
const std::string model_id = "default-llama-relu-f16.gguf";

// A connection to 127.0.0.1:port (reads time out after 10 s).
int connect_to(int port) {
  bool connected = false;
  const int fd = loopback_socket(port, 10, connected);
  EXPECT_TRUE(connected);
  return fd;
}
void send_text(int fd, const std::string& s) { EXPECT_EQ(write(fd, s.data(), s.size()), static_cast<ssize_t>(s.size())); }
// Exactly these bytes as a request; the whole answer.
std::string round_trip(int port, const std::string& request) {
  const int fd = connect_to(port);
  send_text(fd, request);
  std::string out = read_all(fd);
  close(fd);
  return out;
}

// A request as a browser would send it: a method, a target, its Host (as the page's URL names the
// server), more header lines, a body with its length.
std::string request(const std::string& method, const std::string& target, const std::string& host, const std::string& more = "", const std::string& body = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n" + more;
  if (!body.empty() || method == "POST") r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

const std::string ask = json{{"model", model_id}, {"prompt", "Hello world"}, {"max_tokens", 4}, {"temperature", 0}}.dump();

struct keyless_server {
  std::string ep = tcp_endpoint();
  int port = free_port() + 1;
  server_process process;
  explicit keyless_server(std::vector<std::string> extra)
      : process([&] {
          std::vector<std::string> args{"--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "-t", "2"};
          args.insert(args.end(), extra.begin(), extra.end());
          return args;
        }()) {
    wait_ready(ep, &process);
  }
  std::string here() const { return "127.0.0.1:" + std::to_string(port); }
  http_answer send(const std::string& r) const { return split(round_trip(port, r)); }
  double finished() const { return std::max(0.0, metric(http_get(port, "/metrics"), "hotcold_requests_total{outcome=\"length\"}")); }
};

void expect_refused(const http_answer& a, int status, const std::string& code, const std::string& says, const std::string& what, const std::string& cors = "") {
  EXPECT_EQ(a.status, status) << what << "\n" << a.head << "\n" << a.body;
  const json j = a.body_json();
  ASSERT_TRUE(j.is_object()) << what << ": " << a.body;
  EXPECT_EQ(j["error"]["code"], code) << what << ": " << a.body;
  EXPECT_NE(j["error"]["message"].get<std::string>().find(says), std::string::npos) << what << ": " << a.body;
  EXPECT_EQ(a.header("Access-Control-Allow-Origin"), cors) << what;
}

// The attack as a page would make it: a "simple" cross-site POST (text/plain, no preflight) to the
// server by its loopback address, and the same by a rebound name. Each is refused before anything
// runs; this machine's own pages and programs are served.
TEST(ServeBrowsers, AKeylessServerServesThisMachineOnly) {
  keyless_server s({});
  const std::string page_origin = "Origin: https://attacker.example\r\n";
  // The simple request: refused for its origin (403), and for its body type without one (415).
  expect_refused(s.send(request("POST", "/v1/completions", s.here(), page_origin + "Content-Type: text/plain\r\n", ask)), 403, "origin_not_allowed",
                 "https://attacker.example", "a cross-site simple POST");
  expect_refused(s.send(request("POST", "/v1/completions", s.here(), "Content-Type: text/plain\r\n", ask)), 415, "unsupported_media_type", "application/json",
                 "a text/plain body");
  expect_refused(s.send(request("POST", "/v1/completions", s.here(), "Content-Type: application/x-www-form-urlencoded\r\n", ask)), 415,
                 "unsupported_media_type", "application/json", "a form body");
  expect_refused(s.send(request("POST", "/v1/completions", s.here(), "", ask)), 415, "unsupported_media_type", "no Content-Type", "no Content-Type");
  // DNS rebinding: the page's own name in Host (its Origin is then its own too), on every target.
  const std::string rebound = "attacker.example:" + std::to_string(s.port);
  expect_refused(s.send(request("POST", "/v1/completions", rebound, "Origin: http://" + rebound + "\r\nContent-Type: application/json\r\n", ask)), 403,
                 "host_not_allowed", "--allowed-hosts", "a rebound POST");
  for (const char* target : {"/v1/models", "/metrics", "/", "/health", "/api/stats"})
    expect_refused(s.send(request("GET", target, rebound)), 403, "host_not_allowed", "attacker.example", std::string("a rebound GET ") + target);
  // Another site's page reading the API by its address: refused by origin.
  expect_refused(s.send(request("GET", "/v1/models", s.here(), page_origin)), 403, "origin_not_allowed", "--cors-origins", "a cross-site GET");
  // Its preflight too.
  expect_refused(s.send(request("OPTIONS", "/v1/chat/completions", s.here(), page_origin + "Access-Control-Request-Method: POST\r\n")), 403,
                 "origin_not_allowed", "attacker.example", "a cross-site preflight");
  EXPECT_EQ(s.finished(), 0) << "a refused request ran";

  // Programs (no Origin), by any loopback name: served as before.
  const std::string json_body = "Content-Type: application/json; charset=utf-8\r\n";
  for (const std::string& host : {s.here(), "localhost:" + std::to_string(s.port), "[::1]:" + std::to_string(s.port), std::string("localhost")}) {
    const auto a = s.send(request("POST", "/v1/completions", host, json_body, ask));
    EXPECT_EQ(a.status, 200) << host << "\n" << a.body;
    EXPECT_EQ(a.header("Access-Control-Allow-Origin"), "") << host;
  }
  // A page of this machine (a local web app on another port): served, and told it may read the answer,
  // by name — never `*`.
  const std::string local_page = "Origin: http://localhost:5173\r\n";
  const auto pre = s.send(request("OPTIONS", "/v1/chat/completions", s.here(), local_page + "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\n"));
  EXPECT_EQ(pre.status, 204) << pre.head;
  EXPECT_EQ(pre.header("Access-Control-Allow-Origin"), "http://localhost:5173");
  EXPECT_NE(pre.header("Access-Control-Allow-Headers").find("Content-Type"), std::string::npos) << pre.head;
  EXPECT_NE(pre.header("Access-Control-Allow-Methods").find("POST"), std::string::npos) << pre.head;
  const auto whole = s.send(request("POST", "/v1/completions", s.here(), local_page + json_body, ask));
  EXPECT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.header("Access-Control-Allow-Origin"), "http://localhost:5173");
  EXPECT_EQ(whole.header("Vary"), "Origin");
  json streamed = json::parse(ask);
  streamed["stream"] = true;
  const auto stream = s.send(request("POST", "/v1/completions", s.here(), local_page + json_body, streamed.dump()));
  EXPECT_EQ(stream.status, 200);
  EXPECT_EQ(stream.header("Access-Control-Allow-Origin"), "http://localhost:5173") << stream.head;
  EXPECT_NE(stream.body.find("[DONE]"), std::string::npos);
  // The dashboard's own page (its origin is the server's) reads its stats.
  const auto own = s.send(request("GET", "/api/stats", s.here(), "Origin: http://" + s.here() + "\r\n"));
  EXPECT_EQ(own.status, 200);
  EXPECT_EQ(s.finished(), 6);
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// --allowed-hosts adds names (a reverse proxy's, the machine's own); --cors-origins replaces the
// default origins with exactly those given.
TEST(ServeBrowsers, AllowedHostsAndCorsOriginsAreExact) {
  keyless_server s({"--allowed-hosts", "box.lan,proxy.example:8443", "--cors-origins", "https://app.example"});
  EXPECT_EQ(s.send(request("GET", "/health", "box.lan:" + std::to_string(s.port))).status, 200);
  EXPECT_EQ(s.send(request("GET", "/health", "proxy.example:8443")).status, 200);
  expect_refused(s.send(request("GET", "/health", "proxy.example:9000")), 403, "host_not_allowed", "proxy.example:9000", "another port of a listed host");
  expect_refused(s.send(request("GET", "/health", "other.lan")), 403, "host_not_allowed", "other.lan", "an unlisted host");
  const auto listed = s.send(request("POST", "/v1/completions", s.here(), "Origin: https://app.example\r\nContent-Type: application/json\r\n", ask));
  EXPECT_EQ(listed.status, 200) << listed.body;
  EXPECT_EQ(listed.header("Access-Control-Allow-Origin"), "https://app.example");
  expect_refused(s.send(request("POST", "/v1/completions", s.here(), "Origin: http://localhost:5173\r\nContent-Type: application/json\r\n", ask)), 403,
                 "origin_not_allowed", "localhost:5173", "a loopback origin not on the list");
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// '*' lets any page in, only where keys guard the API: refused at start without one; with one, a page
// still needs the key, and is named in the answer (not `*`). A key guards its targets whatever their
// Host; the pages no token guards keep the Host rule.
TEST(ServeBrowsers, AnyOriginOnlyWithKeys) {
  const auto refused = run_capture(std::string(HOTCOLD_BIN) + " serve --zmq " + tcp_endpoint() + " --http 127.0.0.1:" + std::to_string(free_port()) +
                                   " --cors-origins '*' 2>&1; echo rc=$?");
  EXPECT_NE(refused.find("--api-key"), std::string::npos) << refused;
  EXPECT_NE(refused.find("rc=2"), std::string::npos) << refused;
  const auto malformed = run_capture(std::string(HOTCOLD_BIN) + " serve --zmq " + tcp_endpoint() + " --http 127.0.0.1:" + std::to_string(free_port()) +
                                     " --cors-origins app.example 2>&1; echo rc=$?");
  EXPECT_NE(malformed.find("'app.example' is not an origin"), std::string::npos) << malformed;
  EXPECT_NE(malformed.find("rc=2"), std::string::npos) << malformed;

  keyless_server s({"--api-key", key, "--cors-origins", "*"});
  const std::string page = "Origin: https://anyone.example\r\nContent-Type: application/json\r\n";
  expect_refused(s.send(request("POST", "/v1/completions", s.here(), page, ask)), 401, "invalid_api_key", "API key", "a page without the key",
                 "https://anyone.example");  // (it may read why)
  const auto with_key = s.send(request("POST", "/v1/completions", s.here(), page + "Authorization: Bearer " + key + "\r\n", ask));
  EXPECT_EQ(with_key.status, 200) << with_key.body;
  EXPECT_EQ(with_key.header("Access-Control-Allow-Origin"), "https://anyone.example");
  const auto by_name = s.send(request("POST", "/v1/completions", "my-box.example", "Content-Type: application/json\r\nAuthorization: Bearer " + key + "\r\n", ask));
  EXPECT_EQ(by_name.status, 200) << by_name.body;
  expect_refused(s.send(request("GET", "/metrics", "my-box.example")), 403, "host_not_allowed", "my-box.example", "unguarded /metrics by a name");
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// Framing: a transfer coding that is not chunked, or one beside a length (how requests are smuggled
// past proxies), is 400; chunked alone is read. A client that asks before sending its body is told
// 401 when its key is wrong (and never invited to send), 100 Continue when it is right.
TEST(ServeBrowsers, TransferCodingsAndExpectContinue) {
  keyless_server s({"--api-key", key});
  const std::string auth = "Authorization: Bearer " + key + "\r\nContent-Type: application/json\r\n";
  auto raw = [&](const std::string& headers, const std::string& body) {
    return split(round_trip(s.port, "POST /v1/completions HTTP/1.1\r\nHost: " + s.here() + "\r\nConnection: close\r\n" + auth + headers + "\r\n" + body));
  };
  auto chunked = [](const std::string& body) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx", body.size());
    return std::string(size) + "\r\n" + body + "\r\n0\r\n\r\n";
  };
  const auto gzip_with_length = raw("Transfer-Encoding: gzip\r\nContent-Length: " + std::to_string(ask.size()) + "\r\n", ask);
  EXPECT_EQ(gzip_with_length.status, 400) << gzip_with_length.body;
  EXPECT_NE(gzip_with_length.body.find("Transfer-Encoding"), std::string::npos) << gzip_with_length.body;
  EXPECT_EQ(raw("Transfer-Encoding: gzip\r\n", ask).status, 400);
  EXPECT_EQ(raw("Transfer-Encoding: gzip, chunked\r\n", chunked(ask)).status, 400);
  EXPECT_EQ(raw("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", chunked(ask)).status, 400);
  EXPECT_EQ(raw("Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n", chunked(ask)).status, 400);
  const auto plain_chunked = raw("Transfer-Encoding: chunked\r\n", chunked(ask));
  EXPECT_EQ(plain_chunked.status, 200) << plain_chunked.body;
  // Two Host or two Origin headers (RFC 9112: one Host): 400, naming the header.
  for (const std::string twice : {"Host: evil.example\r\n", "Origin: http://a.example\r\nOrigin: http://b.example\r\n"}) {
    const auto r = raw(twice, ask);
    EXPECT_EQ(r.status, 400) << twice << r.body;
    EXPECT_NE(r.body.find(twice.substr(0, twice.find(':')) + " header"), std::string::npos) << r.body;
  }

  // Expect: 100-continue with a wrong key: the final 401, no 100 first, and no body was needed.
  {
    const int fd = connect_to(s.port);
    send_text(fd, "POST /v1/completions HTTP/1.1\r\nHost: " + s.here() + "\r\nAuthorization: Bearer sk-wrong-0123456789abcdef\r\nContent-Type: application/json\r\n"
                  "Content-Length: " + std::to_string(ask.size()) + "\r\nExpect: 100-continue\r\n\r\n");
    const std::string got = read_all(fd);
    close(fd);
    EXPECT_EQ(got.find("100 Continue"), std::string::npos) << got;
    EXPECT_EQ(split(got).status, 401) << got;
  }
  // ... with no key at all, the same.
  {
    const int fd = connect_to(s.port);
    send_text(fd, "POST /v1/completions HTTP/1.1\r\nHost: " + s.here() + "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(ask.size()) +
                      "\r\nExpect: 100-continue\r\n\r\n");
    const std::string got = read_all(fd);
    close(fd);
    EXPECT_EQ(got.find("100 Continue"), std::string::npos) << got;
    EXPECT_EQ(split(got).status, 401) << got;
  }
  // With the key: 100 Continue, then the answer once the body has come.
  {
    const int fd = connect_to(s.port);
    send_text(fd, "POST /v1/completions HTTP/1.1\r\nHost: " + s.here() + "\r\nConnection: close\r\n" + auth + "Content-Length: " + std::to_string(ask.size()) +
                      "\r\nExpect: 100-continue\r\n\r\n");
    std::string interim;
    char c;
    while (interim.find("\r\n\r\n") == std::string::npos && read(fd, &c, 1) == 1) interim += c;
    EXPECT_EQ(interim.rfind("HTTP/1.1 100 Continue", 0), 0u) << interim;
    send_text(fd, ask);
    const auto a = split(read_all(fd));
    close(fd);
    EXPECT_EQ(a.status, 200) << a.body;
  }
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// A limit is named by its flag: /v1's max_tokens over --max-tokens (whatever its size), the
// protocol's n_predict over it; -1 over ZeroMQ generates what `run -n -1` does.
TEST(ServeBrowsers, LimitsAreNamedByTheirFlags) {
  keyless_server s({"--max-tokens", "300", "-c", "96"});
  for (const char* n : {"301", "2199023255552", "18446744073709551615"}) {
    const std::string body = "{\"model\":\"" + model_id + "\",\"prompt\":\"Hi\",\"max_tokens\":" + n + "}";
    const auto a = s.send(request("POST", "/v1/completions", s.here(), "Content-Type: application/json\r\n", body));
    EXPECT_EQ(a.status, 400) << n;
    EXPECT_NE(a.body.find("at most 300 tokens a request (serve --max-tokens)"), std::string::npos) << n << ": " << a.body;
  }
  hotcold::clients::client c(s.ep, 10s);
  try {
    c.generate({{"prompt", "Hi"}, {"n_predict", 5000}});
    ADD_FAILURE() << "n_predict 5000 was taken";
  } catch (const hotcold::clients::client_error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 300 tokens a request (serve --max-tokens)"), std::string::npos) << e.what();
  }
  // -1: until the end of the text or the full context (96), at most --max-tokens: as run -n -1 -c 96.
  const std::string want = run_stdout({"run", "-p", "Once upon a time", "-n", "-1", "-c", "96", "--temp", "0", "-t", "2"});
  const auto got = c.generate({{"prompt", "Once upon a time"}, {"n_predict", -1}, {"sampling", {{"temperature", 0}}}});
  EXPECT_EQ(got.text + "\n", want);
  EXPECT_GT(got.text.size(), 0u);
  const std::string client_out = run_capture(std::string(HOTCOLD_BIN) + " client --endpoint " + s.ep + " -p 'Once upon a time' -n -1 --temp 0 2>/dev/null");
  EXPECT_EQ(client_out, want);
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

}  // namespace
