#pragma once
// What the scheduler reuses of the KV cache from one request to the next: the tokens whose rows each
// slot holds (a free slot keeps its last sequence's until it is taken), the prefix store's index
// (engine/prefix_index.hpp); it decides the moves of rows (engine/cache_op.hpp), appended to the
// caller's list, which the next step carries to the hot executor, which makes them in order before it
// computes anything — so that a move is always made before the rows it reads are written again, and
// after those it reads were computed.
//
// A new prompt reuses the longest of: what its slot already holds (its own earlier turn), a run of
// whole blocks in the store, or what another running sequence's slot holds (copied as it is, to the
// token); always short of its last token, whose logits the step must compute. Tokens are compared
// exactly everywhere.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/cache_op.hpp"
#include "engine/prefix_index.hpp"

namespace hotcold::actors {

class prefix_reuse {
 public:
  // n_slots: the KV cache's sequence slots; store_blocks of block_tokens positions (the context's
  // prefix store; 0: slots alone). hash: the index's (tests force collisions with it).
  prefix_reuse(int64_t n_slots, int64_t block_tokens, int64_t store_blocks, prefix_index::hash_fn hash = {});

  // Of the free slots, the one already holding the longest run of the prompt's first tokens (ties:
  // the one freed longest ago; nothing held counts as freed longest ago).
  int64_t pick_slot(std::span<const int64_t> free_slots, std::span<const token_id> prompt) const;

  // A running sequence's slot and the tokens whose rows it holds, position by position.
  struct holder {
    int64_t slot;
    std::span<const token_id> tokens;
  };
  // The prompt begins in `slot`: returns the positions whose rows it reuses (their moves appended).
  int64_t begin(int64_t slot, std::span<const token_id> prompt, std::span<const holder> running, std::vector<cache_op>& ops);
  // What begin would find elsewhere than in `slot` and the store, to decide whether waiting for a
  // sequence still computing its prompt pays: the common run of the two prompts.
  static int64_t common(std::span<const token_id> a, std::span<const token_id> b);

  // The slot's rows of `tokens` (token i at position i) are computed: their whole blocks are kept in
  // the store (the new ones' rows saved).
  void keep(int64_t slot, std::span<const token_id> tokens, std::vector<cache_op>& ops);
  // The slot is free and holds the rows of `tokens`, kept in the store too.
  void release(int64_t slot, std::span<const token_id> tokens, std::vector<cache_op>& ops);
  // The slot's rows are no longer what it was said to hold (a failed step, erased).
  void forget(int64_t slot);
  // The tokens whose rows a free slot holds.
  const std::vector<token_id>& held(int64_t slot) const { return held_[static_cast<size_t>(slot)]; }
  // Every slot and block forgotten (a failed step whose moves may not have been made).
  void forget_all();

  int64_t block_tokens() const { return index_.block_tokens(); }
  int64_t store_blocks() const { return index_.capacity(); }
  int64_t stored_blocks() const { return index_.size(); }
  uint64_t evictions() const { return index_.evictions(); }

 private:
  prefix_index index_;
  std::vector<std::vector<token_id>> held_;  // per slot
  std::vector<uint64_t> freed_;              // per slot: when it was last freed
  uint64_t clock_ = 0;
};

}  // namespace hotcold::actors
