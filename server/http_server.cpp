#include "server/http_server.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <array>
#include <cerrno>
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

namespace hotcold::server {

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
                                            "(--allow-remote is ZeroMQ's) and --http-token-file or --api-key",
                                            address));
  if (!has_tokens)
    throw std::invalid_argument(fmt::format("--http {} --allow-remote-http: other machines must authenticate: give --http-token-file (bearer "
                                            "tokens, one per line) or --api-key / --api-key-file (for /v1/*)",
                                            address));
}

std::vector<std::string> read_bearer_tokens(const std::string& path, const std::string& what) {
  std::vector<std::string> tokens;
  int n = 0;
  for (std::string line : protocol::read_text_lines(path, what.c_str(), 64 << 10)) {
    ++n;
    line = protocol::trim_blanks(line);
    if (line.empty() || line[0] == '#') continue;
    if (!usable_secret(line))
      throw std::invalid_argument(fmt::format("{}:{}: a token must be at least 16 characters without blanks", path, n));
    tokens.push_back(line);
  }
  if (tokens.empty()) throw std::invalid_argument(path + ": no token in it (one per line, at least 16 characters)");
  return tokens;
}

bool usable_secret(std::string_view token) { return token.size() >= 16 && token.find_first_of(" \t\r\n") == std::string_view::npos; }

std::optional<std::string_view> bearer_token(std::string_view authorization) {
  if (authorization.size() <= 7 || !beast::iequals(beast::string_view(authorization.data(), 7), "Bearer ")) return std::nullopt;
  return authorization.substr(7);
}

bool known_secret(std::string_view token, const std::vector<std::string>& known) {
  bool ok = false;
  for (const auto& k : known) ok |= same_secret(token, k);
  return ok;
}

// What a `work` thread answers through.
struct http_exchange::state {
  int fd = -1;
  bool chunked = false;  // an HTTP/1.1 client: a stream's pieces go as chunks
  bool answered = false, streaming = false, failed = false;
  std::vector<std::pair<std::string, std::string>> headers;  // on every answer (an allowed page's CORS fields)
  std::function<bool()> stopping;
  std::function<bool(std::chrono::milliseconds)> pause;
};

namespace {

std::string serialized_head(const http_reply& r, bool stream, bool chunked, const std::vector<std::pair<std::string, std::string>>& more) {
  http::response<http::empty_body> res;
  res.result(static_cast<http::status>(r.status));
  res.set(http::field::content_type, r.content_type);
  res.set(http::field::server, "hotcold");
  for (const auto& [k, v] : more) res.set(k, v);
  for (const auto& [k, v] : r.headers) res.set(k, v);
  res.keep_alive(false);
  if (stream) {
    res.set(http::field::cache_control, "no-cache");
    if (chunked) res.chunked(true);
  } else {
    res.content_length(r.body.size());
  }
  std::ostringstream head;
  head << res.base();
  return head.str();
}

}  // namespace

bool http_exchange::reply(const http_reply& r) {
  if (s_.answered || s_.failed) return false;
  s_.answered = true;
  s_.failed = !(send_all(s_.fd, serialized_head(r, false, false, s_.headers)) && send_all(s_.fd, r.body));
  return !s_.failed;
}

bool http_exchange::begin_stream(const http_reply& r) {
  if (s_.answered || s_.failed) return false;
  s_.answered = s_.streaming = true;
  s_.failed = !send_all(s_.fd, serialized_head(r, true, s_.chunked, s_.headers));
  return !s_.failed && (r.body.empty() || send(r.body));
}

bool http_exchange::send(std::string_view piece) {
  if (!s_.streaming || s_.failed) return false;
  if (piece.empty()) return true;  // an empty chunk would end a chunked body
  s_.failed = s_.chunked ? !send_all(s_.fd, fmt::format("{:x}\r\n{}\r\n", piece.size(), piece)) : !send_all(s_.fd, piece);
  return !s_.failed;
}

bool http_exchange::client_gone() {
  if (s_.failed) return true;
  pollfd p{s_.fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return s_.failed = true;
  char c;
  if (p.revents & POLLIN) {
    const ssize_t n = ::recv(s_.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return s_.failed = true;
  }
  return false;
}

int http_exchange::client_fd() const { return s_.fd; }

bool http_exchange::stopping() { return s_.stopping(); }

bool http_exchange::pause(std::chrono::milliseconds d) { return s_.pause(d); }

struct http_server::impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  int64_t accept_errors = 0;
  http_options opt;
  handler h;

  // The token a request carries, by header, cookie or URL parameter (removed from `target`); a
  // valid URL token is handed back in url_token (for the cookie). "" when it carries none known.
  std::string known_token(const http::request_header<>& req, std::string& target, std::string& url_token) const {
    url_token.clear();
    std::string found;
    auto known = [&](std::string_view t) {
      if (found.empty() && known_secret(t, opt.tokens)) found = std::string(t);
    };
    if (auto it = req.find(http::field::authorization); it != req.end())
      if (const auto t = bearer_token(std::string_view(it->value().data(), it->value().size()))) known(*t);
    if (auto it = req.find(http::field::cookie); it != req.end()) {
      const std::string_view v(it->value().data(), it->value().size());
      for (size_t at = 0; at < v.size();) {
        size_t end = v.find(';', at);
        if (end == std::string_view::npos) end = v.size();
        std::string_view kv = v.substr(at, end - at);
        while (!kv.empty() && kv.front() == ' ') kv.remove_prefix(1);
        if (kv.rfind("hotcold_token=", 0) == 0) known(kv.substr(14));
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
          if (known_secret(std::string_view(kv).substr(6), opt.tokens)) url_token = kv.substr(6), found = url_token;
        } else if (!kv.empty()) {
          kept += (kept.empty() ? "" : "&") + kv;
        }
        at = end + 1;
      }
      target = target.substr(0, q) + (kept.empty() ? "" : "?" + kept);
    }
    return found;
  }
  bool under(const std::string& target, const std::string& prefix) const { return !prefix.empty() && target.rfind(prefix, 0) == 0; }
  bool api_path(const std::string& target) const {
    const std::string path = target.substr(0, target.find('?'));
    for (const auto& p : opt.api_paths)
      if (path == p || under(path, p + "/")) return true;
    return false;
  }
  size_t body_limit(const std::string& target) const { return under(target, opt.large_body_prefix) || api_path(target) ? opt.large_body : opt.max_body; }
  http_reply error(int status, const std::string& code, const std::string& message, const std::string& target) const {
    if (opt.error_reply) return opt.error_reply(status, code, message, target);
    return {status, "text/plain", message + "\n"};
  }

  // What the header alone decides, before any body is read: a reply (refusal, or a page's
  // preflight), or nullopt to go on. Sets the target the handler sees (a ?token= taken out), the
  // key or token that let the request in, the cookie for a URL token, and the CORS fields of an
  // allowed page's answer.
  struct admission {
    std::string target, key, url_token;
    std::vector<std::pair<std::string, std::string>> cors;
  };
  std::optional<http_reply> admit(const http::request_header<>& req, bool has_length, admission& a) const {
    a.target = std::string(req.target());
    const std::string raw = a.target;
    // RFC 9112 6.1: a body's length is known only when its last transfer coding is chunked, and never
    // from both a coding and a length (the way requests are smuggled past proxies). Only chunked is
    // decoded here.
    if (auto te = req.find(http::field::transfer_encoding); te != req.end()) {
      const std::string coding(te->value());
      if (has_length) return error(400, "bad_request", "the request has both Transfer-Encoding and Content-Length", raw);
      if (req.count(http::field::transfer_encoding) > 1) return error(400, "bad_request", "the request has more than one Transfer-Encoding", raw);
      if (!beast::iequals(protocol::trim_blanks(coding), "chunked"))
        return error(400, "bad_request", fmt::format("Transfer-Encoding '{}' is not decoded here: send the body as it is, or chunked", coding), raw);
    }
    const bool api = under(a.target, opt.api_prefix) || api_path(a.target);
    const std::vector<std::string>& secrets = api ? opt.api_keys : opt.tokens;
    // RFC 9112 3.2: one Host (two would let a guard and a handler read different ones); one Origin too.
    for (const char* one : {"Host", "Origin"})
      if (req.count(one) > 1) return error(400, "bad_request", fmt::format("the request has more than one {} header", one), raw);
    const std::string host(req[http::field::host]), origin(req["Origin"]);
    if (secrets.empty())
      if (auto why = opt.browsers.refuse_host(host)) return error(403, "host_not_allowed", *why, raw);
    if (auto why = opt.browsers.refuse_origin(origin, host)) return error(403, "origin_not_allowed", *why, raw);
    if (!origin.empty()) a.cors = {{"Access-Control-Allow-Origin", origin}, {"Vary", "Origin"}};
    // A page's preflight asks before a request with a key or a JSON body: answered for the origins
    // allowed above, before any key (a browser sends none with it).
    if (req.method() == http::verb::options && !origin.empty() && req.find("Access-Control-Request-Method") != req.end()) {
      http_reply r{204, "text/plain", ""};
      r.headers = a.cors;
      r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      r.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
      r.headers.emplace_back("Access-Control-Max-Age", "600");
      return r;
    }
    if (!secrets.empty()) {
      if (api) {
        std::optional<std::string_view> key;
        const std::string auth(req[http::field::authorization]);
        if ((key = bearer_token(auth)) && known_secret(*key, secrets)) {
          a.key = std::string(*key);
        } else {
          auto r = error(401, "invalid_api_key", key ? "Incorrect API key provided." : "You didn't provide an API key: send 'Authorization: Bearer KEY'.", raw);
          r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"hotcold\"");
          return r;
        }
      } else if ((a.key = known_token(req, a.target, a.url_token)).empty()) {
        auto r = error(401, "invalid_token", "a token is needed: Authorization: Bearer TOKEN (or open /?token=TOKEN once)", raw);
        r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"hotcold\"");
        return r;
      }
    }
    return std::nullopt;
  }

  static constexpr auto io_timeout = std::chrono::seconds(10);  // to send a request, or read an answer
  // Replies that take time, each on a thread writing to its own socket.
  std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;
  int workers = 0;
  struct worker_thread {
    std::thread t;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<worker_thread> worker_threads;

  // One request per connection (Connection: close), read and written asynchronously with a deadline,
  // so a client that connects and says nothing holds up no one; the handler runs on the server's
  // thread and hands what takes time to a `work` thread.
  struct connection : std::enable_shared_from_this<connection> {
    impl& owner;
    beast::tcp_stream stream;
    beast::flat_buffer buf;
    http::request_parser<http::string_body> parser;
    http::response<http::string_body> res;
    admission admitted;
    std::array<char, 16384> discard{};
    size_t discarded = 0;
    connection(impl& o, tcp::socket s) : owner(o), stream(std::move(s)) {}

    void start() {
      parser.body_limit(std::max(owner.opt.max_body, owner.opt.large_body));
      stream.expires_after(io_timeout);
      http::async_read_header(stream, buf, parser, [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
    }
    // The header is in: whether the request is let in at all, and the body's limit (by target).
    void on_header(beast::error_code ec) {
      if (ec == beast::error::timeout || ec == http::error::end_of_stream) return close();
      if (ec) return on_read(ec);
      const auto& head = parser.get().base();
      if (auto early = owner.admit(head, parser.content_length().has_value(), admitted)) return answer(std::move(*early), true);
      const size_t limit = owner.body_limit(admitted.target);
      if (parser.content_length() && *parser.content_length() > limit) return on_read(http::error::body_limit);
      parser.body_limit(limit);
      if (parser.is_done()) return on_read({});
      // A client that waits for leave to send its body (curl does, for large ones) gets it now that
      // it is known to be let in.
      if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        static const std::string go_on = "HTTP/1.1 100 Continue\r\n\r\n";
        asio::async_write(stream, asio::buffer(go_on), [self = shared_from_this()](beast::error_code ec2, size_t) {
          if (ec2) return self->close();
          self->read_body();
        });
        return;
      }
      read_body();
    }
    void read_body() {
      http::async_read(stream, buf, parser, [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
    }
    void on_read(beast::error_code ec) {
      if (ec == beast::error::timeout || ec == http::error::end_of_stream) return close();
      const std::string raw_target(parser.get().target());
      if (ec == http::error::body_limit)
        return answer(owner.error(413, "request_too_large", fmt::format("the request's body is over {} bytes", owner.body_limit(raw_target)), raw_target), true);
      if (ec) return answer(owner.error(400, "bad_request", "bad request: " + ec.message(), raw_target), true);
      http_reply r;
      const auto& req = parser.get();
      try {
        http_request hr{std::string(req.method_string()), admitted.target, req.body(), {}, true, {}, {}};
        for (const auto& f : req) {
          std::string name(f.name_string());
          std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
          hr.headers.emplace_back(std::move(name), std::string(f.value()));
        }
        beast::error_code pec;
        const auto peer = stream.socket().remote_endpoint(pec);
        auto address = peer.address();
        if (!pec && address.is_v6() && address.to_v6().is_v4_mapped()) address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
        hr.loopback_peer = !pec && address.is_loopback();
        hr.peer = pec ? std::string() : address.to_string();
        hr.key = admitted.key;
        r = owner.h(hr);
      } catch (const std::exception& e) {
        r = owner.error(500, "internal_error", fmt::format("internal error: {}", e.what()), raw_target);
      }
      if (r.work) {
        std::lock_guard lock(owner.mu);
        if (owner.workers >= owner.opt.max_workers) {
          r = owner.error(503, "overloaded", fmt::format("too many requests in progress (at most {} at once)", owner.opt.max_workers), raw_target);
          r.headers.emplace_back("Retry-After", "1");
        } else if (owner.stopping) {
          r = owner.error(503, "shutting_down", "the server is stopping", raw_target);
        } else {
          stream.expires_never();
          owner.start_worker(stream.release_socket(), std::move(r.work), raw_target, parser.get().version() >= 11, admitted.cors);
          return;
        }
      }
      answer(std::move(r), false);
    }
    // The whole answer, then the connection closes. Answered before the body was read (`early`), the
    // rest of what the client sends is read and dropped for a while first: closing with it unread
    // would reset the connection, and the client might lose the answer.
    void answer(http_reply r, bool early) {
      if (!admitted.url_token.empty())
        res.set(http::field::set_cookie, "hotcold_token=" + admitted.url_token + "; Path=/; HttpOnly; SameSite=Strict");
      res.result(static_cast<http::status>(r.status));
      res.set(http::field::content_type, r.content_type);
      res.set(http::field::server, "hotcold");
      for (const auto& [k, v] : admitted.cors) res.set(k, v);
      for (const auto& [k, v] : r.headers) res.set(k, v);
      res.body() = std::move(r.body);
      res.keep_alive(false);
      res.prepare_payload();
      stream.expires_after(io_timeout);
      http::async_write(stream, res, [self = shared_from_this(), early](beast::error_code wec, size_t) {
        if (wec || !early) return self->close();
        beast::error_code sec;
        self->stream.socket().shutdown(tcp::socket::shutdown_send, sec);
        self->stream.expires_after(std::chrono::seconds(2));
        self->drain();
      });
    }
    void drain() {
      stream.async_read_some(asio::buffer(discard), [self = shared_from_this()](beast::error_code ec, size_t n) {
        self->discarded += n;
        if (ec || self->discarded > (1u << 20)) return self->close();
        self->drain();
      });
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

  // Called with mu held: a thread for the work, and the threads of work that ended joined.
  void start_worker(tcp::socket s, std::function<void(http_exchange&)> work, std::string target, bool http11,
                    std::vector<std::pair<std::string, std::string>> cors) {
    ++workers;
    std::erase_if(worker_threads, [](worker_thread& w) {
      if (!w.done->load()) return false;
      w.t.join();
      return true;
    });
    auto done = std::make_shared<std::atomic<bool>>(false);
    try {
      worker_threads.push_back({std::thread([this, done, s = std::move(s), work = std::move(work), target = std::move(target), http11,
                                               cors = std::move(cors)]() mutable {
                                  run_worker(std::move(s), work, target, http11, std::move(cors));
                                  done->store(true);
                                }),
                                done});
    } catch (const std::system_error& e) {  // no thread to be had: this request's connection closes
      --workers;
      fmt::print(stderr, "hotcold serve: no thread for an HTTP request: {}\n", e.what());
    }
  }
  // A work thread: blocking writes with a deadline (a client that stops reading for io_timeout is
  // dropped); a reply the work never made is a 500 (shaped for the target, as the server's other
  // errors are); a chunked stream gets its end.
  void run_worker(tcp::socket s, std::function<void(http_exchange&)>& work, const std::string& target, bool http11,
                  std::vector<std::pair<std::string, std::string>> cors) {
    beast::error_code ec;
    s.non_blocking(false, ec);
    const int fd = s.native_handle();
    const timeval tv{static_cast<time_t>(io_timeout.count()), 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    http_exchange::state st;
    st.fd = fd;
    st.chunked = http11;
    st.headers = std::move(cors);
    st.stopping = [this] {
      std::lock_guard lock(mu);
      return stopping;
    };
    st.pause = [this](std::chrono::milliseconds d) {
      std::unique_lock lock(mu);
      return !wake.wait_for(lock, d, [this] { return stopping; });
    };
    http_exchange ex(st);
    try {
      work(ex);
      if (!st.answered) ex.reply(error(500, "internal_error", "internal error: the request got no answer", target));
    } catch (const std::exception& e) {
      if (!st.answered) ex.reply(error(500, "internal_error", fmt::format("internal error: {}", e.what()), target));
      else fmt::print(stderr, "hotcold serve: an HTTP stream failed: {}\n", e.what());
    }
    if (st.streaming && st.chunked && !st.failed) send_all(fd, "0\r\n\r\n");
    s.shutdown(tcp::socket::shutdown_both, ec);
    s.close(ec);
    std::lock_guard lock(mu);
    --workers;
  }
};

http_server::http_server(http_options o, handler h) : impl_(std::make_unique<impl>()) {
  check_http_bind(o.address, o.allow_remote, !o.tokens.empty() || !o.api_keys.empty());
  const auto [ip, port] = parse_http_address(o.address);
  beast::error_code ec;
  impl_->opt = std::move(o);
  impl_->opt.browsers.any_ip_host = !ip.is_loopback();
  impl_->h = std::move(h);
  const std::string& address = impl_->opt.address;
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
  for (auto& w : impl_->worker_threads) w.t.join();
}

}  // namespace hotcold::server
