#pragma once
// The HTTP side of `hotcold serve --http HOST:PORT` (Boost.Beast): GET /metrics (Prometheus text),
// GET /health (JSON). It runs on a thread of its own until destroyed; handlers must be thread-safe.
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace hotcold::launcher {

struct http_reply {
  int status = 200;
  std::string content_type, body;
};

class http_server {
 public:
  using handler = std::function<http_reply(const std::string& method, const std::string& target)>;
  // address: HOST:PORT (a loopback host unless allow_remote). Throws std::invalid_argument for a bad
  // address, std::runtime_error when it cannot bind.
  http_server(const std::string& address, bool allow_remote, handler h);
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

}  // namespace hotcold::launcher
