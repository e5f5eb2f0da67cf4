#pragma once
// `hotcold serve`: a ZeroMQ ROUTER socket in front of the actor pipeline (protocol/README.md). One
// thread polls the socket and the pipeline's events; a request's tokens go out as they are sampled.
// Bad frames are answered (when the sender can be addressed) and counted; nothing a client sends
// stops the others being served.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "loader/open.hpp"
#include "server/server_options.hpp"

namespace hotcold::server {

struct server_counters {
  int64_t frames = 0, bad_frames = 0, busy = 0, requests = 0, completed = 0, cancelled = 0, errors = 0, unreachable = 0, refused_keys = 0;
  int64_t cut_off = 0;  // clients cut off for not reading their replies
  int64_t dropped = 0;  // frames from, and replies to, clients while cut off
};

// Throws std::invalid_argument for an endpoint that is malformed or, without --allow-remote, reachable
// from other machines (checked before the model loads).
void check_bind(const server_options& o);

// Serves until `stop` becomes true (SIGINT/SIGTERM): then refuses new requests, cancels the running
// ones, waits for their last replies and returns. Throws std::invalid_argument for a bad endpoint.
server_counters serve(loader::opened_model& l, const server_options& o, const std::atomic<bool>& stop);

}  // namespace hotcold::server
