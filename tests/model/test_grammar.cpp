// GBNF grammars (model/grammar.hpp): parsed as llama.cpp writes them, followed a code point at a time,
// and refused with the line and column of what is wrong.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include <random>

#include "model/gguf.hpp"
#include "model/grammar.hpp"
#include "model/grammar_tokens.hpp"
#include "model/sampler.hpp"

namespace hotcold {
namespace {

// JSON, written from its published definition (RFC 8259) in GBNF.
const char* json_gbnf = R"(# a JSON value, with space between its parts
root   ::= ws value ws
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( member ( ws "," ws member )* )? ws "}"
member ::= string ws ":" ws value
array  ::= "[" ws ( value ( ws "," ws value )* )? ws "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n\r]*
)";

// Whether the whole text is a sentence of the grammar: every code point taken, and the end allowed.
bool matches(const grammar& g, const std::string& text) {
  grammar_matcher m(g);
  return m.accept_utf8(text) && m.complete();
}

TEST(Grammar, JsonAsItsDefinitionSays) {
  const grammar g = grammar::parse(json_gbnf);
  for (const char* ok : {"{}", "[]", "0", "-12.5e+3", "\"a\\u00e9\\n\"", " {\"a\": [1, 2, {\"b\": null}], \"c\": true} ", "[\"x\",false]", "\"é\""})
    EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"{", "01", "[1,]", "{\"a\" 1}", "\"\x01\"", "tru", "1.", "\"\\q\"", "{} {}", "- 1"}) EXPECT_FALSE(matches(g, bad)) << bad;
  // Followed a code point at a time: what may come next, where the text may end.
  grammar_matcher m(g);
  EXPECT_TRUE(m.may_take('{') && m.may_take('[') && m.may_take('-') && m.may_take(' '));
  EXPECT_FALSE(m.may_take('}') || m.may_take('+') || m.may_take('a'));
  EXPECT_TRUE(m.accept_utf8("{\"k\":"));
  EXPECT_FALSE(m.complete());
  EXPECT_FALSE(m.accept('}'));  // (refused: the state is kept)
  EXPECT_TRUE(m.accept_utf8(" 7"));
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.accept('}'));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.accept('\n'));  // trailing space, then nothing else
  EXPECT_FALSE(m.may_take('x'));
}

TEST(Grammar, RepetitionsCountAsWritten) {
  auto runs = [](const char* text) {
    const grammar g = grammar::parse(text);
    std::string got;
    for (int n = 0; n <= 6; ++n)
      if (matches(g, std::string(static_cast<size_t>(n), 'a'))) got += std::to_string(n);
    return got;
  };
  EXPECT_EQ(runs(R"(root ::= "a"{2,4})"), "234");
  EXPECT_EQ(runs(R"(root ::= "a"{3})"), "3");
  EXPECT_EQ(runs(R"(root ::= "a"{2,})"), "23456");
  EXPECT_EQ(runs(R"(root ::= "a"{,2})"), "012");
  EXPECT_EQ(runs(R"(root ::= "a"?)"), "01");
  EXPECT_EQ(runs(R"(root ::= "a"+)"), "123456");
  EXPECT_EQ(runs(R"(root ::= "a"*)"), "0123456");
  EXPECT_EQ(runs(R"(root ::= ("a" "a")+)"), "246");    // a group repeated whole
  EXPECT_EQ(runs(R"(root ::= "aa"{1,2} "a"?)"), "2345");  // a literal repeated whole
}

TEST(Grammar, CharactersClassesAndEscapes) {
  const grammar g = grammar::parse("root ::= [^a-c\\n] \"\\x41\\u00e9\\U0001F600\" . [\\]\\-] \"é\"\n");
  EXPECT_TRUE(matches(g, "zAé😀?]é"));
  EXPECT_TRUE(matches(g, "dAé😀\n-é"));  // `.` takes a newline too
  EXPECT_FALSE(matches(g, "bAé😀x]é"));  // b is in a-c
  EXPECT_FALSE(matches(g, "\nAé😀x]é"));
  EXPECT_FALSE(matches(g, "zAé😀xaé"));
  // Comments, groups over several lines, a continuation line beginning with |, names with - and _.
  const grammar h = grammar::parse(R"(
root ::= greeting-word " " who_  # a comment
greeting-word ::= ( "hello"
                  | "hi" )
who_ ::= "world"
  | "there"
)");
  for (const char* ok : {"hello world", "hi there", "hello there"}) EXPECT_TRUE(matches(h, ok)) << ok;
  EXPECT_FALSE(matches(h, "hey world"));
}

// What is wrong, and where: the line and column of the text, or the rule for faults of the whole.
TEST(Grammar, ErrorsNameLineAndColumn) {
  auto error_of = [](const std::string& text, int& line, int& column) {
    try {
      grammar::parse(text);
    } catch (const grammar_error& e) {
      line = e.line(), column = e.column();
      return std::string(e.what());
    }
    return std::string("(parsed)");
  };
  int line = 0, column = 0;
  EXPECT_NE(error_of("root ::= item\nitem ::= \"a\" thing\n", line, column).find("rule 'thing' is used but never defined"), std::string::npos);
  EXPECT_EQ(line, 2);
  EXPECT_EQ(column, 14);
  EXPECT_NE(error_of("root ::= \"a\"\nx := \"b\"\n", line, column).find("expecting '::='"), std::string::npos);
  EXPECT_EQ(line, 2);
  EXPECT_EQ(column, 3);
  EXPECT_NE(error_of("root ::= \"abc\n", line, column).find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\\qb\"", line, column).find("unknown escape '\\q'"), std::string::npos);
  EXPECT_EQ(line, 1);
  EXPECT_EQ(column, 12);
  EXPECT_NE(error_of("root ::= \"a\"{3,2}", line, column).find("its most is less than its least"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{2001}", line, column).find("more than 2000"), std::string::npos);
  EXPECT_NE(error_of("root ::= * \"a\"", line, column).find("nothing before it to repeat"), std::string::npos);
  EXPECT_NE(error_of("root ::= [a-", line, column).find("unterminated character class"), std::string::npos);
  EXPECT_NE(error_of("root ::= [z-a]", line, column).find("end is before its start"), std::string::npos);
  EXPECT_NE(error_of("root ::= ( \"a\" ", line, column).find("expecting ')'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" )", line, column).find("expecting a newline or the end"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"", line, column).find("rule 'root' is defined twice"), std::string::npos);
  EXPECT_EQ(line, 2);
  EXPECT_EQ(column, 1);
  EXPECT_NE(error_of("item ::= \"a\"", line, column).find("no rule 'root'"), std::string::npos);
  EXPECT_EQ(line, 0);
  EXPECT_NE(error_of("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", line, column).find("rule 'expr' is left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= e\ne ::= opt e \"x\" | \"y\"\nopt ::= \"z\"?", line, column).find("left-recursive"), std::string::npos);  // through a rule that may match nothing
  EXPECT_NE(error_of("root ::= <[42]>", line, column).find("token references"), std::string::npos);
  // Rules that may match nothing, nested and repeated, lead to more places than a text can need: refused
  // when followed, never followed for ever.
  const grammar ambiguous = grammar::parse("root ::= (\"a\"? | \"b\"?){0,40}");  // (2^40 ways through)
  EXPECT_THROW(grammar_matcher{ambiguous}, grammar_error);
  // Not left recursion: the recursion comes after a character.
  EXPECT_TRUE(matches(grammar::parse("root ::= \"(\" root \")\" | \"x\""), "((x))"));
}

// A real vocabulary's tokens under a grammar: those allowed are exactly the ones whose text keeps the
// output a beginning of a sentence (checked against the pieces themselves, token by token), every
// token at once agrees with one at a time, and tokens drawn at random among the allowed ones until the
// grammar is complete always give text that parses: what random weights sampling under a grammar get.
TEST(Grammar, TokensOfARealVocabulary) {
  const auto f = gguf::file::open(HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf");
  const vocab v = vocab::from_gguf(f);
  const grammar_vocab tokens(v);
  {
    const grammar g = grammar::parse(R"(root ::= "yes" | "no" | "maybe")");
    token_grammar tg(g, tokens);
    std::vector<uint8_t> mask;
    tg.allowed(mask);
    size_t n = 0;
    for (size_t t = 0; t < v.size(); ++t) {
      const std::string& piece = tokens.bytes(static_cast<token_id>(t));
      bool prefix = !piece.empty();
      if (prefix) prefix = std::string("yes").rfind(piece, 0) == 0 || std::string("no").rfind(piece, 0) == 0 || std::string("maybe").rfind(piece, 0) == 0;
      EXPECT_EQ(mask[t] != 0, prefix) << t << " '" << piece << "'";
      EXPECT_EQ(tg.allows(static_cast<token_id>(t)), prefix) << t;
      n += prefix;
    }
    EXPECT_GE(n, 5u);  // y, n, m, no, ma... as the vocabulary has them
    EXPECT_FALSE(tg.allows(v.eos()));  // nothing written yet: the text may not end
    tg.accept(*v.find("no"));
    EXPECT_TRUE(tg.complete());
    EXPECT_TRUE(tg.allows(v.eos()));
    tg.allowed(mask);
    for (size_t t = 0; t < mask.size(); ++t) EXPECT_EQ(mask[t] != 0, v.is_end_of_generation(static_cast<token_id>(t))) << t;  // the end alone
    EXPECT_THROW(tg.accept(*v.find("s")), std::invalid_argument);
  }
  // A byte token opens a code point that the next one finishes: é is <0xC3> <0xA9>.
  {
    const grammar g = grammar::parse(R"(root ::= "é" | "ü")");
    token_grammar tg(g, tokens);
    const token_id c3 = *v.find("<0xC3>"), a9 = *v.find("<0xA9>"), bc = *v.find("<0xBC>"), a4 = *v.find("<0xA4>");
    EXPECT_TRUE(tg.allows(c3));
    EXPECT_FALSE(tg.allows(*v.find("<0xC4>")));  // no allowed code point starts with it
    tg.accept(c3);
    EXPECT_FALSE(tg.complete());
    EXPECT_TRUE(tg.allows(a9) && tg.allows(bc));
    EXPECT_FALSE(tg.allows(a4));  // (ä)
    tg.accept(bc);
    EXPECT_TRUE(tg.complete());
  }
  // <0xED> <0xA0..0xBF> can only become a surrogate, which is no character: refused at its second byte
  // (taken, it was a dead end where no token could go on, and the text ended mid-string).
  {
    const grammar g = grammar::parse(R"(root ::= [^"]{1,3} "!")");
    token_grammar tg(g, tokens);
    tg.accept(*v.find("<0xED>"));
    EXPECT_TRUE(tg.allows(*v.find("<0x9F>")));   // U+D7C0..U+D7FF
    EXPECT_FALSE(tg.allows(*v.find("<0xA0>")));  // U+D800.. (surrogates)
    EXPECT_FALSE(tg.allows(*v.find("<0xBF>")));
    tg.accept(*v.find("<0x9F>"));
    std::vector<uint8_t> mask;
    tg.allowed(mask);
    EXPECT_GT(std::count(mask.begin(), mask.end(), 1), 0);
  }
  // JSON, tokens drawn at random among the allowed ones: every text parses.
  const grammar json = grammar::parse(json_gbnf);
  std::mt19937 rng(7);
  std::vector<uint8_t> mask;
  int parsed = 0;
  for (int round = 0; round < 8; ++round) {
    token_grammar tg(json, tokens);
    std::string text;
    for (int step = 0; step < 100; ++step) {
      tg.allowed(mask);
      std::vector<token_id> ok, closing;
      for (size_t t = 0; t < mask.size(); ++t) {
        if (!mask[t]) continue;
        ok.push_back(static_cast<token_id>(t));
        const std::string& b = tokens.bytes(static_cast<token_id>(t));
        if (b == "\"" || b == "]" || b == "}") closing.push_back(static_cast<token_id>(t));
      }
      ASSERT_FALSE(ok.empty()) << text;
      // Any allowed token for 20 steps; then the end where it is allowed, else a closing one if any.
      token_id pick = ok[rng() % ok.size()];
      if (step >= 20 && tg.allows(v.eos())) pick = v.eos();
      else if (step >= 20 && !closing.empty()) pick = closing[rng() % closing.size()];
      if (v.is_end_of_generation(pick)) break;
      tg.accept(pick);
      text += tokens.bytes(pick);
    }
    if (!tg.complete()) continue;
    ++parsed;
    EXPECT_TRUE(nlohmann::json::accept(text)) << text;
  }
  EXPECT_GE(parsed, 6) << "too few texts ended to check";
}

// The sampler under a grammar, fed random logits at temperature 1 (random weights: nothing but the
// grammar keeps the text valid): every text it ends is a sentence of the grammar, here an object of
// a schema's shape that parses and holds its fields; a token the grammar refuses is never drawn.
TEST(Grammar, TheSamplerDrawsOnlyWhatTheGrammarAllows) {
  const auto f = gguf::file::open(HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf");
  const vocab v = vocab::from_gguf(f);
  const grammar_vocab tokens(v);
  const auto g = std::make_shared<const grammar>(grammar::parse(R"(
root   ::= "{" "\"name\":" name "," "\"age\":" age "," "\"tags\":[" ( tag ( "," tag ){0,3} )? "]," "\"kind\":" kind "}"
name   ::= "\"" [a-zA-Z ]{1,12} "\""
age    ::= [0-9] | [1-9] [0-9]
tag    ::= "\"" [a-z]{1,6} "\""
kind   ::= "\"cat\"" | "\"dog\"" | "null"
)"));
  std::mt19937 rng(11);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  std::vector<float> logits(v.size());
  int ended = 0;
  for (int round = 0; round < 16; ++round) {
    sampling_params p;
    p.temperature = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.seed = static_cast<uint64_t>(round);
    sampler s(p);
    s.constrain(std::make_shared<token_grammar>(g, tokens));
    std::string text;
    for (int step = 0; step < 120; ++step) {
      for (float& x : logits) x = noise(rng);
      const token_id t = s.sample(logits);
      if (v.is_end_of_generation(t)) {
        ++ended;
        const auto j = nlohmann::json::parse(text, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << text;
        EXPECT_TRUE(j.at("name").is_string() && j.at("age").is_number_integer() && j.at("tags").is_array() && j.contains("kind")) << text;
        break;
      }
      text += tokens.bytes(t);
    }
  }
  EXPECT_GE(ended, 12) << "too few texts ended to check";
}

}  // namespace
}  // namespace hotcold
