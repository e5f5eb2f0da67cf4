#include "engine/prefix_index.hpp"

#include <algorithm>
#include <stdexcept>

namespace hotcold {

namespace {
uint64_t mix(uint64_t h, uint64_t x) {  // (splitmix64's finalizer over h and x)
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30, h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27, h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}
uint64_t default_hash(int32_t parent, std::span<const token_id> tokens) {
  uint64_t h = mix(0x5eed, static_cast<uint64_t>(static_cast<int64_t>(parent)));
  for (token_id t : tokens) h = mix(h, static_cast<uint32_t>(t));
  return h;
}
}  // namespace

prefix_index::prefix_index(int64_t block_tokens, int64_t capacity, hash_fn hash)
    : block_tokens_(block_tokens), capacity_(capacity), hash_(hash ? std::move(hash) : hash_fn(default_hash)) {
  if (block_tokens < 1) throw std::invalid_argument("a prefix block holds at least one token");
  if (capacity < 0) throw std::invalid_argument("the prefix store's capacity is negative");
}

int32_t prefix_index::find(int32_t parent, std::span<const token_id> tokens, uint64_t key) const {
  auto [a, b] = by_key_.equal_range(key);
  for (auto it = a; it != b; ++it) {
    const block& k = blocks_[static_cast<size_t>(it->second)];
    if (k.parent == parent && std::equal(k.tokens.begin(), k.tokens.end(), tokens.begin(), tokens.end())) return it->second;
  }
  return -1;
}

std::vector<int32_t> prefix_index::match(std::span<const token_id> tokens) {
  std::vector<int32_t> chain;
  const size_t b = static_cast<size_t>(block_tokens_);
  for (size_t at = 0; at + b <= tokens.size(); at += b) {
    const int32_t parent = chain.empty() ? -1 : chain.back();
    const auto run = tokens.subspan(at, b);
    const int32_t id = find(parent, run, hash_(parent, run));
    if (id < 0) break;
    chain.push_back(id);
  }
  touch(chain);
  return chain;
}

prefix_index::stored prefix_index::insert(std::span<const token_id> tokens) {
  stored out;
  const size_t b = static_cast<size_t>(block_tokens_);
  for (size_t at = 0; at + b <= tokens.size(); at += b) {
    const int32_t parent = out.ids.empty() ? -1 : out.ids.back();
    const auto run = tokens.subspan(at, b);
    const uint64_t key = hash_(parent, run);
    int32_t id = find(parent, run, key);
    const bool fresh = id < 0;
    if (fresh) {
      if ((id = take(out.ids)) < 0) break;
      block& k = blocks_[static_cast<size_t>(id)];
      k.parent = parent, k.tokens.assign(run.begin(), run.end()), k.key = key, k.children = 0;
      if (parent >= 0) ++blocks_[static_cast<size_t>(parent)].children;
      by_key_.emplace(key, id);
    }
    out.ids.push_back(id);
    out.fresh.push_back(fresh ? 1 : 0);
    touch({id});  // (used now: newer than every block an eviction could take before the chain is done)
  }
  touch(out.ids);
  return out;
}

int32_t prefix_index::take(const std::vector<int32_t>& keep) {
  if (!free_.empty()) {
    const int32_t id = free_.back();
    free_.pop_back();
    return id;
  }
  if (static_cast<int64_t>(blocks_.size()) < capacity_) {
    blocks_.emplace_back();
    return static_cast<int32_t>(blocks_.size()) - 1;
  }
  for (auto it = by_use_.begin(); it != by_use_.end(); ++it) {
    const int32_t id = it->second;
    if (blocks_[static_cast<size_t>(id)].children > 0 || std::find(keep.begin(), keep.end(), id) != keep.end()) continue;
    drop(id);
    ++evictions_;
    return id;
  }
  return -1;
}

void prefix_index::drop(int32_t id) {
  block& k = blocks_[static_cast<size_t>(id)];
  auto [a, b] = by_key_.equal_range(k.key);
  for (auto it = a; it != b; ++it)
    if (it->second == id) {
      by_key_.erase(it);
      break;
    }
  by_use_.erase(k.used);
  if (k.parent >= 0) --blocks_[static_cast<size_t>(k.parent)].children;
  k = block{};
}

void prefix_index::touch(const std::vector<int32_t>& chain) {
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    block& k = blocks_[static_cast<size_t>(*it)];
    if (k.used) by_use_.erase(k.used);
    k.used = ++uses_;
    by_use_.emplace(k.used, *it);
  }
}

void prefix_index::clear() {
  blocks_.clear();
  free_.clear();
  by_key_.clear();
  by_use_.clear();
}

}  // namespace hotcold
