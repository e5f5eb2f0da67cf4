// SentencePiece's and byte-level BPE's merging of raw text into tokens (vocab::impl's tokenize_spm
// and tokenize_bpe); the rest of the vocabulary is in vocab.cpp.
#include <algorithm>

#include "model/vocab_impl.hpp"

namespace hotcold {

using namespace vocab_detail;

namespace {

// The code of the character at s[i] (utf8_char_len bytes): its code point, or for a malformed
// byte 0x110000 + the byte, so pairs of characters can be keyed exactly.
uint32_t char_code(std::string_view s, size_t i, size_t len) {
  if (len == 1) {
    auto c = static_cast<unsigned char>(s[i]);
    return c < 0x80 ? c : 0x110000u + c;
  }
  size_t at = i;
  auto cp = utf8_decode(s, at);
  return cp ? *cp : 0x110000u + static_cast<unsigned char>(s[i]);
}

uint64_t char_pair(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

}  // namespace

void vocab::impl::index_joinable_pairs() {
  for (const auto& t : texts) {
    uint32_t prev = 0;
    for (size_t i = 0; i < t.size();) {
      size_t len = utf8_char_len(t, i);
      uint32_t code = char_code(t, i, len);
      if (i > 0) joinable.insert(char_pair(prev, code));
      prev = code;
      i += len;
    }
  }
}

void vocab::impl::tokenize_spm(std::string_view raw, bool prefix_space, std::vector<token_id>& out) const {
  std::string text;
  text.reserve(raw.size() * 2 + 3);
  if (prefix_space) text += space_marker;
  for (char c : raw) {
    if (c == ' ') text += space_marker;
    else text += c;
  }
  // Merges are local: a pair of adjacent characters that no token contains can never end up inside
  // one token, so the text is cut there and each segment merged on its own. The result is the same
  // as one pass over the whole text, with small heaps that stay in cache.
  spm_scratch scratch;
  size_t seg_start = 0;
  uint32_t prev = 0;
  for (size_t i = 0; i < text.size();) {
    size_t len = utf8_char_len(text, i);
    uint32_t code = char_code(text, i, len);
    if (i > 0 && !joinable.count(char_pair(prev, code))) {
      merge_spm_segment(std::string_view(text).substr(seg_start, i - seg_start), scratch, out);
      seg_start = i;
    }
    prev = code;
    i += len;
  }
  if (seg_start < text.size()) merge_spm_segment(std::string_view(text).substr(seg_start), scratch, out);
}

// SentencePiece-style BPE inside one segment: repeatedly merge the adjacent pair whose joined
// text is the best-scoring token (ties: leftmost), then emit tokens, falling back to bytes.
void vocab::impl::merge_spm_segment(std::string_view text, spm_scratch& s, std::vector<token_id>& out) const {
  const impl& v = *this;
  auto& syms = s.syms;
  auto& heap = s.heap;
  syms.clear();
  heap.clear();
  for (size_t off = 0; off < text.size();) {
    size_t len = utf8_char_len(text, off);
    int32_t idx = static_cast<int32_t>(syms.size());
    syms.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(len), idx - 1, off + len < text.size() ? idx + 1 : -1});
    off += len;
  }
  auto worse = [](const spm_bigram& a, const spm_bigram& b) { return a.score < b.score || (a.score == b.score && a.left > b.left); };
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    std::string_view joined(text.data() + syms[l].start, syms[l].len + syms[r].len);
    auto id = v.find(joined);
    if (!id) return;
    heap.push_back({v.scores[*id], l, r, static_cast<uint32_t>(joined.size())});
    std::push_heap(heap.begin(), heap.end(), worse);
  };
  for (size_t i = 1; i < syms.size(); ++i) try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    spm_bigram b = heap.back();
    heap.pop_back();
    symbol& l = syms[b.left];
    symbol& r = syms[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale: one side merged since
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int32_t i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) {
    std::string_view piece(text.data() + syms[i].start, syms[i].len);
    if (auto id = v.find(piece)) {
      out.push_back(*id);
      continue;
    }
    for (unsigned char c : piece)  // byte fallback
      if (v.byte_token[c] != no_token) out.push_back(v.byte_token[c]);
  }
}

void vocab::impl::tokenize_bpe(std::string_view raw, std::vector<token_id>& out) const {
  std::vector<std::string_view> words;
  splitter->split(raw, words);

  struct bigram {
    int32_t rank;
    int32_t left, right;
    token_id left_id, right_id, result;
  };
  auto worse = [](const bigram& a, const bigram& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); };
  std::vector<bigram> heap;
  std::vector<token_id> ids;
  std::vector<int32_t> prev, next;
  std::vector<uint8_t> alive;
  const auto& bl = byte_level();
  std::string encoded;

  for (std::string_view word : words) {
    if (ignore_merges) {
      encoded.clear();
      for (unsigned char c : word) encoded += bl.byte_to_text[c];
      if (auto id = find(encoded)) {
        out.push_back(*id);
        continue;
      }
    }
    size_t n = word.size();
    ids.resize(n);
    prev.resize(n);
    next.resize(n);
    for (size_t i = 0; i < n; ++i) {
      ids[i] = byte_token[static_cast<unsigned char>(word[i])];
      prev[i] = static_cast<int32_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    }
    heap.clear();
    auto try_add = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0 || ids[l] == no_token || ids[r] == no_token) return;
      auto it = merges.find(pair_key(ids[l], ids[r]));
      if (it == merges.end()) return;
      heap.push_back({it->second.rank, l, r, ids[l], ids[r], it->second.result});
      std::push_heap(heap.begin(), heap.end(), worse);
    };
    for (size_t i = 1; i < n; ++i) try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
    alive.assign(n, 1);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), worse);
      bigram b = heap.back();
      heap.pop_back();
      // A symbol's id changes exactly when it absorbs its right neighbour, so equal ids mean the
      // pair is still adjacent and unmerged.
      if (!alive[b.left] || !alive[b.right] || ids[b.left] != b.left_id || ids[b.right] != b.right_id) continue;
      ids[b.left] = b.result;
      alive[b.right] = false;
      next[b.left] = next[b.right];
      if (next[b.right] >= 0) prev[next[b.right]] = b.left;
      try_add(prev[b.left], b.left);
      try_add(b.left, next[b.left]);
    }
    for (int32_t i = n ? 0 : -1; i != -1; i = next[i])
      if (ids[i] != no_token) out.push_back(ids[i]);
  }
}

}  // namespace hotcold
