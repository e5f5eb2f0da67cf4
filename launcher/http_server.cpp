#include "launcher/http_server.hpp"

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
    s.set_option(asio::socket_base::linger(true, 0), ec);
    http::read(s, buf, parser, ec);
    http::response<http::string_body> res;
    if (ec) {
      res.result(http::status::bad_request);
      res.set(http::field::content_type, "text/plain");
      res.body() = "bad request\n";
    } else {
      const auto& req = parser.get();
      http_reply r = h(std::string(req.method_string()), std::string(req.target()));
      res.result(static_cast<http::status>(r.status));
      res.set(http::field::content_type, r.content_type);
      res.body() = std::move(r.body);
    }
    res.set(http::field::server, "hotcold");
    res.keep_alive(false);
    res.prepare_payload();
    http::write(s, res, ec);
    s.shutdown(tcp::socket::shutdown_both, ec);
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
}

}  // namespace hotcold::launcher
