#pragma once
// The serving loop's ZeroMQ side: its router socket (CURVE, its limits, bound where --zmq says, or not
// at all where only --http is served) and the in-process one the HTTP API's requests come in on.
#include <optional>
#include <set>
#include <string>

#include <zmq.hpp>

#include "server/server_options.hpp"

namespace hotcold::server {

// Sets both sockets' options and binds them (the router where o.endpoint says, unless it is empty;
// `local` at local_endpoint). With CURVE: the authentication handler's socket, and the client keys
// let in (allowed). Throws std::runtime_error naming --zmq and the endpoint where it cannot bind.
std::optional<zmq::socket_t> open_sockets(zmq::context_t& ctx, zmq::socket_t& sock, zmq::socket_t& local, const std::string& local_endpoint,
                                          const server_options& o, std::set<std::string>& allowed);

}  // namespace hotcold::server
