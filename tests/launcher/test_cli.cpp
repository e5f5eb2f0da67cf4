// The `hotcold` command as a user meets it: exact stdout, one clear stderr line, exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <iterator>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/llama_bench.hpp"
#include "tests/launcher/cli_run.hpp"

namespace {

using hotcold::test::falcon;
using hotcold::test::llama;
using hotcold::test::quote;
using hotcold::test::result;
using hotcold::test::run;
using hotcold::test::small_model;
namespace fs = std::filesystem;

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

// A small generated model shared by the generation tests.

TEST(Cli, GenModelWritesAnInspectableModel) {
  auto r = run({"inspect", "-m", small_model()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("hotcold.activation"), std::string::npos);
  EXPECT_NE(r.out.find("blk.1.ffn_gate.weight"), std::string::npos);
  auto bad = run({"gen-model", "--embd", "60", "--heads", "7", "--vocab", llama, "-o", "/tmp/never.gguf"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--heads 7 must divide --embd 60"), std::string::npos) << bad.err;
}

// run --grammar / --grammar-file (GBNF, as llama.cpp's): on both pipelines the text is one the grammar
// allows, drawn at temperature 1 from a random-weight model (nothing but the grammar keeps it so); a
// grammar that cannot be followed, or a file that cannot be read, is refused before the model loads,
// naming the line and column or the file.
TEST(Cli, RunFollowsAGrammar) {
  for (const char* pipeline : {"direct", "actors"})
    for (const char* seed : {"1", "2", "3"}) {
      auto r = run({"run", "-m", small_model(), "-p", "Hello", "-n", "40", "--temp", "1", "--seed", seed, "--pipeline", pipeline, "--grammar",
                    R"(root ::= "yes" | "no" | "maybe so")"});
      ASSERT_EQ(r.code, 0) << r.err;
      EXPECT_TRUE(r.out == "yes\n" || r.out == "no\n" || r.out == "maybe so\n") << pipeline << ": '" << r.out << "'";
    }
  const auto file = fs::temp_directory_path() / ("hotcold-cli-grammar-" + std::to_string(getpid()) + ".gbnf");
  std::ofstream(file) << R"(root ::= "{\"n\":" [0-9]{1,3} ",\"tags\":[" ( tag ( "," tag ){0,2} )? "]}"
tag  ::= "\"" [a-z]{1,5} "\""
)";
  auto json = run({"run", "-m", small_model(), "-p", "Hello", "-n", "80", "--temp", "1", "--seed", "5", "--grammar-file", file.string()});
  fs::remove(file);
  ASSERT_EQ(json.code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json.out;
  EXPECT_TRUE(j.at("n").is_number_integer() && j.at("tags").is_array()) << json.out;
  auto bad = run({"run", "-m", small_model(), "-p", "Hello", "--grammar", R"(root ::= "yes" | thing)"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("line 1 column 18: rule 'thing' is used but never defined"), std::string::npos) << bad.err;
  // A JSON Schema, turned into a grammar: the text validates; what it cannot take is named.
  auto schema = run({"run", "-m", small_model(), "-p", "Hello", "-n", "120", "--temp", "1", "--seed", "8", "-j",
                     R"({"type":"object","properties":{"when":{"type":"string","format":"date"},"x":{"type":"number","minimum":0.5,"maximum":0.75}},"required":["when","x"]})"});
  ASSERT_EQ(schema.code, 0) << schema.err;
  const auto s = nlohmann::json::parse(schema.out, nullptr, false);
  ASSERT_TRUE(s.is_object()) << schema.out;
  EXPECT_TRUE(s["x"].get<double>() >= 0.5 && s["x"].get<double>() <= 0.75 && s["when"].get<std::string>().size() == 10) << schema.out;
  auto unknown = run({"run", "-m", small_model(), "-p", "Hello", "--json-schema", R"({"type":"array","uniqueItems":true})"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("--json-schema: the schema: 'uniqueItems' is not supported"), std::string::npos) << unknown.err;
  auto missing = run({"run", "-m", small_model(), "-p", "Hello", "--grammar-file", "/nonexistent.gbnf"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--grammar-file /nonexistent.gbnf: cannot be read"), std::string::npos) << missing.err;
  // In chat, each reply follows the grammar from its start (the readline prompts go to stdout too).
  auto chat = run({"chat", "-m", small_model(), "-n", "20", "--temp", "1", "--seed", "4", "--grammar", R"(root ::= "yes" | "no")"},
                  "printf 'Is it?\\nAnd now?\\nOnce more?\\n' |");
  ASSERT_EQ(chat.code, 0) << chat.err;
  int replies = 0;
  std::istringstream lines(chat.out);
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find_last_of('>');
    const std::string reply = at == std::string::npos ? line : line.substr(at + 1);
    if (reply.empty() || reply == " ") continue;
    EXPECT_TRUE(reply == "yes" || reply == "no" || reply == " yes" || reply == " no") << "'" << line << "'";
    ++replies;
  }
  EXPECT_EQ(replies, 3) << chat.out;
}

TEST(Cli, RunStreamsOnlyGeneratedTextAndIsReproducible) {
  auto greedy = run({"run", "-m", small_model(), "-p", "Hello world", "-n", "24", "--temp", "0", "-t", "2"});
  ASSERT_EQ(greedy.code, 0) << greedy.err;
  EXPECT_GT(greedy.out.size(), 1u);
  EXPECT_EQ(greedy.out.find("hotcold"), std::string::npos);  // logs go to stderr
  EXPECT_NE(greedy.err.find("generated 24 tokens"), std::string::npos) << greedy.err;
  EXPECT_EQ(run({"run", "-m", small_model(), "-p", "Hello world", "-n", "24", "--temp", "0", "-t", "1"}).out, greedy.out);
  auto s1 = run({"run", "-m", small_model(), "-p", "Hello world", "-n", "24", "--seed", "11"});
  auto s2 = run({"run", "-m", small_model(), "-p", "Hello world", "-n", "24", "--seed", "11"});
  auto s3 = run({"run", "-m", small_model(), "-p", "Hello world", "-n", "24", "--seed", "12"});
  EXPECT_EQ(s1.out, s2.out);
  EXPECT_NE(s1.out, s3.out);
}

// -n -1, as users type it from llama.cpp: until the end of the text or a full context (here the
// context: 48 tokens after a prompt of 16), on both pipelines, where a count below -1 is refused
// naming the flag; bench decodes until the context is full.
TEST(Cli, NPredictMinusOneFillsTheContext) {
  const std::string prompt = "Hello world";
  const auto tokens = run({"tokenize", "-m", small_model(), "-p", prompt, "--add-special"});
  ASSERT_EQ(tokens.code, 0) << tokens.err;
  const int64_t n_prompt = std::count(tokens.out.begin(), tokens.out.end(), ' ') + 1;
  const std::string room = std::to_string(64 - n_prompt);
  auto full = run({"run", "-m", small_model(), "-p", prompt, "-n", "-1", "-c", "64", "--temp", "0", "-t", "2"});
  ASSERT_EQ(full.code, 0) << full.err;
  auto same = run({"run", "-m", small_model(), "-p", prompt, "-n", room, "-c", "64", "--temp", "0", "-t", "2"});
  EXPECT_EQ(full.out, same.out);
  // The small model does not end its text within 64 tokens at temperature 0: the context ends it.
  EXPECT_NE(full.err.find("generated " + room + " tokens"), std::string::npos) << full.err;
  auto direct = run({"run", "-m", small_model(), "-p", prompt, "-n", "-1", "-c", "64", "--temp", "0", "-t", "2", "--pipeline", "direct"});
  EXPECT_EQ(direct.out, full.out);
  auto bad = run({"run", "-m", small_model(), "-p", prompt, "-n", "-2"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--n-predict"), std::string::npos) << bad.err;
  auto bench = run({"bench", "-m", small_model(), "-p", "16", "-n", "-1", "-c", "64", "-r", "1", "--json"});
  ASSERT_EQ(bench.code, 0) << bench.err;
  EXPECT_EQ(nlohmann::json::parse(bench.out)["n_gen"], 48) << bench.out;
}

// bench -d/--n-depth as llama-bench's: each depth its own measurement after that many tokens already
// in the cache, a comma list, rows marked "@ dN", the JSON's first depth with all of them under
// "depths"; a negative depth refused naming the flag. On the actors a prompt at depth is a request
// reusing the rows its slot kept of the depth (bench checks it reused exactly those).
TEST(Cli, BenchMeasuresAtDepth) {
  auto both = run({"bench", "-m", small_model(), "-p", "8", "-n", "4", "-d", "0,40", "-r", "1", "-c", "128", "--pipeline", "direct", "--json"});
  ASSERT_EQ(both.code, 0) << both.err;
  const auto j = nlohmann::json::parse(both.out);
  EXPECT_EQ(j["n_depth"], 0);
  ASSERT_EQ(j["depths"].size(), 2u) << both.out;
  EXPECT_EQ(j["depths"][1]["n_depth"], 40);
  EXPECT_GT(j["depths"][1]["decode_tokens_per_s"].get<double>(), 0.0);
  // the cache read at depth 40 counts in the bytes a token reads: 2 layers x 40 keys x 2 (K, V) x 32 wide x 2 bytes more
  EXPECT_GE(j["depths"][1]["host_bytes_per_token"].get<double>() - j["depths"][0]["host_bytes_per_token"].get<double>(), 2 * 40 * 2 * 32 * 2 * 0.9);
  auto table = run({"bench", "-m", small_model(), "-p", "0", "-n", "4", "--n-depth", "24", "-r", "1", "-c", "128"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("| tg4 @ d24 |"), std::string::npos) << table.out;
  auto negative = run({"bench", "-m", small_model(), "-p", "0", "-n", "4", "-d", "-1", "-r", "1"});
  EXPECT_EQ(negative.code, 2);
  EXPECT_NE(negative.err.find("-d -1"), std::string::npos) << negative.err;
  auto actors = run({"bench", "-m", small_model(), "-p", "8", "-n", "4", "-d", "16", "-r", "2", "--json"});
  ASSERT_EQ(actors.code, 0) << actors.err;
  EXPECT_EQ(nlohmann::json::parse(actors.out)["n_depth"], 16);
  EXPECT_GT(nlohmann::json::parse(actors.out)["prefill_tokens_per_s"].get<double>(), 0.0);
}

// bench --vs-depth N: each -d depth's tests and the same after N cached tokens, repetitions
// interleaved, on both pipelines: its figures under "vs_depth" (its own n_depth and its cache reads
// counted), the ratios of them over the depth's, a line saying it in the table.
TEST(Cli, BenchComparesADepthInterleaved) {
  for (const char* pipeline : {"direct", "actors"}) {
    auto b = run({"bench", "-m", small_model(), "-p", "8", "-n", "4", "-d", "0", "--vs-depth", "40", "-r", "2", "-c", "128", "--pipeline", pipeline, "--json"});
    ASSERT_EQ(b.code, 0) << b.err;
    const auto j = nlohmann::json::parse(b.out);
    EXPECT_EQ(j["n_depth"], 0);
    ASSERT_TRUE(j.contains("vs_depth")) << b.out;
    EXPECT_EQ(j["vs_depth"]["n_depth"], 40);
    EXPECT_NEAR(j["depth_decode_ratio"].get<double>(), j["vs_depth"]["decode_tokens_per_s"].get<double>() / j["decode_tokens_per_s"].get<double>(), 1e-9);
    EXPECT_NEAR(j["depth_prefill_ratio"].get<double>(), j["vs_depth"]["prefill_tokens_per_s"].get<double>() / j["prefill_tokens_per_s"].get<double>(), 1e-9);
    // its cache read counted: 2 layers x 40 keys x 2 (K, V) x 32 wide x 2 bytes more a token
    const double more = j["vs_depth"]["host_bytes_per_token"].get<double>() - j["host_bytes_per_token"].get<double>();
    EXPECT_GE(more, 2 * 40 * 2 * 32 * 2 * 0.9) << pipeline;
  }
  auto table = run({"bench", "-m", small_model(), "-p", "0", "-n", "4", "--vs-depth", "24", "-r", "1", "-c", "128"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("| tg4 @ d24 |"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("depth 24 vs 0, interleaved: decode"), std::string::npos) << table.out;
}

// bench with a grammar: every decode's sampler follows it; --vs-unconstrained decodes without it,
// interleaved, and reports constrained over unconstrained. The direct pipeline samples nothing: refused.
TEST(Cli, BenchMeasuresAGrammarsCost) {
  const std::string g = R"(root ::= "[" item ("," item)*
item ::= "{\"n\":" [0-9]{1,3} "}")";
  auto b = run({"bench", "-m", small_model(), "-p", "0", "-n", "6", "-r", "2", "-c", "64", "--grammar", g, "--vs-unconstrained", "--json"});
  ASSERT_EQ(b.code, 0) << b.err;
  const auto j = nlohmann::json::parse(b.out);
  EXPECT_EQ(j["constrained"], true);
  ASSERT_TRUE(j.contains("vs_unconstrained")) << b.out;
  EXPECT_EQ(j["vs_unconstrained"]["constrained"], false);
  EXPECT_NEAR(j["constrained_decode_ratio"].get<double>(), j["decode_tokens_per_s"].get<double>() / j["vs_unconstrained"]["decode_tokens_per_s"].get<double>(), 1e-9);
  auto direct = run({"bench", "-m", small_model(), "-p", "0", "-n", "4", "-r", "1", "--pipeline", "direct", "--grammar", g});
  EXPECT_EQ(direct.code, 2) << direct.err;
  EXPECT_NE(direct.err.find("--pipeline direct samples nothing"), std::string::npos) << direct.err;
  auto alone = run({"bench", "-m", small_model(), "-p", "0", "-n", "4", "-r", "1", "--vs-unconstrained"});
  EXPECT_EQ(alone.code, 2);
  auto bad = run({"bench", "-m", small_model(), "-p", "0", "-n", "4", "-r", "1", "--grammar", "root ::= x"});
  EXPECT_NE(bad.err.find("--grammar: grammar, line 1 column 10"), std::string::npos) << bad.err;
}

// The KV cache's types as llama.cpp's flags spell them (-ctk, -ctv, --cache-type-k/-v, --kv-type for
// both): the context line names them, bench's JSON carries llama-bench's type_k and type_v, a type the
// cache does not hold or blocks of 32 across heads of 16 are refused by name.
TEST(Cli, CacheTypesAsLlamaCppSpellsThem) {
  const std::string heads32 = (fs::temp_directory_path() / ("hotcold-cli-heads32-" + std::to_string(getpid()) + ".gguf")).string();
  ASSERT_EQ(run({"gen-model", "--embd", "128", "--layers", "2", "--ffn", "256", "--heads", "4", "--kv-heads", "2", "--vocab", llama, "-o", heads32}).code, 0);
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args{"run", "-m", heads32, "-p", "Hello world", "-n", "8", "--temp", "0", "-c", "64"};
    args.insert(args.end(), more.begin(), more.end());
    return run(args);
  };
  for (const auto& [flags, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"-ctk", "q8_0", "-ctv", "q8_0"}, "(q8_0 KV cache)"},
           {{"-ctk=q4_0"}, "(K q4_0, V f16 KV cache)"},
           {{"--cache-type-v", "q4_0", "--cache-type-k", "f32"}, "(K f32, V q4_0 KV cache)"},
           {{"--kv-type", "q8_0"}, "(q8_0 KV cache)"},
           {{}, "(f16 KV cache)"}}) {
    auto r = with(flags);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_FALSE(r.out.empty());
  }
  auto bad = with({"-ctk", "q5_1"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--cache-type-k"), std::string::npos) << bad.err;
  auto crossing = run({"run", "-m", small_model(), "-p", "Hello", "-n", "2", "-ctv", "q8_0"});
  EXPECT_NE(crossing.code, 0);
  EXPECT_NE(crossing.err.find("values' cache of q8_0: its blocks of 32 values would cross this model's heads of 16 values"), std::string::npos) << crossing.err;
  auto bench = run({"bench", "-m", heads32, "-p", "8", "-n", "4", "-r", "1", "-ctk", "q8_0", "-ctv", "q4_0", "--pipeline", "direct", "--json"});
  ASSERT_EQ(bench.code, 0) << bench.err;
  const auto j = nlohmann::json::parse(bench.out);
  EXPECT_EQ(j["type_k"], "q8_0");
  EXPECT_EQ(j["type_v"], "q4_0");
  fs::remove(heads32);
}

// A full context: without --context-shift run says so and stops there; with it (llama.cpp's), it goes
// on to -n, the same text on both pipelines.
TEST(Cli, ContextShiftGoesOnPastAFullContext) {
  const std::vector<std::string> base = {"run", "-m", small_model(), "-p", "Hello world", "-n", "100", "-c", "40", "--temp", "0", "-t", "2"};
  auto with = [&](std::vector<std::string> more) {
    auto args = base;
    args.insert(args.end(), more.begin(), more.end());
    return run(args);
  };
  auto stops = with({});
  ASSERT_EQ(stops.code, 0) << stops.err;
  EXPECT_NE(stops.err.find("the context is full (40 tokens); --context-shift goes on past it"), std::string::npos) << stops.err;
  auto stops_direct = with({"--pipeline", "direct"});
  EXPECT_NE(stops_direct.err.find("the context is full (40 tokens)"), std::string::npos) << stops_direct.err;
  EXPECT_EQ(stops_direct.out, stops.out);
  auto shifted = with({"--context-shift", "--pipeline", "direct"});
  ASSERT_EQ(shifted.code, 0) << shifted.err;
  EXPECT_EQ(shifted.err.find("the context is full"), std::string::npos) << shifted.err;
  EXPECT_NE(shifted.err.find("generated 100 tokens"), std::string::npos) << shifted.err;
  EXPECT_EQ(shifted.out.substr(0, stops.out.size() - 1), stops.out.substr(0, stops.out.size() - 1));  // the same until the context was full
  auto on_actors = with({"--context-shift"});
  ASSERT_EQ(on_actors.code, 0) << on_actors.err;
  EXPECT_EQ(on_actors.out, shifted.out);
  EXPECT_EQ(with({"--context-shift", "--keep", "-1", "--pipeline", "direct"}).code, 0);  // (what --keep keeps: tests/actors/test_prefix_reuse.cpp)
  EXPECT_EQ(with({"--keep", "-2"}).code, 2);
}

// llama-bench's `-o json` output as its README documents it: an array of tests, the prompt test
// (n_prompt > 0, n_gen 0) and the generation test (the other way round) told apart by those fields.
TEST(Cli, LlamaBenchJsonIsRead) {
  const std::string two_tests = R"([
    {"build_commit": "8cf427ff", "build_number": 5163, "model_filename": "m.gguf", "n_threads": 2, "n_prompt": 512, "n_gen": 0,
     "avg_ns": 72135640, "avg_ts": 7100.002165, "stddev_ts": 140.34, "samples_ts": [6863.1, 7147.55]},
    {"build_commit": "8cf427ff", "build_number": 5163, "model_filename": "m.gguf", "n_threads": 2, "n_prompt": 0, "n_gen": 128,
     "avg_ns": 1000, "avg_ts": 41.5, "stddev_ts": 0.5, "samples_ts": [41.0, 42.0]}])";
  const auto r = hotcold::launcher::parse_llama_bench_json(two_tests);
  ASSERT_TRUE(r.prefill_tokens_per_s && r.decode_tokens_per_s);
  EXPECT_DOUBLE_EQ(*r.prefill_tokens_per_s, 7100.002165);
  EXPECT_DOUBLE_EQ(*r.decode_tokens_per_s, 41.5);
  EXPECT_EQ(r.build, "8cf427ff");
  const auto only_gen = hotcold::launcher::parse_llama_bench_json(R"([{"n_prompt": 0, "n_gen": 64, "avg_ts": 12.0}])");
  EXPECT_FALSE(only_gen.prefill_tokens_per_s);
  EXPECT_DOUBLE_EQ(*only_gen.decode_tokens_per_s, 12.0);
  EXPECT_THROW(hotcold::launcher::parse_llama_bench_json("| model | size |"), std::runtime_error);  // the markdown table: -o json missing
  EXPECT_THROW(hotcold::launcher::parse_llama_bench_json(R"([{"n_prompt": 512}])"), std::runtime_error);
}

// --vs-llama-bench with what is not llama-bench: refused before the model loads when it cannot be
// run, and a failing binary's exit named with its command.
TEST(Cli, VsLlamaBenchRefusesWhatItCannotRun) {
  auto missing = run({"bench", "-m", small_model(), "-p", "8", "-n", "4", "-r", "1", "--vs-llama-bench", "/nonexistent/llama-bench"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--vs-llama-bench /nonexistent/llama-bench: not an executable file"), std::string::npos) << missing.err;
  auto failing = run({"bench", "-m", small_model(), "-p", "8", "-n", "4", "-r", "1", "--vs-llama-bench", "/bin/false"});
  EXPECT_NE(failing.code, 0);
  EXPECT_NE(failing.err.find("/bin/false -m " + small_model() + " -t "), std::string::npos) << failing.err;
  EXPECT_NE(failing.err.find("failed (exit 1)"), std::string::npos) << failing.err;
}

TEST(Cli, RunMakesTheDefaultModelOnFirstUse) {
  auto cache = fs::temp_directory_path() / ("hotcold-cli-cache-" + std::to_string(getpid()));
  fs::remove_all(cache);
  auto r = run({"run", "-p", "Once upon a time", "-n", "8", "--temp", "0"}, "HOTCOLD_CACHE=" + quote(cache.string()));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("making the default model"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(cache / "default-llama-relu-f16.gguf"));
  auto again = run({"run", "-p", "Once upon a time", "-n", "8", "--temp", "0"}, "HOTCOLD_CACHE=" + quote(cache.string()));
  EXPECT_EQ(again.out, r.out);
  EXPECT_EQ(again.err.find("making the default model"), std::string::npos);
  fs::remove_all(cache);
}

// A mixture of experts through the commands (docs/moe.md): gen-model writes one, run and eval answer,
// eval --vs-oracle holds model/reference to the experts the run chose and agrees with it, sim splits the
// experts with the CPU (a cache of them, --sim-kernels, --n-cpu-moe, --cpu-moe) and answers the same
// greedy tokens, replay names what it cannot do yet, plan answers on paper, and prepare refuses it.
TEST(Cli, MixtureOfExperts) {
  auto dir = fs::temp_directory_path() / ("hotcold-cli-moe-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const auto file = (dir / "moe.gguf").string();
  auto gen = run({"gen-model", "--arch", "qwen2moe", "--act", "silu", "--embd", "64", "--layers", "2", "--ffn", "64", "--heads", "4", "--kv-heads", "2",
                  "--experts", "8", "--experts-used", "2", "--vocab", llama, "--type", "q8_0", "-o", file});
  ASSERT_EQ(gen.code, 0) << gen.err;
  auto r = run({"run", "-m", file, "-p", "Hello world", "-n", "8", "--temp", "0", "-t", "2", "-c", "64"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto oracle_json = (dir / "oracle.json").string();
  auto e = run({"eval", "-m", file, "-p", "Hello world, once upon a time", "-t", "2", "-c", "64", "--oracle-json", oracle_json});
  ASSERT_EQ(e.code, 0) << e.err;
  std::ifstream oin(oracle_json);
  const auto o = nlohmann::json::parse(oin);
  EXPECT_GT(o.at("rel_rms").get<double>(), 0.0);
  EXPECT_LT(o.at("rel_rms").get<double>(), 1.5e-2);
  EXPECT_EQ(o.at("top1_same"), o.at("positions"));
  // (With --sim-kernels the budget counts a GPU's granules: the head's 2 MiB no longer fits, so a smaller
  // budget leaves a cache.)
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--vram-budget", "0.0024"}, {"--vram-budget", "0.0004", "--sim-kernels"},
                                                 {"--vram-budget", "0.01", "--n-cpu-moe", "1"}, {"--vram-budget", "0.01", "--cpu-moe"}}) {
    std::vector<std::string> args = {"run", "-m", file, "-p", "Hello world", "-n", "8", "--temp", "0", "-t", "2", "-c", "64", "--device", "sim"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto sim = run(args);
    ASSERT_EQ(sim.code, 0) << sim.err;
    EXPECT_EQ(sim.out, r.out) << extra.back();
    EXPECT_NE(sim.err.find("experts held"), std::string::npos) << sim.err;  // the plan's table
    if (extra[1] == "0.0024") {  // below the experts' size: a cache of some of them
      EXPECT_NE(sim.err.find("5 of 16 experts on sim"), std::string::npos) << sim.err;
    }
    if (extra[1] == "0.0004") {
      EXPECT_NE(sim.err.find("6 of 16 experts on sim"), std::string::npos) << sim.err;
    }
  }
  auto both = run({"run", "-m", file, "-p", "Hello", "-n", "2", "-c", "64", "--device", "sim", "--vram-budget", "0.01", "--cpu-moe", "--n-cpu-moe", "1"});
  EXPECT_NE(both.code, 0);
  EXPECT_NE(both.err.find("give one"), std::string::npos) << both.err;
  auto big = run({"run", "-m", file, "-p", "Hello", "-n", "2", "-c", "64", "--device", "sim", "--vram-budget", "0.0024", "--n-cpu-moe", "0"});
  EXPECT_NE(big.code, 0);
  EXPECT_NE(big.err.find("--n-cpu-moe 0: layer"), std::string::npos) << big.err;
  auto cpu_only = run({"run", "-m", file, "-p", "Hello", "-n", "2", "-c", "64", "--n-cpu-moe", "1"});  // (llama.cpp's habit without a GPU: said, and run)
  EXPECT_EQ(cpu_only.code, 0) << cpu_only.err;
  EXPECT_NE(cpu_only.err.find("no GPU here; every expert is on the CPU already"), std::string::npos) << cpu_only.err;
  const auto trace = (dir / "t.json").string();
  auto traced = run({"run", "-m", file, "-p", "Hello", "-n", "4", "-t", "2", "-c", "64", "--trace-out", trace});
  ASSERT_EQ(traced.code, 0) << traced.err;
  auto replay = run({"replay", "--activations", trace, "-m", file, "--vram-budget", "0.01"});
  EXPECT_NE(replay.code, 0);
  EXPECT_NE(replay.err.find("--experts-cached"), std::string::npos) << replay.err;
  const auto report = (dir / "cache.json").string();
  auto cache = run({"replay", "--activations", trace, "-m", file, "--experts-cached", "2", "--experts-cached", "8", "--report", report, "--cpu-gbps", "20",
                    "--hot-gbps", "200", "--experts-popular-from", trace + ".activations"});
  ASSERT_EQ(cache.code, 0) << cache.err;
  EXPECT_NE(cache.out.find("| 2 | lru |"), std::string::npos) << cache.out;
  std::ifstream rin(report);
  const auto rj = nlohmann::json::parse(rin);
  ASSERT_EQ(rj.at("expert_caches").size(), 8u);
  std::map<std::string, double> hit_at_2;
  for (const auto& row : rj.at("expert_caches")) {
    const double hit = row.at("expert_hit_rate").get<double>();
    EXPECT_GE(hit, 0.0);
    EXPECT_LE(hit, 1.0);
    if (row.at("experts_cached") == 2) hit_at_2[row.at("policy").get<std::string>()] = hit;
    if (row.at("experts_cached") == 8 && row.at("policy") == "popular") {
      EXPECT_EQ(hit, 1.0);  // every expert held: every expert read at the device's rate (10x the CPU's here), none uploaded
      EXPECT_GT(row.at("tokens_per_s").get<double>(), 5 / rj.at("cpu_only_seconds_per_token").get<double>());
    }
  }
  EXPECT_EQ(hit_at_2.at("popular-elsewhere"), hit_at_2.at("popular"));  // learned on the same record here
  auto prep = run({"prepare", "-m", file, "-o", (dir / "p.gguf").string(), "--tokens", "64"});
  EXPECT_NE(prep.code, 0);
  // plan on paper: every expert fits a GiB, so llama.cpp's --n-cpu-moe 0, and the hybrid holds them all.
  auto plan = run({"plan", "-m", file, "--vram-budget", "1", "--gpu-bandwidth", "1000", "--pcie", "25", "--cpu-bandwidth", "50", "--json"});
  ASSERT_EQ(plan.code, 0) << plan.err;
  const auto pj = nlohmann::json::parse(plan.out);
  EXPECT_EQ(pj.at("n_cpu_moe"), 0);
  EXPECT_EQ(pj.at("experts_on_gpu"), 16);
  EXPECT_DOUBLE_EQ(pj.at("expert_hit_rate").get<double>(), 1.0);
  auto not_moe = run({"plan", "-m", small_model(), "--vram-budget", "1", "--gpu", "h200", "--cpu-bandwidth", "50", "--expert-hit-rate", "0.5"});
  EXPECT_NE(not_moe.code, 0);
  EXPECT_NE(not_moe.err.find("not a mixture"), std::string::npos) << not_moe.err;
  fs::remove_all(dir);
}

// prepare --down-layout blocks keeps ffn_down (its columns in the firing order): the file runs on the
// CPU and answers as the rows layout does (greedy, F16: the same down values, summed in another
// order); the hot/cold split, which reads a neuron's down row, says what to prepare instead; and
// PowerInfer's magic, whose files hold down rows, is refused with it.
TEST(Cli, PrepareDownBlocks) {
  auto dir = fs::temp_directory_path() / ("hotcold-cli-blocks-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const auto blocks = (dir / "blocks.gguf").string(), rows = (dir / "rows.gguf").string();
  for (const auto& [out, layout] : {std::pair{blocks, "blocks"}, std::pair{rows, "rows"}}) {
    auto prep = run({"prepare", "-m", small_model(), "-o", out, "--tokens", "256", "-t", "2", "--down-layout", layout});
    ASSERT_EQ(prep.code, 0) << prep.err;
  }
  auto inspect = run({"inspect", "-m", blocks});
  ASSERT_EQ(inspect.code, 0) << inspect.err;
  auto a = run({"run", "-m", blocks, "-p", "Hello world", "-n", "12", "--temp", "0", "-t", "2", "-c", "64"});
  auto b = run({"run", "-m", rows, "-p", "Hello world", "-n", "12", "--temp", "0", "-t", "2", "-c", "64"});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  auto sim = run({"run", "-m", blocks, "-p", "Hello world", "-n", "4", "--temp", "0", "-t", "2", "-c", "64", "--device", "sim", "--vram-budget", "0.0042"});
  EXPECT_NE(sim.code, 0);
  EXPECT_NE(sim.err.find("--down-layout rows"), std::string::npos) << sim.err;
  auto pi = run({"prepare", "-m", small_model(), "-o", (dir / "pi.gguf").string(), "--tokens", "64", "--down-layout", "blocks", "--powerinfer"});
  EXPECT_NE(pi.code, 0);
  EXPECT_NE(pi.err.find("--powerinfer"), std::string::npos) << pi.err;
  auto bad = run({"prepare", "-m", small_model(), "-o", (dir / "bad.gguf").string(), "--down-layout", "columns"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--down-layout"), std::string::npos) << bad.err;
  fs::remove_all(dir);
}

// A hot device splits each layer's FFN by the placement; greedy text is the CPU's, and the trace shows
// both sides. Without a placement, or in dense mode, the command says what is missing.
TEST(Cli, SimDeviceSplitsByPlacement) {
  auto dir = fs::temp_directory_path() / ("hotcold-cli-sim-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto sparse = (dir / "sparse.gguf").string();
  // The fixed part (attention, head, KV cache at 64 tokens, predictors, compute) is about 4.3 MiB
  // here and all the FFN rows 0.1 MiB, so 0.0042 GiB leaves room for some of the rows only.
  auto prep = run({"prepare", "-m", small_model(), "-o", sparse, "--tokens", "256", "-t", "2", "--vram-budget", "0.0042", "-c", "64"});
  ASSERT_EQ(prep.code, 0) << prep.err;
  ASSERT_TRUE(fs::exists(sparse + ".generated.gpuidx")) << prep.err;
  auto cpu = run({"run", "-m", sparse, "-p", "Hello world", "-n", "16", "--temp", "0", "-t", "2", "-c", "64", "--device", "cpu"});
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  auto trace = (dir / "trace.json").string();
  // The budget and context prepare planned for: its placement is used as it is.
  auto sim = run({"run", "-m", sparse, "-p", "Hello world", "-n", "16", "--temp", "0", "-t", "2", "-c", "64", "--device", "sim", "--vram-budget", "0.0042",
                  "--trace-out", trace});
  ASSERT_EQ(sim.code, 0) << sim.err;
  EXPECT_EQ(sim.out, cpu.out);
  auto sim_reference = run({"run", "-m", sparse, "-p", "Hello world", "-n", "16", "--temp", "0", "-t", "2", "-c", "64", "--device", "sim",
                            "--vram-budget", "0.0042", "--pipeline", "direct"});
  ASSERT_EQ(sim_reference.code, 0) << sim_reference.err;
  EXPECT_EQ(sim_reference.out, cpu.out);
  // eval --vs-oracle: the actors on sim's GPU-like kernels and the CPU's forward pass against
  // model/reference given the neurons each chose, and the file in dense mode against the model.
  for (const auto& extra : std::vector<std::vector<std::string>>{
           {"--device", "sim", "--sim-kernels", "--vram-budget", "0.0042", "--pipeline", "actors"}, {"--device", "cpu"}, {"--device", "cpu", "--mode", "dense"}}) {
    const auto oracle_json = (dir / "oracle.json").string();
    std::vector<std::string> args{"eval", "-m", sparse, "-p", "Hello world, once upon a time", "-t", "2", "-c", "64", "--oracle-json", oracle_json};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto e = run(args);
    ASSERT_EQ(e.code, 0) << e.err;
    EXPECT_NE(e.err.find("vs model/reference"), std::string::npos) << e.err;
    std::ifstream oin(oracle_json);
    const auto o = nlohmann::json::parse(oin);
    std::istringstream ids(e.out);
    const auto positions = std::distance(std::istream_iterator<std::string>(ids), std::istream_iterator<std::string>());
    EXPECT_EQ(o.at("positions").get<int64_t>(), positions);
    EXPECT_GT(o.at("rel_rms").get<double>(), 0.0);
    EXPECT_LT(o.at("rel_rms").get<double>(), 1e-4) << extra.front();
    EXPECT_EQ(o.at("top1_same"), o.at("positions"));
    EXPECT_EQ(o.at("mode"), extra.back() == "dense" ? "dense" : "sparse");
  }
  EXPECT_NE(sim.err.find("hot device sim"), std::string::npos) << sim.err;
  EXPECT_EQ(sim.err.find("planned a placement"), std::string::npos) << sim.err;
  // Some neurons hot, not all: "placement …: N hot neurons (P% of the FFN)".
  const auto at = sim.err.find("% of the FFN");
  ASSERT_NE(at, std::string::npos) << sim.err;
  const double share = std::stod(sim.err.substr(sim.err.rfind('(', at) + 1));
  EXPECT_GT(share, 0.0);
  EXPECT_LT(share, 100.0);
  std::ifstream in(trace);
  auto j = nlohmann::json::parse(in);
  std::map<std::string, int> count;
  for (const auto& e : j.at("traceEvents")) count[e.at("name").get<std::string>()]++;
  EXPECT_GT(count["hot_ffn"], 0);
  EXPECT_GT(count["cold_ffn"], 0);
  EXPECT_EQ(count["sample"], 16);
  EXPECT_GT(count["thread_name"], 1);

  // The trace's active sets, for the what-if: the budget the placement was made for, placed again
  // from the same profile, gives the recorded split exactly; a bigger one puts more on the device.
  ASSERT_TRUE(fs::exists(trace + ".activations")) << sim.err;
  const auto report = (dir / "whatif.json").string();
  auto wi = run({"replay", "--activations", trace, "-m", sparse, "--stats", sparse + ".work", "-c", "64", "--vram-budget", "0.0042", "--vram-budget", "0.0045",
                 "--report", report});
  ASSERT_EQ(wi.code, 0) << wi.err;
  EXPECT_NE(wi.out.find("| recorded |"), std::string::npos) << wi.out;
  std::ifstream rin(report);
  auto w = nlohmann::json::parse(rin);
  EXPECT_TRUE(w["timed"].get<bool>());
  EXPECT_EQ(w["tokens"], 16 + 2);  // the prompt's tokens and the 15 generated ones that ran (the 16th is sampled, never run)
  ASSERT_EQ(w["estimates"].size(), 3u);
  const auto& rec = w["estimates"][0];
  const auto& same = w["estimates"][1];
  const auto& more = w["estimates"][2];
  EXPECT_EQ(same["hot_neurons"], rec["hot_neurons"]);
  EXPECT_DOUBLE_EQ(same["hot_hit_ratio"].get<double>(), rec["hot_hit_ratio"].get<double>());
  EXPECT_GT(rec["hot_hit_ratio"].get<double>(), 0.0);
  EXPECT_GT(more["hot_neurons"].get<int64_t>(), rec["hot_neurons"].get<int64_t>());
  EXPECT_GE(more["hot_hit_ratio"].get<double>(), rec["hot_hit_ratio"].get<double>());
  EXPECT_NEAR(rec["seconds_per_token"].get<double>(), w["recorded_seconds_per_token"].get<double>(), 0.25 * w["recorded_seconds_per_token"].get<double>());
  // From the profile instead (the neurons that truly fired, timed by a bandwidth model): at the
  // placement's own budget the hot-hit ratio is the share of profiled firings that prepare reported.
  const auto from_profile = (dir / "whatif-profile.json").string();
  auto wp = run({"replay", "--activations", sparse + ".work", "-m", sparse, "-c", "64", "--vram-budget", "0.0042", "--cpu-gbps", "10", "--hot-gbps", "100",
                 "--report", from_profile});
  ASSERT_EQ(wp.code, 0) << wp.err;
  std::ifstream pin(from_profile);
  auto wpj = nlohmann::json::parse(pin);
  EXPECT_FALSE(wpj["timed"].get<bool>());
  EXPECT_EQ(wpj["tokens"], 256);
  const auto mass_at = prep.err.find("% of firings on hot neurons");
  ASSERT_NE(mass_at, std::string::npos) << prep.err;
  const double mass = std::stod(prep.err.substr(prep.err.rfind(' ', mass_at - 1) + 1)) / 100;
  EXPECT_NEAR(wpj["estimates"][0]["hot_hit_ratio"].get<double>(), mass, 0.0006);
  auto no_model = run({"replay", "--activations", trace, "--vram-budget", "1"});
  EXPECT_EQ(no_model.code, 2);
  EXPECT_NE(no_model.err.find("-m MODEL"), std::string::npos) << no_model.err;

  // Sparse against dense mode on the same file: both measured, each its own roofline probe over
  // as many bytes as its step reads (sparse fewer), and their ratio.
  auto vs = run({"bench", "-m", sparse, "-p", "4", "-n", "4", "-r", "1", "-t", "2", "-c", "64", "--vs-dense", "--roofline", "--json"});
  ASSERT_EQ(vs.code, 0) << vs.err;
  auto v = nlohmann::json::parse(vs.out);
  EXPECT_EQ(v.at("mode"), "sparse");
  EXPECT_EQ(v.at("dense").at("mode"), "dense");
  EXPECT_NEAR(v.at("decode_speedup_vs_dense").get<double>(),
              v.at("decode_tokens_per_s").get<double>() / v.at("dense").at("decode_tokens_per_s").get<double>(), 1e-9);
  EXPECT_GT(v.at("prefill_speedup_vs_dense").get<double>(), 0);
  EXPECT_LT(v.at("bytes_per_token").get<double>(), v.at("dense").at("bytes_per_token").get<double>());
  EXPECT_EQ(v.at("probe_bytes").get<double>(), std::floor(v.at("bytes_per_token").get<double>()));
  EXPECT_EQ(v.at("dense").at("probe_bytes").get<double>(), std::floor(v.at("dense").at("bytes_per_token").get<double>()));
  // Each side's bytes a token: on the CPU alone the device reads nothing and the host reads the
  // weights and the KV cache; with the sim device holding what the plan puts there (attention with its
  // KV cache, predictors, the head, hot rows), it reads those, on either pipeline, and the two sides
  // add up to the weights plus the same KV cache.
  const double kv = v.at("host_bytes_per_token").get<double>() - v.at("bytes_per_token").get<double>();
  EXPECT_EQ(v.at("device_bytes_per_token").get<double>(), 0.0);
  EXPECT_GT(kv, 0.0);
  auto on_sim = run({"bench", "-m", sparse, "-p", "4", "-n", "4", "-r", "1", "-t", "2", "-c", "64", "--device", "sim", "--vram-budget", "0.0042",
                     "--vs-reference", "--json"});
  ASSERT_EQ(on_sim.code, 0) << on_sim.err;
  auto s = nlohmann::json::parse(on_sim.out);
  for (const auto& d : {s, s.at("direct")}) {
    SCOPED_TRACE(d.at("pipeline").get<std::string>());
    EXPECT_GT(d.at("device_bytes_per_token").get<double>(), 0.0);
    EXPECT_LT(d.at("device_bytes_per_token").get<double>(), d.at("bytes_per_token").get<double>() + kv);
    EXPECT_NEAR(d.at("host_bytes_per_token").get<double>() + d.at("device_bytes_per_token").get<double>(), d.at("bytes_per_token").get<double>() + kv, 1e-6 * kv);
  }

  auto bare = (dir / "bare.gguf").string();
  fs::copy_file(sparse, bare);
  // A sparse file with no placement beside it: one is planned (from a short profile: no work folder
  // beside this copy), written beside it and used; the next run with the same budget and context
  // reuses it; another budget plans again.
  auto none = run({"run", "-m", bare, "-p", "Hello", "-n", "2", "-c", "64", "--device", "sim", "--vram-budget", "0.0042"});
  EXPECT_EQ(none.code, 0) << none.err;
  EXPECT_NE(none.err.find("there is no placement beside it: planned a placement for 0.0042 GiB at context 64"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("| total |"), std::string::npos) << none.err;  // the plan's table
  ASSERT_TRUE(fs::exists(bare + ".generated.gpuidx"));
  auto again = run({"run", "-m", bare, "-p", "Hello", "-n", "2", "-c", "64", "--device", "sim", "--vram-budget", "0.0042"});
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.err.find("planned a placement"), std::string::npos) << again.err;
  auto other = run({"run", "-m", bare, "-p", "Hello", "-n", "2", "-c", "64", "--device", "sim", "--vram-budget", "0.0045"});
  EXPECT_EQ(other.code, 0) << other.err;
  EXPECT_NE(other.err.find("was made for a budget of 0.004 GiB: planned a placement for 0.0045 GiB"), std::string::npos) << other.err;
  // Dense mode splits every neuron by the placement (and the fixed parts are on the device as planned).
  auto dense = run({"run", "-m", sparse, "-p", "Hello", "-n", "2", "-c", "64", "--device", "sim", "--vram-budget", "0.0042", "--mode", "dense"});
  EXPECT_EQ(dense.code, 0) << dense.err;
  // Sim computing as a GPU does (the attention, predictor, FFN-rows and product jobs): the plan holds
  // every layer's attention, the predictors, the head and hot rows; the text is the CPU's. On the
  // dense file, whole layers through the attention and dense FFN jobs; the text is the CPU's too.
  // (Its waiters sleep at once: --device-wait block.)
  auto gpu_like = run({"run", "-m", sparse, "-p", "Hello", "-n", "4", "-c", "64", "--temp", "0", "--device", "sim", "--sim-kernels", "--vram-budget", "0.05",
                       "--device-wait", "block"});
  EXPECT_EQ(gpu_like.code, 0) << gpu_like.err;
  EXPECT_NE(gpu_like.err.find("threads wait for sim by block (--device-wait)"), std::string::npos) << gpu_like.err;
  EXPECT_NE(gpu_like.err.find("attention and KV cache of 2 of 2 layers, 2 predictors, 0 dense FFNs, the head there"), std::string::npos) << gpu_like.err;
  auto cpu_text = run({"run", "-m", sparse, "-p", "Hello", "-n", "4", "-c", "64", "--temp", "0"});
  EXPECT_EQ(gpu_like.out, cpu_text.out);
  auto gpu_like_dense = run({"run", "-m", small_model(), "-p", "Hello", "-n", "4", "-c", "64", "--temp", "0", "--device", "sim", "--sim-kernels",
                             "--vram-budget", "0.05"});
  EXPECT_EQ(gpu_like_dense.code, 0) << gpu_like_dense.err;
  EXPECT_NE(gpu_like_dense.err.find("attention and KV cache of 2 of 2 layers, 0 predictors, 2 dense FFNs, the head there"), std::string::npos)
      << gpu_like_dense.err;
  EXPECT_EQ(gpu_like_dense.out, run({"run", "-m", small_model(), "-p", "Hello", "-n", "4", "-c", "64", "--temp", "0"}).out);
  // The round trips a GPU would make a decoded token, counted on sim computing as one: per layer one
  // job, attention with the FFN after it (Q, K and V products, RoPE with the store, the attention, the
  // output product, the residual, its norm, gate, up, the activation, down, the residual again: 13
  // launches, a copy in and out, one wait — not two with the host's norm between them), then the head
  // (1, 2, 1): at most a wait a layer. The CPU alone crosses nothing.
  auto trips = run({"bench", "-m", small_model(), "-p", "0", "-n", "4", "-r", "1", "-t", "2", "-c", "64", "--device", "sim", "--sim-kernels",
                    "--vram-budget", "0.05", "--vs-reference", "--json"});
  ASSERT_EQ(trips.code, 0) << trips.err;
  auto tj = nlohmann::json::parse(trips.out);
  for (const auto& d : {tj, tj.at("direct")}) {
    SCOPED_TRACE(d.at("pipeline").get<std::string>());
    EXPECT_EQ(d.at("launches_per_token").get<double>(), 2 * 13 + 1);
    EXPECT_EQ(d.at("copies_per_token").get<double>(), 2 * 2 + 2);
    EXPECT_EQ(d.at("syncs_per_token").get<double>(), 2 * 1 + 1);
    // Where the device's time went, job by job (whole: copies and waits included): the two kinds it ran
    // (a whole layer's job is an attention job).
    const auto& jobs = d.at("device_job_ms_per_token");
    for (const char* k : {"attention", "matvec"}) EXPECT_GT(jobs.at(k).get<double>(), 0.0) << k;
    for (const char* k : {"ffn_rows", "predict", "dense_ffn"}) EXPECT_EQ(jobs.at(k).get<double>(), 0.0) << k;
  }
  EXPECT_NE(trips.out.find("\"launches_per_token\""), std::string::npos);
  // --device-wait auto: block where the CPU's threads take every core and the plan leaves them FFN work
  // beside the device's, else spin — here every layer's FFN is on the device: spin.
  EXPECT_EQ(tj.at("device_wait").get<std::string>(), "spin");
  const std::string all_cores = std::to_string(std::max(1u, std::thread::hardware_concurrency()));
  auto cold_share = run({"bench", "-m", sparse, "-p", "0", "-n", "2", "-r", "1", "-t", all_cores, "-c", "64", "--device", "sim", "--vram-budget", "0.0042", "--json"});
  ASSERT_EQ(cold_share.code, 0) << cold_share.err;
  EXPECT_EQ(nlohmann::json::parse(cold_share.out).at("device_wait").get<std::string>(), "block");  // (cold rows on every core)
  auto bad_wait = run({"bench", "-m", small_model(), "-p", "0", "-n", "1", "--device", "sim", "--vram-budget", "0.05", "--device-wait", "sometimes"});
  EXPECT_NE(bad_wait.code, 0);
  EXPECT_NE(bad_wait.err.find("--device-wait"), std::string::npos) << bad_wait.err;
  for (const char* k : {"launches_per_token", "copies_per_token", "syncs_per_token"}) EXPECT_EQ(v.at(k).get<double>(), 0.0) << k;
  // A budget that holds every layer's attention, the predictors, the head and every neuron: a decoded
  // token reads only its embedding row on the host (no attention, norm, predictor, head, KV or FFN row).
  auto all = run({"bench", "-m", sparse, "-p", "0", "-n", "4", "-r", "1", "-t", "2", "-c", "64", "--device", "sim", "--vram-budget", "0.05",
                  "--vs-reference", "--json"});
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_NE(all.err.find("attention and KV cache of 2 of 2 layers, 2 predictors, 0 dense FFNs, the head there"), std::string::npos) << all.err;
  auto a = nlohmann::json::parse(all.out);
  for (const auto& d : {a, a.at("direct")}) {
    SCOPED_TRACE(d.at("pipeline").get<std::string>());
    EXPECT_GT(d.at("host_bytes_per_token").get<double>(), 0.0);
    EXPECT_LE(d.at("host_bytes_per_token").get<double>(), 64 * 4) << "more than an embedding row";
    EXPECT_NEAR(d.at("host_bytes_per_token").get<double>() + d.at("device_bytes_per_token").get<double>(), d.at("bytes_per_token").get<double>() + kv, 1e-6 * kv);
  }
  auto small = run({"run", "-m", sparse, "-p", "Hello", "-n", "2", "--device", "sim", "--vram-budget", "0.000001"});
  EXPECT_EQ(small.code, 2);  // below even the compute buffers: an impossible flag
  EXPECT_NE(small.err.find("budget"), std::string::npos) << small.err;
  auto nobudget = run({"run", "-m", sparse, "-p", "Hello", "-n", "2", "--device", "sim"});
  EXPECT_EQ(nobudget.code, 2);
  EXPECT_NE(nobudget.err.find("--vram-budget"), std::string::npos) << nobudget.err;
  fs::remove_all(dir);
}

TEST(Cli, EvalWritesEveryPositionsLogits) {
  auto out = fs::temp_directory_path() / ("hotcold-cli-logits-" + std::to_string(getpid()) + ".f32");
  auto r = run({"eval", "-m", small_model(), "-p", "Hello world", "--logits-out", out.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "1 15043 3186\n");  // BOS, as the llama vocabulary asks, then the text
  EXPECT_EQ(fs::file_size(out), 3u * 32000u * 4u);
  std::ifstream in(out, std::ios::binary);
  std::vector<float> row(32000);
  in.read(reinterpret_cast<char*>(row.data()), 32000 * 4);
  float best = *std::max_element(row.begin(), row.end());
  EXPECT_TRUE(std::isfinite(best));
  fs::remove(out);
}

std::vector<float> read_floats(const fs::path& p) {
  std::vector<float> v(fs::file_size(p) / 4);
  std::ifstream in(p, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

// The actor runtime (run's and bench's default) and the forward pass called directly print the same
// text and write the same logits; bench measures both, and several sequences at once.
TEST(Cli, PipelinesAgree) {
  for (std::vector<std::string> sampling : {std::vector<std::string>{"--temp", "0"}, std::vector<std::string>{"--seed", "5"}}) {
    std::vector<std::string> args{"run", "-m", small_model(), "-p", "Once upon a time", "-n", "24", "-t", "2"};
    args.insert(args.end(), sampling.begin(), sampling.end());
    auto actors = run(args);
    args.insert(args.end(), {"--pipeline", "direct"});
    auto reference = run(args);
    ASSERT_EQ(actors.code, 0) << actors.err;
    ASSERT_EQ(reference.code, 0) << reference.err;
    EXPECT_EQ(actors.out, reference.out);
    EXPECT_NE(actors.err.find("first token after"), std::string::npos) << actors.err;
  }

  auto a = fs::temp_directory_path() / ("hotcold-cli-actors-" + std::to_string(getpid()) + ".f32");
  auto b = fs::temp_directory_path() / ("hotcold-cli-reference-" + std::to_string(getpid()) + ".f32");
  const std::string text = "The quick brown fox jumps over the lazy dog, again and again.";
  auto ea = run({"eval", "-m", small_model(), "-p", text, "--logits-out", a.string(), "--pipeline", "actors"});
  auto eb = run({"eval", "-m", small_model(), "-p", text, "--logits-out", b.string()});
  ASSERT_EQ(ea.code, 0) << ea.err;
  ASSERT_EQ(eb.code, 0) << eb.err;
  EXPECT_EQ(ea.out, eb.out);
  auto la = read_floats(a), lb = read_floats(b);
  ASSERT_EQ(la.size(), lb.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < la.size(); ++i) num += double(la[i] - lb[i]) * (la[i] - lb[i]), den += double(lb[i]) * lb[i];
  EXPECT_LT(std::sqrt(num / den), 1e-5);
  fs::remove(a), fs::remove(b);

  auto bench = run({"bench", "-m", small_model(), "-p", "8", "-n", "8", "-r", "1", "-t", "2", "--parallel", "2", "--vs-parallel", "1", "--vs-reference",
                    "--roofline", "--json"});
  ASSERT_EQ(bench.code, 0) << bench.err;
  auto j = nlohmann::json::parse(bench.out);
  EXPECT_EQ(j.at("pipeline"), "actors");
  EXPECT_EQ(j.at("parallel"), 2);
  EXPECT_GT(j.at("decode_tokens_per_s").get<double>(), 0);
  EXPECT_GT(j.at("prefill_tokens_per_s").get<double>(), 0);
  EXPECT_EQ(j.at("direct").at("pipeline"), "direct");
  EXPECT_GT(j.at("direct").at("decode_tokens_per_s").get<double>(), 0);
  EXPECT_EQ(j.at("reference"), j.at("direct")) << "the direct pipeline's older name, for scripts that read it";
  EXPECT_EQ(j.at("vs_parallel").at("parallel"), 1);
  EXPECT_TRUE(j.contains("actor_overhead"));
  // --vs-parallel's sequences over --parallel's: the other configuration's decode over the base's.
  EXPECT_NEAR(j.at("parallel_speedup").get<double>(),
              j.at("vs_parallel").at("decode_tokens_per_s").get<double>() / j.at("decode_tokens_per_s").get<double>(), 1e-9);
  EXPECT_EQ(j.at("warmup"), true);  // as llama-bench: an untimed prompt and generation first
  // Each configuration's roofline probe reads as many bytes as its step: two sequences' step is
  // shared by its two tokens.
  for (const char* k : {"", "reference", "vs_parallel"}) {
    const auto& d = *k ? j.at(k) : j;
    const double per_step = d.at("bytes_per_token").get<double>() * d.at("parallel").get<int>();
    EXPECT_NEAR(d.at("probe_bytes").get<double>(), per_step, 1e-9 * per_step) << k;
    EXPECT_GT(d.at("read_bandwidth_bytes_per_s").get<double>(), 1e8) << k;
  }
  auto cold = run({"bench", "-m", small_model(), "-p", "4", "-n", "4", "-r", "1", "-t", "2", "--no-warmup", "--roofline", "--json"});
  ASSERT_EQ(cold.code, 0) << cold.err;
  auto c = nlohmann::json::parse(cold.out);
  EXPECT_EQ(c.at("warmup"), false);
  // The roofline: a measured bandwidth (between 100 MB/s and 10 TB/s on any machine), over as many
  // bytes as a token reads (after the repetition; without a warm-up the first probe reads what a
  // dense token would), the decode speed it allows at the bytes read per token, and the fraction
  // of that reached.
  const double bw = c.at("read_bandwidth_bytes_per_s").get<double>(), per_token = c.at("bytes_per_token").get<double>();
  EXPECT_GT(bw, 1e8);
  EXPECT_LT(bw, 1e13);
  EXPECT_NEAR(c.at("probe_bytes").get<double>(), per_token, 1e-9 * per_token);
  EXPECT_NEAR(c.at("roofline_tokens_per_s").get<double>(), bw / per_token, 1e-6 * bw / per_token);
  const double fraction = c.at("decode_tokens_per_s").get<double>() / c.at("roofline_tokens_per_s").get<double>();
  EXPECT_NEAR(c.at("roofline_fraction").get<double>(), fraction, 1e-6 * fraction);
  ASSERT_EQ(c.at("roofline_fraction_per_repetition").size(), 1u);

  auto bad = run({"run", "-m", small_model(), "-p", "x", "--pipeline", "threads"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--pipeline"), std::string::npos) << bad.err;
  auto stats = run({"eval", "-m", small_model(), "-p", "x", "--logits-out", a.string(), "--pipeline", "actors", "--stats-json", b.string()});
  EXPECT_EQ(stats.code, 2);
  EXPECT_NE(stats.err.find("--pipeline direct"), std::string::npos) << stats.err;
}

TEST(Cli, PerplexityPrintsAFinalEstimate) {
  auto text = fs::temp_directory_path() / ("hotcold-cli-ppl-" + std::to_string(getpid()) + ".txt");
  std::ofstream(text) << std::string(40, ' ') + "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times. "
                      << "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse.";
  auto r = run({"perplexity", "-m", small_model(), "-f", text.string(), "-c", "16"});
  fs::remove(text);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Final estimate: PPL = "), std::string::npos) << r.out;
}

TEST(Cli, ChatAnswersEachLine) {
  auto r = run({"chat", "-m", small_model(), "-n", "6", "--temp", "0"}, "printf 'Hello there\\nHow are you\\n' |");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_GE(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;  // one reply per line (replies may hold newlines too)
  EXPECT_NE(r.err.find("Ctrl-D ends"), std::string::npos);
  // The synthetic model carries no chat template: ChatML, said so.
  EXPECT_NE(r.err.find("no chat template: using chatml"), std::string::npos) << r.err;
  // A family named, and a system message; an unknown family is refused by name.
  auto named = run({"chat", "-m", small_model(), "-n", "4", "--temp", "0", "--chat-template", "llama2", "--system", "Be brief."}, "printf 'Hi\n' |");
  EXPECT_EQ(named.code, 0) << named.err;
  EXPECT_NE(named.err.find("llama2 template"), std::string::npos) << named.err;
  auto unknown = run({"chat", "-m", small_model(), "--chat-template", "vicuna"}, "printf 'Hi\n' |");
  EXPECT_NE(unknown.code, 0);
  EXPECT_NE(unknown.err.find("unknown chat template \"vicuna\""), std::string::npos) << unknown.err;
  // A file that carries a template (gen-model writes a family's published one) is chatted with it.
  const std::string with_template = (fs::temp_directory_path() / ("hotcold-cli-gemma-" + std::to_string(getpid()) + ".gguf")).string();
  auto made = run({"gen-model", "--arch", "llama", "--act", "relu", "--embd", "64", "--layers", "1", "--ffn", "64", "--heads", "4", "--kv-heads", "4", "--vocab", llama,
                   "--chat-template", "gemma", "-o", with_template});
  ASSERT_EQ(made.code, 0) << made.err;
  EXPECT_NE(run({"inspect", "-m", with_template}).out.find("tokenizer.chat_template"), std::string::npos);
  auto gemma = run({"chat", "-m", with_template, "-n", "3", "--temp", "0"}, "printf 'Hi\\nAgain\\n' |");
  fs::remove(with_template);
  EXPECT_EQ(gemma.code, 0) << gemma.err;
  EXPECT_NE(gemma.err.find("gemma template"), std::string::npos) << gemma.err;
  EXPECT_EQ(run({"gen-model", "--vocab", llama, "--chat-template", "vicuna", "-o", "/tmp/never.gguf"}).code, 2);
}

TEST(Cli, ModelsThatCannotRunExitWithOne) {
  auto too_long = run({"run", "-m", small_model(), "-p", std::string(200, 'x'), "-c", "8"});
  EXPECT_EQ(too_long.code, 1);
  EXPECT_NE(too_long.err.find("more than the context of 8"), std::string::npos) << too_long.err;
  auto vocab_only = run({"run", "-m", llama, "-p", "x"});
  EXPECT_EQ(vocab_only.code, 1);
  EXPECT_NE(vocab_only.err.find("holds no tensors (a vocabulary alone?)"), std::string::npos) << vocab_only.err;
  auto falcon_vocab = run({"eval", "-m", falcon, "-p", "x", "--logits-out", "/tmp/never.f32"});
  EXPECT_EQ(falcon_vocab.code, 1);
  EXPECT_EQ(std::count(falcon_vocab.err.begin(), falcon_vocab.err.end(), '\n'), 1) << falcon_vocab.err;
}

TEST(Cli, UsageErrors) {
  auto none = run({});
  EXPECT_EQ(none.code, 2);
  auto unknown = run({"inspect", "-m", llama, "--bogus"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("--bogus"), std::string::npos) << unknown.err;
  EXPECT_EQ(run({"--help"}).code, 0);
}

// Values llama.cpp gives a meaning keep it: temperature <= 0 is greedy, top-k <= 0 and top-p >= 1 are
// off, -t <= 0 is every hardware thread, --repeat-last-n -1 the whole context. Values with no meaning
// are refused with one short line naming the flag: NaN, -c < 0, --repeat-penalty < 0, --min-p outside
// [0, 1], --vram-budget NaN or < 0, more threads than the machine can use, a context whose KV cache
// cannot fit in memory. (Before: all accepted, -t 10000 died with "terminate called without an active
// exception", -c -5's message carried a 309-digit bound, -c 2147483647 said std::bad_alloc.)
TEST(Cli, SamplingThreadAndSizeValues) {
  const std::vector<std::string> base{"run", "-m", small_model(), "-p", "Once upon a time", "-n", "8"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a);
  };
  const auto greedy = with({"--temp", "0"});
  ASSERT_EQ(greedy.code, 0) << greedy.err;
  for (const auto& same : {std::vector<std::string>{"--temp", "-1"}, {"--temp", "-0.5", "--top-k", "-5", "--top-p", "7"}, {"--temp", "0", "-t", "0"},
                           {"--temp", "0", "-t", "-1"}, {"--temp", "0", "--repeat-last-n", "-1"}}) {
    const auto r = with(same);
    EXPECT_EQ(r.code, 0) << same[0] << " " << same[1] << ": " << r.err;
    EXPECT_EQ(r.out, greedy.out) << same[0] << " " << same[1];
  }
  struct refused {
    std::vector<std::string> flags;
    std::string names;
  };
  for (const auto& c : {refused{{"--temp", "nan"}, "--temp"}, refused{{"--top-p", "nan"}, "--top-p"}, refused{{"-c", "-5"}, "--ctx"},
                        refused{{"--repeat-penalty", "-1"}, "--repeat-penalty"}, refused{{"--min-p", "1.5"}, "--min-p"},
                        refused{{"--min-p", "-0.1"}, "--min-p"}, refused{{"--vram-budget", "nan"}, "--vram-budget"},
                        refused{{"--vram-budget", "-1"}, "--vram-budget"}, refused{{"-t", "10000"}, "threads"},
                        refused{{"--repeat-last-n", "-2"}, "--repeat-last-n"}, refused{{"--temp", "1e308"}, "--temp"},
                        refused{{"-c", "2147483647"}, "KV cache"}}) {
    const auto r = with(c.flags);
    EXPECT_EQ(r.code, 2) << c.flags[0] << " " << c.flags[1] << ": " << r.err;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << c.flags[0] << " " << c.flags[1] << ": " << r.err;
    EXPECT_LT(r.err.size(), 400u) << "a long message: " << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
  }
}

// Smaller ones: a write error says "cannot write" (not "cannot read"); eval --stats-json needs no
// --logits-out; keygen's secret key is created 0600 (never written under a wider mode: the open
// call is checked with strace where it runs) and stays 0600 when the file was there before; a key
// file that is endless (/dev/zero) or a directory is a clear error.
TEST(Cli, FilesAndSmallerDefects) {
  const auto write_error = run({"eval", "-m", small_model(), "-p", "Hello", "--logits-out", "/nonexistent-dir/x.f32"});
  EXPECT_EQ(write_error.code, 1) << write_error.err;
  EXPECT_NE(write_error.err.find("cannot write /nonexistent-dir/x.f32"), std::string::npos) << write_error.err;
  EXPECT_EQ(write_error.err.find("cannot read"), std::string::npos) << write_error.err;

  const fs::path dir = fs::temp_directory_path() / ("hotcold-cli-small-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const auto stats = run({"eval", "-m", small_model(), "-p", "Hello world", "--pipeline", "reference", "--stats-json", (dir / "stats.json").string()});
  EXPECT_EQ(stats.code, 0) << stats.err;
  EXPECT_TRUE(fs::exists(dir / "stats.json"));
  EXPECT_EQ(run({"eval", "-m", small_model(), "-p", "Hello"}).code, 2);  // neither output: a usage error

  // keygen: an existing world-readable file ends 0600; a new one is opened 0600.
  std::ofstream(dir / "old.key") << "x\n";
  fs::permissions(dir / "old.key", fs::perms::all);
  ASSERT_EQ(run({"keygen", "-o", (dir / "old").string()}).code, 0);
  EXPECT_EQ(fs::status(dir / "old.key").permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  if (std::system("strace -V >/dev/null 2>&1") == 0) {
    const std::string log = (dir / "strace.log").string();
    const std::string cmd = "strace -f -qq -e trace=open,openat,creat -o " + quote(log) + " " + quote(HOTCOLD_BIN) + " keygen -o " +
                            quote((dir / "fresh").string()) + " >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::ifstream in(log);
    int opens = 0;
    for (std::string l; std::getline(in, l);)
      if (l.find("fresh.key\"") != std::string::npos && l.find("O_CREAT") != std::string::npos) {
        ++opens;
        EXPECT_NE(l.find(", 0600)"), std::string::npos) << "the secret key file is created with a wider mode: " << l;
      }
    EXPECT_EQ(opens, 1);
  }

  // Key files: /dev/zero is not read for ever, a directory is named as such.
  const auto zero = run({"client", "--endpoint", "tcp://127.0.0.1:9", "-p", "x", "--curve-server-key", "/dev/zero", "--curve-key", "/dev/zero"});
  EXPECT_NE(zero.code, 0);
  EXPECT_NE(zero.err.find("more than"), std::string::npos) << zero.err;
  const auto clients_dir = run({"serve", "--zmq", "tcp://127.0.0.1:9", "--curve-key", (dir / "old.key").string(), "--curve-clients", dir.string()});
  EXPECT_EQ(clients_dir.code, 2);
  EXPECT_NE(clients_dir.err.find("directory"), std::string::npos) << clients_dir.err;
  fs::remove_all(dir);
}

// hotcold plan: predictions on paper, for a named GPU or given bandwidths; --json's fields; a GPU it
// does not know and a missing GPU are usage errors naming what to give.
TEST(Cli, PlanPredictsOnPaper) {
  auto p = run({"plan", "-m", small_model(), "--vram-budget", "0.01", "-c", "64", "--gpu", "H200", "--cpu-bandwidth", "20", "--json"});
  ASSERT_EQ(p.code, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  for (const char* k : {"cpu_only_tokens_per_s", "layer_offload_tokens_per_s", "hybrid_tokens_per_s", "host_bytes_per_token", "device_bytes_per_token",
                        "limited_by"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j.at("gpu"), "H200");
  EXPECT_NEAR(j.at("cpu_only_tokens_per_s").get<double>(), 20e9 / j.at("cpu_only_bytes_per_token").get<double>(), 1e-6);
  EXPECT_NEAR(j.at("host_bytes_per_token").get<double>() + j.at("device_bytes_per_token").get<double>(), j.at("cpu_only_bytes_per_token").get<double>(),
              1.0);
  // Every layer and the head on the GPU: the round trips bench counts on sim for the same placement
  // (Cli.SimDeviceSplitsByPlacement: 27 launches, 6 copies, 3 waits), at 3, 3 and 10 us.
  EXPECT_EQ(j.at("launches_per_token").get<double>(), 27);
  EXPECT_EQ(j.at("copies_per_token").get<double>(), 6);
  EXPECT_EQ(j.at("syncs_per_token").get<double>(), 3);
  EXPECT_NEAR(j.at("round_trip_seconds_per_token").get<double>(), 27 * 3e-6 + 6 * 3e-6 + 3 * 10e-6, 1e-12);
  auto table = run({"plan", "-m", small_model(), "--vram-budget", "0.01", "--gpu-bandwidth", "900", "--pcie", "16", "--cpu-bandwidth", "20"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("| hybrid |"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("limited by the"), std::string::npos) << table.out;
  auto unknown = run({"plan", "-m", small_model(), "--vram-budget", "0.01", "--gpu", "Voodoo 2"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("--gpu Voodoo 2: not one of the GPUs known here"), std::string::npos) << unknown.err;
  auto none = run({"plan", "-m", small_model(), "--vram-budget", "0.01", "--cpu-bandwidth", "20"});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("plan needs a GPU"), std::string::npos) << none.err;
}

}  // namespace
