// Data-driven: every vocab GGUF in the fixtures folder that has NAME.gguf.inp / NAME.gguf.out beside
// it must give exactly the reference ids for every string (no BOS/EOS, special text not parsed),
// and detokenizing those ids must give the string back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/gguf.hpp"
#include "model/vocab.hpp"

namespace hotcold {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> fixture_vocabs() {
  std::vector<fs::path> out;
  fs::path dir = HOTCOLD_FIXTURES_DIR "/vocab";
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    auto p = e.path();
    if (p.extension() == ".gguf" && fs::exists(p.string() + ".inp") && fs::exists(p.string() + ".out")) out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct vector_case {
  std::string text;
  std::vector<token_id> ids;
};

// .inp: strings each followed by "\n__ggml_vocab_test__\n"; .out: one line of ids per string.
std::vector<vector_case> read_cases(const fs::path& vocab_path) {
  std::string inp = slurp(vocab_path.string() + ".inp");
  std::string out = slurp(vocab_path.string() + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0;;) {
    size_t at = inp.find(sep, pos);
    if (at == std::string::npos) break;
    texts.push_back(inp.substr(pos, at - pos));
    pos = at + sep.size();
  }
  std::vector<vector_case> cases;
  std::istringstream lines(out);
  std::string line;
  for (const auto& t : texts) {
    if (!std::getline(lines, line)) break;
    vector_case c{t, {}};
    std::istringstream ids(line);
    for (token_id id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), texts.size()) << vocab_path << ": .out has fewer lines than .inp has strings";
  return cases;
}

TEST(TokenizerFixtures, FixturesArePresent) {
  ASSERT_TRUE(fs::is_directory(HOTCOLD_FIXTURES_DIR "/vocab"))
      << "missing " HOTCOLD_FIXTURES_DIR "/vocab: clone the project beside its shared/ folder";
  EXPECT_GE(fixture_vocabs().size(), 2u);
}

class TokenizerFixture : public testing::TestWithParam<fs::path> {};

TEST_P(TokenizerFixture, MatchesReferenceIdsAndRoundTrips) {
  auto f = gguf::file::open(GetParam().string());
  auto v = vocab::from_gguf(f);
  auto cases = read_cases(GetParam());
  ASSERT_EQ(cases.size(), 46u);
  size_t exact = 0;
  for (const auto& c : cases) {
    auto ids = v.tokenize(c.text, false, false);
    EXPECT_EQ(ids, c.ids) << "text: \"" << c.text << "\"";
    exact += ids == c.ids;
    EXPECT_EQ(v.detokenize(ids), c.text);
  }
  EXPECT_EQ(exact, cases.size());
  RecordProperty("exact", static_cast<int>(exact));
}

std::string vocab_name(const testing::TestParamInfo<fs::path>& info) {
  std::string s = info.param.stem().string();
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Vocabs, TokenizerFixture, testing::ValuesIn(fixture_vocabs()), vocab_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TokenizerFixture);

}  // namespace
}  // namespace hotcold
