#pragma once
// The prefix index: which runs of prompt tokens have their keys and values kept in the KV cache's
// store (kv_cache's blocks), so that a request whose prompt begins the same way reuses them instead of
// computing them again — its own earlier turn, or another client's identical system prompt.
//
// The store holds blocks of block_tokens positions. A block is known by its parent (the block before
// it in the prompt; none for the first) and its tokens, compared exactly: the hash only finds the
// candidates, so two different runs of tokens that hash alike never answer for each other. A chain of
// blocks from the first is a prefix. Blocks are evicted least recently used when the capacity is
// reached; a block is used when a match or an insertion passes through it, children after their
// parents, so that a parent is always newer than its children and eviction takes leaves first.
//
// Nothing here holds keys or values: the caller copies rows into a new block's storage and out of a
// matched one (engine/kv_cache.hpp's cache_op), in the order it decided them.
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/vocab.hpp"

namespace hotcold {

class prefix_index {
 public:
  // A block's key from its parent's id (-1: none) and its tokens. The default mixes every token.
  using hash_fn = std::function<uint64_t(int32_t parent, std::span<const token_id> tokens)>;

  // capacity: blocks the store holds (0: nothing is kept). std::invalid_argument for block_tokens < 1
  // or a negative capacity.
  prefix_index(int64_t block_tokens, int64_t capacity, hash_fn hash = {});

  int64_t block_tokens() const { return block_tokens_; }
  int64_t capacity() const { return capacity_; }
  int64_t size() const { return static_cast<int64_t>(blocks_.size()) - static_cast<int64_t>(free_.size()); }
  uint64_t evictions() const { return evictions_; }

  // The blocks holding the longest run of whole blocks that begins `tokens`, in order (marked used).
  std::vector<int32_t> match(std::span<const token_id> tokens);

  // Keeps the whole blocks of `tokens` (a trailing partial block is not kept): every block's id in
  // order, and for each whether it is new — its rows are the caller's to copy into the block's
  // storage before anything reads it. Room is made by evicting the least recently used blocks that
  // this chain does not pass through; when there is none left to evict, the chain stops there (fewer
  // ids than whole blocks).
  struct stored {
    std::vector<int32_t> ids;
    std::vector<uint8_t> fresh;
  };
  stored insert(std::span<const token_id> tokens);

  // Forgets every block (their storage may then hold anything).
  void clear();

 private:
  struct block {
    int32_t parent = -1;
    std::vector<token_id> tokens;  // empty: free
    uint64_t key = 0;
    uint64_t used = 0;  // the use count when it was last passed through
    int32_t children = 0;
  };
  int32_t find(int32_t parent, std::span<const token_id> tokens, uint64_t key) const;
  // A free block, or the least recently used leaf outside `keep` evicted; -1 when none.
  int32_t take(const std::vector<int32_t>& keep);
  void touch(const std::vector<int32_t>& chain);  // the chain's blocks used now, its last first
  void drop(int32_t id);  // out of the index (its storage then the caller's to reuse)

  int64_t block_tokens_, capacity_;
  hash_fn hash_;
  std::vector<block> blocks_;
  std::vector<int32_t> free_;
  std::unordered_multimap<uint64_t, int32_t> by_key_;
  std::map<uint64_t, int32_t> by_use_;  // use count -> block, oldest first
  uint64_t uses_ = 0, evictions_ = 0;
};

}  // namespace hotcold
