#pragma once
// Generation on the forward pass called directly, as run (--pipeline direct) and chat use it: the
// prompt fed, tokens sampled and streamed to stdout, the context shifted where --context-shift says.
#include <atomic>
#include <span>
#include <string>
#include <vector>

#include "engine/forward.hpp"
#include "model/sampler.hpp"

namespace hotcold::launcher {

// Writes a token's text to stdout at once.
void write_piece(const std::string& piece);

// Feeds `tokens` from position `pos` (advanced past them), returns the logits after the last one.
std::span<const float> feed(inference_context& ctx, const std::vector<token_id>& tokens, int64_t& pos);

// The context shift of the direct path (--context-shift): what it keeps of the prompt, and what the
// shifts so far dropped — the tokens kept .. kept + dropped - 1 of those written (every shift keeps
// the same first positions).
struct shift_rule {
  bool on = false;
  int64_t keep = 0, prompt_tokens = 0;
  bool bos_first = false;
  int64_t kept = 0, dropped = 0;
  // Shifts slot 0 of ctx, which holds pos positions (pos lowered); false when nothing is left to drop.
  bool make(inference_context& ctx, int64_t& pos) {
    const cache_op op = context_shift(0, pos, ctx.n_ctx(), keep, prompt_tokens, bos_first);
    if (op.count < 1) return false;
    ctx.apply(std::span(&op, 1));
    pos -= op.count;
    kept = op.pos, dropped += op.count;
    return true;
  }
};

// Generates up to n tokens after `logits`, streaming their text; returns how many were generated
// (their ids appended to `out` when given). A full context ends it (said on stderr), or with
// shift.on is shifted and it goes on; `stop` set (chat's Ctrl-C) ends it where it is.
int generate(inference_context& ctx, sampler& smp, std::span<const float> logits, int64_t& pos, int n, shift_rule& shift,
             std::vector<token_id>* out = nullptr, const std::atomic<bool>* stop = nullptr);

}  // namespace hotcold::launcher
