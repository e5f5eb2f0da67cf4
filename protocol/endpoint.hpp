#pragma once
// ZeroMQ endpoints as users write them (`tcp://127.0.0.1:5555`, `ipc:///tmp/hotcold.sock`),
// checked before any socket binds: the server binds loopback unless told --allow-remote.
#include <cstdint>
#include <string>
#include <string_view>

namespace hotcold::protocol {

enum class transport { tcp, ipc, inproc };

struct endpoint {
  transport kind = transport::tcp;
  std::string host;     // tcp: address or name as written (brackets stripped for IPv6)
  uint16_t port = 0;    // tcp only
  std::string path;     // ipc / inproc
  std::string text;     // the endpoint as given

  // True when only this machine can reach it: ipc, inproc, 127.0.0.0/8, ::1, localhost.
  bool is_loopback() const;
  // The endpoint as ZeroMQ binds and connects it: ZeroMQ takes a bind's host for an interface name,
  // so `localhost` becomes 127.0.0.1; an IPv6 address needs the socket's ipv6 option (needs_ipv6).
  std::string zmq_address() const;
  bool needs_ipv6() const;
};

// Throws std::invalid_argument naming what is wrong ("tcp endpoint needs a port: ...").
// any_port: a tcp port of 0 (one the system picks when it binds) is accepted.
endpoint parse_endpoint(std::string_view text, bool any_port = false);

}  // namespace hotcold::protocol
