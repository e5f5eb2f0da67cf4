#include "launcher/http_server.hpp"

#include <atomic>
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

struct http_server::impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  handler h;
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

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
      if (ec) return;  // closed: the server is stopping
      serve_one(std::move(s));
      accept();
    });
  }
  // One request per connection (Connection: close), answered synchronously: the pages are small.
  void serve_one(tcp::socket s) {
    beast::error_code ec;
    beast::flat_buffer buf;
    http::request_parser<http::string_body> parser;
    parser.body_limit(64 * 1024);
    http::read(s, buf, parser, ec);
    http_reply r;
    if (ec) {
      r = {400, "text/plain", "bad request\n"};
    } else {
      const auto& req = parser.get();
      try {
        r = h(std::string(req.method_string()), std::string(req.target()));
      } catch (const std::exception& e) {
        r = {500, "text/plain", fmt::format("internal error: {}\n", e.what())};
      }
    }
    if (r.next) {
      std::lock_guard lock(mu);
      if (streams >= max_streams) r = {503, "text/plain", fmt::format("too many streams (at most {} at once)\n", max_streams)};
      else if (!stopping) {
        ++streams;
        // Threads of streams that ended are joined here, so they do not pile up.
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
        return;
      }
    }
    s.set_option(asio::socket_base::linger(true, 0), ec);
    http::response<http::string_body> res;
    res.result(static_cast<http::status>(r.status));
    res.set(http::field::content_type, r.content_type);
    res.body() = std::move(r.body);
    res.set(http::field::server, "hotcold");
    res.keep_alive(false);
    res.prepare_payload();
    http::write(s, res, ec);
    s.shutdown(tcp::socket::shutdown_both, ec);
  }
  // A stream's thread: the headers (no length: the body ends when the connection does), then the
  // chunks as next() gives them.
  void stream(tcp::socket s, http_reply r) {
    beast::error_code ec;
    http::response<http::empty_body> res;
    res.result(static_cast<http::status>(r.status));
    res.set(http::field::content_type, r.content_type);
    res.set(http::field::cache_control, "no-cache");
    res.set(http::field::server, "hotcold");
    res.keep_alive(false);
    http::response_serializer<http::empty_body> sr(res);
    http::write_header(s, sr, ec);
    if (!ec && !r.body.empty()) asio::write(s, asio::buffer(r.body), ec);
    while (!ec) {
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
      asio::write(s, asio::buffer(*chunk), ec);
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
