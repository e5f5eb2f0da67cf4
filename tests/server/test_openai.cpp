// serve's OpenAI-style API (/v1/*) end to end: the official openai client for Node.js and curl get
// what `hotcold run` prints for the same prompt, parameters and seed; errors come as the API's error
// objects with their statuses; a client that goes cancels its sequence; a slow reader holds up no
// one; a full queue answers 429 with Retry-After; the pages stay on loopback; and a load of 32
// streaming HTTP clients beside ZeroMQ clients loses and mixes nothing.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/model/edited_files.hpp"
#include "tests/server/serve_process.hpp"
#include "clients/client.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using namespace hotcold::test;

const std::string key = "sk-hotcold-test-0123456789";
const std::string model_id = "default-llama-relu-f16.gguf";  // the default model's file name

double cancelled_count(int port) { return metric(http_get(port, "/metrics"), "hotcold_requests_total{outcome=\"cancelled\"}"); }

http_answer post(int port, const std::string& target, const std::string& body, const std::string& bearer = key) {
  std::string headers = "Content-Type: application/json\r\n";
  if (!bearer.empty()) headers += "Authorization: Bearer " + bearer + "\r\n";
  return split(http_request(port, "POST", target, headers, body));
}

// The data: events of a Server-Sent Events body, in order.
std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  for (size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
    const auto end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6));
    at = end == std::string::npos ? body.size() : end;
  }
  return out;
}

// A streamed completion's text, finish reason and usage, read from its events.
struct streamed {
  std::string text, finish;
  json usage;
  bool done = false;  // ended with [DONE]
  int pieces = 0;
};
streamed read_stream(const std::vector<std::string>& events, bool chat) {
  streamed s;
  for (const auto& e : events) {
    if (e == "[DONE]") {
      s.done = true;
      continue;
    }
    const json c = json::parse(e, nullptr, false);
    if (c.is_discarded()) continue;
    if (c.contains("usage") && c["usage"].is_object()) s.usage = c["usage"];
    for (const auto& ch : c.value("choices", json::array())) {
      const std::string piece = chat ? ch["delta"].value("content", "") : ch.value("text", "");
      s.text += piece;
      s.pieces += !piece.empty();
      if (ch["finish_reason"].is_string()) s.finish = ch["finish_reason"];
    }
  }
  return s;
}

// curl -N with a JSON body from a file: what it prints (the response's body, or with -i also the head).
std::string curl(int port, const std::string& target, const json& body, const std::string& extra = "") {
  const std::string file = (fs::temp_directory_path() / ("hotcold-openai-" + std::to_string(getpid()) + ".json")).string();
  std::ofstream(file) << body.dump();
  const std::string out = run_capture("curl -sN --max-time 60 " + extra + " -H 'Content-Type: application/json' -H 'Authorization: Bearer " + key + "' --data-binary @" +
                                      file + " http://127.0.0.1:" + std::to_string(port) + target);
  fs::remove(file);
  return out;
}

// A serve process with --http, ready for requests.
struct api_server {
  std::string ep = tcp_endpoint();
  int port = free_port() + 1;  // free_port() checks the one after it too
  server_process process;
  explicit api_server(std::vector<std::string> extra)
      : process([&] {
          std::vector<std::string> args{"--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "-t", "2", "--api-key", key};
          args.insert(args.end(), extra.begin(), extra.end());
          return args;
        }()) {
    wait_ready(ep, &process);
  }
};

const char* const llama2_prompt = "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST]";  // what the llama2 template writes, less its <s>

// The official openai package (tests/node, installed by scripts/install-deps.sh) against a running
// server: chat with and without streaming gets exactly `hotcold run`'s text for the prompt the
// template writes; a seeded sampled completion gets run's text for that seed; the models list; its
// typed errors for a wrong key, an unknown model, a bad value; a stream it abandons is cancelled.
TEST(OpenAI, OfficialNodeClientGetsWhatRunPrints) {
  const fs::path script = fs::path(HOTCOLD_SOURCE_DIR) / "tests/node/openai_client.mjs";
  ASSERT_TRUE(fs::exists(fs::path(HOTCOLD_SOURCE_DIR) / "tests/node/node_modules/openai/package.json"))
      << "the openai package is not installed in tests/node: run scripts/install-deps.sh";
  api_server s({"--chat-template", "llama2", "--embeddings"});
  const std::string out = run_capture("HOTCOLD_BASE_URL=http://127.0.0.1:" + std::to_string(s.port) + "/v1 HOTCOLD_API_KEY=" + key + " HOTCOLD_MODEL=" + model_id +
                                      " node " + script.string() + " 2>&1");
  const json r = json::parse(out, nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << out;
  const std::string chat_ref = run_stdout({"run", "-p", llama2_prompt, "-n", "10", "--temp", "0", "-t", "2"});
  EXPECT_EQ(r["chat"]["text"].get<std::string>() + "\n", chat_ref);
  EXPECT_EQ(r["chat"]["role"], "assistant");
  EXPECT_EQ(r["chat"]["finish"], "length");
  EXPECT_EQ(r["chat"]["usage"]["completion_tokens"], 10);
  EXPECT_EQ(r["chat"]["usage"]["total_tokens"], r["chat"]["usage"]["prompt_tokens"].get<int>() + 10);
  EXPECT_EQ(r["chat_stream"]["text"].get<std::string>() + "\n", chat_ref);
  EXPECT_EQ(r["chat_stream"]["role"], "assistant");
  EXPECT_EQ(r["chat_stream"]["finish"], "length");
  // The same request a second time: all its prompt but the last token reused (the official client
  // reads OpenAI's usage.prompt_tokens_details).
  const int prompt = r["chat"]["usage"]["prompt_tokens"];
  EXPECT_EQ(r["chat"]["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  json second = r["chat"]["usage"];
  second["prompt_tokens_details"]["cached_tokens"] = prompt - 1;
  EXPECT_EQ(r["chat_stream"]["usage"], second);
  EXPECT_GE(r["chat_stream"]["chunks"].get<int>(), 10);  // a piece at a time, not all at the end
  EXPECT_EQ(r["completion"]["text"].get<std::string>() + "\n", run_stdout({"run", "-p", "Once upon a time", "-n", "12", "--temp", "0.8", "--seed", "7", "-t", "2"}));
  EXPECT_EQ(r["completion"]["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(r["models"], json::array({model_id}));
  EXPECT_EQ(r["wrong_key"], 401);
  EXPECT_EQ(r["unknown_model"], 404);
  EXPECT_EQ(r["bad_value"], 400);
  EXPECT_EQ(r["aborted_after"], 1);
  // Log probabilities are the model's: the log-softmax of the logits `hotcold eval` writes for the
  // same tokens (echo: the prompt's from its second token on; then the greedy token's).
  const json info = hotcold::clients::client(s.ep, 30s).call("model_info");
  const auto file = fs::temp_directory_path() / ("hotcold-openai-logits-" + std::to_string(getpid()) + ".f32");
  EXPECT_EQ(run_stdout({"eval", "-m", info["model"]["path"], "-p", "Once upon a time", "--logits-out", file.string(), "-t", "2"}), "1 9038 2501 263 931\n");
  const size_t n_vocab = info["model"]["n_vocab"];
  std::vector<float> logits(5 * n_vocab);
  std::ifstream(file, std::ios::binary).read(reinterpret_cast<char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
  fs::remove(file);
  auto log_softmax = [&](size_t row) {
    const float* x = logits.data() + row * n_vocab;
    const double m = *std::max_element(x, x + n_vocab);
    double sum = 0;
    for (size_t i = 0; i < n_vocab; ++i) sum += std::exp(x[i] - m);
    std::vector<double> out(n_vocab);
    for (size_t i = 0; i < n_vocab; ++i) out[i] = x[i] - m - std::log(sum);
    return out;
  };
  const json& echo = r["echo"]["logprobs"];
  ASSERT_EQ(echo["tokens"].size(), 6u) << r["echo"].dump();
  EXPECT_TRUE(echo["token_logprobs"][0].is_null() && echo["top_logprobs"][0].is_null());
  const std::vector<int> echoed{1, 9038, 2501, 263, 931};
  for (size_t i = 1; i < 6; ++i) {
    const auto ls = log_softmax(i - 1);
    const size_t best = static_cast<size_t>(std::max_element(ls.begin(), ls.end()) - ls.begin());
    const size_t token = i < 5 ? static_cast<size_t>(echoed[i]) : best;  // (the generated one: greedy)
    EXPECT_NEAR(echo["token_logprobs"][i].get<double>(), ls[token], 2e-3) << i;
    ASSERT_EQ(echo["top_logprobs"][i].size(), 3u);
    double top = -1e9;
    for (const auto& [piece, v] : echo["top_logprobs"][i].items()) top = std::max(top, v.get<double>());
    EXPECT_NEAR(top, ls[best], 2e-3) << i;
  }
  const json& scored = r["scored"]["logprobs"];
  ASSERT_EQ(scored["tokens"].size(), 5u) << r["scored"].dump();
  EXPECT_EQ(r["scored"]["usage"]["completion_tokens"], 0);
  for (size_t i = 1; i < 5; ++i) {
    EXPECT_NEAR(scored["token_logprobs"][i].get<double>(), echo["token_logprobs"][i].get<double>(), 1e-4);
    EXPECT_EQ(scored["top_logprobs"][i].size(), 1u);
  }
  EXPECT_EQ(r["scored"]["text"], " Once upon a time");  // (the prompt's pieces: what the model read)
  EXPECT_EQ(r["top_without_logprobs"], 400);
  // Embeddings: one a text, what `hotcold embed` prints (mean pooling), of length 1; ids as input the same.
  ASSERT_EQ(r["embeddings"]["vectors"].size(), 2u) << r["embeddings"].dump().substr(0, 300);
  EXPECT_EQ(r["embeddings"]["index"], json::parse("[0, 1]"));
  EXPECT_EQ(r["embeddings"]["usage"]["prompt_tokens"], 3 + 5);
  for (int k = 0; k < 2; ++k) {
    const json want = json::parse(run_stdout({"embed", "-p", k == 0 ? "Hello world" : "Once upon a time", "-t", "2"}));
    const json& got = r["embeddings"]["vectors"][k];
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(got.size(), 256u);
    double norm = 0, worst = 0;
    for (size_t i = 0; i < got.size(); ++i) norm += got[i].get<double>() * got[i].get<double>(), worst = std::max(worst, std::abs(got[i].get<double>() - want[i].get<double>()));
    EXPECT_NEAR(norm, 1.0, 1e-5);
    EXPECT_LT(worst, 1e-5) << k;
  }
  ASSERT_EQ(r["embedding_of_tokens"].size(), 256u);
  for (size_t i = 0; i < 256; ++i) EXPECT_NEAR(r["embedding_of_tokens"][i].get<double>(), r["embeddings"]["vectors"][0][i].get<double>(), 1e-6);
  // A chat's: one entry a token, the text theirs, three alternatives most likely first (greedy: the
  // token is the first), and streamed the same.
  const json& content = r["chat_logprobs"]["content"];
  ASSERT_EQ(content.size(), 5u) << r["chat_logprobs"].dump();
  std::string joined;
  for (const auto& e : content) {
    joined += e["token"].get<std::string>();
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(e["logprob"].get<double>(), e["top_logprobs"][0]["logprob"].get<double>());
    EXPECT_EQ(e["token"], e["top_logprobs"][0]["token"]);
    EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(), e["top_logprobs"][1]["logprob"].get<double>());
    EXPECT_GE(e["top_logprobs"][1]["logprob"].get<double>(), e["top_logprobs"][2]["logprob"].get<double>());
    EXPECT_EQ(e["bytes"].size(), e["token"].get<std::string>().size());
  }
  EXPECT_EQ(joined, r["chat_logprobs"]["text"]);
  // (The second request reuses the first's cached prompt: its sums may differ in the last bits.)
  ASSERT_EQ(r["chat_logprobs_stream"].size(), content.size());
  for (size_t i = 0; i < content.size(); ++i) {
    EXPECT_EQ(r["chat_logprobs_stream"][i]["token"], content[i]["token"]);
    EXPECT_NEAR(r["chat_logprobs_stream"][i]["logprob"].get<double>(), content[i]["logprob"].get<double>(), 1e-4);
  }
  // The abandoned stream (4000 tokens asked) was cancelled, not generated to its end.
  double cancelled = 0;
  for (int i = 0; i < 40 && (cancelled = cancelled_count(s.port)) < 1; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(cancelled, 1) << http_get(s.port, "/metrics");
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// Structured outputs: 200 chat completions at temperature 1 through the official client with a
// response_format JSON Schema all parse and validate (ajv, formats included); llama-server's
// `grammar` and `json_schema` on /v1/completions and response_format json_object; bad ones are 400s
// naming the field and what is wrong.
TEST(OpenAI, StructuredOutputsFollowTheirSchemas) {
  const fs::path script = fs::path(HOTCOLD_SOURCE_DIR) / "tests/node/structured_outputs.mjs";
  ASSERT_TRUE(fs::exists(fs::path(HOTCOLD_SOURCE_DIR) / "tests/node/node_modules/ajv-formats/package.json"))
      << "ajv is not installed in tests/node: run scripts/install-deps.sh";
  api_server s({"--chat-template", "qwen2.5", "--parallel", "8"});
  const std::string out = run_capture("HOTCOLD_BASE_URL=http://127.0.0.1:" + std::to_string(s.port) + "/v1 HOTCOLD_API_KEY=" + key + " HOTCOLD_MODEL=" + model_id +
                                      " COUNT=200 node " + script.string() + " 2>&1");
  const json r = json::parse(out, nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << out;
  EXPECT_EQ(r["total"], 200) << out;
  EXPECT_EQ(r["valid"], 200) << out;
  // Tool calls: tool_choice "required" at temperature 1, 200 of 200 well-formed; streamed deltas too.
  EXPECT_EQ(r["tools"]["total"], 200) << r["tools"].dump();
  EXPECT_EQ(r["tools"]["valid"], 200) << r["tools"].dump();
  EXPECT_EQ(r["tools"]["finish"]["tool_calls"], 200);
  EXPECT_EQ(r["streamed_call"]["valid"], true) << r["streamed_call"].dump();
  EXPECT_EQ(r["streamed_call"]["finish"], "tool_calls");
  EXPECT_GT(r["after_result"]["usage"]["prompt_tokens"].get<int>(), 100);  // (the tools, the call and its result written)

  const json grammar{{"model", model_id}, {"prompt", "Once"}, {"max_tokens", 40}, {"temperature", 1}, {"seed", 5}, {"grammar", R"(root ::= ("ab" | "cd"){2} "!")"}};
  const json g = json::parse(curl(s.port, "/v1/completions", grammar), nullptr, false);
  const std::string text = g["choices"][0]["text"];
  EXPECT_TRUE(text.size() == 5 && text.back() == '!' && (text.substr(0, 2) == "ab" || text.substr(0, 2) == "cd")) << g.dump();
  EXPECT_EQ(g["choices"][0]["finish_reason"], "stop");
  const json schema{{"model", model_id}, {"prompt", "Once"}, {"max_tokens", 60}, {"temperature", 1}, {"seed", 6},
                    {"json_schema", {{"type", "array"}, {"items", {{"type", "integer"}, {"minimum", 10}, {"maximum", 12}}}, {"minItems", 2}, {"maxItems", 2}}}};
  const json a = json::parse(json::parse(curl(s.port, "/v1/completions", schema))["choices"][0]["text"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(a.is_array() && a.size() == 2) << a.dump();
  for (const auto& x : a) EXPECT_TRUE(x.is_number_integer() && x.get<int>() >= 10 && x.get<int>() <= 12) << a.dump();
  const json object{{"model", model_id}, {"messages", {{{"role", "user"}, {"content", "JSON please"}}}}, {"max_tokens", 200}, {"temperature", 1}, {"seed", 2},
                    {"response_format", {{"type", "json_object"}}}};
  const json o = json::parse(curl(s.port, "/v1/chat/completions", object), nullptr, false);
  const std::string content = o["choices"][0]["message"]["content"];
  if (o["choices"][0]["finish_reason"] == "stop") EXPECT_TRUE(json::parse(content, nullptr, false).is_object()) << content;
  EXPECT_EQ(content.substr(0, 1), "{") << content;
  // Refusals: the field, and where in it.
  auto error_of = [&](json body) {
    body["model"] = model_id;
    body["prompt"] = "x";
    const auto reply = post(s.port, "/v1/completions", body.dump());
    EXPECT_EQ(reply.status, 400) << reply.body;
    const json e = json::parse(reply.body, nullptr, false);
    return e["error"]["param"].get<std::string>() + ": " + e["error"]["message"].get<std::string>();
  };
  EXPECT_NE(error_of({{"grammar", "root ::= [a-"}}).find("grammar: grammar, line 1 column"), std::string::npos);
  EXPECT_NE(error_of({{"json_schema", {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}, {"multipleOf", 2}}}}}}}})
                .find("json_schema: json_schema: the schema at /properties/a: 'multipleOf' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}).find("response_format.json_schema.schema"), std::string::npos);
  EXPECT_NE(error_of({{"response_format", {{"type", "yaml"}}}}).find("'response_format' type 'yaml'"), std::string::npos);
  EXPECT_NE(error_of({{"grammar", "root ::= \"a\""}, {"json_schema", {{"type", "string"}}}}).find("not 'grammar' and 'json_schema'"), std::string::npos);
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// curl -N sees the raw events; bad requests get the documented error objects and statuses, and the
// server goes on.
TEST(OpenAI, CurlStreamsAndErrorsAreTheAPIs) {
  api_server s({"--chat-template", "llama2"});
  const std::string ref = run_stdout({"run", "-p", "Once upon a time", "-n", "12", "--temp", "0", "-t", "2"});
  const json ask{{"model", model_id}, {"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}};

  // Whole, then streamed (with usage), then streamed chat.
  const auto whole = post(s.port, "/v1/completions", ask.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json w = whole.body_json();
  EXPECT_EQ(w["object"], "text_completion");
  EXPECT_EQ(w["choices"][0]["text"].get<std::string>() + "\n", ref);
  EXPECT_EQ(w["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(w["usage"], json({{"prompt_tokens", 5}, {"completion_tokens", 12}, {"total_tokens", 17}, {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  json ask_stream = ask;
  ask_stream["stream"] = true;
  ask_stream["stream_options"] = {{"include_usage", true}};
  const std::string raw = curl(s.port, "/v1/completions", ask_stream, "-i");
  EXPECT_NE(raw.find("Content-Type: text/event-stream"), std::string::npos) << raw.substr(0, 300);
  const auto events = sse_data(raw);
  ASSERT_GE(events.size(), 3u) << raw;
  const auto st = read_stream(events, false);
  EXPECT_EQ(st.text + "\n", ref);
  EXPECT_EQ(st.finish, "length");
  EXPECT_TRUE(st.done);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(st.usage["completion_tokens"], 12);
  const json chat{{"model", model_id}, {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi there"}}}},
                  {"max_tokens", 10}, {"temperature", 0}, {"stream", true}};
  const auto cs = read_stream(sse_data(curl(s.port, "/v1/chat/completions", chat)), true);
  EXPECT_EQ(cs.text + "\n", run_stdout({"run", "-p", llama2_prompt, "-n", "10", "--temp", "0", "-t", "2"}));
  EXPECT_TRUE(cs.done);

  // A stop string: the text ends where it begins, finish_reason "stop".
  const std::string stop_at = ref.substr(6, 4);
  json ask_stop = ask;
  ask_stop["stop"] = stop_at;
  const json cut = post(s.port, "/v1/completions", ask_stop.dump()).body_json();
  EXPECT_EQ(cut["choices"][0]["text"], ref.substr(0, ref.find(stop_at))) << cut;
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");

  // Errors: status, and the error object's type and code (param where a field is at fault).
  auto expect_error = [&](const http_answer& a, int status, const std::string& code, const std::string& param = "") {
    EXPECT_EQ(a.status, status) << a.head << "\n" << a.body;
    const json e = a.body_json();
    ASSERT_TRUE(e.contains("error")) << a.body;
    EXPECT_TRUE(e["error"]["message"].is_string() && !e["error"]["message"].get<std::string>().empty()) << a.body;
    EXPECT_TRUE(e["error"]["type"].is_string()) << a.body;
    EXPECT_EQ(e["error"]["code"], code) << a.body;
    if (!param.empty()) {
      EXPECT_EQ(e["error"]["param"], param) << a.body;
    }
    EXPECT_NE(a.head.find("application/json"), std::string::npos) << a.head;
  };
  expect_error(post(s.port, "/v1/completions", "{\"model\": "), 400, "invalid_json");
  expect_error(post(s.port, "/v1/chat/completions", "[1,2]"), 400, "invalid_json");
  expect_error(post(s.port, "/v1/completions", json{{"model", model_id}, {"prompt", 7}}.dump()), 400, "invalid_value", "prompt");
  expect_error(post(s.port, "/v1/completions", json{{"model", model_id}, {"prompt", "a"}, {"temperature", "hot"}}.dump()), 400, "invalid_value", "temperature");
  expect_error(post(s.port, "/v1/completions", json{{"model", model_id}, {"prompt", "a"}, {"max_tokens", -3}}.dump()), 400, "invalid_value", "max_tokens");
  expect_error(post(s.port, "/v1/completions", json{{"model", model_id}, {"prompt", "a"}, {"n", 17}}.dump()), 400, "invalid_value", "n");
  // No field silently ignored: a misspelt one, another route's, a sampler hotcold does not have.
  expect_error(post(s.port, "/v1/completions", json{{"model", model_id}, {"prompt", "a"}, {"temprature", 0}}.dump()), 400, "unsupported_parameter", "temprature");
  expect_error(post(s.port, "/v1/chat/completions", json{{"model", model_id}, {"messages", {{{"role", "user"}, {"content", "a"}}}}, {"echo", true}}.dump()), 400,
               "unsupported_parameter", "echo");
  expect_error(post(s.port, "/v1/completions", json{{"model", model_id}, {"prompt", "a"}, {"typical_p", 0.9}}.dump()), 400, "unsupported_parameter", "typical_p");
  // Tools where the template has none (llama2): refused, naming it.
  const json weather_tool = json::parse(R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}})");
  const auto no_tools = post(s.port, "/v1/chat/completions", json{{"model", model_id}, {"messages", {{{"role", "user"}, {"content", "a"}}}}, {"tools", {weather_tool}}}.dump());
  expect_error(no_tools, 400, "invalid_value", "tools");
  EXPECT_NE(no_tools.body.find("the chat template 'llama2' has no tools"), std::string::npos) << no_tools.body;
  for (const json extra : {json{{"user", "u1"}}, json{{"metadata", {{"k", "v"}}}}, json{{"typical_p", 1}}, json{{"mirostat", 0}}}) {
    json b{{"model", model_id}, {"prompt", "a"}, {"max_tokens", 1}};
    b.update(extra);
    EXPECT_EQ(post(s.port, "/v1/completions", b.dump()).status, 200) << extra.dump();
  }
  expect_error(post(s.port, "/v1/chat/completions", json{{"model", model_id}, {"messages", {{{"role", "function"}, {"content", "x"}}}}}.dump()), 400, "invalid_value",
               "messages[0].role");
  expect_error(post(s.port, "/v1/chat/completions", json{{"model", model_id}, {"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}}}}.dump()),
               400, "invalid_value", "messages");  // llama2 turns must alternate
  EXPECT_EQ(post(s.port, "/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", "a"}}}}, {"max_tokens", 2}}.dump()).status, 200);  // (no model: the one served, as llama-server takes it)
  expect_error(post(s.port, "/v1/chat/completions", json{{"model", 7}, {"messages", {{{"role", "user"}, {"content", "a"}}}}}.dump()), 400, "invalid_value", "model");
  expect_error(post(s.port, "/v1/chat/completions", json{{"model", "gpt-4o"}, {"messages", {{{"role", "user"}, {"content", "a"}}}}}.dump()), 404, "model_not_found");
  expect_error(post(s.port, "/v1/embeddings", json{{"model", model_id}, {"input", "x"}}.dump()), 501, "not_implemented");  // (no --embeddings)
  expect_error(split(http_get(s.port, "/v1/completions", "Authorization: Bearer " + key + "\r\n")), 405, "method_not_allowed");
  expect_error(post(s.port, "/v1/completions", ask.dump(), ""), 401, "invalid_api_key");
  expect_error(post(s.port, "/v1/completions", ask.dump(), "sk-wrong-key-0123456789"), 401, "invalid_api_key");
  expect_error(split(http_get(s.port, "/v1/models")), 401, "invalid_api_key");
  // A body over 8 MiB: refused as it arrives (413), whether announced or sent.
  expect_error(split(http_request(s.port, "POST", "/v1/completions", "Authorization: Bearer " + key + "\r\nContent-Length: 9437184\r\n")), 413, "request_too_large");
  const std::string big = (fs::temp_directory_path() / ("hotcold-openai-big-" + std::to_string(getpid()) + ".json")).string();
  std::ofstream(big) << "{\"model\":\"" << model_id << "\",\"prompt\":\"" << std::string(9 << 20, 'a') << "\"}";
  const std::string huge = run_capture("curl -s -o /dev/null -w '%{http_code}' --max-time 60 -H 'Authorization: Bearer " + key + "' --data-binary @" + big +
                                       " http://127.0.0.1:" + std::to_string(s.port) + "/v1/completions");
  fs::remove(big);
  EXPECT_EQ(huge, "413");  // curl asks first (Expect: 100-continue) and gets the answer before it sends the body
  // A prompt longer than the context: 400 context_length_exceeded.
  json too_long = ask;
  too_long["prompt"] = std::vector<int>(3000, 100);
  expect_error(post(s.port, "/v1/completions", too_long.dump()), 400, "context_length_exceeded");
  // The server is unharmed: the same text again.
  EXPECT_EQ(post(s.port, "/v1/completions", ask.dump()).body_json()["choices"][0]["text"].get<std::string>() + "\n", ref);
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// A raw HTTP/1.0 connection with a request sent and nothing read yet.
int open_request(int port, const std::string& target, const json& body, int rcvbuf = 0) {
  bool connected = false;
  const int fd = loopback_socket(port, 10, connected, rcvbuf);
  EXPECT_TRUE(connected);
  const std::string b = body.dump();
  const std::string req = "POST " + target + " HTTP/1.0\r\nAuthorization: Bearer " + key + "\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(b.size()) + "\r\n\r\n" + b;
  EXPECT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  return fd;
}
// Reads until `what` has come (or the connection ends); returns what was read.
std::string read_until(int fd, const std::string& what) {
  std::string got;
  char buf[4096];
  for (ssize_t n; got.find(what) == std::string::npos && (n = read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  return got;
}

// A conversation as chat clients send it, the whole history every turn: each turn reuses what the
// turn before left cached (usage.prompt_tokens_details.cached_tokens, the server's counters of
// prompt tokens reused and computed), with the text of the same request computed whole
// (cache_prompt: false, llama-server's field) — from the prefix store, as another client's text took
// the one slot between the turns. The same with a hot device (sim) that holds every layer's attention
// and KV cache, whose rows move through the device's copies (the default model's greedy text would
// not show rows left unmoved: tests/actors/test_prefix_reuse.cpp holds the logits there).
void turns_reuse_the_cached_history(std::vector<std::string> extra, const std::string& log_says = {}) {
  extra.insert(extra.end(), {"--chat-template", "llama2"});
  api_server s(extra);
  json messages = json::array({{{"role", "system"}, {"content", "You are a storyteller who answers at length."}},
                               {{"role", "user"}, {"content", "Tell me about the sea and its ships."}}});
  int64_t reused = 0, computed = 0;
  for (int turn = 0; turn < 3; ++turn) {
    json ask{{"model", model_id}, {"messages", messages}, {"max_tokens", 16}, {"temperature", 0}};
    const json got = post(s.port, "/v1/chat/completions", ask.dump()).body_json();
    ASSERT_TRUE(got.contains("usage")) << got;
    const int64_t prompt = got["usage"]["prompt_tokens"], cached = got["usage"]["prompt_tokens_details"]["cached_tokens"];
    if (turn == 0) EXPECT_EQ(cached, 0);
    else EXPECT_TRUE(cached >= 32 && cached % 16 == 0) << "turn " << turn << ", whole blocks of the store: " << got["usage"];
    EXPECT_LT(cached, prompt);
    reused += cached, computed += prompt - cached;
    ask["cache_prompt"] = false;
    const json whole = post(s.port, "/v1/chat/completions", ask.dump()).body_json();
    EXPECT_EQ(whole["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    computed += prompt;
    EXPECT_EQ(got["choices"][0]["message"]["content"], whole["choices"][0]["message"]["content"]) << "turn " << turn;
    // Another client's text between the turns: with one slot, the next turn's history comes from the
    // prefix store's blocks (moved in), not from the slot.
    const json other = post(s.port, "/v1/completions", json{{"model", model_id}, {"prompt", "Hello there"}, {"max_tokens", 2}}.dump()).body_json();
    reused += other["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    computed += other["usage"]["prompt_tokens"].get<int64_t>() - other["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    messages.push_back({{"role", "assistant"}, {"content", got["choices"][0]["message"]["content"]}});
    messages.push_back({{"role", "user"}, {"content", "And then what happened, turn " + std::to_string(turn) + "?"}});
  }
  const std::string m = http_get(s.port, "/metrics");
  EXPECT_EQ(metric(m, "hotcold_prompt_tokens_cached_total"), static_cast<double>(reused)) << m;
  EXPECT_EQ(metric(m, "hotcold_prompt_tokens_computed_total"), static_cast<double>(computed)) << m;
  // The store keeps the conversation's whole blocks (16 tokens): at least those of its last turn.
  EXPECT_GE(metric(m, "hotcold_prefix_store_blocks"), std::floor(static_cast<double>(reused) / 3 / 16)) << m;
  EXPECT_GT(metric(m, "hotcold_prefix_store_capacity_blocks"), metric(m, "hotcold_prefix_store_blocks")) << m;
  EXPECT_GT(metric(m, "hotcold_prefix_store_bytes"), 0.0) << m;
  const auto bad = post(s.port, "/v1/chat/completions", json{{"model", model_id}, {"messages", messages}, {"cache_prompt", "yes"}}.dump());
  EXPECT_EQ(bad.status, 400) << bad.body;
  if (!log_says.empty()) EXPECT_NE(s.process.log().find(log_says), std::string::npos) << s.process.log();
}

TEST(OpenAI, ATurnReusesTheCachedHistory) { turns_reuse_the_cached_history({"--parallel", "1"}); }

TEST(OpenAI, ATurnReusesTheCachedHistoryOnAHotDevice) {
  turns_reuse_the_cached_history({"--device", "sim", "--vram-budget", "0.03", "--parallel", "1", "-c", "512"},
                                 "hot device sim: attention and KV cache of 4 of 4 layers");
}

// llama-server's slot files: POST /slots/0?action=save writes what the slot holds into
// --slot-save-path, erase forgets it, restore brings it back (into a slot that held another text since),
// after which the same request reuses all its prompt and answers the same; the API's keys guard it; a
// missing file, a name with a folder, another model's file or cache type, an unknown action or slot
// are refused by name.
TEST(OpenAI, SlotFilesKeepASlotsCache) {
  const fs::path dir = fs::temp_directory_path() / ("hotcold-slots-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  api_server s({"--parallel", "1", "--cache-ram", "0", "--slot-save-path", dir.string()});
  const json ask{{"model", model_id}, {"prompt", "Once upon a time there was a"}, {"max_tokens", 8}, {"temperature", 0}};
  const json first = post(s.port, "/v1/completions", ask.dump()).body_json();
  const int prompt = first["usage"]["prompt_tokens"];
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const auto saved = post(s.port, "/slots/0?action=save", json{{"filename", "story.bin"}}.dump());
  ASSERT_EQ(saved.status, 200) << saved.body;
  const json sv = saved.body_json();
  EXPECT_EQ(sv["id_slot"], 0);
  EXPECT_EQ(sv["filename"], "story.bin");
  EXPECT_EQ(sv["n_saved"], prompt + 7);  // the prompt and the generated tokens but the last
  EXPECT_EQ(sv["n_written"], static_cast<int64_t>(fs::file_size(dir / "story.bin")));
  EXPECT_TRUE(sv["timings"]["save_ms"].is_number());
  EXPECT_EQ(post(s.port, "/slots/0?action=erase", "").body_json()["n_erased"], prompt + 7);
  EXPECT_EQ(post(s.port, "/v1/completions", ask.dump()).body_json()["usage"]["prompt_tokens_details"]["cached_tokens"], 0);  // erased
  post(s.port, "/v1/completions", json{{"model", model_id}, {"prompt", "Hello"}, {"max_tokens", 4}}.dump());  // the slot holds another text
  const auto restored = post(s.port, "/slots/0?action=restore", json{{"filename", "story.bin"}}.dump());
  ASSERT_EQ(restored.status, 200) << restored.body;
  EXPECT_EQ(restored.body_json()["n_restored"], prompt + 7);
  const json again = post(s.port, "/v1/completions", ask.dump()).body_json();
  EXPECT_EQ(again["usage"]["prompt_tokens_details"]["cached_tokens"], prompt - 1);
  EXPECT_EQ(again["choices"][0]["text"], first["choices"][0]["text"]);

  auto refused = [&](const std::string& target, const std::string& body, int status, const std::string& says) {
    const auto a = post(s.port, target, body);
    EXPECT_EQ(a.status, status) << target << ": " << a.body;
    EXPECT_NE(a.body.find(says), std::string::npos) << target << ": " << a.body;
  };
  refused("/slots/0?action=restore", json{{"filename", "missing.bin"}}.dump(), 404, "missing.bin");
  refused("/slots/0?action=save", json{{"filename", "../escape.bin"}}.dump(), 400, "plain file name");
  refused("/slots/0?action=fly", "{}", 400, "save, restore or erase");
  refused("/slots/3?action=erase", "", 400, "slot 3 does not exist");
  refused("/slots/0?action=save", "{}", 400, "filename");
  // Another model's file (its header's identity changed): refused, naming both.
  std::string bytes;
  {
    std::ifstream in(dir / "story.bin", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto at = bytes.find("\"model\":\"") + 9;
  const char identity = bytes[at];
  bytes[at] = bytes[at] == '1' ? '2' : '1';
  std::ofstream(dir / "other.bin", std::ios::binary) << bytes;
  refused("/slots/0?action=restore", json{{"filename", "other.bin"}}.dump(), 400, "made with model");
  // A file of another cache type (its keys f32, this server's f16): refused, naming both.
  bytes[at] = identity;
  const auto type_at = bytes.find("\"cache_type_k\":\"f16\"");
  ASSERT_NE(type_at, std::string::npos);
  bytes.replace(type_at, 20, "\"cache_type_k\":\"f32\"");
  std::ofstream(dir / "f32.bin", std::ios::binary) << bytes;
  refused("/slots/0?action=restore", json{{"filename", "f32.bin"}}.dump(), 400, "its cache holds f32 keys and f16 values, this server's f16 and f16");
  const auto no_key = split(http_request(s.port, "POST", "/slots/0?action=erase", "Content-Type: application/json\r\n", ""));
  EXPECT_EQ(no_key.status, 401);
  fs::remove_all(dir);
}

TEST(OpenAI, SlotFilesAreOffWithoutAFolder) {
  api_server s({});
  const auto a = post(s.port, "/slots/0?action=save", json{{"filename", "x.bin"}}.dump());
  EXPECT_EQ(a.status, 400) << a.body;
  EXPECT_NE(a.body.find("--slot-save-path"), std::string::npos) << a.body;
}

// A client that drops mid-stream has its sequence cancelled at once; one that reads nothing holds up
// no one; a full queue answers 429 with Retry-After, and the server stops cleanly with such clients on.
TEST(OpenAI, DroppedSlowAndQueuedClients) {
  api_server s({"--parallel", "2", "--max-queue", "0"});
  const json endless{{"model", model_id}, {"prompt", "Once upon a time"}, {"max_tokens", 4000}, {"temperature", 0}, {"stream", true}};
  // Dropped after its first piece: cancelled (counted) well before 4000 tokens could be made.
  const int drop = open_request(s.port, "/v1/completions", endless);
  EXPECT_NE(read_until(drop, "\"text\":\"").find("200 OK"), std::string::npos);
  const auto dropped_at = std::chrono::steady_clock::now();
  close(drop);
  double cancelled = 0;
  for (int i = 0; i < 100 && (cancelled = cancelled_count(s.port)) < 1; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(cancelled, 1);
  std::printf("a dropped stream was counted cancelled %.0f ms after its client closed\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - dropped_at).count());
  // A slow reader (a tiny receive buffer, nothing read) holds one sequence; another client's text
  // meanwhile is exact.
  const json ask{{"model", model_id}, {"prompt", "Hello world"}, {"max_tokens", 6}, {"temperature", 0}};
  const std::string ref = run_stdout({"run", "-p", "Hello world", "-n", "6", "--temp", "0", "-t", "2"});
  const int slow = open_request(s.port, "/v1/completions", endless, 1024);
  std::this_thread::sleep_for(300ms);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(post(s.port, "/v1/completions", ask.dump()).body_json()["choices"][0]["text"].get<std::string>() + "\n", ref);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  // With the other sequence taken too, the queue (0) is full: 429, Retry-After, queue_full.
  const int second = open_request(s.port, "/v1/completions", endless);
  read_until(second, "\"text\":\"");
  const auto full = post(s.port, "/v1/completions", ask.dump());
  EXPECT_EQ(full.status, 429) << full.head << full.body;
  EXPECT_NE(full.head.find("Retry-After: "), std::string::npos) << full.head;
  EXPECT_EQ(full.body_json()["error"]["code"], "queue_full") << full.body;
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(split(http_get(s.port, "/health")).status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 1s);
  // Once they go, the next is served.
  close(slow);
  close(second);
  std::optional<http_answer> served;
  for (int i = 0; i < 40; ++i) {
    served = post(s.port, "/v1/completions", ask.dump());
    if (served->status != 429) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(served->status, 200) << served->body;
  EXPECT_EQ(served->body_json()["choices"][0]["text"].get<std::string>() + "\n", ref);
  // A stop with a stream open ends the stream and the server within seconds.
  const int open = open_request(s.port, "/v1/completions", endless);
  read_until(open, "\"text\":\"");
  const auto t2 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
  EXPECT_LT(std::chrono::steady_clock::now() - t2, 5s);
  close(open);
}

// This machine's first IPv4 address that is not loopback ("" when it has none).
std::string outward_address() {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return "";
  std::string found;
  for (ifaddrs* i = all; i && found.empty(); i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
      char text[INET_ADDRSTRLEN];
      const auto* in = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
      if ((ntohl(in->sin_addr.s_addr) >> 24) != 127 && inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) found = text;
    }
  freeifaddrs(all);
  return found;
}
// GET over a connection to `host` (an IPv4 address of this machine): the status.
int status_from(const std::string& host, int port, const std::string& target, const std::string& headers = "") {
  const std::string out = run_capture("curl -s -o /dev/null -w '%{http_code}' --max-time 10 " + (headers.empty() ? "" : "-H '" + headers + "' ") + "http://" + host +
                                      ":" + std::to_string(port) + target);
  return std::atoi(out.c_str());
}

// Served on an outward address with --api-key: other machines get the API (with the key) and /health,
// not the dashboard or /metrics, unless --allow-remote.
TEST(OpenAI, PagesStayOnLoopbackUnlessAllowRemote) {
  const std::string host = outward_address();
  if (host.empty()) GTEST_SKIP() << "this machine has no IPv4 address but loopback";
  for (bool allow : {false, true}) {
    const std::string ep = tcp_endpoint();
    const int port = free_port() + 1;
    std::vector<std::string> args{"--zmq", ep, "--http", "0.0.0.0:" + std::to_string(port), "--allow-remote-http", "--api-key", key, "-t", "2"};
    if (allow) args.push_back("--allow-remote");
    server_process server(args);
    wait_ready(ep, &server);
    EXPECT_EQ(status_from(host, port, "/metrics"), allow ? 200 : 403);
    EXPECT_EQ(status_from(host, port, "/"), allow ? 200 : 403);
    EXPECT_EQ(status_from(host, port, "/health"), 200);
    EXPECT_EQ(status_from(host, port, "/v1/models"), 401);
    EXPECT_EQ(status_from(host, port, "/v1/models", "Authorization: Bearer " + key), 200);
    EXPECT_EQ(status_from("127.0.0.1", port, "/metrics"), 200);
    EXPECT_EQ(server.stop(), 0) << server.log();
  }
}

// An outward address without keys or tokens, keys too short, and API options without --http are
// refused before the model loads (exit 2, naming what is wrong).
TEST(OpenAI, BadKeysAndOptionsAreRefusedAtStart) {
  // An outward address needs a key (or tokens) at all.
  const auto refused = run_capture(std::string(HOTCOLD_BIN) + " serve --http 0.0.0.0:" + std::to_string(free_port()) + " --allow-remote-http 2>&1; echo rc=$?");
  EXPECT_NE(refused.find("--api-key"), std::string::npos) << refused;
  EXPECT_NE(refused.find("rc=2"), std::string::npos) << refused;
  // Keys too short, and API options without --http, are refused before the model loads.
  const auto short_key = run_capture(std::string(HOTCOLD_BIN) + " serve --http 127.0.0.1:" + std::to_string(free_port()) + " --api-key short 2>&1; echo rc=$?");
  EXPECT_NE(short_key.find("at least 16 characters"), std::string::npos) << short_key;
  EXPECT_NE(short_key.find("rc=2"), std::string::npos) << short_key;
  const auto no_http = run_capture(std::string(HOTCOLD_BIN) + " serve --zmq " + tcp_endpoint() + " --api-key " + key + " 2>&1; echo rc=$?");
  EXPECT_NE(no_http.find("give --http"), std::string::npos) << no_http;
  EXPECT_NE(no_http.find("rc=2"), std::string::npos) << no_http;
  const auto unknown = run_capture(std::string(HOTCOLD_BIN) + " serve --zmq " + tcp_endpoint() + " --chat-template vicuna 2>&1; echo rc=$?");
  EXPECT_NE(unknown.find("unknown chat template \"vicuna\""), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("rc=2"), std::string::npos) << unknown;
}

// 32 HTTP clients each streaming 20 completions, beside 4 ZeroMQ clients doing the same: every text is
// its prompt's greedy text, in order, nothing lost; the figures (requests/s, time to first piece) are
// printed and recorded.
TEST(OpenAI, LoadOf32StreamingClientsTimes20BesideZeroMQ) {
  api_server s({"--parallel", "8", "--max-queue", "64"});
  const char* prompts[] = {"Once upon a time", "The quick brown fox", "Hello world", "In the beginning"};
  std::string expected[4];
  for (int k = 0; k < 4; ++k) {
    const json ask{{"model", model_id}, {"prompt", prompts[k]}, {"max_tokens", 6}, {"temperature", 0}};
    expected[k] = post(s.port, "/v1/completions", ask.dump()).body_json()["choices"][0]["text"].get<std::string>();
    ASSERT_FALSE(expected[k].empty());
  }
  constexpr int http_clients = 32, zmq_clients = 4, per_client = 20;
  std::vector<std::vector<double>> ttft(http_clients);
  std::atomic<int> lost{0}, mixed{0}, busy{0};
  std::mutex why_mutex;
  std::vector<std::string> why_lost;  // each lost request's status and the start of its answer
  const auto t0 = std::chrono::steady_clock::now();
  // A busy answer (429: the queue is full) is retried until then: how often one comes depends on how
  // busy the machine is, so no count of them may fail the test.
  const auto retry_until = t0 + 120s;
  std::vector<std::thread> threads;
  for (int k = 0; k < http_clients; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < per_client; ++i) {
        const int which = (k + i) % 4;
        const json ask{{"model", model_id}, {"prompt", prompts[which]}, {"max_tokens", 6}, {"temperature", 0}, {"stream", true}};
        for (int attempt = 0;; ++attempt) {
          const auto start = std::chrono::steady_clock::now();
          const int fd = open_request(s.port, "/v1/completions", ask);
          std::string got = read_until(fd, "\"text\":\"");
          const auto first = std::chrono::steady_clock::now();
          char buf[4096];
          for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
          close(fd);
          const auto a = split(got);
          if (a.status == 429 && std::chrono::steady_clock::now() < retry_until) {
            ++busy;
            std::this_thread::sleep_for(20ms);
            continue;
          }
          if (a.status != 200) {
            ++lost;
            std::lock_guard lock(why_mutex);
            why_lost.push_back(std::to_string(a.status) + " after " + std::to_string(attempt) + " busy answers: " + got.substr(0, 200));
            break;
          }
          const auto st = read_stream(sse_data(a.body), false);
          if (st.text != expected[which] || st.finish != "length" || !st.done || st.pieces != 6) ++mixed;
          ttft[static_cast<size_t>(k)].push_back(std::chrono::duration<double, std::milli>(first - start).count());
          break;
        }
      }
    });
  for (int k = 0; k < zmq_clients; ++k)
    threads.emplace_back([&, k] {
      hotcold::clients::client c(s.ep, 120s);
      for (int i = 0; i < per_client; ++i) {
        const int which = (k + i) % 4;
        const auto g = generate_through_busy(c, {{"prompt", prompts[which]}, {"n_predict", 6}, {"sampling", {{"temperature", 0}}}}, busy);
        if (!g) ++lost;
        else if (g->text != expected[which]) ++mixed;
      }
    });
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<double> all;
  for (const auto& l : ttft) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  ASSERT_FALSE(all.empty());
  const int total = (http_clients + zmq_clients) * per_client;
  const double p50 = all[all.size() / 2], p99 = all[all.size() * 99 / 100];
  std::printf("load: %d requests (%d HTTP streams, %d ZeroMQ) in %.2f s = %.1f requests/s; HTTP time to first piece p50 %.1f ms, p99 %.1f ms; %d busy answers retried\n",
              total, http_clients * per_client, zmq_clients * per_client, seconds, total / seconds, p50, p99, busy.load());
  RecordProperty("requests_per_s", std::to_string(total / seconds));
  RecordProperty("ttft_p50_ms", std::to_string(p50));
  RecordProperty("ttft_p99_ms", std::to_string(p99));
  std::string whys;
  for (const auto& w : why_lost) whys += w + "\n";
  EXPECT_EQ(lost, 0) << whys;
  EXPECT_EQ(mixed, 0);
  EXPECT_EQ(all.size(), static_cast<size_t>(http_clients * per_client));
  // Every request was counted by the one scheduler's metrics.
  EXPECT_GE(metric(http_get(s.port, "/metrics"), "hotcold_requests_total{outcome=\"length\"}"), total + 4);
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// llama-server's small endpoints and fields: /tokenize (with pieces; half a character as its bytes) and
// /detokenize, /props, /slots while a request runs, the API's keys guarding them; a timings object in
// every reply that adds up with usage; ignore_eos past a grammar's end.
TEST(OpenAI, LlamaServersEndpointsAndFields) {
  api_server s({"--chat-template", "llama2", "--parallel", "3"});
  auto body = [&](const std::string& target, const json& b) {
    const auto r = post(s.port, target, b.dump());
    EXPECT_EQ(r.status, 200) << target << " " << r.body;
    return json::parse(r.body, nullptr, false);
  };
  const json ids = body("/tokenize", {{"content", "Hello world"}, {"add_special", true}});
  EXPECT_EQ(ids["tokens"], json::parse("[1, 15043, 3186]"));
  EXPECT_EQ(body("/detokenize", {{"tokens", {15043, 3186}}})["content"], "Hello world");
  const json pieces = body("/tokenize", {{"content", "a\xF0\x9F\xA6\x99"}, {"with_pieces", true}});  // a llama: byte tokens
  ASSERT_GE(pieces["tokens"].size(), 2u) << pieces.dump();
  EXPECT_EQ(pieces["tokens"][0]["piece"], " a");
  bool bytes_seen = false;
  for (const auto& t : pieces["tokens"]) bytes_seen |= t["piece"].is_array();
  EXPECT_TRUE(bytes_seen) << pieces.dump();
  EXPECT_EQ(post(s.port, "/tokenize", R"({"content":"x"})", "").status, 401);  // (the API's key guards it)
  EXPECT_EQ(post(s.port, "/tokenize", R"({"text":"x"})").status, 400);
  const auto props = json::parse(split(http_request(s.port, "GET", "/props", "Authorization: Bearer " + key + "\r\n")).body);
  EXPECT_EQ(props["total_slots"], 3);
  EXPECT_EQ(props["default_generation_settings"]["n_ctx"], 2048);
  EXPECT_EQ(props["default_generation_settings"]["params"]["temperature"], 0.8);
  // /slots while a long request runs: one slot processing it.
  const int fd = open_request(s.port, "/v1/completions", {{"model", model_id}, {"prompt", "Once"}, {"max_tokens", 3000}, {"stream", true}, {"ignore_eos", true}});
  read_until(fd, "data: ");
  const auto slots = json::parse(split(http_request(s.port, "GET", "/slots", "Authorization: Bearer " + key + "\r\n")).body);
  ASSERT_EQ(slots.size(), 3u) << slots.dump();
  int busy = 0;
  for (const auto& k : slots) busy += k["is_processing"].get<bool>() && k["id_task"].get<int64_t>() >= 0 && k["n_cached"].get<int64_t>() > 0;
  EXPECT_EQ(busy, 1) << slots.dump();
  ::close(fd);
  // timings beside usage, whole and streamed.
  const json done = body("/v1/completions", {{"model", model_id}, {"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 0}});
  EXPECT_EQ(done["timings"]["predicted_n"], done["usage"]["completion_tokens"]);
  EXPECT_EQ(done["timings"]["prompt_n"].get<int>() + done["timings"]["cache_n"].get<int>(), done["usage"]["prompt_tokens"].get<int>());
  EXPECT_GT(done["timings"]["predicted_per_second"].get<double>(), 0.0);
  const auto streamed = sse_data(curl(s.port, "/v1/completions", {{"model", model_id}, {"prompt", "Once"}, {"max_tokens", 4}, {"stream", true}}));
  ASSERT_GE(streamed.size(), 2u);
  EXPECT_EQ(json::parse(streamed[streamed.size() - 2])["timings"]["predicted_n"], 4);
  // ignore_eos: past the end a grammar allows (only the end of the text may follow "a").
  const json grammar{{"model", model_id}, {"prompt", "Once"}, {"max_tokens", 5}, {"grammar", R"(root ::= "a")"}};
  EXPECT_EQ(body("/v1/completions", grammar)["usage"]["completion_tokens"], 1);
  json past = grammar;
  past["ignore_eos"] = true;
  const json p = body("/v1/completions", past);
  EXPECT_EQ(p["usage"]["completion_tokens"], 5) << p.dump();
  EXPECT_EQ(p["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// n > 1: several choices of one prompt, each what `hotcold run` gives with the request's seed plus its
// index; the later choices reuse the first's prompt (computed about once); streamed, each chunk
// names its choice and each choice ends once.
TEST(OpenAI, SeveralChoicesShareThePrompt) {
  api_server s({"--parallel", "4", "--chat-template", "llama2"});
  const double computed_before = metric(http_get(s.port, "/metrics"), "hotcold_prompt_tokens_computed_total");
  const std::string prompt = "The quick brown fox jumps over the lazy dog again and again";
  const json r = json::parse(curl(s.port, "/v1/completions", {{"model", model_id}, {"prompt", prompt}, {"max_tokens", 5}, {"n", 3}, {"seed", 40}}));
  ASSERT_EQ(r["choices"].size(), 3u) << r.dump();
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(r["choices"][k]["index"], k);
    EXPECT_EQ(r["choices"][k]["text"].get<std::string>() + "\n", run_stdout({"run", "-p", prompt, "-n", "5", "--seed", std::to_string(40 + k), "-t", "2"})) << k;
  }
  EXPECT_EQ(r["usage"]["completion_tokens"], 15);
  const int prompt_tokens = r["usage"]["prompt_tokens"];
  const double computed = metric(http_get(s.port, "/metrics"), "hotcold_prompt_tokens_computed_total") - computed_before;
  EXPECT_LT(computed, prompt_tokens + 3 * 2) << "the choices computed their prompt " << computed << " tokens";
  const auto events = sse_data(curl(s.port, "/v1/chat/completions", {{"model", model_id}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 3}, {"n", 2}, {"stream", true}}));
  std::map<int, int> finishes;
  for (const auto& e : events) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    for (const auto& c : chunk["choices"])
      if (c["finish_reason"].is_string()) ++finishes[c["index"].get<int>()];
  }
  EXPECT_EQ(finishes, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// Llama 3.1's tool format (serve --chat-template llama3.1): a call forced by tool_choice comes back as
// tool_calls, its arguments valid; with auto, a reply that is not a call is content.
TEST(OpenAI, ToolCallsInLlama31sFormat) {
  api_server s({"--chat-template", "llama3.1"});
  const json tool = json::parse(R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":)"
                                R"({"city":{"type":"string","maxLength":10},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]}}})");
  for (int seed : {1, 2, 3}) {
    const json r = json::parse(curl(s.port, "/v1/chat/completions", {{"model", model_id}, {"messages", {{{"role", "user"}, {"content", "Weather?"}}}},
                                                                    {"tools", {tool}}, {"tool_choice", "required"}, {"temperature", 1}, {"seed", seed}, {"max_tokens", 100}}));
    const json& c = r["choices"][0];
    EXPECT_EQ(c["finish_reason"], "tool_calls") << r.dump();
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.dump();
    EXPECT_TRUE(c["message"]["content"].is_null());
    const json args = json::parse(c["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args["city"].is_string() && args["days"].get<int>() >= 1 && args["days"].get<int>() <= 7) << args.dump();
  }
  const json prose = json::parse(curl(s.port, "/v1/chat/completions", {{"model", model_id}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                                                      {"tools", {tool}}, {"temperature", 0}, {"max_tokens", 5}}));
  EXPECT_EQ(prose["choices"][0]["finish_reason"], "length") << prose.dump();
  EXPECT_TRUE(prose["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// Mistral's v3 tool format (serve --chat-template mistral-v3): forced calls come back as tool_calls
// with ids of 9 letters or digits (what its template takes back); the conversation sent back with the
// call and its result goes on; a result without the id of its call is refused, naming the field.
TEST(OpenAI, ToolCallsInMistralsFormat) {
  api_server s({"--chat-template", "mistral-v3"});
  const json tool = json::parse(R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":)"
                                R"({"city":{"type":"string","maxLength":10},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]}}})");
  const json user{{"role", "user"}, {"content", "Weather?"}};
  for (int seed : {1, 2, 3}) {
    const json r = json::parse(curl(s.port, "/v1/chat/completions", {{"model", model_id}, {"messages", {user}}, {"tools", {tool}}, {"tool_choice", "required"},
                                                                    {"temperature", 1}, {"seed", seed}, {"max_tokens", 120}}));
    const json& c = r["choices"][0];
    EXPECT_EQ(c["finish_reason"], "tool_calls") << r.dump();
    ASSERT_GE(c["message"]["tool_calls"].size(), 1u) << r.dump();
    for (const auto& call : c["message"]["tool_calls"]) {
      const std::string id = call["id"];
      EXPECT_EQ(id.size(), 9u) << id;
      EXPECT_TRUE(std::all_of(id.begin(), id.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) != 0; })) << id;
      const json args = json::parse(call["function"]["arguments"].get<std::string>());
      EXPECT_TRUE(args["city"].is_string() && args["days"].get<int>() >= 1 && args["days"].get<int>() <= 7) << args.dump();
    }
    const json& call = c["message"]["tool_calls"][0];
    const json back{{"model", model_id}, {"tools", {tool}}, {"max_tokens", 3},
                    {"messages", {user, {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}}, {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "{\"temp\": 21}"}}}}};
    const json next = json::parse(curl(s.port, "/v1/chat/completions", back));
    EXPECT_GT(next["usage"]["prompt_tokens"].get<int>(), r["usage"]["prompt_tokens"].get<int>()) << next.dump();
    json no_id = back;
    no_id["messages"][2].erase("tool_call_id");
    const auto refused = post(s.port, "/v1/chat/completions", no_id.dump());
    EXPECT_EQ(refused.status, 400);
    EXPECT_NE(refused.body.find("tool_call_id"), std::string::npos) << refused.body;
  }
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// A generation that fails says why over HTTP as over ZeroMQ (it was a bare "ended early"): a file
// whose head's norm is NaN gives logits no text is made from; the 500 names the NaN, whole and
// streamed; the server goes on answering.
TEST(OpenAI, AFailedGenerationSaysWhy) {
  auto o = hotcold::test::small_options(2, 2);
  o.type = hotcold::tensor_type::f32;
  hotcold::test::gguf_edit e;
  e.tensor = [](std::string& n, hotcold::tensor_type&, std::vector<int64_t>&, std::vector<uint8_t>& bytes) {
    if (n == "output_norm.weight") std::fill_n(reinterpret_cast<float*>(bytes.data()), bytes.size() / 4, NAN);
    return true;
  };
  const std::string nan_model = hotcold::test::edited_copy(hotcold::test::make_model("openai_nan_base", o), "openai_nan", e);
  api_server s({"-m", nan_model});
  const std::string model = fs::path(nan_model).filename().string();
  const auto whole = post(s.port, "/v1/completions", json{{"model", model}, {"prompt", "Once"}, {"max_tokens", 3}}.dump());
  EXPECT_EQ(whole.status, 500) << whole.body;
  EXPECT_NE(whole.body.find("the generation ended early (error): the forward pass gave a logit of nan"), std::string::npos) << whole.body;
  const std::string streamed = curl(s.port, "/v1/completions", {{"model", model}, {"prompt", "Once"}, {"max_tokens", 3}, {"stream", true}});
  EXPECT_NE(streamed.find("logit of nan"), std::string::npos) << streamed;
  EXPECT_EQ(json::parse(split(http_get(s.port, "/health")).body)["status"], "ok");
  EXPECT_EQ(s.process.stop(), 0) << s.process.log();
}

// llama-server's command lines (docs/for-llama-cpp-users.md) serve as their users expect: --port (and
// --host) is the HTTP side, with no ZeroMQ port opened unasked; -ngl without a GPU warns and serves on
// the CPU; -fa, -ctk, -ctv, -np, -cb, --jinja are taken; --host with --http is refused by name.
TEST(OpenAI, LlamaServerCommandLinesServe) {
  for (const auto& extra : {std::vector<std::string>{}, {"-ngl", "99", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-c", "1024", "-np", "2", "-cb", "--jinja"}}) {
    const int port = free_port();
    std::vector<std::string> args{"--port", std::to_string(port), "-t", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    server_process s(args);
    for (int i = 0; i < 200 && s.log().find("listening on http://127.0.0.1:" + std::to_string(port)) == std::string::npos && !s.ended(); ++i)
      std::this_thread::sleep_for(50ms);
    ASSERT_NE(s.log().find("listening on http://127.0.0.1:" + std::to_string(port)), std::string::npos) << s.log();
    EXPECT_EQ(split(http_get(port, "/health")).status, 200);
    const auto r = split(http_request(port, "POST", "/v1/completions", "Content-Type: application/json\r\n",
                                      json{{"prompt", "Once"}, {"max_tokens", 3}, {"temperature", 0}}.dump()));
    EXPECT_EQ(r.status, 200) << r.body;
    for (int i = 0; i < 40 && s.log().find("hotcold serve: request") == std::string::npos; ++i) std::this_thread::sleep_for(50ms);
    EXPECT_NE(s.log().find(" from http:127.0.0.1: prompt "), std::string::npos) << "a line per request, as llama-server logs: " << s.log();
    EXPECT_NE(s.log().find(" generated, first token "), std::string::npos) << s.log();
    if (!extra.empty()) {
      EXPECT_NE(s.log().find("warning: -ngl 99: no GPU here"), std::string::npos) << s.log();
    }
    EXPECT_EQ(s.log().find("tcp://127.0.0.1:5555"), std::string::npos) << s.log();
    EXPECT_EQ(s.stop(), 0) << s.log();
  }
  server_process both({"--port", std::to_string(free_port()), "--http", "127.0.0.1:" + std::to_string(free_port())});
  EXPECT_EQ(both.wait_exit(10s), 2);
  EXPECT_NE(both.log().find("--http, or --host and --port: give one"), std::string::npos) << both.log();
}

}  // namespace
