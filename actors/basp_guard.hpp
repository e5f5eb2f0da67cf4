#pragma once
// A front for a worker's plain stage port. CAF's BASP reads a message's header and then allocates the
// payload it announces (up to 4 GiB) before anything says who sent it; on a plain link (loopback) any
// local process can connect. The guard listens where the worker was told to, forwards each connection
// to CAF's own port on loopback, and reads the headers that go in: a connection whose header announces
// more than max_payload bytes is closed before CAF sees it, and at most max_connections are open at
// once. So what an unauthenticated peer can make the worker hold is bounded by their product. (On TLS
// links the peer's certificate is checked before any BASP byte is read: no guard is needed there.)
#include <cstdint>
#include <memory>
#include <string>

namespace hotcold::actors {

// A TCP socket listening on host:port (port 0: a free one). Throws std::runtime_error with the
// system's reason ("the address is in use (another process listens there)", ...) where it cannot.
int listen_tcp(const std::string& host, uint16_t port);

class basp_guard {
 public:
  // Listens on host:port (port 0: a free one) and forwards to 127.0.0.1:inner. Throws
  // std::runtime_error with the system's reason ("the address is in use ...") where it cannot listen.
  basp_guard(const std::string& host, uint16_t port, uint16_t inner, uint32_t max_payload, int max_connections);
  ~basp_guard();
  basp_guard(const basp_guard&) = delete;
  basp_guard& operator=(const basp_guard&) = delete;

  uint16_t port() const;
  // Connections closed for a header over the limit, or refused for being one too many (for tests and logs).
  int64_t refused() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace hotcold::actors
