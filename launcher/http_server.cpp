#include "launcher/http_server.hpp"

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <memory>
#include <sstream>
#include <string_view>
#include <system_error>
#include <condition_variable>
#include <mutex>
#include <vector>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "protocol/text_file.hpp"

namespace hotcold::launcher {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// Sends all of `data` on a blocking socket whose SO_SNDTIMEO is set; false when the client is gone
// or has not read for that long.
bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

namespace {

// Equal without an early exit at the first differing byte (the time says nothing of where).
bool same_secret(std::string_view a, std::string_view b) {
  if (b.empty()) return false;
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % b.size()]);
  return diff == 0;
}

// HOST and PORT of HOST:PORT (brackets around an IPv6 host removed); throws std::invalid_argument.
std::pair<asio::ip::address, unsigned short> parse_http_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument(fmt::format("--http {}: expected HOST:PORT", address));
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (...) {
    port = -1;
  }
  if (port < 0 || port > 65535) throw std::invalid_argument(fmt::format("--http {}: the port must be 0..65535", address));
  beast::error_code ec;
  const auto ip = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) throw std::invalid_argument(fmt::format("--http {}: '{}' is not an IP address", address, host));
  return {ip, static_cast<unsigned short>(port)};
}

}  // namespace

void check_http_bind(const std::string& address, bool allow_remote, bool has_tokens) {
  if (parse_http_address(address).first.is_loopback()) return;
  if (!allow_remote)
    throw std::invalid_argument(fmt::format("--http {}: not a loopback address; serving HTTP to other machines needs --allow-remote-http "
                                            "(--allow-remote is ZeroMQ's) and --http-token-file",
                                            address));
  if (!has_tokens)
    throw std::invalid_argument(
        fmt::format("--http {} --allow-remote-http: other machines must authenticate: give --http-token-file (bearer tokens, one per line)", address));
}

std::vector<std::string> read_bearer_tokens(const std::string& path) {
  std::vector<std::string> tokens;
  int n = 0;
  for (std::string line : protocol::read_text_lines(path, "--http-token-file", 64 << 10)) {
    ++n;
    line = protocol::trim_blanks(line);
    if (line.empty() || line[0] == '#') continue;
    if (line.size() < 16 || line.find_first_of(" \t") != std::string::npos)
      throw std::invalid_argument(fmt::format("{}:{}: a token must be at least 16 characters without blanks", path, n));
    tokens.push_back(line);
  }
  if (tokens.empty()) throw std::invalid_argument(path + ": no token in it (one per line, at least 16 characters)");
  return tokens;
}

struct http_server::impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  int64_t accept_errors = 0;
  std::vector<std::string> tokens;  // empty: no authentication
  handler h;
  size_t max_body = 64 * 1024;

  // The token a request carries, by header, cookie or URL parameter (removed from `target`); a
  // valid URL token is handed back in url_token (for the cookie).
  bool authorized(const http::request<http::string_body>& req, std::string& target, std::string& url_token) const {
    url_token.clear();
    auto known = [&](std::string_view t) {
      bool ok = false;
      for (const auto& k : tokens) ok |= same_secret(t, k);
      return ok;
    };
    bool ok = false;
    if (auto it = req.find(http::field::authorization); it != req.end()) {
      const std::string_view v(it->value().data(), it->value().size());
      if (v.size() > 7 && beast::iequals(beast::string_view(v.data(), 7), "Bearer ")) ok |= known(v.substr(7));
    }
    if (auto it = req.find(http::field::cookie); it != req.end()) {
      const std::string_view v(it->value().data(), it->value().size());
      for (size_t at = 0; at < v.size();) {
        size_t end = v.find(';', at);
        if (end == std::string_view::npos) end = v.size();
        std::string_view kv = v.substr(at, end - at);
        while (!kv.empty() && kv.front() == ' ') kv.remove_prefix(1);
        if (kv.rfind("hotcold_token=", 0) == 0) ok |= known(kv.substr(14));
        at = end + 1;
      }
    }
    // ?token=... anywhere in the query: checked, and taken out of what the handler sees.
    if (const auto q = target.find('?'); q != std::string::npos) {
      std::string kept;
      for (size_t at = q + 1; at <= target.size();) {
        size_t end = target.find('&', at);
        if (end == std::string::npos) end = target.size();
        const std::string kv = target.substr(at, end - at);
        if (kv.rfind("token=", 0) == 0) {
          if (known(std::string_view(kv).substr(6))) ok = true, url_token = kv.substr(6);
        } else if (!kv.empty()) {
          kept += (kept.empty() ? "" : "&") + kv;
        }
        at = end + 1;
      }
      target = target.substr(0, q) + (kept.empty() ? "" : "?" + kept);
    }
    return ok;
  }
  static constexpr auto io_timeout = std::chrono::seconds(10);  // to send a request, or read an answer
  // Streams in progress: each a thread writing to its own socket.
  std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;
  int streams = 0;
  struct stream_thread {
    std::thread t;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<stream_thread> stream_threads;

  // One request per connection (Connection: close), read and written asynchronously with a deadline,
  // so a client that connects and says nothing holds up no one; the handler runs on the server's
  // thread (the pages are small).
  struct connection : std::enable_shared_from_this<connection> {
    impl& owner;
    beast::tcp_stream stream;
    beast::flat_buffer buf;
    http::request_parser<http::string_body> parser;
    http::response<http::string_body> res;
    connection(impl& o, tcp::socket s) : owner(o), stream(std::move(s)) {}

    void start() {
      parser.body_limit(owner.max_body);
      stream.expires_after(io_timeout);
      http::async_read(stream, buf, parser, [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
    }
    void on_read(beast::error_code ec) {
      if (ec == beast::error::timeout || ec == http::error::end_of_stream) return close();
      http_reply r;
      std::string url_token;  // a valid ?token=, kept by the browser as a cookie for the page's own requests
      if (ec == http::error::body_limit) {
        r = {413, "text/plain", fmt::format("the request's body is over {} bytes\n", owner.max_body)};
      } else if (ec) {
        r = {400, "text/plain", "bad request\n"};
      } else {
        const auto& req = parser.get();
        std::string target(req.target());
        if (!owner.tokens.empty() && !owner.authorized(req, target, url_token)) {
          r = {401, "text/plain", "a token is needed: Authorization: Bearer TOKEN (or open /?token=TOKEN once)\n"};
          res.set(http::field::www_authenticate, "Bearer realm=\"hotcold\"");
        } else {
          try {
            http_request hr{std::string(req.method_string()), target, req.body(), {}};
            for (const auto& f : req) {
              std::string name(f.name_string());
              std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
              hr.headers.emplace_back(std::move(name), std::string(f.value()));
            }
            r = owner.h(hr);
          } catch (const std::exception& e) {
            r = {500, "text/plain", fmt::format("internal error: {}\n", e.what())};
          }
        }
      }
      if (!url_token.empty()) res.set(http::field::set_cookie, "hotcold_token=" + url_token + "; Path=/; HttpOnly; SameSite=Strict");
      if (r.next) {
        std::lock_guard lock(owner.mu);
        if (owner.streams >= max_streams) {
          r = {503, "text/plain", fmt::format("too many streams (at most {} at once)\n", max_streams)};
        } else if (!owner.stopping) {
          stream.expires_never();
          owner.start_stream(stream.release_socket(), std::move(r));
          return;
        }
      }
      res.result(static_cast<http::status>(r.status));
      res.set(http::field::content_type, r.content_type);
      res.set(http::field::server, "hotcold");
      res.body() = std::move(r.body);
      res.keep_alive(false);
      res.prepare_payload();
      stream.expires_after(io_timeout);
      http::async_write(stream, res, [self = shared_from_this()](beast::error_code, size_t) { self->close(); });
    }
    void close() {
      beast::error_code ec;
      stream.socket().shutdown(tcp::socket::shutdown_both, ec);
      stream.socket().close(ec);
    }
  };

  // An accept that fails (out of descriptors: EMFILE, ENFILE; out of memory) is logged and tried
  // again after a pause, until the acceptor is closed (the server stopping).
  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) {
        if (accept_errors++ % 100 == 0)
          fmt::print(stderr, "hotcold serve: HTTP accept failed: {} ({} so far); trying again in 100 ms\n", ec.message(), accept_errors);
        accept_retry.expires_after(std::chrono::milliseconds(100));
        accept_retry.async_wait([this](beast::error_code wait_ec) {
          if (!wait_ec) accept();
        });
        return;
      }
      std::make_shared<connection>(*this, std::move(s))->start();
      accept();
    });
  }

  // Called with mu held: a thread for the stream, and the threads of streams that ended joined.
  void start_stream(tcp::socket s, http_reply r) {
    ++streams;
    std::erase_if(stream_threads, [](stream_thread& st) {
      if (!st.done->load()) return false;
      st.t.join();
      return true;
    });
    auto done = std::make_shared<std::atomic<bool>>(false);
    try {
      stream_threads.push_back({std::thread([this, done, s = std::move(s), r = std::move(r)]() mutable {
                                  stream(std::move(s), std::move(r));
                                  done->store(true);
                                }),
                                done});
    } catch (const std::system_error& e) {  // no thread to be had: this stream's connection closes
      --streams;
      fmt::print(stderr, "hotcold serve: no thread for an HTTP stream: {}\n", e.what());
    }
  }
  // A stream's thread: the headers (no length: the body ends when the connection does), then the
  // chunks as next() gives them. A client that stops reading for io_timeout is dropped.
  void stream(tcp::socket s, http_reply r) {
    beast::error_code ec;
    s.non_blocking(false, ec);
    const int fd = s.native_handle();
    const timeval tv{static_cast<time_t>(io_timeout.count()), 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    http::response<http::empty_body> res;
    res.result(static_cast<http::status>(r.status));
    res.set(http::field::content_type, r.content_type);
    res.set(http::field::cache_control, "no-cache");
    res.set(http::field::server, "hotcold");
    res.keep_alive(false);
    std::ostringstream head;
    head << res.base();
    bool ok = send_all(fd, head.str()) && send_all(fd, r.body);
    while (ok) {
      {
        std::unique_lock lock(mu);
        if (wake.wait_for(lock, r.period, [this] { return stopping; })) break;
      }
      std::optional<std::string> chunk;
      try {
        chunk = r.next();
      } catch (...) {
        break;
      }
      if (!chunk) break;
      ok = send_all(fd, *chunk);
    }
    s.shutdown(tcp::socket::shutdown_both, ec);
    s.close(ec);
    std::lock_guard lock(mu);
    --streams;
  }
};

http_server::http_server(const std::string& address, bool allow_remote, std::vector<std::string> tokens, handler h, size_t max_body)
    : impl_(std::make_unique<impl>()) {
  check_http_bind(address, allow_remote, !tokens.empty());
  const auto [ip, port] = parse_http_address(address);
  beast::error_code ec;
  impl_->tokens = std::move(tokens);
  impl_->h = std::move(h);
  impl_->max_body = max_body;
  const tcp::endpoint ep(ip, port);
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
  impl_->acceptor.bind(ep, ec);
  if (ec) throw std::runtime_error(fmt::format("--http {}: cannot bind: {}", address, ec.message()));
  impl_->acceptor.listen();
  port_ = impl_->acceptor.local_endpoint().port();
  impl_->accept();
  try {
    thread_ = std::thread([this] { impl_->io.run(); });
  } catch (const std::system_error& e) {
    throw std::runtime_error(fmt::format("--http {}: cannot start its thread: {}", address, e.what()));
  }
}

http_server::~http_server() {
  asio::post(impl_->io, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
  impl_->io.stop();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  for (auto& st : impl_->stream_threads) st.t.join();
}

}  // namespace hotcold::launcher
