#pragma once
// The whole codec of the wire between clients and `hotcold serve` (protocol/README.md; the same
// schema as data in protocol/schema.json, which the Python client reads): one JSON object per ZeroMQ
// frame, version 1, encoded and decoded in both directions — the server decodes requests and encodes
// replies, every client (hotcold client, clients/client.hpp, the HTTP API) encodes requests and decodes
// replies. decode_request turns any bytes into a request or a protocol_error that names what is
// wrong; nothing a client sends can make it throw, allocate past the limits, or crash. This room
// knows nothing of models: tokens are plain integers.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hotcold::protocol {

constexpr int protocol_version = 1;  // bumped on any incompatible change to the wire schema

enum class error_code {
  bad_frame,            // not a JSON object (or not UTF-8 text)
  unsupported_version,  // "v" missing or not 1
  unknown_type,         // "type" missing or not one of the request types
  invalid_field,        // a field of the wrong type, out of range, or unknown
  too_large,            // the frame, the prompt or a list passes a limit
  busy,                 // the queue is full: retry after retry_after_ms
  not_found,            // cancel of an id the server does not hold for this client
  duplicate_id,         // a generate whose id this client already has in flight
  shutting_down,        // the server stops accepting
  internal,             // the server failed; the request ended
};
std::string_view error_code_name(error_code c);
std::optional<error_code> error_code_from_name(std::string_view name);

// Limits the decoder enforces (the server may lower them from its flags).
struct limits {
  size_t max_frame_bytes = 1 << 20;   // whole frame
  size_t max_id_bytes = 128;
  size_t max_prompt_bytes = 1 << 19;  // prompt text
  size_t max_tokens_in = 65536;       // prompt or detokenize token arrays
  int32_t max_n_predict = 1 << 16;
  std::string max_n_predict_flag;     // the flag that set it, named in the error ("serve --max-tokens")
  size_t max_stop = 8;                // stop strings
  size_t max_stop_bytes = 256;        // each
};

struct sampling {
  double temperature = 0.8;
  int32_t top_k = 40;
  double top_p = 0.95;
  double min_p = 0.05;
  double repeat_penalty = 1.0;
  int32_t repeat_last_n = 64;
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  std::optional<uint64_t> seed;  // absent: the server picks one and reports it
};

// The one check of sampling parameters, for every way in (this protocol's decoder, the command
// line). Where llama.cpp gives a value a meaning it keeps it: temperature <= 0 is greedy, top_k <= 0
// and top_p >= 1 switch those filters off (top_p <= 0 keeps the most likely token), min_p 0 and
// repeat_penalty 1 too, repeat_last_n -1 looks back over the whole context. Values with no meaning
// are refused: NaN or infinite anywhere, temperature > 100, min_p outside [0, 1], repeat_penalty
// outside [0, 100], repeat_last_n below -1 or above 2^20, frequency/presence penalties outside
// [-100, 100]. Throws std::invalid_argument naming the field ("min_p") and its range.
void check_sampling(const sampling& s);

struct generate_request {
  std::string id;                      // the client's request id, unique among its requests in flight
  std::optional<std::string> prompt;   // text, or
  std::vector<int32_t> tokens;         // token ids, or
  std::string messages;                // a conversation (a JSON array, as the HTTP API's `messages`) the server's chat template writes (exactly one of the three)
  std::string tools;                   // with messages: the functions offered (a JSON array, as the HTTP API's `tools`)
  std::string tool_choice;             // auto (or empty), none, required, or a function's name
  int32_t n_predict = 128;
  sampling params;
  std::vector<std::string> stop;       // generation ends before any of these strings
  bool stream = true;                  // token messages as they are sampled; else only done (with the text)
  bool parse_special = false;          // control-token text in the prompt becomes those tokens
  bool cache_prompt = true;            // reuse the cached rows of a prompt beginning as one before (llama-server's)
  std::string grammar;                 // GBNF the text must follow (empty: none), or
  std::string json_schema;             // a JSON Schema it must be valid against, as JSON text (empty: none)
  bool logprobs = false;               // each token reply with its log probability
  int32_t n_probs = 0;                 // ... and the n most likely tokens' (0-20; > 0 implies logprobs)
  bool prompt_logprobs = false;        // a prompt_token reply per prompt token first, with its log probability (every prompt token computed)
  bool ignore_eos = false;             // go on past an end-of-generation token (llama-server's)
};
struct cancel_request {
  std::string id;  // of the generate to cancel
};
struct health_request {
  std::string id;
};
struct model_info_request {
  std::string id;
};
struct tokenize_request {
  std::string id;
  std::string text;
  bool add_special = false;
  bool parse_special = false;
};
struct detokenize_request {
  std::string id;
  std::vector<int32_t> tokens;
};
// A sequence slot's cache saved to a file of the server's --slot-save-path, restored from one, or
// erased (llama-server's POST /slots/{id}?action=...).
struct slot_request {
  std::string id;
  std::string action;    // save, restore, erase
  int64_t slot = 0;
  std::string filename;  // save, restore: a name in that folder
};
using request = std::variant<generate_request, cancel_request, health_request, model_info_request, tokenize_request, detokenize_request, slot_request>;

struct protocol_error {
  error_code code;
  std::string message;
  std::string id;  // the request's id when the frame named one
};

std::variant<request, protocol_error> decode_request(std::string_view frame, const limits& l = {});
// Any request as its frame (every field written; a generate's sampling whole, its seed when set).
std::string encode_request(const request& r);
// A generate's fields without v, type and id: its frame's body, and what a record of it keeps.
nlohmann::json generate_body(const generate_request& g);
const std::string& request_id(const request& r);
std::string_view request_type(const request& r);  // "generate", "cancel", ...

// ---- Replies -------------------------------------------------------------------------------------

struct timings {
  double queued_ms = 0, time_to_first_token_ms = 0, total_ms = 0;
};
struct model_facts {
  std::string path, architecture, activation, mode;  // mode: dense or sparse
  int64_t n_vocab = 0, n_ctx = 0, n_layer = 0, n_embd = 0, n_ff = 0;
  int32_t bos = -1, eos = -1;
};

// A token's log probability under the model (the log-softmax of its logits before sampling), and the
// most likely tokens' at its place, most likely first.
struct token_prob {
  int32_t token = 0;
  std::string bytes;  // its piece (on the wire: "text" and "bytes", as a token reply's)
  double logprob = 0;
};
struct token_probs {
  double logprob = 0;
  std::vector<token_prob> top;
};

struct accepted_reply {
  std::string id;
  int64_t prompt_tokens = 0;
  uint64_t seed = 0;  // the seed the sampler uses
};
struct token_reply {
  std::string id;
  int64_t index = 0;   // 0 for the first generated token
  int32_t token = 0;
  std::string bytes;   // the piece's exact bytes (on the wire: "text", invalid UTF-8 as U+FFFD, and "bytes", base64)
  double ms = 0;       // since accepted
  std::optional<token_probs> probs;  // where the generate asked (logprobs, n_probs)
};
// A prompt token with its log probability after the tokens before it (none for the first), sent
// before the first token reply where a generate asks (prompt_logprobs).
struct prompt_token_reply {
  std::string id;
  int64_t index = 0;  // its position in the prompt
  int32_t token = 0;
  std::string bytes;
  std::optional<token_probs> probs;  // none for index 0
};
struct done_reply {
  std::string id;
  std::string finish;  // length, stop, stop_string, context, cancelled, error
  int64_t prompt_tokens = 0, generated_tokens = 0;
  timings t;
  std::optional<std::string> text;  // the whole generated text when the request did not stream
  std::optional<std::string> error;  // why, when finish is "error" (a stage's worker gone, a lost device, ...)
  int64_t cached_tokens = 0;  // of the prompt's, reused from the cache rather than computed
  // Where the generate offered tools: the text less its calls, and the calls (function, arguments JSON).
  std::optional<std::string> content = std::nullopt;
  std::vector<std::pair<std::string, std::string>> tool_calls = {};
};
struct error_reply {
  protocol_error error;  // its id empty: the frame named none (null on the wire)
  std::optional<int64_t> retry_after_ms;
};
struct health_reply {
  std::string id, status;  // ok, stopping
  int64_t active = 0, queued = 0;
};
struct tokens_reply {
  std::string id;
  std::vector<int32_t> tokens;
};
struct text_reply {
  std::string id, text;
};
struct model_info_reply {
  std::string id;
  model_facts model;
};
struct slot_reply {
  std::string id;
  std::string action;
  int64_t slot = 0;
  int64_t n_tokens = 0;  // saved, restored or erased
  int64_t n_bytes = 0;   // written or read
  double ms = 0;
};
using reply = std::variant<accepted_reply, token_reply, done_reply, error_reply, health_reply, tokens_reply, text_reply, model_info_reply, slot_reply,
                           prompt_token_reply>;

std::string encode_reply(const reply& r);
// A reply frame of this version as the struct of its type, or a protocol_error (bad_frame,
// unsupported_version, unknown_type, invalid_field) naming what is wrong with it.
std::variant<reply, protocol_error> decode_reply(std::string_view frame);
std::string_view reply_type(const reply& r);  // "accepted", "token", ...
const std::string& reply_id(const reply& r);

// The server's encoders, one per reply type (encode_reply writes the same).
std::string encode_accepted(std::string_view id, int64_t prompt_tokens, uint64_t seed);
// text: the piece's bytes (invalid UTF-8 becomes U+FFFD there); the exact bytes also go as base64 in
// "bytes", so a client can print exactly what `hotcold run` prints.
// probs: the token's log probability and the top ones' ("logprob", "top_logprobs"), where asked.
std::string encode_token(std::string_view id, int64_t index, int32_t token, std::string_view text, double ms_since_accepted, const token_probs* probs = nullptr);
std::string encode_prompt_token(std::string_view id, int64_t index, int32_t token, std::string_view text, const token_probs* probs);
// text: the whole generated text when the request did not stream (else left out); error: why, for
// finish "error" (else left out).
std::string encode_done(std::string_view id, std::string_view finish, int64_t prompt_tokens, int64_t generated_tokens, const timings& t,
                        std::optional<std::string_view> text = std::nullopt, std::optional<std::string_view> error = std::nullopt, int64_t cached_tokens = 0);
// A done reply in full (encode_done's fields, and where tools were offered its content and tool_calls).
std::string encode_done(const done_reply& d);
std::string encode_error(const protocol_error& e, std::optional<int64_t> retry_after_ms = std::nullopt);
std::string encode_health(std::string_view id, std::string_view status, int64_t active, int64_t queued);
std::string encode_tokens(std::string_view id, const std::vector<int32_t>& tokens);
std::string encode_model_info(std::string_view id, const model_facts& m);
std::string encode_text(std::string_view id, std::string_view text);
std::string encode_slot(const slot_reply& r);

std::string base64(std::string_view bytes);
// Throws std::invalid_argument on anything that is not base64.
std::string unbase64(std::string_view text);

}  // namespace hotcold::protocol
