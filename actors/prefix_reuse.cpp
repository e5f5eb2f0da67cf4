#include "actors/prefix_reuse.hpp"

#include <algorithm>

namespace hotcold::actors {

prefix_reuse::prefix_reuse(int64_t n_slots, int64_t block_tokens, int64_t store_blocks, prefix_index::hash_fn hash)
    : index_(block_tokens, store_blocks, std::move(hash)), held_(static_cast<size_t>(n_slots)), freed_(static_cast<size_t>(n_slots), 0) {}

int64_t prefix_reuse::common(std::span<const token_id> a, std::span<const token_id> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

int64_t prefix_reuse::pick_slot(std::span<const int64_t> free_slots, std::span<const token_id> prompt) const {
  int64_t best = -1, best_len = -1;
  uint64_t best_freed = 0;
  for (int64_t s : free_slots) {
    const int64_t len = common(held_[static_cast<size_t>(s)], prompt);
    const uint64_t freed = freed_[static_cast<size_t>(s)];
    if (len > best_len || (len == best_len && freed < best_freed)) best = s, best_len = len, best_freed = freed;
  }
  return best;
}

int64_t prefix_reuse::begin(int64_t slot, std::span<const token_id> prompt, std::span<const holder> running, std::vector<cache_op>& ops) {
  std::vector<token_id>& held = held_[static_cast<size_t>(slot)];
  const int64_t limit = static_cast<int64_t>(prompt.size()) - 1;  // the last token is computed
  const int64_t own = std::min(common(held, prompt), limit);
  int64_t other = 0, other_slot = -1;
  for (const holder& h : running)
    if (h.slot != slot)
      if (const int64_t c = std::min(common(h.tokens, prompt), limit); c > other) other = c, other_slot = h.slot;
  std::vector<int32_t> chain;
  if (index_.capacity() > 0) chain = index_.match(prompt.first(static_cast<size_t>(std::max<int64_t>(limit, 0))));
  const int64_t b = index_.block_tokens();
  const int64_t stored = static_cast<int64_t>(chain.size()) * b;
  int64_t reused = own;
  if (other > own && other >= stored) {
    ops.push_back({cache_op::kind::copy, slot, other_slot, own, other - own});
    reused = other;
  } else if (stored > own) {
    for (int64_t j = own / b; j < static_cast<int64_t>(chain.size()); ++j) ops.push_back({cache_op::kind::load, slot, chain[static_cast<size_t>(j)], j * b, b});
    reused = stored;
  }
  held.assign(prompt.begin(), prompt.begin() + reused);
  return reused;
}

void prefix_reuse::keep(int64_t slot, std::span<const token_id> tokens, std::vector<cache_op>& ops) {
  if (index_.capacity() == 0) return;
  const prefix_index::stored s = index_.insert(tokens);
  const int64_t b = index_.block_tokens();
  for (size_t j = 0; j < s.ids.size(); ++j)
    if (s.fresh[j]) ops.push_back({cache_op::kind::save, slot, s.ids[j], static_cast<int64_t>(j) * b, b});
}

void prefix_reuse::release(int64_t slot, std::span<const token_id> tokens, std::vector<cache_op>& ops) {
  keep(slot, tokens, ops);
  held_[static_cast<size_t>(slot)].assign(tokens.begin(), tokens.end());
  freed_[static_cast<size_t>(slot)] = ++clock_;
}

void prefix_reuse::forget(int64_t slot) { held_[static_cast<size_t>(slot)].clear(); }

void prefix_reuse::forget_all() {
  for (auto& h : held_) h.clear();
  index_.clear();
}

}  // namespace hotcold::actors
