#include "protocol/endpoint.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <stdexcept>

namespace hotcold::protocol {

static std::invalid_argument bad(std::string_view text, const std::string& why) {
  return std::invalid_argument("endpoint '" + std::string(text) + "': " + why);
}

endpoint parse_endpoint(std::string_view text, bool any_port) {
  endpoint ep;
  ep.text = std::string(text);
  auto scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos) throw bad(text, "expected tcp://HOST:PORT, ipc://PATH or inproc://NAME");
  std::string_view scheme = text.substr(0, scheme_end);
  std::string_view rest = text.substr(scheme_end + 3);
  if (scheme == "ipc" || scheme == "inproc") {
    ep.kind = scheme == "ipc" ? transport::ipc : transport::inproc;
    if (rest.empty()) throw bad(text, "empty path");
    ep.path = std::string(rest);
    return ep;
  }
  if (scheme != "tcp") throw bad(text, "unsupported transport '" + std::string(scheme) + "' (use tcp, ipc or inproc)");
  auto colon = rest.rfind(':');
  if (colon == std::string_view::npos) throw bad(text, "tcp endpoint needs a port");
  std::string_view host = rest.substr(0, colon), port = rest.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) throw bad(text, "empty host");
  unsigned value = 0;
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || p != port.data() + port.size() || (value == 0 && !any_port) || value > 65535)
    throw bad(text, any_port ? "port must be a number from 0 to 65535" : "port must be a number from 1 to 65535");
  ep.host = std::string(host);
  ep.port = static_cast<uint16_t>(value);
  return ep;
}

bool endpoint::is_loopback() const {
  if (kind != transport::tcp) return true;
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;  // '*', interface names and other host names may be reachable from outside
}

std::string endpoint::zmq_address() const {
  if (kind != transport::tcp) return text;
  if (host == "localhost") return "tcp://127.0.0.1:" + std::to_string(port);
  if (needs_ipv6()) return "tcp://[" + host + "]:" + std::to_string(port);
  return "tcp://" + host + ":" + std::to_string(port);
}

bool endpoint::needs_ipv6() const {
  in6_addr v6{};
  return kind == transport::tcp && inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

}  // namespace hotcold::protocol
