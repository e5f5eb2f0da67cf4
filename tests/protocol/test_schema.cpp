// The C++ codec (protocol/messages.hpp) and the Python client (clients/hotcold_client.py) against the one
// schema (protocol/schema.json): the same message kinds; every frame the C++ codec encodes — one of
// every request and reply kind, every field filled — passes the Python client's strict check; every
// request the Python client builds with every field decodes here to the same frame; and the C++
// reply decoder gives back what was encoded.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "protocol/messages.hpp"

namespace hotcold::protocol {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string source = HOTCOLD_SOURCE_DIR;

json schema() {
  std::ifstream in(source + "/protocol/schema.json");
  return json::parse(in);
}

std::vector<request> every_request() {
  generate_request text;
  text.id = "g1";
  text.prompt = "Once upon a time";
  text.n_predict = 7;
  text.params.temperature = 0.25, text.params.top_k = 5, text.params.top_p = 0.5, text.params.min_p = 0.125, text.params.repeat_penalty = 1.5;
  text.params.repeat_last_n = 32, text.params.frequency_penalty = 0.75, text.params.presence_penalty = -0.5, text.params.seed = 99;
  text.stop = {"\n\n", "The end"};
  text.stream = false;
  text.parse_special = true;
  text.grammar = "root ::= [a-z]+ \"!\"";
  text.logprobs = true, text.n_probs = 3, text.prompt_logprobs = true, text.ignore_eos = true;
  generate_request ids;
  ids.id = "g2";
  ids.tokens = {1, 2, 3};
  ids.json_schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  generate_request chat;
  chat.id = "g3";
  chat.messages = R"([{"role":"user","content":"Weather?"}])";
  chat.tools = R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";
  chat.tool_choice = "required";
  return {text, ids, chat, cancel_request{"c1"}, health_request{"h1"}, model_info_request{"m1"}, tokenize_request{"t1", "Hello world", true, true},
          detokenize_request{"d1", {15043, 3186}}, slot_request{"s1", "save", 1, "chat-1.bin"}, slot_request{"s2", "erase", 0, ""}};
}

std::vector<reply> every_reply() {
  model_facts f{"/models/x.gguf", "llama", "relu", "sparse", 32000, 4096, 2, 64, 256, 1, 2};
  return {accepted_reply{"g1", 5, 7},
          token_reply{"g1", 0, 29892, "\xe2\x82", 41.5, std::nullopt},  // half a character: U+FFFD in text, exact in bytes
          token_reply{"g1", 1, 450, " the", 52.5, token_probs{-0.25, {{450, " the", -0.25}, {263, " a", -2.5}}}},
          prompt_token_reply{"g1", 0, 1, "<s>", std::nullopt},
          prompt_token_reply{"g1", 1, 9038, "Once", token_probs{-7.5, {{450, " the", -1.5}}}},
          done_reply{"g1", "length", 5, 32, {0.25, 41.5, 812}, std::nullopt, std::nullopt},
          done_reply{"g2", "stop_string", 5, 3, {0, 1, 2}, std::string("whole text"), std::nullopt},
          done_reply{"g3", "stop", 40, 20, {0, 1, 2}, std::nullopt, std::nullopt, 0, std::string(""), {{"get_weather", R"({"city":"Oslo"})"}}},
          done_reply{"g4", "error", 5, 0, {0, 0, 1}, std::nullopt, std::string("stage tcp://127.0.0.1:7001 (layers 0-1): its worker is gone")},
          error_reply{{error_code::busy, "the queue is full", "g3"}, 150},
          error_reply{{error_code::bad_frame, "not JSON", ""}, std::nullopt},
          health_reply{"h1", "ok", 2, 1},
          tokens_reply{"t1", {1, 15043, 3186}},
          slot_reply{"s1", "save", 1, 1745, 14309796, 49.9},
          text_reply{"d1", "Hello world"},
          model_info_reply{"m1", f}};
}

std::set<std::string> kinds(const json& j) {
  std::set<std::string> out;
  for (const auto& [k, v] : j.items()) out.insert(k);
  return out;
}

TEST(Schema, NamesEveryKindTheCodecHasAndNoOther) {
  const json s = schema();
  std::set<std::string> requests, replies;
  for (const auto& r : every_request()) requests.insert(std::string(request_type(r)));
  for (const auto& r : every_reply()) replies.insert(std::string(reply_type(r)));
  EXPECT_EQ(requests.size(), std::variant_size_v<request>) << "every_request() leaves a request kind out";
  EXPECT_EQ(replies.size(), std::variant_size_v<reply>) << "every_reply() leaves a reply kind out";
  EXPECT_EQ(kinds(s["requests"]), requests);
  EXPECT_EQ(kinds(s["replies"]), replies);
  EXPECT_EQ(s["version"], protocol_version);
  std::set<std::string> codes;
  for (const auto& c : s["error_codes"]) {
    ASSERT_TRUE(error_code_from_name(c.get<std::string>())) << c;
    codes.insert(c.get<std::string>());
  }
  EXPECT_EQ(codes.size(), static_cast<size_t>(error_code::internal) + 1) << "the schema leaves an error code out";
}

TEST(Schema, TheCppCodecAndThePythonClientAgreeOnEveryMessage) {
  const auto dir = fs::temp_directory_path() / ("hotcold_schema_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::string> sent;
  {
    std::ofstream in(dir / "in.txt");
    for (const auto& r : every_request()) sent.push_back("request " + encode_request(r));
    for (const auto& r : every_reply()) sent.push_back("reply " + encode_reply(r));
    for (const auto& line : sent) in << line << "\n";
  }
  const std::string cmd = "python3 " + source + "/tests/protocol/schema_agreement.py " + source + "/protocol/schema.json < " + (dir / "in.txt").string() +
                          " > " + (dir / "out.txt").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream out(dir / "out.txt");
  std::vector<std::string> checked, frames;
  for (std::string line; std::getline(out, line);) (line.rfind("frame ", 0) == 0 ? frames : checked).push_back(line);
  fs::remove_all(dir);

  // Every frame the C++ codec wrote, as the Python client reads it.
  ASSERT_EQ(checked.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    const auto space = sent[i].find(' ');
    const std::string kind = json::parse(sent[i].substr(space + 1))["type"];
    EXPECT_EQ(checked[i], "ok " + sent[i].substr(0, space) + " " + kind) << sent[i];
  }
  // Every request the Python client built, as the C++ decoder reads it: the same frame back.
  ASSERT_EQ(frames.size(), kinds(schema()["requests"]).size() + 2);  // generate three times: prompt, tokens, messages
  std::set<std::string> decoded;
  for (const auto& f : frames) {
    const std::string frame = f.substr(6);
    auto r = decode_request(frame);
    ASSERT_TRUE(std::holds_alternative<request>(r)) << frame << ": " << std::get<protocol_error>(r).message;
    decoded.insert(std::string(request_type(std::get<request>(r))));
    EXPECT_EQ(json::parse(encode_request(std::get<request>(r))), json::parse(frame)) << "a field the C++ codec lost or changed";
  }
  EXPECT_EQ(decoded, kinds(schema()["requests"]));
}

TEST(Schema, EveryReplyDecodesToWhatWasEncoded) {
  for (const auto& r : every_reply()) {
    const std::string frame = encode_reply(r);
    auto back = decode_reply(frame);
    ASSERT_TRUE(std::holds_alternative<reply>(back)) << frame << ": " << std::get<protocol_error>(back).message;
    EXPECT_EQ(encode_reply(std::get<reply>(back)), frame);
    EXPECT_EQ(reply_id(std::get<reply>(back)), reply_id(r));
  }
  const auto token = std::get<token_reply>(std::get<reply>(decode_reply(encode_reply(every_reply()[1]))));
  EXPECT_EQ(token.bytes, "\xe2\x82") << "the exact bytes, not the text's U+FFFD";
  // What a client cannot read is named, never thrown.
  for (const char* bad : {"[1]", "{\"v\":2,\"type\":\"token\"}", "{\"v\":1,\"type\":\"nonsense\",\"id\":\"x\"}", "{\"v\":1,\"type\":\"accepted\",\"id\":\"x\"}",
                          "{\"v\":1,\"type\":\"token\",\"id\":\"x\",\"index\":0,\"token\":1,\"text\":\"a\",\"bytes\":\"!!\",\"ms\":1}",
                          "{\"v\":1,\"type\":\"error\",\"id\":null,\"code\":\"no_such_code\",\"message\":\"m\"}"}) {
    auto r = decode_reply(bad);
    ASSERT_TRUE(std::holds_alternative<protocol_error>(r)) << bad;
    EXPECT_FALSE(std::get<protocol_error>(r).message.empty());
  }
}

}  // namespace
}  // namespace hotcold::protocol
