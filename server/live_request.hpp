#pragma once
// What the serving loop (server.cpp) keeps of a request in flight, and of a slot action it passed on.
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "server/client_accounts.hpp"
#include "server/server_options.hpp"
#include "server/openai_tools.hpp"
#include "server/stop_text.hpp"
#include "protocol/messages.hpp"

namespace hotcold::server {

using clock_type = std::chrono::steady_clock;

// A generate in flight: waiting for a slot (pid < 0, the request in `pending`), or in the pipeline.
struct live {
  address to;
  std::string id;
  int64_t pid = -1;
  actors::generation_request pending;
  double waited_s = 0;  // in the server's queue before the pipeline had it
  bool stream = true;
  stop_text out;  // generated so far, cut at a stop string
  bool gone = false;  // the client cannot be reached: nothing more is sent
  bool cut_off = false;  // ... because it stopped reading (outcome `cut_off`)
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0, computed_tokens = 0;  // of them, reused and computed (the pipeline's done event says)
  int64_t emitted = 0;  // tokens sent (or, not streaming, counted)
  clock_type::time_point accepted, last_token;
  bool waiting() const { return pid < 0; }
  // For --record: the request as it came (with the seed used), and the gaps between its tokens.
  std::string recorded_request;
  double arrival_s = 0, ttft_s = 0;
  std::vector<double> itl_s;
  // Log probabilities asked for: each token's (until it is sent), and the prompt's.
  std::map<int64_t, token_logprobs> probs;
  int32_t n_probs = 0;
  std::vector<token_id> prompt;  // kept where prompt_logprobs asks
  std::optional<tool_format> tools;  // a conversation with tools: its calls read back into the done reply, in this format
};

// The done reply of a request that ended (with the text less its calls, and the calls, where it offered tools).
std::string done_of(const live& lv, const std::string& finish, const protocol::timings& tm, const std::string& error);

// A token's log probabilities as the protocol sends them (each top token with its piece).
protocol::token_probs wire_probs(const token_logprobs& p, const vocab& v);
// The log probabilities of the token at `index`, taken from lv.probs (none where not asked).
std::optional<protocol::token_probs> take_probs(live& lv, int64_t index, const vocab& v);
// The line serve logs on stderr for a request that ended, as llama-server logs one: its client, tokens
// in (cached) and out, time to first token, rate, time in all, finish (and why, for an error).
std::string log_line(const live& lv, const std::string& finish, const protocol::timings& tm, const std::string& error);
// The line serve --record writes for a request that ended (docs/replay.md).
std::string record_line(const live& lv, const std::string& finish);
// The prompt_token replies a prompt's logits give (rows of consecutive positions from
// e.first_position; a row predicts the token after its position), the first prompt token's too.
std::vector<std::string> prompt_token_replies(const live& lv, const actors::logits_event& e, const vocab& v);

// A slot action (POST /slots/{id}?action=..., the protocol's `slot`) on its way through the pipeline.
struct slot_asker {
  address to;
  std::string id;
};
// The file a slot action names: the filename inside --slot-save-path. std::invalid_argument naming
// what is wrong: no folder given, a name that is not a plain file name.
std::string slot_file_path(const server_options& o, const protocol::slot_request& s);
// The reply to a slot action the pipeline answered: the protocol's slot reply, or an error.
std::string slot_answer(const actors::slot_event& e, const std::string& id);

}  // namespace hotcold::server
