#include "launcher/http_server.hpp"

#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <sstream>
#include <string_view>
#include <condition_variable>
#include <mutex>
#include <vector>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

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

struct http_server::impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  handler h;
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
      parser.body_limit(64 * 1024);
      stream.expires_after(io_timeout);
      http::async_read(stream, buf, parser, [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
    }
    void on_read(beast::error_code ec) {
      if (ec == beast::error::timeout || ec == http::error::end_of_stream) return close();
      http_reply r;
      if (ec) {
        r = {400, "text/plain", "bad request\n"};
      } else {
        const auto& req = parser.get();
        try {
          r = owner.h(std::string(req.method_string()), std::string(req.target()));
        } catch (const std::exception& e) {
          r = {500, "text/plain", fmt::format("internal error: {}\n", e.what())};
        }
      }
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

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
      if (ec) return;  // closed: the server is stopping
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
    stream_threads.push_back({std::thread([this, done, s = std::move(s), r = std::move(r)]() mutable {
                                stream(std::move(s), std::move(r));
                                done->store(true);
                              }),
                              done});
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

http_server::http_server(const std::string& address, bool allow_remote, handler h) : impl_(std::make_unique<impl>()) {
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
  if (!ip.is_loopback() && !allow_remote)
    throw std::invalid_argument(fmt::format("--http {}: not a loopback address; serving other machines needs --allow-remote", address));
  impl_->h = std::move(h);
  const tcp::endpoint ep(ip, static_cast<unsigned short>(port));
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
  impl_->acceptor.bind(ep, ec);
  if (ec) throw std::runtime_error(fmt::format("--http {}: cannot bind: {}", address, ec.message()));
  impl_->acceptor.listen();
  port_ = impl_->acceptor.local_endpoint().port();
  impl_->accept();
  thread_ = std::thread([this] { impl_->io.run(); });
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
