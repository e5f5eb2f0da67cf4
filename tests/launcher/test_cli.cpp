// The `hotcold` command as a user meets it: exact stdout, one clear stderr line, exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct result {
  int code;
  std::string out, err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

result run(const std::vector<std::string>& args) {
  auto err_path = fs::temp_directory_path() / ("hotcold-cli-" + std::to_string(getpid()) + ".err");
  std::string cmd = quote(HOTCOLD_BIN);
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " 2>" + quote(err_path.string());
  FILE* p = popen(cmd.c_str(), "r");
  result r{};
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  fs::remove(err_path);
  return r;
}

const std::string llama = HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf";
const std::string falcon = HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-falcon.gguf";

TEST(Cli, TokenizePrintsIdsOnOneLine) {
  auto r = run({"tokenize", "-m", llama, "-p", "Hello world"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "15043 3186\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(run({"tokenize", "-m", llama, "-p", "Hello world", "--add-special"}).out, "1 15043 3186\n");
  EXPECT_EQ(run({"tokenize", "-m", falcon, "-p", " Hello, world!"}).out, "23090 23 1079 12\n");
  EXPECT_EQ(run({"tokenize", "-m", llama, "-p", "<s>", "--parse-special"}).out, "1\n");
}

TEST(Cli, TokenizeEmptyTextPrintsAnEmptyLine) {
  auto r = run({"tokenize", "-m", llama, "-p", ""});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "\n");
}

TEST(Cli, TokenizeReadsFilesByteForByte) {
  auto path = fs::temp_directory_path() / "hotcold-cli-input.txt";
  std::ofstream(path, std::ios::binary) << "Hello world\n";
  auto r = run({"tokenize", "-m", llama, "-f", path.string()});
  fs::remove(path);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "15043 3186 13\n");  // the trailing newline is <0x0A>
}

TEST(Cli, TokenizePieces) {
  auto r = run({"tokenize", "-m", llama, "-p", "Hi\n", "--pieces", "--add-special"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "1 -> '<s>'\n6324 -> ' Hi'\n13 -> '\\n'\n");
}

TEST(Cli, TokenizeNeedsExactlyOneText) {
  auto neither = run({"tokenize", "-m", llama});
  EXPECT_EQ(neither.code, 2);
  EXPECT_NE(neither.err.find("exactly one of -p TEXT or -f FILE"), std::string::npos) << neither.err;
  auto both = run({"tokenize", "-m", llama, "-p", "x", "-f", "y"});
  EXPECT_EQ(both.code, 2);
  EXPECT_EQ(both.out, "");
}

TEST(Cli, DetokenizePrintsText) {
  auto r = run({"detokenize", "-m", llama, "--ids", "1 15043 3186"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Hello world\n");
  auto bad = run({"detokenize", "-m", llama, "--ids", "1 99999"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("token id 99999 is outside the vocabulary"), std::string::npos) << bad.err;
}

TEST(Cli, InspectListsMetadataAndTotals) {
  auto r = run({"inspect", "-m", falcon});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("format:    GGUF v3"), std::string::npos);
  EXPECT_NE(r.out.find("tokenizer.ggml.pre"), std::string::npos);
  EXPECT_NE(r.out.find("\"falcon\""), std::string::npos);
  EXPECT_NE(r.out.find("string[65024]"), std::string::npos);
  EXPECT_NE(r.out.find("… (65024 in all)"), std::string::npos);  // long arrays summarized
  EXPECT_NE(r.out.find("total: 0 tensors"), std::string::npos);
  EXPECT_LT(r.out.size(), 8000u);
}

TEST(Cli, InspectJson) {
  auto r = run({"inspect", "-m", llama, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["magic"], "GGUF");
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.model"]["value"], "llama");
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["count"], 32000);
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["head"][1], "<s>");
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.add_bos_token"]["value"], true);
  EXPECT_EQ(j["totals"]["tensors"], 0);
}

TEST(Cli, BadFilesGiveOneClearMessage) {
  auto missing = run({"inspect", "-m", "/nonexistent/m.gguf"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(missing.err, "hotcold inspect: cannot read /nonexistent/m.gguf: No such file or directory\n");
  auto dir = run({"tokenize", "-m", fs::temp_directory_path().string(), "-p", "x"});
  EXPECT_EQ(dir.code, 1);
  EXPECT_NE(dir.err.find("Is a directory"), std::string::npos) << dir.err;
  auto path = fs::temp_directory_path() / "hotcold-cli-corrupt.gguf";
  std::ofstream(path, std::ios::binary).write("GGUF\x03\0\0\0garbage", 15);
  auto corrupt = run({"inspect", "-m", path.string()});
  fs::remove(path);
  EXPECT_EQ(corrupt.code, 2);
  EXPECT_NE(corrupt.err.find("header.n_tensors at byte 8"), std::string::npos) << corrupt.err;
  EXPECT_EQ(std::count(corrupt.err.begin(), corrupt.err.end(), '\n'), 1);
  auto no_tokenizer = fs::temp_directory_path() / "hotcold-cli-notok.gguf";
  std::ofstream(no_tokenizer, std::ios::binary).write("GGUF\x03\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24);
  auto r = run({"tokenize", "-m", no_tokenizer.string(), "-p", "x"});
  fs::remove(no_tokenizer);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("tokenizer.ggml.model is missing"), std::string::npos) << r.err;
}

TEST(Cli, UsageErrors) {
  auto none = run({});
  EXPECT_EQ(none.code, 2);
  auto unknown = run({"inspect", "-m", llama, "--bogus"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("--bogus"), std::string::npos) << unknown.err;
  EXPECT_EQ(run({"--help"}).code, 0);
}

}  // namespace
