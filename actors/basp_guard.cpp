#include "actors/basp_guard.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

namespace hotcold::actors {
namespace {

constexpr size_t header_bytes = 32;  // caf::io::basp::header_size: operation, two pads, flags, payload_len (big-endian), data, source, dest

std::string errno_text(int e) { return e == EADDRINUSE ? "the address is in use (another process listens there)" : std::strerror(e); }

bool send_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k, n -= static_cast<size_t>(k);
  }
  return true;
}

// The peer-to-CAF direction, message by message: a header is held until it is whole, checked, then
// sent on with its payload as it comes.
struct basp_reader {
  uint32_t max_payload;
  uint8_t header[header_bytes] = {};
  size_t have = 0;
  uint64_t payload_left = 0;
  // Forwards what `in` holds to fd; false where a header asks too much or fd is gone.
  bool pass(int fd, const uint8_t* in, size_t n) {
    while (n > 0) {
      if (payload_left > 0) {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(payload_left, n));
        if (!send_all(fd, in, k)) return false;
        payload_left -= k, in += k, n -= k;
        continue;
      }
      const size_t k = std::min(header_bytes - have, n);
      std::memcpy(header + have, in, k);
      have += k, in += k, n -= k;
      if (have < header_bytes) return true;
      const uint32_t len = (uint32_t{header[4]} << 24) | (uint32_t{header[5]} << 16) | (uint32_t{header[6]} << 8) | header[7];
      if (len > max_payload) return false;
      if (!send_all(fd, header, header_bytes)) return false;
      have = 0, payload_left = len;
    }
    return true;
  }
};

}  // namespace

struct basp_guard::impl {
  int listener = -1, stop_rx = -1, stop_tx = -1;
  uint16_t port = 0, inner = 0;
  uint32_t max_payload = 0;
  int max_connections = 0;
  std::atomic<int> open{0};
  std::atomic<int64_t> refused{0};
  struct relayed {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<relayed> relays;  // (the acceptor's alone: joined as they end, and at the end)
  std::thread acceptor;

  void accept_loop() {
    for (;;) {
      pollfd fds[] = {{listener, POLLIN, 0}, {stop_rx, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
      if (fds[1].revents) return;
      if (!(fds[0].revents & POLLIN)) continue;
      const int peer = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (peer < 0) {
        if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      if (open.load() >= max_connections) {
        ++refused;
        ::close(peer);
        continue;
      }
      for (auto it = relays.begin(); it != relays.end();)  // (those that ended)
        if (it->done->load()) it->thread.join(), it = relays.erase(it);
        else ++it;
      ++open;
      auto done = std::make_shared<std::atomic<bool>>(false);
      relays.push_back({std::thread([this, peer, done] {
                          relay(peer);
                          --open;
                          *done = true;
                        }),
                        done});
    }
  }

  void relay(int peer) {
    const int caf = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET, to.sin_port = htons(inner), to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (caf < 0 || ::connect(caf, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      if (caf >= 0) ::close(caf);
      ::close(peer);
      return;
    }
    basp_reader in{max_payload};
    uint8_t buf[65536];
    for (bool going = true; going;) {
      pollfd fds[] = {{peer, POLLIN, 0}, {caf, POLLIN, 0}, {stop_rx, POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[2].revents) break;
      if (fds[0].revents) {
        const ssize_t n = ::recv(peer, buf, sizeof buf, 0);
        if (n <= 0) break;
        if (!in.pass(caf, buf, static_cast<size_t>(n))) {
          if (in.have == header_bytes) ++refused;  // (a header over the limit, not a lost link)
          break;
        }
      }
      if (fds[1].revents) {
        const ssize_t n = ::recv(caf, buf, sizeof buf, 0);
        going = n > 0 && send_all(peer, buf, static_cast<size_t>(n));
      }
    }
    ::close(caf);
    ::close(peer);
  }
};

int listen_tcp(const std::string& host, uint16_t port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_socktype = SOCK_STREAM, hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  if (const int e = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0)
    throw std::runtime_error(fmt::format("cannot resolve '{}': {}", host, gai_strerror(e)));
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool ok = fd >= 0 && ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, 64) == 0;
  const int why = errno;
  freeaddrinfo(found);
  if (!ok) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error(errno_text(why));
  }
  return fd;
}

basp_guard::basp_guard(const std::string& host, uint16_t port, uint16_t inner, uint32_t max_payload, int max_connections)
    : impl_(std::make_unique<impl>()) {
  impl& i = *impl_;
  i.inner = inner, i.max_payload = max_payload, i.max_connections = max_connections;
  i.listener = listen_tcp(host, port);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(i.listener, reinterpret_cast<sockaddr*>(&bound), &len);
  i.port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    ::close(i.listener);
    throw std::runtime_error(std::strerror(errno));
  }
  i.stop_rx = pipe_fds[0], i.stop_tx = pipe_fds[1];
  i.acceptor = std::thread([&i] { i.accept_loop(); });
}

basp_guard::~basp_guard() {
  impl& i = *impl_;
  const char stop = 1;
  [[maybe_unused]] const ssize_t n = ::write(i.stop_tx, &stop, 1);  // (every thread polls the pipe: one byte wakes them all)
  i.acceptor.join();
  for (auto& r : i.relays) r.thread.join();
  ::close(i.listener), ::close(i.stop_rx), ::close(i.stop_tx);
}

uint16_t basp_guard::port() const { return impl_->port; }
int64_t basp_guard::refused() const { return impl_->refused.load(); }

}  // namespace hotcold::actors
