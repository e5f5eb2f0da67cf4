// Tokenizer behaviour on small hand-made vocabularies (where the right answer can be worked out by
// hand) and on the fixture vocabularies' special-token rules.
#include <gtest/gtest.h>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/pretokenizer.hpp"
#include "model/vocab.hpp"
#include "tests/model/tiny_models.hpp"
#include "loader/text_corpus.hpp"

namespace hotcold {
namespace {

struct built_vocab {
  std::vector<uint8_t> bytes;
  std::unique_ptr<gguf::file> file;
  std::unique_ptr<vocab> v;
  token_id id(std::string_view t) const { return *v->find(t); }
};

built_vocab build(const std::function<void(gguf::writer&)>& fill) {
  built_vocab b;
  gguf::writer w;
  fill(w);
  b.bytes = w.to_bytes();
  b.file = std::make_unique<gguf::file>(gguf::file::parse(b.bytes));
  b.v = std::make_unique<vocab>(vocab::from_gguf(*b.file));
  return b;
}

// SentencePiece-style: <unk> <s> </s>, 256 byte tokens, then scored pieces.
built_vocab spm_vocab() {
  return build([](gguf::writer& w) {
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
    test::spm_base_tokens(tokens, scores, types);
    for (auto [t, s] : std::vector<std::pair<std::string, float>>{
             {"▁", -1}, {"a", -2}, {"b", -2}, {"c", -2}, {"ab", -3}, {"bc", -1.5f}, {"▁a", -4}, {"abc", -0.5f}}) {
      tokens.push_back(t);
      scores.push_back(s);
      types.push_back(1);
    }
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_array("tokenizer.ggml.scores", std::span<const float>(scores));
    w.set_array("tokenizer.ggml.token_type", std::span<const int32_t>(types));
  });
}

TEST(SpmTokenizer, MergesTheBestScoringPairFirst) {
  auto b = spm_vocab();
  // "▁abc": "bc" (-1.5) beats "ab" (-3) and "▁a" (-4); then "abc" (-0.5) forms. A left-to-right
  // or lowest-score merge order would end with "▁a" or "ab".
  EXPECT_EQ(b.v->tokenize("abc"), (std::vector<token_id>{b.id("▁"), b.id("abc")}));
  EXPECT_EQ(b.v->tokenize("ab"), (std::vector<token_id>{b.id("▁"), b.id("ab")}));
  EXPECT_EQ(b.v->tokenize("a"), (std::vector<token_id>{b.id("▁a")}));
}

TEST(SpmTokenizer, FallsBackToBytesAndAddsBos) {
  auto b = spm_vocab();
  // "é" is not a piece: its UTF-8 bytes C3 A9 become <0xC3> <0xA9>.
  EXPECT_EQ(b.v->tokenize("é"), (std::vector<token_id>{b.id("▁"), b.id("<0xC3>"), b.id("<0xA9>")}));
  EXPECT_TRUE(b.v->add_bos());  // llama vocabularies add BOS when add_bos_token is absent
  EXPECT_EQ(b.v->tokenize("a", true), (std::vector<token_id>{1, b.id("▁a")}));
  EXPECT_TRUE(b.v->tokenize("").empty());
  EXPECT_EQ(b.v->tokenize("", true), std::vector<token_id>{1});
  EXPECT_EQ(b.v->detokenize(b.v->tokenize("abc é", true)), "abc é");
  EXPECT_EQ(b.v->detokenize(b.v->tokenize("abc", true), true), "<s>abc");
}

// Byte-level BPE over "a", "b", "c" and "Ġ" (the space byte's character) with ranked merges.
built_vocab bpe_vocab(std::vector<std::string> merges, std::string_view pre = "gpt-2") {
  return build([&](gguf::writer& w) {
    std::vector<std::string> tokens{"<|endoftext|>", "a", "b", "c", "Ġ", "ab", "bc", "abc", "Ġa", "Ġabc"};
    std::vector<int32_t> types{3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", pre);
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_array("tokenizer.ggml.token_type", std::span<const int32_t>(types));
    w.set_strings("tokenizer.ggml.merges", merges);
    w.set_u32("tokenizer.ggml.eos_token_id", 0);
    w.set_u32("tokenizer.ggml.bos_token_id", 0);
  });
}

TEST(BpeTokenizer, AppliesMergesInRankOrder) {
  auto first_bc = bpe_vocab({"b c", "a b", "a bc", "Ġ a"});
  EXPECT_EQ(first_bc.v->tokenize("abc"), std::vector<token_id>{first_bc.id("abc")});
  auto first_ab = bpe_vocab({"a b", "b c", "a bc", "Ġ a"});
  EXPECT_EQ(first_ab.v->tokenize("abc"), (std::vector<token_id>{first_ab.id("ab"), first_ab.id("c")}));
  // " abc": bc (rank 0), then a+bc (rank 2) before Ġ+a (rank 3); no "Ġ abc" merge.
  EXPECT_EQ(first_bc.v->tokenize(" abc"), (std::vector<token_id>{first_bc.id("Ġ"), first_bc.id("abc")}));
  EXPECT_EQ(first_bc.v->detokenize(first_bc.v->tokenize(" abc abc")), " abc abc");
  EXPECT_FALSE(first_bc.v->add_bos());  // gpt2 vocabularies add no BOS unless asked
  EXPECT_TRUE(first_bc.v->is_end_of_generation(0));
}

TEST(BpeTokenizer, Llama3TakesWholeWordsThatAreTokens) {
  auto plain = bpe_vocab({}, "gpt-2");
  EXPECT_EQ(plain.v->tokenize(" abc"), (std::vector<token_id>{plain.id("Ġ"), plain.id("a"), plain.id("b"), plain.id("c")}));
  auto llama3 = bpe_vocab({}, "llama-bpe");
  EXPECT_EQ(llama3.v->pre_tokenizer(), "llama3");
  EXPECT_EQ(llama3.v->tokenize(" abc"), std::vector<token_id>{llama3.id("Ġabc")});
  EXPECT_TRUE(llama3.v->add_bos());
}

TEST(BpeTokenizer, ControlTokensNeedParseSpecial) {
  auto b = bpe_vocab({"b c", "a b", "a bc"});
  EXPECT_EQ(b.v->tokenize("a<|endoftext|>", false, true), (std::vector<token_id>{b.id("a"), 0}));
  auto plain = b.v->tokenize("a<|endoftext|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 0), 0);
}

TEST(VocabErrors, NameTheKey) {
  auto expect_error = [](const std::function<void(gguf::writer&)>& fill, const std::string& text) {
    gguf::writer w;
    fill(w);
    auto bytes = w.to_bytes();
    auto f = gguf::file::parse(bytes, "v.gguf");
    try {
      vocab::from_gguf(f);
      ADD_FAILURE() << "accepted; expected: " << text;
    } catch (const vocab_error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  std::vector<std::string> toks{"a", "b"};
  expect_error([](gguf::writer&) {}, "tokenizer.ggml.model is missing");
  expect_error([](gguf::writer& w) { w.set_string("tokenizer.ggml.model", "bert"); }, "'bert' is not supported");
  expect_error([](gguf::writer& w) { w.set_string("tokenizer.ggml.model", "llama"); }, "tokenizer.ggml.tokens is missing");
  expect_error([&](gguf::writer& w) {
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_strings("tokenizer.ggml.tokens", toks);
    std::vector<float> s{1.0f};
    w.set_array("tokenizer.ggml.scores", std::span<const float>(s));
  }, "tokenizer.ggml.scores has 1 entries for 2 tokens");
  expect_error([&](gguf::writer& w) {
    w.set_string("tokenizer.ggml.model", "llama");
    std::vector<uint32_t> ids{1, 2};
    w.set_array("tokenizer.ggml.tokens", std::span<const uint32_t>(ids));
  }, "tokenizer.ggml.tokens: expected an array of string");
  expect_error([&](gguf::writer& w) {
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_strings("tokenizer.ggml.tokens", toks);
  }, "tokenizer.ggml.merges is missing");
}

TEST(VocabWarnings, BadSpecialIdsFallBackToDefaults) {
  auto b = build([](gguf::writer& w) {
    std::vector<std::string> toks{"<unk>", "<s>", "</s>", "x"};
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_strings("tokenizer.ggml.tokens", toks);
    w.set_u32("tokenizer.ggml.bos_token_id", 99);
  });
  EXPECT_EQ(b.v->bos(), 1);
  ASSERT_EQ(b.v->warnings().size(), 1u);
  EXPECT_NE(b.v->warnings()[0].find("bos_token_id = 99"), std::string::npos);
}

// The fixture vocabularies' own rules for BOS and special text.
class FixtureRules : public testing::Test {
 protected:
  static vocab load(const char* name) {
    auto f = gguf::file::open(std::string(HOTCOLD_FIXTURES_DIR "/vocab/") + name);
    return vocab::from_gguf(f);
  }
};

TEST_F(FixtureRules, LlamaAddsBosAndParsesSpecialOnlyWhenAsked) {
  auto v = load("ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(v.tokenize("Hello world", true), (std::vector<token_id>{1, 15043, 3186}));
  EXPECT_EQ(v.tokenize("<s>Hello", false, true), (std::vector<token_id>{1, 15043}));
  auto plain = v.tokenize("<s>Hello", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(v.detokenize(std::vector<token_id>{1, 15043, 3186, 2}), "Hello world");
  EXPECT_EQ(v.detokenize(std::vector<token_id>{1, 15043, 3186, 2}, true), "<s>Hello world</s>");
  EXPECT_TRUE(v.is_end_of_generation(2));
  EXPECT_FALSE(v.is_end_of_generation(1));
}

TEST_F(FixtureRules, FalconAddsNoBosAndKnowsItsControlTokens) {
  auto v = load("ggml-vocab-falcon.gguf");
  EXPECT_EQ(v.pre_tokenizer(), "falcon");
  EXPECT_FALSE(v.add_bos());
  EXPECT_EQ(v.tokenize("Hello world", true), (std::vector<token_id>{9856, 1079}));
  EXPECT_EQ(v.tokenize(">>TITLE<<Hello", false, true), (std::vector<token_id>{0, 9856}));
  auto plain = v.tokenize(">>TITLE<<", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_TRUE(v.is_end_of_generation(11));
}

TEST_F(FixtureRules, LongMixedTextRoundTrips) {
  auto text = loader::mixed_text(64 * 1024, 7);
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-falcon.gguf"}) {
    auto v = load(name);
    EXPECT_EQ(v.detokenize(v.tokenize(text)), text) << name;
  }
}

TEST_F(FixtureRules, InvalidUtf8SurvivesTheRoundTrip) {
  // Lone lead bytes, stray continuation bytes and a truncated sequence. (Falcon's vocabulary has no
  // token for bytes that never occur in UTF-8, such as 0xFF, so those are left out here.)
  std::string bad = "ok \xc3 bad \x80\x80 end \xe2\x96";
  auto v = load("ggml-vocab-falcon.gguf");
  EXPECT_EQ(v.detokenize(v.tokenize(bad)), bad);
  auto s = load("ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(s.detokenize(s.tokenize(bad)), bad);
  std::string all_bytes = "x\xff\xfe\xf8 y";  // SentencePiece's <0xXX> tokens cover every byte
  EXPECT_EQ(s.detokenize(s.tokenize(all_bytes)), all_bytes);
}

}  // namespace
}  // namespace hotcold
