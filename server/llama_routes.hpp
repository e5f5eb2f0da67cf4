#pragma once
// llama-server's small endpoints beside the OpenAI-style API, answered as it answers them (guarded by
// the same keys): POST /tokenize (with_pieces), POST /detokenize, GET /props (the defaults, the
// slots, the model, the chat template) and GET /slots (each KV slot: whether it runs a request and
// what its cache holds).
#include <cstdint>
#include <optional>
#include <string>

#include "server/http_server.hpp"
#include "server/metrics.hpp"
#include "model/vocab.hpp"

namespace hotcold::server {

struct llama_routes_setup {
  const vocab* v = nullptr;
  const metrics* m = nullptr;  // its slots (the pipeline's)
  int64_t n_ctx = 0, total_slots = 0;
  int32_t max_tokens = 4096;
  std::string model_path, model_id, chat_template;  // the template's text ("" without one)
};

// The answer to one of those routes; nullopt for any other path.
std::optional<http_reply> llama_route(const llama_routes_setup& s, const http_request& req);

}  // namespace hotcold::server
