#include "model/grammar_tokens.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

namespace hotcold {

grammar_vocab::grammar_vocab(const vocab& v) : bytes_(v.size()), ends_(v.size(), 0), end_(v.eos()) {
  trie_.emplace_back();
  std::vector<std::map<uint8_t, uint32_t>> children(1);
  for (size_t t = 0; t < v.size(); ++t) {
    const auto id = static_cast<token_id>(t);
    const token_type type = v.type(id);
    ends_[t] = v.is_end_of_generation(id);
    if (ends_[t] || type == token_type::control || type == token_type::unknown || type == token_type::unused) continue;
    bytes_[t] = v.piece(id);
    uint32_t at = 0;
    for (const char c : bytes_[t]) {
      const auto b = static_cast<uint8_t>(c);
      auto found = children[at].find(b);
      if (found == children[at].end()) {
        found = children[at].emplace(b, static_cast<uint32_t>(trie_.size())).first;
        trie_.emplace_back();
        children.emplace_back();
      }
      at = found->second;
    }
    if (at != 0) trie_[at].tokens.push_back(id);  // (an empty piece never advances the text: never allowed)
  }
  for (size_t n = 0; n < trie_.size(); ++n) trie_[n].next.assign(children[n].begin(), children[n].end());
}

namespace {
constexpr size_t max_states = 20000;  // states remembered before the memory starts again
}

token_grammar::token_grammar(const grammar& g, const grammar_vocab& tokens) : tokens_(&tokens) { at_ = intern(reading{grammar_matcher(g)}); }

int32_t token_grammar::intern(reading&& r) const {
  std::string key;
  for (const auto& stack : r.m.stacks()) {
    key.append(reinterpret_cast<const char*>(stack.data()), stack.size() * sizeof(uint32_t));
    key.append(4, '\xff');  // (no position is 0xffffffff: a stack's end)
  }
  const uint32_t tail[3] = {r.partial, static_cast<uint32_t>(r.need), r.least};
  key.append(reinterpret_cast<const char*>(tail), sizeof tail);
  if (auto found = ids_.find(key); found != ids_.end()) return found->second;
  const auto id = static_cast<int32_t>(states_.size());
  states_.push_back(std::move(r));
  steps_.emplace_back();
  steps_.back().fill(-2);
  ids_.emplace(std::move(key), id);
  return id;
}

int32_t token_grammar::step(int32_t state, uint8_t b) const {
  int32_t& known = steps_[static_cast<size_t>(state)][b];
  if (known != -2) return known;
  reading r = states_[static_cast<size_t>(state)];
  const int32_t next = feed(r, b) ? intern(std::move(r)) : -1;
  steps_[static_cast<size_t>(state)][b] = next;  // (interning may have moved the table: not through `known`)
  return next;
}

bool token_grammar::feed(reading& r, uint8_t b) {
  if (r.need == 0) {
    if (b < 0x80) return r.m.accept(b);
    const int n = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0) return false;  // (a continuation byte where a code point starts, or no UTF-8 at all)
    r.partial = b & (0x7Fu >> n), r.need = n - 1, r.least = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
  } else {
    if ((b >> 6) != 2) return false;
    r.partial = (r.partial << 6) | (b & 0x3F);
    if (--r.need == 0) {  // (overlong forms, surrogates and what is past Unicode are not UTF-8)
      const uint32_t c = r.partial, least = r.least;
      r.partial = 0, r.least = 0;  // (a finished code point leaves nothing in reading: one state, however it came)
      if (c < least || (c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) return false;
      return r.m.accept(c);
    }
  }
  // An unfinished code point: the ones it can still become (never a surrogate: ED A0..BF leads only to
  // those, and a text that took it could not go on).
  const uint32_t lo = std::max(r.least, r.partial << (6 * r.need)), hi = std::min<uint32_t>(((r.partial + 1) << (6 * r.need)) - 1, 0x10FFFF);
  if (lo > hi) return false;
  if (lo < 0xD800 && r.m.may_take_any(lo, std::min<uint32_t>(hi, 0xD7FF))) return true;
  return hi > 0xDFFF && r.m.may_take_any(std::max<uint32_t>(lo, 0xE000), hi);
}

bool token_grammar::complete() const {
  const reading& r = states_[static_cast<size_t>(at_)];
  return r.need == 0 && r.m.complete();
}

int32_t token_grammar::after(token_id t) const {
  if (t < 0 || static_cast<size_t>(t) >= tokens_->size()) return -1;
  if (tokens_->ends_generation(t)) return complete() ? at_ : -1;
  const std::string& bytes = tokens_->bytes(t);
  if (bytes.empty()) return -1;
  int32_t s = at_;
  for (const char c : bytes)
    if ((s = step(s, static_cast<uint8_t>(c))) < 0) return -1;
  return s;
}

bool token_grammar::allows(token_id t) const { return after(t) >= 0; }

void token_grammar::walk(uint32_t node, int32_t state, std::vector<uint8_t>& mask) const {
  const auto& n = tokens_->trie()[node];
  for (token_id t : n.tokens) mask[static_cast<size_t>(t)] = 1;
  for (const auto& [b, child] : n.next)
    if (const int32_t next = step(state, b); next >= 0) walk(child, next, mask);
}

void token_grammar::allowed(std::vector<uint8_t>& mask) const {
  mask.assign(tokens_->size(), 0);
  walk(0, at_, mask);
  if (complete())
    for (size_t t = 0; t < tokens_->size(); ++t)
      if (tokens_->ends_generation(static_cast<token_id>(t))) mask[t] = 1;
}

void token_grammar::accept(token_id t) {
  const int32_t next = after(t);
  if (next < 0) throw std::invalid_argument(fmt::format("token {} is not one the grammar allows here", t));
  at_ = next;
  if (states_.size() > max_states) {  // (a grammar of ever new states: start remembering again from here)
    reading here = states_[static_cast<size_t>(at_)];
    states_.clear(), steps_.clear(), ids_.clear();
    at_ = intern(std::move(here));
  }
}

}  // namespace hotcold
