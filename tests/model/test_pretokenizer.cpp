// Pre-tokenizer families split text as their published regexes define.
#include <gtest/gtest.h>

#include "model/pretokenizer.hpp"
#include "loader/text_corpus.hpp"

namespace hotcold {
namespace {

std::vector<std::string> split(std::string_view family, std::string_view text) {
  const auto* f = find_pre_tokenizer(family);
  EXPECT_NE(f, nullptr) << family;
  if (!f) return {};
  regex_splitter s(f->patterns);
  std::vector<std::string_view> pieces;
  s.split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

using words = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world's  123!!"), (words{"Hello", " world", "'s", " ", " 123", "!!"}));
  EXPECT_EQ(split("gpt-2", "a   b"), (words{"a", "  ", " b"}));
  EXPECT_EQ(split("mpt", "x\n\ny"), (words{"x", "\n", "\n", "y"}));
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(split("llama3", "1234567 abc"), (words{"123", "456", "7", " abc"}));
  EXPECT_EQ(split("llama-bpe", "IT'S ok"), (words{"IT", "'S", " ok"}));
  EXPECT_EQ(split("llama3", "x.\n\ny"), (words{"x", ".\n\n", "y"}));
}

TEST(PreTokenizer, Qwen2AndStarcoderSplitDigits) {
  EXPECT_EQ(split("qwen2", "a123"), (words{"a", "1", "2", "3"}));
  EXPECT_EQ(split("starcoder", "x12 y"), (words{"x", "1", "2", " y"}));
  EXPECT_EQ(split("refact", "42"), (words{"4", "2"}));
}

TEST(PreTokenizer, FalconAndDefault) {
  EXPECT_EQ(split("falcon", "1234"), (words{"123", "4"}));
  EXPECT_EQ(split("falcon", "a+b`c"), (words{"a", "+", "b", "`", "c"}));
  EXPECT_EQ(split("default", "a+b`c"), (words{"a", "+", "b", "`", "c"}));
  EXPECT_EQ(split("default", "12345"), (words{"123", "45"}));
}

TEST(PreTokenizer, DeepseekFamilies) {
  EXPECT_EQ(split("deepseek-coder", "Hi 世界\n7"), (words{"Hi", " ", "世界", "\n", "7"}));
  EXPECT_EQ(split("deepseek-llm", "Hi, 世界 42"), (words{"Hi", ",", " ", "世界", " ", "42"}));
}

TEST(PreTokenizer, UnicodeCategories) {
  // Letters of any script, Unicode digits, and punctuation classes are honoured.
  EXPECT_EQ(split("gpt-2", "Привет мир"), (words{"Привет", " мир"}));
  EXPECT_EQ(split("gpt-2", "x٣٤"), (words{"x", "٣٤"}));  // Arabic-Indic digits are \p{N}
  EXPECT_EQ(split("falcon", "a«b»"), (words{"a", "«", "b", "»"}));  // « » are \p{P}
}

TEST(PreTokenizer, PiecesCoverTheTextExactly) {
  auto text = loader::mixed_text(32 * 1024, 3) + "\xff\xfe broken \xc3";
  for (const auto& family : all_pre_tokenizers()) {
    regex_splitter s(family.patterns);
    std::vector<std::string_view> pieces;
    s.split(text, pieces);
    std::string joined;
    for (auto p : pieces) {
      EXPECT_FALSE(p.empty()) << family.name;
      joined += p;
    }
    EXPECT_EQ(joined, text) << family.name;
  }
}

TEST(PreTokenizer, NamesAndAliases) {
  EXPECT_EQ(find_pre_tokenizer("llama-v3")->name, "llama3");
  EXPECT_EQ(find_pre_tokenizer("deepseek-r1-qwen")->name, "qwen2");
  EXPECT_EQ(find_pre_tokenizer("no-such-family"), nullptr);
  EXPECT_EQ(default_pre_tokenizer().name, "default");
}

}  // namespace
}  // namespace hotcold
