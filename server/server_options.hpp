#pragma once
// What `hotcold serve` is told: its ZeroMQ endpoint and limits, its keys, and its HTTP side
// (docs/commands.md, "serve"). The serving loop (server.hpp) and the HTTP side (serve_http.hpp) read it.
#include <cstdint>
#include <string>
#include <vector>

#include "actors/stages.hpp"

namespace hotcold::server {

struct server_options {
  std::string endpoint = "tcp://127.0.0.1:5555";
  int64_t max_queue = 64;          // requests waiting for a KV slot before `busy`
  int64_t max_prompt_tokens = 0;   // 0: the context
  int32_t max_tokens = 4096;       // n_predict at most
  std::string grammar;             // GBNF for requests that name no grammar or schema (checked; empty: none)
  bool embeddings = false;         // POST /v1/embeddings on (a context of its own beside the pipeline)
  std::string pooling;             // its pooling: mean, last, cls ("" : the file's, else mean)
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
  std::vector<std::string> allowed_hosts;  // Host names served besides loopback ones (comma-separated lists)
  std::vector<std::string> cors_origins;   // origins of web pages allowed to use the server (default: loopback ones)
  int64_t max_queued_per_client = -1;      // requests of one client waiting for a slot (-1: a quarter of max_queue)
  int64_t recall_every = 64;       // steps between predictor recall checks (0: none)
  int micro_batches = 0;           // micro-batches a step of several sequences goes in (0: one a stage where stages are on other hosts, else 1)
  // Stages of layers on other hosts (actors::pipeline_options::stages; --workers).
  actors::stage_plan stages;
  uint64_t prefix_store_bytes = 0;  // the prefix store's memory (--cache-ram; actors::pipeline_options)
  bool context_shift = false;       // --context-shift, --keep (actors::pipeline_options)
  int64_t keep = 0;
  std::string slot_save_path;       // --slot-save-path: where POST /slots/{id}?action=save|restore files go (empty: off)
  std::string record;              // JSONL file: one line per generate that ended (docs/replay.md)
  bool log_requests = true;        // a line on stderr per request that ended (--no-request-log: none)
  int64_t max_client_buffer = 8 << 20;  // bytes of unread replies per client before it is cut off
};

}  // namespace hotcold::server
