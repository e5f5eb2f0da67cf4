#pragma once
// A model's vocabulary and tokenizer, built from GGUF metadata (`tokenizer.ggml.*`).
//
//   llama (SentencePiece-style BPE): merges the best-scoring adjacent pair first; spaces are "▁";
//         a space is prefixed to raw text when add_space_prefix; unknown bytes fall back to <0xXX>.
//   gpt2  (byte-level BPE): text is split into words by the pre-tokenizer family, each byte maps to
//         a printable character, then merges apply in rank order inside each word.
//
// Where a file leaves a rule implicit (BOS when add_bos_token is absent, ...), the defaults are
// those of llama.cpp, so the same file means the same tokens.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/gguf.hpp"

namespace hotcold {

using token_id = int32_t;
constexpr token_id no_token = -1;

// Token types as GGUF stores them in tokenizer.ggml.token_type.
enum class token_type : int32_t { undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

enum class vocab_kind { spm, bpe };

class vocab_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class vocab {
 public:
  // Throws vocab_error naming the key when the tokenizer metadata is missing or inconsistent.
  static vocab from_gguf(const gguf::file& f);
  ~vocab();
  vocab(vocab&&) noexcept;
  vocab& operator=(vocab&&) noexcept;

  vocab_kind kind() const;
  std::string_view model_name() const;     // "llama" or "gpt2"
  std::string_view pre_tokenizer() const;  // family name actually used ("default" when absent)
  size_t size() const;

  std::string_view text(token_id id) const;  // the token as stored ("▁Hello", "Ġworld", "<0x0A>")
  float score(token_id id) const;
  token_type type(token_id id) const;
  std::optional<token_id> find(std::string_view text) const;

  token_id bos() const;
  token_id eos() const;
  token_id unk() const;
  bool add_bos() const;
  bool add_eos() const;
  bool add_space_prefix() const;
  // End of generation: EOS, EOT and the end-of-turn tokens llama.cpp recognizes by text.
  bool is_end_of_generation(token_id id) const;
  // Notes about metadata that was unusual but usable (bad special ids replaced by defaults...).
  const std::vector<std::string>& warnings() const;

  // add_special: BOS/EOS as the vocabulary asks. parse_special: text of control tokens ("<s>")
  // becomes those tokens; otherwise it is tokenized as plain text. User-defined tokens always match.
  std::vector<token_id> tokenize(std::string_view text, bool add_special = false, bool parse_special = false) const;
  // tokenize(text, false, true), except that control tokens are not taken from inside the byte ranges
  // `plain` ([begin, end), ascending; a chat's message contents): there their text stays text.
  std::vector<token_id> tokenize_outside(std::string_view text, std::span<const std::pair<size_t, size_t>> plain) const;

  // The text a token stands for. Control and unknown tokens render only when render_special.
  std::string piece(token_id id, bool render_special = false) const;
  // The text of a sequence: pieces concatenated; for add_space_prefix vocabularies the space the
  // tokenizer prefixed is removed from the first text piece, so detokenize(tokenize(s)) == s.
  std::string detokenize(std::span<const token_id> ids, bool render_special = false) const;

 private:
  struct impl;
  explicit vocab(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace hotcold
