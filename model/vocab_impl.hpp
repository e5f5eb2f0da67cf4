#pragma once
// What model/vocab.cpp (loading, special tokens, detokenizing) and model/vocab_merge.cpp (SentencePiece
// and byte-level BPE merging) share: the vocabulary's inside and the UTF-8 helpers (utf8_decode:
// model/utf8.hpp). Not for use
// outside those two files.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "model/pretokenizer.hpp"
#include "model/utf8.hpp"
#include "model/vocab.hpp"

namespace hotcold {
namespace vocab_detail {

inline constexpr std::string_view space_marker = "\xE2\x96\x81";  // "▁" U+2581, SentencePiece's space

// Bytes of the UTF-8 character starting at s[i]. A malformed sequence counts as one byte, so
// invalid input falls back to byte tokens one byte at a time and survives a round trip.
inline size_t utf8_char_len(std::string_view s, size_t i) {
  static constexpr uint8_t lengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  size_t n = lengths[static_cast<unsigned char>(s[i]) >> 4];
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}

// GPT-2's byte-level encoding: printable bytes stand for themselves, the other 68 bytes map to
// U+0100 onwards in byte order, so every byte sequence becomes printable text and back.
struct byte_level_table {
  std::array<std::string, 256> byte_to_text;
  std::unordered_map<uint32_t, uint8_t> codepoint_to_byte;
  byte_level_table();
};
const byte_level_table& byte_level();

inline uint64_t pair_key(token_id a, token_id b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

struct merge_rule {
  int32_t rank;
  token_id result;
};

struct symbol {
  uint32_t start, len;  // bytes in the working text
  int32_t prev, next;
};
struct spm_bigram {
  float score;
  int32_t left, right;
  uint32_t len;
};
struct spm_scratch {
  std::vector<symbol> syms;
  std::vector<spm_bigram> heap;
};
struct fragment {
  std::string_view text;  // raw text when id == no_token
  token_id id = no_token;
};

}  // namespace vocab_detail

struct vocab::impl {
  vocab_kind kind = vocab_kind::spm;
  std::string model_name;
  const pre_tokenizer_family* pre = nullptr;
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<token_type> types;
  std::unordered_map<std::string_view, token_id> by_text;
  std::unordered_map<uint64_t, vocab_detail::merge_rule> merges;   // (left, right) -> rank, merged token
  std::array<token_id, 256> byte_token{};            // SPM: <0xXX>; BPE: the byte's character token
  std::vector<token_id> special_tokens;              // control / user-defined / unknown, longest first
  std::unordered_set<token_id> end_of_generation;
  std::unique_ptr<regex_splitter> splitter;
  token_id bos = no_token, eos = no_token, unk = no_token, eot = no_token, eom = no_token;
  token_id sep = no_token, pad = no_token, mask = no_token;
  bool add_bos = false, add_eos = false, add_space_prefix = false, ignore_merges = false;
  std::vector<std::string> warnings;

  std::optional<token_id> find(std::string_view t) const {
    auto it = by_text.find(t);
    if (it == by_text.end()) return std::nullopt;
    return it->second;
  }

  std::unordered_set<uint64_t> joinable;             // SPM: character pairs that occur inside some token

  void index_joinable_pairs();
  // Loading (vocab::from_gguf): the special tokens' ids the file names (n: the vocabulary's size), and
  // a BPE tokenizer's merges (those that name text that is not a token are counted and left out).
  void read_special_ids(const gguf::file& f, size_t n);
  void read_merges(const gguf::file& f);
  void tokenize_spm(std::string_view raw, bool prefix_space, std::vector<token_id>& out) const;
  void merge_spm_segment(std::string_view text, vocab_detail::spm_scratch& s, std::vector<token_id>& out) const;
  void tokenize_bpe(std::string_view raw, std::vector<token_id>& out) const;
  std::vector<vocab_detail::fragment> partition(std::string_view text, bool parse_special) const;
  std::vector<token_id> tokens_of(const std::vector<vocab_detail::fragment>& frags, bool add_special) const;
};

}  // namespace hotcold
