// `hotcold serve` end to end over tcp loopback and ipc: the same text as `hotcold run`, cancel,
// a client that disappears, busy, malformed frames, tokenize round trips, and a clean stop on SIGTERM.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <algorithm>
#include <atomic>

#include <nlohmann/json.hpp>

#include "protocol/curve.hpp"
#include "tests/server/png.hpp"
#include "tests/server/dashboard_dom.hpp"
#include "tests/server/serve_process.hpp"
#include "clients/client.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using namespace hotcold::test;

class Serve : public testing::TestWithParam<const char*> {};

TEST_P(Serve, AnswersLikeRunAndSurvivesBadClients) {
  const std::string ep = endpoint_for(GetParam());
  server_process server({"--zmq", ep, "-t", "2", "--parallel", "2", "--max-queue", "1"});
  wait_ready(ep, &server);
  hotcold::clients::client c(ep, 60s);

  // The same text as `hotcold run`, greedy and seeded.
  for (auto [extra, seed] : {std::pair<json, std::string>{json{{"temperature", 0}}, ""}, {json{{"seed", 5}}, "5"}}) {
    auto g = c.generate({{"prompt", "Once upon a time"}, {"n_predict", 24}, {"sampling", extra}});
    std::vector<std::string> args{"run", "-p", "Once upon a time", "-n", "24", "-t", "2"};
    if (seed.empty()) args.insert(args.end(), {"--temp", "0"});
    else args.insert(args.end(), {"--seed", seed});
    EXPECT_EQ(g.text + "\n", run_stdout(args));
    EXPECT_EQ(g.done.finish, "length");
    EXPECT_EQ(g.done.generated_tokens, 24);
  }

  // Tokenize and detokenize round trip; model facts.
  auto t = c.call("tokenize", {{"text", "Hello world"}, {"add_special", true}});
  EXPECT_EQ(t["tokens"], json({1, 15043, 3186}));
  EXPECT_EQ(c.call("detokenize", {{"tokens", {15043, 3186}}})["text"], "Hello world");
  EXPECT_EQ(c.call("model_info")["model"]["n_vocab"], 32000);

  // A stop string ends the text where it begins, and the tokens sent stop there too.
  auto free_text = c.generate({{"prompt", "Once upon a time"}, {"n_predict", 40}, {"sampling", {{"temperature", 0}}}});
  ASSERT_GT(free_text.text.size(), 12u);
  const std::string stop = free_text.text.substr(6, 4);
  std::string streamed;
  auto cut = c.generate({{"prompt", "Once upon a time"}, {"n_predict", 40}, {"sampling", {{"temperature", 0}}}, {"stop", {stop}}},
                        [&](const hotcold::protocol::token_reply& t) { streamed += t.bytes; });
  EXPECT_EQ(cut.done.finish, "stop_string");
  EXPECT_EQ(cut.text, free_text.text.substr(0, free_text.text.find(stop)));
  EXPECT_EQ(streamed, cut.text);

  // Cancel within a step.
  auto cancelled = c.generate({{"prompt", "Once upon a time"}, {"n_predict", 1000}, {"sampling", {{"temperature", 0}}}}, {}, 3);
  EXPECT_EQ(cancelled.done.finish, "cancelled");
  EXPECT_LT(cancelled.done.generated_tokens, 1000);

  // A few hundred malformed frames: each answered, then well-formed requests are served.
  std::mt19937 rng(3);
  int answered = 0;
  for (int i = 0; i < 300; ++i) {
    std::string frame;
    switch (i % 5) {
      case 0: frame = std::string(rng() % 64, static_cast<char>(rng())); break;
      case 1: frame = R"({"v":1,"type":"generate","id":"x","prompt":5})"; break;
      case 2: frame = R"({"v":9,"type":"health","id":"y"})"; break;
      case 3: frame = R"([1,2,3])"; break;
      default: frame = R"({"v":1,"type":"generate","id":"z","tokens":[1,99999999]})"; break;
    }
    if (frame.empty()) frame.push_back('{');
    c.send_raw(frame);
  }
  for (auto r = c.next_reply(5s); r; r = c.next_reply(500ms)) answered += (*r)["type"] == "error";
  EXPECT_EQ(answered, 300);
  std::string big(64 << 20, 'a');  // past the socket's limit: the connection is dropped, the server stays
  {
    hotcold::clients::client rogue(ep, 2s);
    rogue.send_raw(big);
  }
  EXPECT_EQ(c.call("health")["status"], "ok");
  // The clients refuse a request over the server's frame limit before sending it, naming too_large
  // (the server closes a connection sending over 16 MiB unread, so no reply would come).
  hotcold::protocol::generate_request huge;
  huge.tokens.assign(300000, 1000);
  try {
    c.generate(huge);
    ADD_FAILURE() << "sent a frame over the limit";
  } catch (const hotcold::clients::client_error& e) {
    EXPECT_NE(std::string(e.what()).find("too_large: the request's frame has"), std::string::npos) << e.what();
  }
  if (std::system("/usr/bin/python3 -c 'import zmq' 2>/dev/null") == 0) {
    const std::string py = "/usr/bin/python3 -c \"import sys; sys.path.insert(0, '" + std::string(HOTCOLD_SOURCE_DIR) +
                           "/clients'); import hotcold_client as h; c = h.Client('" + ep + "', 5)\ntry: c.generate(prompt='x' * (2 << 20))\n"
                           "except h.HotcoldError as e: print(e)\"";
    std::string out;
    FILE* p = popen(py.c_str(), "r");
    char buf[512];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    pclose(p);
    EXPECT_NE(out.find("too_large: the request's frame has"), std::string::npos) << out;
  }

  // A client that disappears mid-generation frees its sequence; the queue refuses when full.
  {
    hotcold::clients::client gone(ep, 5s);
    gone.send_raw(json{{"v", 1}, {"type", "generate"}, {"id", "g"}, {"prompt", "Once"}, {"n_predict", 1500}, {"sampling", {{"temperature", 0}}}}.dump());
    ASSERT_TRUE(gone.next_reply(10s));  // accepted
  }
  for (int i = 0; i < 200; ++i) {
    if (c.call("health")["active"] == 0) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(c.call("health")["active"], 0) << "the vanished client's sequence was not freed";

  // Two slots and a queue of one: the fourth request in flight is busy.
  for (int i = 0; i < 3; ++i)
    c.send_raw(json{{"v", 1}, {"type", "generate"}, {"id", "b" + std::to_string(i)}, {"prompt", "Once"}, {"n_predict", 200}}.dump());
  auto busy = [&] {
    try {
      c.generate({{"prompt", "Once"}, {"n_predict", 4}});
      return std::string("served");
    } catch (const hotcold::clients::client_error& e) {
      return std::string(e.what());
    }
  }();
  EXPECT_NE(busy.find("busy"), std::string::npos) << busy;

  EXPECT_EQ(server.stop(), 0) << server.log();
  EXPECT_NE(server.log().find("cancelled"), std::string::npos) << server.log();
}

// The Python example client (clients/hotcold_client.py, written from protocol/README.md) prints what
// `hotcold run` prints. Skipped where Debian's python3 has no pyzmq.
TEST(Serve, PythonClientPrintsWhatRunPrints) {
  if (std::system("/usr/bin/python3 -c 'import zmq' 2>/dev/null") != 0) GTEST_SKIP() << "no python3-zmq";
  const std::string ep = tcp_endpoint();
  server_process server({"--zmq", ep, "-t", "2"});
  wait_ready(ep, &server);
  const std::string script = std::string(HOTCOLD_SOURCE_DIR) + "/clients/hotcold_client.py";
  std::string cmd = "/usr/bin/python3 '" + script + "' --endpoint " + ep + " -p 'Once upon a time' -n 20 --temp 0 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0);
  EXPECT_EQ(out, run_stdout({"run", "-p", "Once upon a time", "-n", "20", "--temp", "0", "-t", "2"}));
  EXPECT_EQ(server.stop(), 0) << server.log();
}

INSTANTIATE_TEST_SUITE_P(Transports, Serve, testing::Values("tcp", "ipc"));

// A grammar and a JSON schema through ZeroMQ: `hotcold client` and the Python client print what
// `hotcold run` prints with the same grammar or schema, seed and temperature 1 (only the constraint
// keeps a random-weight model's text in shape); a bad grammar or schema is refused naming its line
// and column or its keyword, and the server goes on; serve --grammar holds for requests naming none.
TEST(Serve, GrammarsAndSchemasThroughTheClients) {
  const std::string ep = tcp_endpoint();
  const std::string fallback = R"(root ::= "fallback " [a-c]{3})";
  server_process server({"--zmq", ep, "-t", "2", "--grammar", fallback, "--chat-template", "qwen2.5"});
  wait_ready(ep, &server);
  const std::string schema = R"({"type":"object","properties":{"n":{"type":"integer","minimum":-5,"maximum":300},"ok":{"type":"boolean"},)"
                             R"("tag":{"enum":["red","green"]}},"required":["n","ok","tag"],"additionalProperties":false})";
  const std::vector<std::string> common{"-p", "Once upon a time", "-n", "60", "--temp", "1", "--seed", "11"};
  auto with = [&](std::vector<std::string> head, const std::vector<std::string>& tail) {
    head.insert(head.end(), common.begin(), common.end());
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  const std::string reference = run_stdout(with({"run", "-t", "2"}, {"--json-schema", schema}));
  const auto parsed = nlohmann::json::parse(reference, nullptr, false);
  ASSERT_TRUE(parsed.is_object()) << reference;
  EXPECT_TRUE(parsed["n"].get<int>() >= -5 && parsed["n"].get<int>() <= 300 && parsed["ok"].is_boolean() && (parsed["tag"] == "red" || parsed["tag"] == "green"))
      << reference;
  EXPECT_EQ(run_stdout(with({"client", "--endpoint", ep}, {"--json-schema", schema})), reference);
  const std::string gbnf = R"(root ::= "The " ("cat" | "dog") " ate " [0-9]{1,2} " fish.")";
  const std::string run_text = run_stdout(with({"run", "-t", "2"}, {"--grammar", gbnf}));
  EXPECT_EQ(run_text.rfind("The ", 0), 0u) << run_text;
  EXPECT_EQ(run_stdout(with({"client", "--endpoint", ep}, {"--grammar", gbnf})), run_text);
  if (std::system("/usr/bin/python3 -c 'import zmq' 2>/dev/null") == 0) {
    const std::string script = std::string(HOTCOLD_SOURCE_DIR) + "/clients/hotcold_client.py";
    EXPECT_EQ(run_capture("/usr/bin/python3 '" + script + "' --endpoint " + ep + " -p 'Once upon a time' -n 60 --temp 1 --seed 11 --grammar '" + gbnf +
                          "' 2>/dev/null"),
              run_text);
    EXPECT_EQ(run_capture("/usr/bin/python3 '" + script + "' --endpoint " + ep + " -p 'Once upon a time' -n 60 --temp 1 --seed 11 --json-schema '" +
                          schema + "' 2>/dev/null"),
              reference);
  }
  // A tool call: the text as a user's message, the tools offered, a call forced (tool_choice required);
  // the calls print as JSON lines after the text, the same from both clients.
  const auto tools_file = fs::temp_directory_path() / ("hotcold-serve-tools-" + std::to_string(getpid()) + ".json");
  std::ofstream(tools_file) << R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":)"
                               R"({"city":{"type":"string","maxLength":10},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],)"
                               R"("additionalProperties":false}}}])";
  const std::vector<std::string> ask{"-p", "Weather?", "-n", "120", "--temp", "1", "--seed", "4", "--tools", tools_file.string(), "--tool-choice", "required"};
  std::vector<std::string> client_args{"client", "--endpoint", ep};
  client_args.insert(client_args.end(), ask.begin(), ask.end());
  const std::string called = run_stdout(client_args);
  const auto last_line = called.substr(called.rfind('\n', called.size() - 2) + 1);
  const auto call = nlohmann::json::parse(last_line, nullptr, false);
  ASSERT_TRUE(call.is_object()) << called;
  EXPECT_EQ(call["name"], "get_weather") << called;
  const auto args = nlohmann::json::parse(call["arguments"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(args.is_object()) << called;
  EXPECT_TRUE(args["city"].is_string() && args["days"].get<int>() >= 1 && args["days"].get<int>() <= 7) << called;
  EXPECT_EQ(called.rfind("<tool_call>", 0), 0u) << called;  // (the raw text streams first)
  if (std::system("/usr/bin/python3 -c 'import zmq' 2>/dev/null") == 0) {
    std::string cmd = "/usr/bin/python3 '" + std::string(HOTCOLD_SOURCE_DIR) + "/clients/hotcold_client.py' --endpoint " + ep;
    for (const auto& a : ask) cmd += " '" + a + "'";
    EXPECT_EQ(run_capture(cmd + " 2>/dev/null"), called);
  }
  fs::remove(tools_file);
  hotcold::clients::client c(ep, 60s);
  // Refused by name; the server goes on.
  auto refusal = [&](const nlohmann::json& fields) {
    try {
      c.generate(fields);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(refusal({{"prompt", "x"}, {"grammar", "root ::= \"a\" | b"}}).find("line 1 column 16: rule 'b' is used but never defined"), std::string::npos);
  EXPECT_NE(refusal({{"prompt", "x"}, {"json_schema", {{"type", "string"}, {"format", "email"}}}}).find("the format \"email\" is not supported"), std::string::npos);
  EXPECT_NE(refusal({{"prompt", "x"}, {"grammar", gbnf}, {"json_schema", {{"type", "string"}}}}).find("not both"), std::string::npos);
  EXPECT_NE(refusal({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", nlohmann::json::array({{{"type", "function"}, {"function", {{"name", "a b"}}}}})}})
                .find("tools[0].function.name"),
            std::string::npos);
  EXPECT_NE(refusal({{"prompt", "x"}, {"tool_choice", "required"}}).find("go with \"messages\""), std::string::npos);
  // A request naming no grammar follows serve --grammar.
  const auto g = c.generate({{"prompt", "x"}, {"n_predict", 30}, {"sampling", {{"temperature", 1}, {"seed", 3}}}});
  EXPECT_EQ(g.text.rfind("fallback ", 0), 0u) << g.text;
  EXPECT_EQ(g.text.size(), 12u) << g.text;
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// 32 clients at once, 50 requests each: every request answered, each stream its own (ids, indices
// in order, the text its prompt gives alone), none lost. Prints requests/s and latency percentiles.
TEST(Serve, LoadOf32ClientsTimes50Requests) {
  const std::string ep = tcp_endpoint();
  server_process server({"--zmq", ep, "-t", "2", "--parallel", "8", "--max-queue", "64"});
  wait_ready(ep, &server);
  const char* prompts[] = {"Once upon a time", "The quick brown fox", "Hello world", "In the beginning"};
  std::string expected[4];
  {
    hotcold::clients::client c(ep, 60s);
    for (int k = 0; k < 4; ++k) expected[k] = c.generate({{"prompt", prompts[k]}, {"n_predict", 6}, {"sampling", {{"temperature", 0}}}}).text;
  }
  constexpr int clients = 32, per_client = 50;
  std::vector<std::vector<double>> latency(clients);
  std::atomic<int> lost{0}, mixed{0}, busy{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int k = 0; k < clients; ++k)
    threads.emplace_back([&, k] {
      hotcold::clients::client c(ep, 120s);
      for (int i = 0; i < per_client; ++i) {
        const int which = (k + i) % 4;
        const auto start = std::chrono::steady_clock::now();
        int64_t next_index = 0;
        bool in_order = true;
        const auto g = generate_through_busy(c, {{"prompt", prompts[which]}, {"n_predict", 6}, {"sampling", {{"temperature", 0}}}}, busy,
                                             [&](const hotcold::protocol::token_reply& t) { in_order &= t.index == next_index++; });
        if (!g) ++lost;
        else if (g->text != expected[which] || !in_order || g->done.generated_tokens != 6) ++mixed;
        latency[static_cast<size_t>(k)].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      }
    });
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<double> all;
  for (const auto& l : latency) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  const double p50 = all[all.size() / 2], p99 = all[all.size() * 99 / 100];
  std::printf("load: %d requests in %.2f s = %.1f requests/s; latency p50 %.1f ms, p99 %.1f ms; %d busy answers retried\n", clients * per_client, seconds,
              clients * per_client / seconds, p50, p99, busy.load());
  RecordProperty("requests_per_s", std::to_string(clients * per_client / seconds));
  RecordProperty("p50_ms", std::to_string(p50));
  RecordProperty("p99_ms", std::to_string(p99));
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(mixed, 0);
  EXPECT_EQ(all.size(), static_cast<size_t>(clients * per_client));
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// Writes a small qwen3moe file (2 layers, 8 experts of 64 neurons, 2 a token) into dir; returns the
// server's arguments that serve it on sim below its experts' size (four sequences' KV cache first: a
// few of the 16 experts in device slots, a cache), or nothing when gen-model failed.
std::vector<std::string> small_moe_on_sim(const fs::path& dir, const std::string& ep, int port) {
  const std::string moe = (dir / "moe.gguf").string(), bin = HOTCOLD_BIN;
  if (std::system((bin + " gen-model --vocab " HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf --arch qwen3moe --act silu --embd 64 --layers 2 "
                         "--ffn 64 --heads 4 --kv-heads 2 --experts 8 --experts-used 2 -o '" + moe + "' >/dev/null 2>&1").c_str()) != 0)
    return {};
  return {"-m", moe, "-c", "64", "-t", "1", "--device", "sim", "--vram-budget", "0.0043", "--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port)};
}

// A mixture of experts served (docs/moe.md): /metrics holds each layer's expert histogram and the
// expert guess's counters, which agree with each other (every expert chosen in a layer after the
// first is one the guess is held to), and /api/stats the same per layer.
TEST(Serve, MixtureOfExpertsMetrics) {
  const auto dir = fs::temp_directory_path() / ("hotcold-serve-moe-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string ep = tcp_endpoint();
  const int port = free_port();
  const auto args = small_moe_on_sim(dir, ep, port);
  ASSERT_FALSE(args.empty()) << "gen-model failed";
  server_process server(args);
  wait_ready(ep, &server);
  hotcold::clients::client c(ep, 30s);
  for (int i = 0; i < 3; ++i) c.generate({{"prompt", "Hello there"}, {"n_predict", 5}, {"sampling", {{"temperature", 0}}}});
  const std::string m = http_get(port, "/metrics");
  auto value = [&](const std::string& series) {
    const auto at = m.find("\n" + series + " ");  // (a sample's line, not its # HELP)
    EXPECT_NE(at, std::string::npos) << series;
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + series.size() + 2));
  };
  for (int layer = 0; layer < 2; ++layer) {
    double sum = 0;
    for (int e = 0; e < 8; ++e) sum += value("hotcold_expert_choices_total{layer=\"" + std::to_string(layer) + "\",expert=\"" + std::to_string(e) + "\"}");
    EXPECT_GT(sum, 0);
    EXPECT_EQ(static_cast<int64_t>(sum) % 2, 0) << "two experts a token";
    // Every routed expert counted once, some of them held by a device slot, not all.
    const std::string l = "{layer=\"" + std::to_string(layer) + "\"}";
    EXPECT_EQ(value("hotcold_expert_routed_total" + l), sum);
    EXPECT_GT(value("hotcold_expert_device_hits_total" + l), 0);
    EXPECT_LT(value("hotcold_expert_device_hits_total" + l), sum);
    EXPECT_GE(value("hotcold_expert_uploads_total" + l), 0);
    if (layer == 1) {
      EXPECT_EQ(sum, value("hotcold_expert_guess_chosen_total{layer=\"1\"}"));
      EXPECT_LE(value("hotcold_expert_guess_found_total{layer=\"1\"}"), sum);
    }
  }
  EXPECT_EQ(value("hotcold_expert_guess_chosen_total{layer=\"0\"}"), 0);
  const std::string st = http_get(port, "/api/stats");
  const auto stats = json::parse(st.substr(st.find("\r\n\r\n") + 4));
  const auto& l1 = stats["pipeline"]["layers"][1];
  ASSERT_EQ(l1["experts"].size(), 8u);
  EXPECT_GE(l1["expert_guess_recall"].get<double>(), 0.0);
  EXPECT_LE(l1["expert_guess_recall"].get<double>(), 1.0);
  const double hit = stats["pipeline"]["expert_hit_rate"].get<double>();
  EXPECT_GT(hit, 0.0);
  EXPECT_LT(hit, 1.0);
  EXPECT_NEAR(hit, value("hotcold_expert_hit_ratio"), 1e-9);
  EXPECT_GE(stats["pipeline"]["expert_uploads_per_token"].get<double>(), 0.0);
  EXPECT_EQ(server.stop(), 0) << server.log();
  fs::remove_all(dir);
}

// --http: /metrics counts what was served and promtool accepts it; /health answers; others 404.
TEST(Serve, HttpMetricsAndHealth) {
  const std::string ep = tcp_endpoint();
  const int port = free_port();
  server_process server({"--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "-t", "2"});
  wait_ready(ep, &server);
  hotcold::clients::client c(ep, 30s);
  for (int i = 0; i < 3; ++i) c.generate({{"prompt", "Hello"}, {"n_predict", 5}, {"sampling", {{"temperature", 0}}}});
  c.send_raw("not json");
  ASSERT_TRUE(c.next_reply(5s));
  const std::string m = http_get(port, "/metrics");
  EXPECT_NE(m.find("200 OK"), std::string::npos) << m;
  EXPECT_NE(m.find("hotcold_requests_total{outcome=\"length\"} 3\n"), std::string::npos) << m;
  EXPECT_NE(m.find("hotcold_generated_tokens_total 15\n"), std::string::npos) << m;
  EXPECT_NE(m.find("hotcold_bad_frames_total 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("hotcold_time_to_first_token_seconds_count 3\n"), std::string::npos) << m;
  EXPECT_NE(m.find("hotcold_inter_token_latency_seconds_count 12\n"), std::string::npos) << m;
  // The pipeline's own: compute time by layer, stage and device, bytes read, mailboxes, the ceiling.
  for (const char* line : {"hotcold_compute_seconds_total{layer=\"0\",stage=\"attention\",device=\"cpu\"} ", "hotcold_compute_seconds_total{layer=\"output\",stage=\"output\",device=\"cpu\"} ",
                           "hotcold_device_busy_seconds_total{device=\"cpu\"} ", "hotcold_weight_read_bytes_total{memory=\"host\"} ",
                           "hotcold_actor_mailbox_depth{actor=\"scheduler\"} ", "hotcold_memory_bandwidth_ceiling_bytes_per_second ", "hotcold_steps_total "})
    EXPECT_NE(m.find(line), std::string::npos) << line;
  if (std::system("command -v promtool >/dev/null 2>&1") == 0) {
    const auto path = fs::temp_directory_path() / ("hotcold-serve-metrics-" + std::to_string(getpid()));
    std::ofstream(path) << m.substr(m.find("\r\n\r\n") + 4);
    EXPECT_EQ(std::system(("promtool check metrics < '" + path.string() + "'").c_str()), 0);
    fs::remove(path);
  }
  const std::string st = http_get(port, "/api/stats");
  const auto stats = json::parse(st.substr(st.find("\r\n\r\n") + 4));
  EXPECT_EQ(stats["requests_total"]["length"], 3);
  EXPECT_EQ(stats["generated_tokens_total"], 15);
  EXPECT_EQ(stats["time_to_first_token_seconds"]["count"], 3);
  EXPECT_GT(stats["time_to_first_token_seconds"]["mean"].get<double>(), 0);
  EXPECT_EQ(stats["status"], "ok");
  EXPECT_TRUE(stats["tokens_per_second"].is_number());
  EXPECT_EQ(stats["ttft_recent_s"]["count"], 3);
  EXPECT_LE(stats["ttft_recent_s"]["p50"].get<double>(), stats["ttft_recent_s"]["p99"].get<double>());
  // The default model is dense: every step ran each layer's whole FFN on the CPU.
  const auto& pl = stats["pipeline"];
  EXPECT_GE(pl["step_tokens"].get<int64_t>(), 15);
  EXPECT_GT(pl["layers"][0]["ffn_s"].get<double>(), 0);
  EXPECT_EQ(pl["hot_device"], "");
  EXPECT_GT(pl["bandwidth_ceiling_bytes_per_second"].get<double>(), 1e8);
  // Other methods are refused; a body announced over the limit (64 KiB for these pages) is answered 413
  // as soon as its length is read, and the server goes on.
  const std::string post = http_request(port, "POST", "/metrics", "Content-Type: text/plain\r\n", "x");
  EXPECT_NE(post.find("405"), std::string::npos) << post;
  const std::string big = http_request(port, "POST", "/metrics", "Content-Type: text/plain\r\nContent-Length: 102400\r\n");
  EXPECT_NE(big.find("413"), std::string::npos) << big.substr(0, 200);
  EXPECT_NE(big.find("over 65536 bytes"), std::string::npos) << big.substr(0, 200);
  EXPECT_NE(http_get(port, "/health").find("200 OK"), std::string::npos);
  // The event stream: two updates, then its end.
  const std::string ev = http_get(port, "/api/events?frames=2&period_ms=50");
  EXPECT_NE(ev.find("text/event-stream"), std::string::npos) << ev.substr(0, 300);
  EXPECT_NE(ev.find("\"frame\":2"), std::string::npos);
  EXPECT_EQ(ev.find("\"frame\":3"), std::string::npos);
  EXPECT_NE(ev.find("event: end"), std::string::npos);
  EXPECT_NE(http_get(port, "/api/events?frames=-1").find("400"), std::string::npos);
  EXPECT_NE(http_get(port, "/").find("id=\"tokens-per-second\""), std::string::npos);
  // A client that connects and says nothing, and one that sends half a request, hold up no one; an
  // endless event stream left open does not keep the server from stopping.
  auto connect_to = [&](const std::string& send) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    if (!send.empty()) {
      EXPECT_EQ(write(fd, send.data(), send.size()), static_cast<ssize_t>(send.size()));
    }
    return fd;
  };
  const int silent = connect_to(""), half = connect_to("GET /metr"), endless = connect_to("GET /api/events HTTP/1.0\r\n\r\n");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(http_get(port, "/health").find("\"status\":\"ok\""), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  const std::string h = http_get(port, "/health");
  EXPECT_NE(h.find("\"status\":\"ok\""), std::string::npos) << h;
  EXPECT_NE(http_get(port, "/elsewhere").find("404"), std::string::npos);
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(server.stop(), 0) << server.log();
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 5s);
  for (int fd : {silent, half, endless}) close(fd);
}

// serve --record writes one line per request; replay sends them again with their inter-arrival
// times and reports the latencies (and, with --compare, the recorded ones beside them).
TEST(Serve, RecordAndReplay) {
  const auto dir = fs::temp_directory_path() / ("hotcold-replay-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string ep = tcp_endpoint();
  const auto trace = (dir / "trace.jsonl").string(), report = (dir / "report.json").string();
  server_process server({"--zmq", ep, "--record", trace, "-t", "2"});
  wait_ready(ep, &server);
  {
    hotcold::clients::client c(ep, 30s);
    for (int i = 0; i < 5; ++i) {
      c.generate({{"prompt", "Once upon a time " + std::to_string(i)}, {"n_predict", 6}, {"sampling", {{"temperature", 0}}}});
      std::this_thread::sleep_for(50ms);
    }
  }
  std::ifstream in(trace);
  int lines = 0;
  double last_arrival = -1;
  for (std::string line; std::getline(in, line); ++lines) {
    auto j = json::parse(line);
    EXPECT_GT(j["arrival_s"].get<double>(), last_arrival);
    last_arrival = j["arrival_s"].get<double>();
    EXPECT_EQ(j["request"]["n_predict"], 6);
    EXPECT_TRUE(j["request"]["sampling"]["seed"].is_number());
    EXPECT_EQ(j["generated_tokens"], 6);
    EXPECT_EQ(j["itl_s"].size(), 5u);
    EXPECT_GT(j["ttft_s"].get<double>(), 0);
    EXPECT_GE(j["e2e_s"].get<double>(), j["ttft_s"].get<double>());
  }
  EXPECT_EQ(lines, 5);
  const std::string out = run_stdout({"replay", "--trace", trace, "--endpoint", ep, "--speed", "4", "--report", report, "--compare"});
  EXPECT_NE(out.find("| ttft_s |"), std::string::npos) << out;
  std::ifstream rin(report);
  json r = json::parse(rin);
  EXPECT_EQ(r["requests"], 5);
  EXPECT_EQ(r["failed"], 0);
  for (const char* k : {"ttft_s", "itl_s", "e2e_s"})
    for (const char* q : {"p50", "p95", "p99", "mean", "max"}) {
      EXPECT_TRUE(r[k][q].is_number()) << k << " " << q;
      EXPECT_TRUE(r["recorded"][k][q].is_number()) << k << " " << q;
    }
  EXPECT_EQ(r["itl_s"]["n"], 25);
  EXPECT_LE(r["ttft_s"]["p50"].get<double>(), r["ttft_s"]["max"].get<double>());
  EXPECT_EQ(server.stop(), 0) << server.log();
  fs::remove_all(dir);
}

// The server's limits and ids: --max-prompt-tokens, --max-tokens, an id already in flight, a cancel
// of an unknown id, a token id outside the vocabulary.
TEST(Serve, LimitsAndIdsAreEnforced) {
  const std::string ep = tcp_endpoint();
  server_process server({"--zmq", ep, "-t", "2", "--max-prompt-tokens", "4", "--max-tokens", "8"});
  wait_ready(ep, &server);
  hotcold::clients::client c(ep, 30s);
  auto error_of = [&](const json& request) {
    try {
      c.generate(request);
      return std::string("served");
    } catch (const hotcold::clients::client_error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(error_of({{"prompt", "one two three four five six"}, {"n_predict", 2}}).find("too_large"), std::string::npos);
  EXPECT_NE(error_of({{"prompt", "Hi"}, {"n_predict", 9}}).find("invalid_field"), std::string::npos);
  EXPECT_NE(error_of({{"tokens", {1, 32000}}, {"n_predict", 2}}).find("outside the vocabulary"), std::string::npos);
  EXPECT_EQ(error_of({{"prompt", "Hi"}, {"n_predict", 8}}), "served");
  const auto twice = json{{"v", 1}, {"type", "generate"}, {"id", "same"}, {"prompt", "Hi"}, {"n_predict", 8}}.dump();
  c.send_raw(twice);
  c.send_raw(twice);
  bool duplicate = false;
  for (auto r = c.next_reply(5s); r; r = c.next_reply(1s)) duplicate |= (*r)["type"] == "error" && (*r)["code"] == "duplicate_id";
  EXPECT_TRUE(duplicate);
  c.send_raw(json{{"v", 1}, {"type", "cancel"}, {"id", "never-sent"}}.dump());
  auto r = c.next_reply(5s);
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["code"], "not_found");
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(Serve, RefusesRemoteAddressesWithoutAllowRemoteAndKeys) {
  server_process bare({"--zmq", "tcp://0.0.0.0:5999"});
  EXPECT_EQ(bare.wait_exit(30s), 2) << bare.log();
  EXPECT_NE(bare.log().find("--allow-remote"), std::string::npos) << bare.log();
  server_process no_keys({"--zmq", "tcp://0.0.0.0:5999", "--allow-remote"});
  EXPECT_EQ(no_keys.wait_exit(30s), 2) << no_keys.log();
  EXPECT_NE(no_keys.log().find("--curve-key"), std::string::npos) << no_keys.log();
}

// CURVE: a client whose key is on the allow list is served; one with another key, or without CURVE,
// gets nothing (the handshake fails) and the server counts the refused key.
TEST(Serve, CurveLetsInOnlyAllowedClients) {
  const auto dir = fs::temp_directory_path() / ("hotcold-keys-" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const char* who : {"server", "alice", "mallory"}) run_stdout({"keygen", "-o", (dir / who).string()});
  fs::copy_file(dir / "alice.pub", dir / "allowed", fs::copy_options::overwrite_existing);
  EXPECT_EQ(fs::status(dir / "server.key").permissions() & fs::perms::group_read, fs::perms::none);
  const int port = free_port();
  const std::string ep = "tcp://0.0.0.0:" + std::to_string(port);
  const std::string local = "tcp://127.0.0.1:" + std::to_string(port);
  server_process server({"--zmq", ep, "--allow-remote", "--curve-key", (dir / "server.key").string(), "--curve-clients", (dir / "allowed").string(), "-t", "2"});
  auto keys = [&](const char* who) {
    const auto mine = hotcold::protocol::read_keypair((dir / (std::string(who) + ".key")).string());
    return hotcold::clients::client::curve{hotcold::protocol::read_public_key((dir / "server.pub").string()), mine.public_key, mine.secret_key};
  };
  bool served = false;
  for (int i = 0; i < 120 && !served; ++i) {
    try {
      hotcold::clients::client alice(local, 500ms, keys("alice"));
      served = alice.call("health")["status"] == "ok";
    } catch (const hotcold::clients::client_error&) {
    }
  }
  EXPECT_TRUE(served) << server.log();
  hotcold::clients::client mallory(local, 1500ms, keys("mallory"));
  EXPECT_THROW(mallory.call("health"), hotcold::clients::client_error);
  hotcold::clients::client plain(local, 1500ms);
  EXPECT_THROW(plain.call("health"), hotcold::clients::client_error);
  EXPECT_EQ(server.stop(), 0) << server.log();
  EXPECT_NE(server.log().find("keys refused"), std::string::npos) << server.log();
  EXPECT_EQ(server.log().find(" 0 keys refused"), std::string::npos) << server.log();
  fs::remove_all(dir);
}

}  // namespace


// The dashboard in headless Chromium while requests run, on a sparse model whose hot neurons are on
// the sim device: the page follows the event stream to its end (?frames=N) and shows numbers that
// agree with /api/stats; the screenshot shows the per-layer hot and cold bars in their colours.
TEST(Serve, DashboardInHeadlessChromium) {
  const std::string chromium = run_capture("command -v chromium || command -v chromium-browser");
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  const auto dir = fs::temp_directory_path() / ("hotcold-dashboard-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string dense = (dir / "tiny.gguf").string(), sparse = (dir / "tiny-sparse.gguf").string();
  const std::string bin = HOTCOLD_BIN;
  ASSERT_EQ(std::system((bin + " gen-model --vocab " HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf --embd 256 --layers 4 --ffn 1024 --kv-heads 4 -o '" +
                         dense + "' >/dev/null 2>&1").c_str()), 0);
  ASSERT_EQ(std::system((bin + " prepare -m '" + dense + "' -o '" + sparse + "' --tokens 256 -t 2 --vram-budget 0.019 -c 64 >/dev/null 2>&1").c_str()), 0);
  ASSERT_TRUE(fs::exists(sparse + ".generated.gpuidx"));

  const std::string ep = tcp_endpoint();
  const int port = free_port();
  server_process server({"-m", sparse, "--device", "sim", "--vram-budget", "0.019", "-c", "64", "-t", "1", "--recall-every", "4", "--zmq", ep, "--http",
                         "127.0.0.1:" + std::to_string(port)});
  wait_ready(ep, &server);
  // Requests run all along: two clients, one after another each.
  std::atomic<bool> stop{false};
  std::atomic<int> done{0};
  std::vector<std::thread> load;
  for (int k = 0; k < 2; ++k)
    load.emplace_back([&, k] {
      hotcold::clients::client c(ep, 30s);
      while (!stop) {
        c.generate({{"prompt", k ? "Once upon a time" : "The cat sat on the"}, {"n_predict", 48}, {"sampling", {{"temperature", 0}}}});
        ++done;
      }
    });
  while (done < 2) std::this_thread::sleep_for(20ms);

  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/?frames=4&period_ms=250";
  const std::string flags = " --headless --no-sandbox --disable-gpu --disable-background-networking --user-data-dir='" + (dir / "profile").string() +
                            "' --virtual-time-budget=10000 --window-size=1200,1400 --hide-scrollbars ";
  const std::string cmd = "timeout 120 " + chromium.substr(0, chromium.find('\n')) + flags;
  const std::string dom = run_capture(cmd + "--dump-dom '" + url + "' 2>/dev/null");
  const std::string shot = (dir / "dashboard.png").string();
  std::system((cmd + "--screenshot='" + shot + "' '" + url + "' >/dev/null 2>&1").c_str());
  const std::string st = http_get(port, "/api/stats");
  const std::string metrics_text = http_get(port, "/metrics");
  stop = true;
  for (auto& t : load) t.join();
  const auto stats = json::parse(st.substr(st.find("\r\n\r\n") + 4));

  // The stream ran its four updates and ended; the numbers are live, and agree with /api/stats.
  ASSERT_NE(dom.find("tokens-per-second"), std::string::npos) << dom.substr(0, 2000);
  EXPECT_EQ(element_text(dom, "frame"), "4");
  EXPECT_EQ(element_text(dom, "status"), "ended after 4 updates");
  EXPECT_EQ(element_text(dom, "hot-device"), "sim");
  const double tps = element_number(dom, "tokens-per-second");
  EXPECT_GT(tps, 0);
  const double p50 = element_number(dom, "ttft-p50"), p95 = element_number(dom, "ttft-p95"), p99 = element_number(dom, "ttft-p99");
  EXPECT_GT(p50, 0);
  EXPECT_LE(p50, p95);
  EXPECT_LE(p95, p99);
  EXPECT_GT(element_number(dom, "itl-p50"), 0);
  const double recall = element_number(dom, "predictor-recall");
  EXPECT_GT(recall, 0.9);
  EXPECT_LE(recall, 1.0);
  EXPECT_NEAR(recall, stats["pipeline"]["predictor_recall"].get<double>(), 0.02);
  const double hot_hit = element_number(dom, "hot-hit-ratio");
  EXPECT_GT(hot_hit, 0.3);  // the placement puts most firings on the device
  EXPECT_LT(hot_hit, 1.0);
  EXPECT_NEAR(hot_hit, stats["pipeline"]["hot_hit_ratio"].get<double>(), 0.05);
  const double active = element_number(dom, "active-ratio");
  EXPECT_GT(active, 0.02);
  EXPECT_LT(active, 0.5);
  EXPECT_GE(element_number(dom, "queue-depth"), 0);
  EXPECT_GE(element_number(dom, "active-sequences"), 1);
  EXPECT_GT(element_number(dom, "bytes-per-token"), 0);
  EXPECT_GT(element_number(dom, "bandwidth-ceiling"), 0.5);  // GB/s
  EXPECT_GE(element_number(dom, "device-util-sim"), 0);
  EXPECT_GT(element_number(dom, "device-util-cpu"), 0);
  // Four layers, each with a hot and a cold bar of some height.
  size_t hot_bars = 0, cold_bars = 0;
  for (size_t at = 0; (at = dom.find("class=\"bar-hot\"", at)) != std::string::npos; ++at) ++hot_bars;
  for (size_t at = 0; (at = dom.find("class=\"bar-cold\"", at)) != std::string::npos; ++at) ++cold_bars;
  EXPECT_EQ(hot_bars, 4u);
  EXPECT_EQ(cold_bars, 4u);
  // The model, where its parts run and the settings, as /api/stats says them; the legend names where
  // attention and the head run (it said "(CPU)" while the sim device held them); the last minutes'
  // graphs drawn from the server's samples.
  EXPECT_EQ(element_text(dom, "model-file"), "tiny-sparse.gguf");
  EXPECT_EQ(element_text(dom, "model-architecture"), stats["model"]["architecture"].get<std::string>());
  EXPECT_EQ(element_number(dom, "model-layers"), stats["model"]["layers"].get<double>());
  EXPECT_EQ(element_text(dom, "model-mode"), "sparse (predictors)");
  EXPECT_EQ(element_text(dom, "place-attention"), stats["placement"]["attention"].get<std::string>());
  EXPECT_EQ(element_text(dom, "place-hot-ffn"), "sim");
  EXPECT_EQ(element_text(dom, "legend-attention"), stats["placement"]["attention"].get<std::string>());
  EXPECT_EQ(element_text(dom, "legend-head"), stats["placement"]["head"].get<std::string>());
  EXPECT_EQ(element_number(dom, "set-ctx"), stats["settings"]["n_ctx"].get<double>());
  EXPECT_EQ(element_text(dom, "set-kv"), stats["settings"]["kv_cache"].get<std::string>());
  EXPECT_GT(std::atoi(element_attribute(dom, "spark-tps", "data-points").c_str()), 0) << "the tokens/s graph has samples";
  EXPECT_GT(std::atoi(element_attribute(dom, "spark-ttft", "data-points").c_str()), 0);
  EXPECT_EQ(element_text(dom, "spark-experts-now"), "none");  // (not a mixture)

  // The screenshot: the page's size, with bars in the hot (#e8590c) and cold (#1971c2) colours.
  const auto img = hotcold::test::read_png(shot);
  EXPECT_EQ(img.width, 1200u);
  EXPECT_EQ(img.height, 1400u);
  const size_t hot_px = img.count(0xe8590c), cold_px = img.count(0x1971c2);
  // (Bars' heights follow each side's seconds: with attention on the device too, the hot rows are
  // fewer and the hot bars shorter than the cold ones; some hundreds of pixels each.)
  EXPECT_GT(hot_px, 200u);
  EXPECT_GT(cold_px, 200u);

  // With a hot device every family of the exposition has its series; promtool accepts them.
  for (const char* line : {"hotcold_compute_seconds_total{layer=\"3\",stage=\"hot_ffn\",device=\"sim\"} ", "hotcold_device_busy_seconds_total{device=\"sim\"} ",
                           "hotcold_hot_hit_ratio ", "hotcold_predictor_recall_ratio ", "hotcold_weight_read_bytes_total{memory=\"device\"} "})
    EXPECT_NE(metrics_text.find(line), std::string::npos) << line;
  if (std::system("command -v promtool >/dev/null 2>&1") == 0) {
    const auto path = dir / "metrics.txt";
    std::ofstream(path) << metrics_text.substr(metrics_text.find("\r\n\r\n") + 4);
    EXPECT_EQ(std::system(("promtool check metrics < '" + path.string() + "'").c_str()), 0);
  }
  EXPECT_EQ(server.stop(), 0) << server.log();
  fs::remove_all(dir);
}

// The chat page (/chat) in Chromium as a person uses it (tests/node/chat_page.mjs): a message typed and
// sent with Enter streams the reply the API gives the same conversation; Stop ends a long reply where
// it is; a reload keeps the conversation and Clear empties it; the screenshot shows both bubbles. And
// the dashboard of this dense file says "none" for its predictor (it said 0.0000).
TEST(Serve, ChatPageInChromium) {
  const std::string chromium = run_capture("command -v chromium || command -v chromium-browser");
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  ASSERT_TRUE(fs::exists(fs::path(HOTCOLD_SOURCE_DIR) / "tests/node/node_modules/puppeteer-core/package.json")) << "run scripts/install-deps.sh";
  const int port = free_port();
  server_process server({"--http", "127.0.0.1:" + std::to_string(port), "-t", "2"});
  for (int i = 0; i < 200 && server.log().find("listening on") == std::string::npos && !server.ended(); ++i) std::this_thread::sleep_for(50ms);
  const auto dir = fs::temp_directory_path() / ("hotcold-chat-page-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string shot = (dir / "chat.png").string();
  const std::string out = run_capture("HOTCOLD_URL=http://127.0.0.1:" + std::to_string(port) + " CHROMIUM=" + chromium.substr(0, chromium.find('\n')) +
                                      " SHOT='" + shot + "' timeout 120 node " + (fs::path(HOTCOLD_SOURCE_DIR) / "tests/node/chat_page.mjs").string() + " 2>&1");
  const json r = json::parse(out, nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << out << server.log();
  const auto api = split(http_request(port, "POST", "/v1/chat/completions", "Content-Type: application/json\r\n",
                                      json{{"messages", {{{"role", "user"}, {"content", "Hello there"}}}}, {"max_tokens", 8}, {"temperature", 0}}.dump()));
  ASSERT_EQ(api.status, 200) << api.body;
  EXPECT_EQ(r["first"], json::parse(api.body)["choices"][0]["message"]["content"]) << out;
  EXPECT_NE(r["first_stats"].get<std::string>().find("8 tokens in"), std::string::npos) << out;
  EXPECT_NE(r["stopped_stats"].get<std::string>().find("stopped"), std::string::npos) << out;
  EXPECT_EQ(r["after_reload"], (json{"user", "assistant", "user", "assistant"})) << out;
  EXPECT_EQ(r["after_clear"], 0);
  const auto img = hotcold::test::read_png(shot);
  EXPECT_GT(img.count(0x1971c2), 500u);  // the user's bubble
  EXPECT_GT(img.count(0xf1f3f5), 500u);  // the assistant's
  // The dashboard of a dense file: its predictor is "none".
  const std::string dom = dashboard_dom(port, "/?frames=2&period_ms=200", 4000);
  EXPECT_EQ(element_text(dom, "predictor-recall"), "none") << dom.substr(0, 1000);
  EXPECT_EQ(element_text(dom, "hot-hit-ratio"), "none");
  EXPECT_EQ(element_text(dom, "place-attention"), "cpu");
  EXPECT_EQ(server.stop(), 0) << server.log();
  fs::remove_all(dir);
}

// A mixture's card on the dashboard (headless Chromium): shown, its hit rate and uploads those of
// /api/stats, its histogram one row a layer and one column an expert.
TEST(Serve, DashboardShowsExperts) {
  if (chromium_command().empty()) GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  const auto dir = fs::temp_directory_path() / ("hotcold-dashboard-moe-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string ep = tcp_endpoint();
  const int port = free_port();
  const auto args = small_moe_on_sim(dir, ep, port);
  ASSERT_FALSE(args.empty()) << "gen-model failed";
  server_process server(args);
  wait_ready(ep, &server);
  hotcold::clients::client c(ep, 30s);
  for (int i = 0; i < 3; ++i) c.generate({{"prompt", "Hello there"}, {"n_predict", 8}, {"sampling", {{"temperature", 0}}}});
  const std::string dom = dashboard_dom(port, "/?frames=2&period_ms=200", 6000);
  const std::string st = http_get(port, "/api/stats");
  const auto stats = json::parse(st.substr(st.find("\r\n\r\n") + 4));
  ASSERT_NE(dom.find("experts-card"), std::string::npos) << dom.substr(0, 2000);
  EXPECT_EQ(dom.find("id=\"experts-card\" hidden"), std::string::npos) << "the card stays hidden";
  EXPECT_NEAR(element_number(dom, "expert-hit-rate"), stats["pipeline"]["expert_hit_rate"].get<double>(), 1e-3);
  EXPECT_NEAR(element_number(dom, "expert-uploads"), stats["pipeline"]["expert_uploads_per_token"].get<double>(), 0.01);
  EXPECT_NE(dom.find("data-layers=\"2\""), std::string::npos);
  EXPECT_NE(dom.find("data-experts=\"8\""), std::string::npos);
  EXPECT_EQ(server.stop(), 0) << server.log();
  fs::remove_all(dir);
}
