#include "server/serve_sockets.hpp"

#include <fmt/format.h>

#include "protocol/curve.hpp"
#include "protocol/endpoint.hpp"

namespace hotcold::server {

std::optional<zmq::socket_t> open_sockets(zmq::context_t& ctx, zmq::socket_t& sock, zmq::socket_t& local, const std::string& local_endpoint,
                                          const server_options& o, std::set<std::string>& allowed) {
  std::optional<zmq::socket_t> zap;  // ZeroMQ's authentication handler: asks the loop about each CURVE client
  if (!o.curve_key.empty()) {
    const auto keys = protocol::read_keypair(o.curve_key);
    allowed = protocol::read_allowed_keys(o.curve_clients);
    zap.emplace(ctx, zmq::socket_type::rep);
    zap->bind("inproc://zeromq.zap.01");
    sock.set(zmq::sockopt::curve_server, 1);
    sock.set(zmq::sockopt::curve_secretkey, keys.secret_key);
    sock.set(zmq::sockopt::zap_domain, "hotcold");
    fmt::print(stderr, "hotcold serve: CURVE on, server key {}, {} client keys allowed\n", keys.public_key, allowed.size());
  }
  for (auto* s : {&sock, &local}) {
    s->set(zmq::sockopt::router_mandatory, 1);            // a send to a client that left fails (and its requests are cancelled)
    s->set(zmq::sockopt::maxmsgsize, int64_t{16} << 20);  // a bigger frame drops its sender, not the server's memory
    s->set(zmq::sockopt::linger, 0);
  }
  if (!o.endpoint.empty()) {
    const auto ep = protocol::parse_endpoint(o.endpoint);
    if (ep.needs_ipv6()) sock.set(zmq::sockopt::ipv6, 1);
    try {
      sock.bind(ep.zmq_address());
    } catch (const zmq::error_t& e) {
      throw std::runtime_error(fmt::format("--zmq {}: cannot bind: {}", o.endpoint, e.what()));
    }
  }
  local.bind(local_endpoint);
  return zap;
}

}  // namespace hotcold::server
