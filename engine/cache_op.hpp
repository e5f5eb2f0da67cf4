#pragma once
#include <cstdint>

namespace hotcold {

// A move of cached rows between steps (every layer's keys and values; engine/prefix_index.hpp): a
// slot's positions into a block of the prefix store, a block into a slot's positions, one slot's
// positions into another's — or a slot's context shifted (llama.cpp's --context-shift): positions
// pos .. pos + count - 1 dropped, those after them up to `from` moved down by count, their keys
// turned back by count positions of RoPE.
struct cache_op {
  enum class kind : uint8_t { save, load, copy, shift };
  kind what = kind::save;
  int64_t slot = 0;   // save: read from; load, copy, shift: written
  int64_t from = 0;   // save, load: the block; copy: the slot read from; shift: the positions held before
  int64_t pos = 0;    // the first position (save, load: a block's worth from there; shift: the first dropped)
  int64_t count = 0;  // copy: positions; shift: positions dropped
};

// llama.cpp's context shift of a slot holding `held` positions of a context of n_ctx: the positions
// kept at the start — a BOS the prompt begins with (bos_first), then `keep` tokens (-1: the rest of
// the prompt of prompt_tokens), at most n_ctx - 4 — and half of what follows them dropped. count 0:
// nothing left to drop.
inline cache_op context_shift(int64_t slot, int64_t held, int64_t n_ctx, int64_t keep, int64_t prompt_tokens, bool bos_first) {
  const int64_t first = bos_first ? 1 : 0;
  int64_t kept = first + (keep < 0 ? prompt_tokens - first : keep);
  if (kept > n_ctx - 4) kept = n_ctx - 4;
  if (kept < 0) kept = 0;
  const int64_t drop = held > kept ? (held - kept) / 2 : 0;
  return {cache_op::kind::shift, slot, held, kept, drop};
}

}  // namespace hotcold
