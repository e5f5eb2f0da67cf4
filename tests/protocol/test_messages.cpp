// The wire schema's decoder and encoders (protocol/README.md): every request type with its fields
// and defaults, each kind of bad frame answered with the right code (naming the request when it can),
// and replies that parse back.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "protocol/messages.hpp"

namespace hotcold::protocol {
namespace {

using json = nlohmann::json;

template <class T>
T decoded(const std::string& frame, const limits& l = {}) {
  auto r = decode_request(frame, l);
  if (auto* e = std::get_if<protocol_error>(&r)) {
    ADD_FAILURE() << frame << " -> " << error_code_name(e->code) << ": " << e->message;
    return T{};
  }
  auto& req = std::get<request>(r);
  EXPECT_TRUE(std::holds_alternative<T>(req)) << frame;
  return std::holds_alternative<T>(req) ? std::get<T>(req) : T{};
}

protocol_error refused(const std::string& frame, const limits& l = {}) {
  auto r = decode_request(frame, l);
  if (!std::holds_alternative<protocol_error>(r)) {
    ADD_FAILURE() << "accepted: " << frame;
    return {};
  }
  return std::get<protocol_error>(r);
}

TEST(Messages, GenerateWithEveryField) {
  auto g = decoded<generate_request>(R"({"v":1,"type":"generate","id":"a1","prompt":"Once upon","n_predict":12,
    "sampling":{"temperature":0,"top_k":5,"top_p":0.5,"min_p":0.1,"repeat_penalty":1.1,"repeat_last_n":32,
                "frequency_penalty":0.2,"presence_penalty":-0.3,"seed":18446744073709551615},
    "stop":["\n\n","The end"],"stream":false,"parse_special":true})");
  EXPECT_EQ(g.id, "a1");
  EXPECT_EQ(g.prompt, "Once upon");
  EXPECT_TRUE(g.tokens.empty());
  EXPECT_EQ(g.n_predict, 12);
  EXPECT_EQ(g.params.temperature, 0.0);
  EXPECT_EQ(g.params.top_k, 5);
  EXPECT_EQ(g.params.top_p, 0.5);
  EXPECT_EQ(g.params.min_p, 0.1);
  EXPECT_EQ(g.params.repeat_penalty, 1.1);
  EXPECT_EQ(g.params.repeat_last_n, 32);
  EXPECT_EQ(g.params.frequency_penalty, 0.2);
  EXPECT_EQ(g.params.presence_penalty, -0.3);
  EXPECT_EQ(g.params.seed, UINT64_MAX);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"\n\n", "The end"}));
  EXPECT_FALSE(g.stream);
  EXPECT_TRUE(g.parse_special);
}

// n_predict -1 is llama.cpp's "until the end of the text or a full context"; a count over the
// server's limit is refused naming the flag that set it, whatever its size.
TEST(Messages, NPredictMinusOneAndTheLimitByItsFlag) {
  EXPECT_EQ(decoded<generate_request>(R"({"v":1,"type":"generate","id":"x","prompt":"a","n_predict":-1})").n_predict, -1);
  limits l;
  l.max_n_predict = 300;
  l.max_n_predict_flag = "serve --max-tokens";
  for (const char* n : {"301", "1099511627777", "18446744073709551615"}) {
    const auto e = refused(std::string(R"({"v":1,"type":"generate","id":"x","prompt":"a","n_predict":)") + n + "}", l);
    EXPECT_EQ(e.code, error_code::invalid_field) << n;
    EXPECT_NE(e.message.find("at most 300 tokens a request (serve --max-tokens)"), std::string::npos) << e.message;
  }
  EXPECT_EQ(decoded<generate_request>(R"({"v":1,"type":"generate","id":"x","prompt":"a","n_predict":300})", l).n_predict, 300);
}

TEST(Messages, GenerateDefaultsAndTokenPrompts) {
  auto g = decoded<generate_request>(R"({"v":1,"type":"generate","id":"x","tokens":[1,15043,0]})");
  EXPECT_FALSE(g.prompt.has_value());
  EXPECT_EQ(g.tokens, (std::vector<int32_t>{1, 15043, 0}));
  EXPECT_EQ(g.n_predict, 128);
  EXPECT_EQ(g.params.temperature, 0.8);
  EXPECT_EQ(g.params.top_k, 40);
  EXPECT_FALSE(g.params.seed.has_value());
  EXPECT_TRUE(g.stream);
  EXPECT_TRUE(g.stop.empty());
}

TEST(Messages, OtherRequests) {
  EXPECT_EQ(decoded<cancel_request>(R"({"v":1,"type":"cancel","id":"a1"})").id, "a1");
  EXPECT_EQ(decoded<health_request>(R"({"v":1,"type":"health","id":"h"})").id, "h");
  EXPECT_EQ(decoded<model_info_request>(R"({"v":1,"type":"model_info","id":"m"})").id, "m");
  auto t = decoded<tokenize_request>(R"({"v":1,"type":"tokenize","id":"t","text":"Hello","add_special":true})");
  EXPECT_EQ(t.text, "Hello");
  EXPECT_TRUE(t.add_special);
  EXPECT_FALSE(t.parse_special);
  EXPECT_EQ(decoded<detokenize_request>(R"({"v":1,"type":"detokenize","id":"d","tokens":[5,6]})").tokens, (std::vector<int32_t>{5, 6}));
}

TEST(Messages, BadFramesGetTheirCode) {
  EXPECT_EQ(refused("").code, error_code::bad_frame);
  EXPECT_EQ(refused("not json").code, error_code::bad_frame);
  EXPECT_EQ(refused("[1,2]").code, error_code::bad_frame);
  EXPECT_EQ(refused(R"({"v":1,"type":"health","id":"x"} trailing)").code, error_code::bad_frame);
  EXPECT_EQ(refused(std::string(100000, '[') + std::string(100000, ']')).code, error_code::bad_frame);  // no deep recursion
  EXPECT_EQ(refused("{\"v\":1,\"type\":\"health\",\"id\":\"\xff\xfe\"}").code, error_code::bad_frame);      // not UTF-8
  limits small;
  small.max_frame_bytes = 64;
  EXPECT_EQ(refused(R"({"v":1,"type":"generate","id":"x","prompt":")" + std::string(100, 'a') + "\"}", small).code, error_code::too_large);

  auto v = refused(R"({"v":2,"type":"health","id":"q7"})");
  EXPECT_EQ(v.code, error_code::unsupported_version);
  EXPECT_EQ(v.id, "q7");  // named, so the client can match the error
  EXPECT_EQ(refused(R"({"type":"health","id":"q7"})").code, error_code::unsupported_version);
  EXPECT_EQ(refused(R"({"v":1,"id":"q7"})").code, error_code::unknown_type);
  auto u = refused(R"({"v":1,"type":"explode","id":"q8"})");
  EXPECT_EQ(u.code, error_code::unknown_type);
  EXPECT_EQ(u.id, "q8");

  auto field = [](const std::string& frame) { return refused(frame).code; };
  EXPECT_EQ(field(R"({"v":1,"type":"health"})"), error_code::invalid_field);                         // no id
  EXPECT_EQ(field(R"({"v":1,"type":"health","id":7})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"health","id":")" + std::string(200, 'i') + "\"}"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x"})"), error_code::invalid_field);              // neither prompt nor tokens
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","tokens":[1]})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","tokens":[]})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","tokens":[1,-2]})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","tokens":[1,"a"]})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","n_predict":-2})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","n_predict":1.5})"), error_code::invalid_field);
  // Sampling values with no meaning (protocol::check_sampling, shared with the command line).
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","sampling":{"min_p":1.5}})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","sampling":{"repeat_penalty":-1}})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","sampling":{"repeat_last_n":-2}})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","sampling":{"temperature":101}})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","sampling":{"presence_penalty":1e300}})"), error_code::invalid_field);
  EXPECT_NE(refused(R"({"v":1,"type":"generate","id":"x","prompt":"a","sampling":{"min_p":2}})").message.find("min_p"), std::string::npos);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","sampling":{"seed":-1}})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","sampling":{"temprature":0}})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","sampling":5})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","stream":"yes"})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","stop":[""]})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"generate","id":"x","prompt":"a","stop":["1","2","3","4","5","6","7","8","9"]})"), error_code::too_large);
  auto unknown = refused(R"({"v":1,"type":"generate","id":"x","prompt":"a","n_pedict":3})");
  EXPECT_EQ(unknown.code, error_code::invalid_field);
  EXPECT_NE(unknown.message.find("n_pedict"), std::string::npos) << unknown.message;
  EXPECT_EQ(unknown.id, "x");
  EXPECT_EQ(field(R"({"v":1,"type":"tokenize","id":"t"})"), error_code::invalid_field);
  EXPECT_EQ(field(R"({"v":1,"type":"detokenize","id":"t"})"), error_code::invalid_field);
}

// Whatever the bytes, the decoder answers (a request or an error) and never throws.
TEST(Messages, RandomBytesNeverThrow) {
  std::mt19937 rng(7);
  const std::string pieces[] = {"{", "}", "[", "]", "\"v\":1", "\"type\":\"generate\"", "\"id\":\"a\"", ",", ":", "\"prompt\":\"x\"",
                                "\"tokens\":[1,2]", "null", "1e999", "-0", "\"\\u0000\"", "\xc3", "\x80", " "};
  for (int i = 0; i < 5000; ++i) {
    std::string frame;
    const int n = static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k) {
      if (rng() % 3 == 0) frame += static_cast<char>(rng() % 256);
      else frame += pieces[rng() % std::size(pieces)];
    }
    EXPECT_NO_THROW(decode_request(frame)) << i;
  }
}

TEST(Messages, Base64RoundTrips) {
  EXPECT_EQ(base64(""), "");
  EXPECT_EQ(base64("f"), "Zg==");
  EXPECT_EQ(base64("fo"), "Zm8=");
  EXPECT_EQ(base64("foo"), "Zm9v");
  EXPECT_EQ(base64("foobar"), "Zm9vYmFy");
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  for (size_t n = 0; n < all.size(); n += 37) EXPECT_EQ(unbase64(base64(all.substr(0, n))), all.substr(0, n));
  EXPECT_THROW(unbase64("Zg="), std::invalid_argument);
  EXPECT_THROW(unbase64("Z!=="), std::invalid_argument);
  EXPECT_THROW(unbase64("Z=g="), std::invalid_argument);
}

TEST(Messages, RepliesParseBack) {
  auto a = json::parse(encode_accepted("r1", 5, 42));
  EXPECT_EQ(a["v"], 1);
  EXPECT_EQ(a["type"], "accepted");
  EXPECT_EQ(a["id"], "r1");
  EXPECT_EQ(a["prompt_tokens"], 5);
  EXPECT_EQ(a["seed"], 42);
  // A piece that ends inside a UTF-8 character still makes valid JSON.
  auto t = json::parse(encode_token("r1", 3, 29871, std::string("\xe2\x96"), 12.5));
  EXPECT_EQ(t["index"], 3);
  EXPECT_EQ(t["token"], 29871);
  EXPECT_TRUE(t["text"].is_string());
  EXPECT_EQ(unbase64(t["bytes"].get<std::string>()), std::string("\xe2\x96"));  // the exact bytes
  auto d = json::parse(encode_done("r1", "stop_string", 5, 7, {1.0, 2.0, 3.0}, std::string_view("abc")));
  EXPECT_EQ(d["finish"], "stop_string");
  EXPECT_EQ(d["generated_tokens"], 7);
  EXPECT_EQ(d["timings"]["time_to_first_token_ms"], 2.0);
  EXPECT_EQ(d["text"], "abc");
  EXPECT_FALSE(json::parse(encode_done("r1", "length", 1, 1, {}))
                   .contains("text"));
  auto e = json::parse(encode_error({error_code::busy, "the queue is full", "r9"}, 250));
  EXPECT_EQ(e["code"], "busy");
  EXPECT_EQ(e["retry_after_ms"], 250);
  EXPECT_TRUE(json::parse(encode_error({error_code::bad_frame, "not JSON", ""}))["id"].is_null());
  EXPECT_EQ(json::parse(encode_health("h", "ok", 2, 3))["queued"], 3);
  EXPECT_EQ(json::parse(encode_tokens("t", {1, 2}))["tokens"], json({1, 2}));
  EXPECT_EQ(json::parse(encode_text("d", "Hi"))["text"], "Hi");
  model_facts m;
  m.architecture = "llama";
  m.n_vocab = 32000;
  EXPECT_EQ(json::parse(encode_model_info("m", m))["model"]["n_vocab"], 32000);
}

}  // namespace
}  // namespace hotcold::protocol

namespace hotcold::protocol {
namespace {

// Values llama.cpp gives a meaning are accepted: temperature <= 0 (greedy), top_k <= 0 and top_p >= 1
// (off), repeat_last_n -1 (the whole context).
TEST(Messages, SamplingEdgesWithAMeaningAreAccepted) {
  auto r = decode_request(R"({"v":1,"type":"generate","id":"x","prompt":"a","sampling":{"temperature":-1,"top_k":-5,"top_p":7,"repeat_last_n":-1}})",
                          limits{});
  ASSERT_TRUE(std::holds_alternative<request>(r)) << std::get<protocol_error>(r).message;
  const auto& g = std::get<generate_request>(std::get<request>(r));
  EXPECT_EQ(g.params.temperature, -1.0);
  EXPECT_EQ(g.params.top_k, -5);
  EXPECT_EQ(g.params.top_p, 7.0);
  EXPECT_EQ(g.params.repeat_last_n, -1);
}

}  // namespace
}  // namespace hotcold::protocol
