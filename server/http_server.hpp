#pragma once
// The HTTP side of `hotcold serve --http HOST:PORT` (Boost.Beast): one request per connection.
// Quick answers are made on the server's thread; a reply that takes time (a generation, an event
// stream) runs on a thread of its own (`http_reply::work`) and answers through an http_exchange,
// whole or as a stream, until it ends, the client goes or the server stops. Handlers must be
// thread-safe.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "server/browser_guard.hpp"

namespace hotcold::server {

class http_exchange;

struct http_reply {
  http_reply() = default;
  http_reply(int status_, std::string content_type_, std::string body_) : status(status_), content_type(std::move(content_type_)), body(std::move(body_)) {}
  int status = 200;
  std::string content_type, body;
  std::vector<std::pair<std::string, std::string>> headers;  // more header fields (Retry-After, ...)
  // A reply that takes time: run on a thread of its own, which answers through the exchange (the
  // fields above are then unused). Past http_options::max_workers at once, 503 instead.
  std::function<void(http_exchange&)> work;
};

// A request as the handler sees it: the method, the target (without a ?token= parameter), the
// header fields (names in lower case), the body (at most the server's body limit for the target),
// whether it came from this machine and its address, and the key or token it was let in with.
struct http_request {
  std::string method, target, body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool loopback_peer = true;
  std::string peer;  // the client's IP address
  std::string key;   // the API key or token that opened it ("" when none is needed)
  // The value of a header field ("" when absent); name in lower case.
  std::string header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k == name) return v;
    return {};
  }
  // The target without its query.
  std::string path() const { return target.substr(0, target.find('?')); }
};

// How a `work` thread answers. A stream's head goes without a length: to an HTTP/1.1 client the
// body is chunked (its end is marked), to an HTTP/1.0 one it ends when the connection closes.
class http_exchange {
 public:
  struct state;
  explicit http_exchange(state& s) : s_(s) {}
  // The whole reply at once, with its length. False when the client has gone.
  bool reply(const http_reply& r);
  // A stream: its head (status, content type, r.headers; r.body is sent as its first piece), then
  // its pieces. False when the client has gone or stopped reading for 10 s.
  bool begin_stream(const http_reply& r);
  bool send(std::string_view piece);
  // The client has closed its side of the connection (or a send to it failed).
  bool client_gone();
  // The connection's descriptor, to wait on beside other things (readable: the client sent more, or
  // went; then ask client_gone()).
  int client_fd() const;
  // The server is stopping: end soon.
  bool stopping();
  // Waits for d; false at once when the server stops.
  bool pause(std::chrono::milliseconds d);

 private:
  state& s_;
};

// Whether HTTP may bind HOST:PORT: a loopback host (127.0.0.0/8, ::1, localhost), or another with
// allow_remote and bearer tokens (or API keys). Throws std::invalid_argument naming what is wrong or
// missing (a malformed address, --allow-remote-http, --http-token-file / --api-key).
void check_http_bind(const std::string& address, bool allow_remote, bool has_tokens);

// Bearer tokens, one per line (blank lines and # comments skipped), each at least 16 characters
// without blanks. `what` names the option in errors. Throws std::invalid_argument naming what is wrong.
std::vector<std::string> read_bearer_tokens(const std::string& path, const std::string& what = "--http-token-file");

// Whether a token or key is one hotcold accepts: at least 16 characters, no blanks.
bool usable_secret(std::string_view token);

// The token of an Authorization header value `Bearer TOKEN` (the scheme in any case); nullopt for
// another scheme.
std::optional<std::string_view> bearer_token(std::string_view authorization);

// Whether `token` is one of `known` (each compared without an early exit).
bool known_secret(std::string_view token, const std::vector<std::string>& known);

struct http_options {
  std::string address;          // HOST:PORT (a loopback host unless allow_remote)
  bool allow_remote = false;
  // With tokens, every request outside api_prefix must carry one: `Authorization: Bearer TOKEN`,
  // the cookie `hotcold_token=TOKEN`, or `?token=TOKEN` in the URL (which sets that cookie, so that a
  // dashboard opened from such a link streams too); others get 401.
  std::vector<std::string> tokens;
  // With api_keys, every request under api_prefix must carry one as `Authorization: Bearer KEY`.
  // Keys and tokens are checked as soon as the header is in: before a body is read, and before a
  // client that asks first (`Expect: 100-continue`) is told to send it.
  std::string api_prefix;
  // Paths guarded as api_prefix is, each the path itself or under it (serve: /slots, /tokenize, ...).
  std::vector<std::string> api_paths;
  std::vector<std::string> api_keys;
  // What web pages may do (browser_guard.hpp): the Host check holds on the targets no key or token
  // guards, the Origin check on all; a page's preflight (OPTIONS) is answered here.
  browser_guard browsers;
  // A body over its limit is answered 413 without the handler: large_body for targets under
  // large_body_prefix, max_body for the rest.
  size_t max_body = 64 * 1024;
  std::string large_body_prefix;  // (and api_paths)
  size_t large_body = 0;
  int max_workers = 256;  // `work` threads at once
  // The server's own error answers (400, 401, 403, 413, 503) for a target: `code` names the error in
  // a word (bad_request, invalid_api_key, host_not_allowed, ...); plain text when unset.
  std::function<http_reply(int status, const std::string& code, const std::string& message, const std::string& target)> error_reply;
};

class http_server {
 public:
  using handler = std::function<http_reply(const http_request&)>;
  // Throws std::invalid_argument for a bad address, std::runtime_error when it cannot bind.
  http_server(http_options o, handler h);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;
  unsigned short port() const { return port_; }

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  unsigned short port_ = 0;
  std::thread thread_;
};

}  // namespace hotcold::server
