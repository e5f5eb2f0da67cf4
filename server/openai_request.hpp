#pragma once
// What the OpenAI-style API's completion routes take (docs/openai-api.md, "Request fields"): a body
// read into the request the scheduler is sent, each field checked, or refused with a 400 naming it.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai_api.hpp"
#include "server/openai_tools.hpp"
#include "protocol/messages.hpp"

namespace hotcold::server {

using api_json = nlohmann::ordered_json;  // fields in the order the API documents them

// A request the API refuses: the status and the error object's fields.
struct api_failure {
  int status;
  std::string message, type, code, param;
};

// A completion request as the scheduler takes it.
struct completion_request {
  bool chat = true, stream = false, include_usage = false;
  bool cache_prompt = true;  // llama-server's field: reuse the cached rows of the prompt's beginning
  std::vector<token_id> tokens;
  int64_t n_predict = 0;
  protocol::sampling sampling;  // what the API does not give: hotcold run's defaults
  std::vector<std::string> stop;
  std::string grammar;  // GBNF the output follows (from grammar, json_schema or response_format), checked
  bool logprobs = false;  // each token's log probability (chat logprobs, completions logprobs, n_probs)
  int32_t n_probs = 0;    // ... and the most likely tokens' (top_logprobs, completions logprobs N, n_probs)
  bool echo = false;      // completions: the prompt's tokens first, with their log probabilities
  bool ignore_eos = false;  // llama-server's: on past an end-of-generation token
  int32_t n = 1;            // choices, each its own generate of the same prompt
  tool_request tools;       // chat: the functions offered, and how they may be called
};

// The field, or nullptr when it is absent or null (the API treats both as "not given").
const api_json* field(const api_json& body, const char* name);

// A chat (`messages`) or completion (`prompt`) request's body; throws api_failure.
completion_request parse_request(const api_json& body, bool chat, const openai_setup& s);

// The protocol's generate with `messages` (server.cpp): the conversation as the HTTP API reads it
// (JSON texts; tool_choice a word or a function's name), its tokens by the chat template, its tools and
// the grammar a tool choice asks for. Throws std::invalid_argument naming the field.
struct chat_request {
  std::vector<token_id> tokens;
  tool_request tools;
  std::string grammar;
};
chat_request chat_of(const std::string& messages, const std::string& tools, const std::string& tool_choice, const openai_setup& s);

}  // namespace hotcold::server
