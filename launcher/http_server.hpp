#pragma once
// The HTTP side of `hotcold serve --http HOST:PORT` (Boost.Beast): one request per connection,
// answered on the server's thread, except streams (Server-Sent Events), which each get a thread of
// their own until they end, the client goes or the server stops. Handlers must be thread-safe.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace hotcold::launcher {

struct http_reply {
  http_reply() = default;
  http_reply(int status_, std::string content_type_, std::string body_) : status(status_), content_type(std::move(content_type_)), body(std::move(body_)) {}
  int status = 200;
  std::string content_type, body;
  // A stream: after the headers and `body`, next() is called every `period` for the next chunk,
  // written as it comes, until it returns nullopt (or the client goes). The connection then closes.
  std::function<std::optional<std::string>()> next;
  std::chrono::milliseconds period{1000};
};

// A request as the handler sees it: the method, the target (without a ?token= parameter), the
// header fields (names in lower case) and the body (at most the server's body limit).
struct http_request {
  std::string method, target, body;
  std::vector<std::pair<std::string, std::string>> headers;
  // The value of a header field ("" when absent); name in lower case.
  std::string header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k == name) return v;
    return {};
  }
};

// Whether HTTP may bind HOST:PORT: a loopback host (127.0.0.0/8, ::1, localhost), or another with
// allow_remote and bearer tokens. Throws std::invalid_argument naming what is wrong or missing (a
// malformed address, --allow-remote-http, --http-token-file).
void check_http_bind(const std::string& address, bool allow_remote, bool has_tokens);

// Bearer tokens, one per line (blank lines and # comments skipped), each at least 16 characters
// without blanks. Throws std::invalid_argument naming what is wrong.
std::vector<std::string> read_bearer_tokens(const std::string& path);

class http_server {
 public:
  using handler = std::function<http_reply(const http_request&)>;
  // address: HOST:PORT (a loopback host unless allow_remote). With tokens, every request must carry
  // one: `Authorization: Bearer TOKEN`, the cookie `hotcold_token=TOKEN`, or `?token=TOKEN` in the
  // URL (which sets that cookie, so that a dashboard opened from such a link streams too); others
  // get 401. The handler never sees the token parameter. A body over max_body bytes is answered 413
  // without the handler. Throws std::invalid_argument for a bad address, std::runtime_error when it
  // cannot bind.
  http_server(const std::string& address, bool allow_remote, std::vector<std::string> tokens, handler h, size_t max_body = 64 * 1024);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;
  unsigned short port() const { return port_; }
  static constexpr int max_streams = 32;  // at once; more are answered 503

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  unsigned short port_ = 0;
  std::thread thread_;
};

}  // namespace hotcold::launcher
