#pragma once
// Pre-tokenization for byte-level BPE vocabularies: the text is cut into words by a family's
// regexes before BPE merges run inside each word. The family comes from `tokenizer.ggml.pre`.
//
// Each regex of a family is applied in turn inside each piece the previous one produced, and both
// the matches and the text between matches become pieces (Hugging Face's Split with "isolated"
// behaviour, which is how llama.cpp applies the same lists). Unicode classes (\p{L}, \p{N}, \p{P},
// \s) come from PCRE2 in UTF + UCP mode; invalid UTF-8 bytes are never matched, so they end up in
// the gaps and reach the byte-level encoder unchanged.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hotcold {

struct pre_tokenizer_family {
  std::string_view name;                   // canonical name, e.g. "llama3"
  std::vector<std::string_view> aliases;   // other `tokenizer.ggml.pre` values meaning the same
  std::vector<std::string_view> patterns;  // applied in order
  bool ignore_merges = false;              // a whole word that is a token is taken as is (llama3)
  bool add_bos = false;                    // BOS default when `add_bos_token` is absent
};

// The family for a `tokenizer.ggml.pre` value; nullptr when unknown.
const pre_tokenizer_family* find_pre_tokenizer(std::string_view pre);
// The family used when the key is absent or unknown (llama.cpp's "default").
const pre_tokenizer_family& default_pre_tokenizer();
const std::vector<pre_tokenizer_family>& all_pre_tokenizers();

class regex_splitter {
 public:
  explicit regex_splitter(const std::vector<std::string_view>& patterns);
  ~regex_splitter();
  regex_splitter(regex_splitter&&) noexcept;
  regex_splitter& operator=(regex_splitter&&) noexcept;

  // Appends the pieces of `text` to `out`; the pieces cover `text` exactly, in order.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct compiled;
  std::vector<std::unique_ptr<compiled>> regexes_;
};

}  // namespace hotcold
