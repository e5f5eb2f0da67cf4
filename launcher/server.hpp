#pragma once
// `hotcold serve`: a ZeroMQ ROUTER socket in front of the actor pipeline (protocol/README.md). One
// thread polls the socket and the pipeline's events; a request's tokens go out as they are sampled.
// Bad frames are answered (when the sender can be addressed) and counted; nothing a client sends
// stops the others being served.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "launcher/model_options.hpp"

namespace hotcold::launcher {

struct server_options {
  std::string endpoint = "tcp://127.0.0.1:5555";
  int64_t max_queue = 64;          // requests waiting for a KV slot before `busy`
  int64_t max_prompt_tokens = 0;   // 0: the context
  int32_t max_tokens = 4096;       // n_predict at most
  bool allow_remote = false;       // bind a non-loopback address (needs the two below)
  std::string curve_key;           // the server's key pair (hotcold keygen): CURVE on
  std::string curve_clients;       // public keys of the clients allowed in, one per line
  std::string http;                // HOST:PORT for the dashboard, /metrics, /api/stats, /api/events, /health (empty: none)
  bool allow_remote_http = false;  // bind a non-loopback HTTP address (needs http_token_file)
  std::string http_token_file;     // bearer tokens, one per line: every HTTP request must carry one
  std::vector<std::string> api_keys;  // keys the OpenAI-style API (/v1/*) takes as `Authorization: Bearer`
  std::string api_key_file;        // ... more of them, one per line
  std::string chat_template;       // the API's chat template family instead of the model's own
  std::string alias;               // the model's id in /v1/models (default: its file's name)
  int64_t recall_every = 64;       // steps between predictor recall checks (0: none)
  std::string record;              // JSONL file: one line per generate that ended (docs/replay.md)
  int64_t max_client_buffer = 8 << 20;  // bytes of unread replies per client before it is cut off
};

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
server_counters serve(loaded& l, const server_options& o, const std::atomic<bool>& stop);

}  // namespace hotcold::launcher
