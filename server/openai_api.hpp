#pragma once
// serve's OpenAI-compatible API on the HTTP port (docs/openai-api.md): POST /v1/chat/completions,
// POST /v1/completions, GET /v1/models. Each completion runs on the HTTP server's thread for it and
// goes to the scheduler as a `generate` over the server's in-process ZeroMQ endpoint, so HTTP and
// ZeroMQ clients share one queue, its limits and its metrics; a client that goes away mid-request has
// its sequence cancelled within a step.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "server/http_server.hpp"
#include "engine/embeddings.hpp"
#include "model/chat_template.hpp"

namespace hotcold::server {

struct openai_setup {
  zmq::context_t* zmq = nullptr;
  std::string endpoint;              // the server's in-process ROUTER
  std::string model_id;              // what /v1/models lists and requests name
  std::string model_path;            // accepted as the model's name too
  int64_t created = 0;               // Unix time the model was loaded
  const vocab* v = nullptr;
  int64_t n_ctx = 0;
  int32_t max_tokens = 4096;         // serve --max-tokens
  std::optional<chat_template> chat;  // the chat template, or why there is none:
  std::string chat_problem;
  std::shared_ptr<embedder> embeddings;  // serve --embeddings (null: /v1/embeddings is off)
};

class openai_api {
 public:
  explicit openai_api(openai_setup s) : s_(std::make_shared<const openai_setup>(std::move(s))) {}
  // Answers a request under /v1/.
  http_reply operator()(const http_request& req) const;
  // An answer in the API's error shape: {"error":{"message","type","param","code"}}.
  static http_reply error(int status, std::string_view message, std::string_view type, std::string_view code = {}, std::string_view param = {});
  // The HTTP server's own refusals (400, 401, 403, 413, 503, ...) of /v1/ requests, in that shape.
  static http_reply server_error(int status, const std::string& code, const std::string& message);

 private:
  std::shared_ptr<const openai_setup> s_;
};

}  // namespace hotcold::server
