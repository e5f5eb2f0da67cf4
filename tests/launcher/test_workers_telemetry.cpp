// Stages of layers on other processes in the telemetry (docs/distributed.md, docs/telemetry.md):
// /metrics, /api/stats, the dashboard and --trace-out.
#include <map>

#include "tests/launcher/workers_fixture.hpp"
#include "tests/server/dashboard_dom.hpp"

namespace hotcold::test {
namespace {

// Per-stage telemetry: /metrics has each stage's state, busy ratio, compute, a histogram of hops
// (one a step) and the bytes a token costs its link (a 128-wide file: 128 floats each way and a
// slot and position, 1040 bytes, whatever the step); promtool accepts it; /api/stats carries the
// same for the dashboard, which draws a row a stage; a silent worker reads 0 and gone; --trace-out
// has each stage's hops and layers, one a step.
TEST(Workers, StagesShowInMetricsStatsAndTraces) {
  const auto& f = files();
  worker_pair pair(f.dense);
  ASSERT_TRUE(pair.listening()) << pair.a.log() << pair.b.log();
  const std::string &wa = pair.wa, &wb = pair.wb;
  const std::string ep = tcp_endpoint();
  const int port = free_port();
  server_process serve({"-m", f.dense, "-c", "256", "-t", "1", "--parallel", "2", "--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "--workers",
                        wa + "," + wb});
  wait_ready(ep, &serve);
  hotcold::clients::client c(ep, 30s);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.generate({{"prompt", "Once upon a time"}, {"n_predict", 5}}).done.finish, "length");
  const std::string m = http_get(port, "/metrics");
  const std::string s1 = "{stage=\"1\",worker=\"" + wa + "\",layers=\"0-1\"}", s2 = "{stage=\"2\",worker=\"" + wb + "\",layers=\"2-3\"}";
  const double steps = metric(m, "hotcold_steps_total");
  EXPECT_GE(steps, 6);
  for (const auto& s : {s1, s2}) {
    EXPECT_EQ(metric(m, "hotcold_stage_up" + s), 1) << m;
    EXPECT_EQ(metric(m, "hotcold_stage_hop_seconds_count" + s), steps) << m;
    EXPECT_EQ(metric(m, "hotcold_stage_bytes_per_token" + s), 2 * 128 * 4 + 16) << m;
    EXPECT_GT(metric(m, "hotcold_stage_compute_seconds_total" + s), 0) << m;
    EXPECT_GE(metric(m, "hotcold_stage_busy_ratio" + s), 0) << m;
    double heartbeat = 0;  // (every 250 ms)
    for (int i = 0; i < 40 && heartbeat <= 0; ++i, std::this_thread::sleep_for(50ms)) heartbeat = metric(http_get(port, "/metrics"), "hotcold_stage_heartbeat_seconds" + s);
    EXPECT_GT(heartbeat, 0) << m;
  }
  const double tokens = metric(m, "hotcold_step_tokens_total");
  auto sent = s1;
  sent.insert(sent.size() - 1, ",direction=\"sent\"");
  EXPECT_EQ(metric(m, "hotcold_stage_bytes_total" + sent), tokens * (128 * 4 + 16)) << m;
  if (std::system("command -v promtool >/dev/null 2>&1") == 0) {
    const auto path = fs::temp_directory_path() / ("hotcold-stage-metrics-" + std::to_string(getpid()));
    std::ofstream(path) << m.substr(m.find("\r\n\r\n") + 4);
    EXPECT_EQ(std::system(("promtool check metrics < '" + path.string() + "'").c_str()), 0);
    fs::remove(path);
  }
  const auto stats_of = [&] {
    const std::string st = http_get(port, "/api/stats");
    return nlohmann::json::parse(st.substr(st.find("\r\n\r\n") + 4));
  };
  auto stats = stats_of();
  ASSERT_EQ(stats["pipeline"]["stages"].size(), 2u) << stats.dump();
  EXPECT_EQ(stats["pipeline"]["stages"][1]["where"], wb + " (layers 2-3)");
  EXPECT_EQ(stats["pipeline"]["stages"][1]["bytes_per_token"], 1040.0);
  EXPECT_TRUE(stats["pipeline"]["stages"][1]["up"].get<bool>());

  kill(pair.b.pid(), SIGSTOP);
  bool gone = false;
  for (int i = 0; i < 60 && !gone; ++i, std::this_thread::sleep_for(100ms)) gone = metric(http_get(port, "/metrics"), "hotcold_stage_up" + s2) == 0;
  EXPECT_TRUE(gone);
  // The dashboard (headless Chromium, while the second stage is silent): a row a stage, its state.
  if (!chromium_command().empty()) {
    const std::string dom = dashboard_dom(port, "/?frames=1&period_ms=200", 4000);
    EXPECT_EQ(dom.find("id=\"stages-card\" hidden"), std::string::npos) << dom.substr(0, 2000);
    EXPECT_NE(dom.find("<tr id=\"stage-1\"><td>1</td><td>" + wa + "</td><td>0-1</td><td>up</td>"), std::string::npos) << dom;
    EXPECT_NE(dom.find("<tr id=\"stage-2\" class=\"off\"><td>2</td><td>" + wb + "</td><td>2-3</td><td>gone</td>"), std::string::npos) << dom;
    EXPECT_NE(dom.find("<td>1.0 kB</td>"), std::string::npos);  // (1040 bytes a token)
  }
  kill(pair.b.pid(), SIGCONT);
  EXPECT_EQ(serve.stop(), 0) << serve.log();  // (a worker serves one coordinator at a time: the run below is another)

  const std::string trace = (fs::temp_directory_path() / ("hotcold-stage-trace-" + std::to_string(getpid()) + ".json")).string();
  const std::string one = run_capture(std::string(HOTCOLD_BIN) + " run -m '" + f.dense + "' -p 'Once upon a time' -n 4 -c 64 -t 1 --workers " + wa + "," + wb +
                                      " --split 1,3 --trace-out '" + trace + "' 2>&1 >/dev/null");
  std::ifstream in(trace);
  ASSERT_TRUE(in.good()) << one;
  const auto events = nlohmann::json::parse(in)["traceEvents"];
  std::map<std::pair<std::string, int64_t>, int> count;
  for (const auto& e : events)
    if (e["ph"] == "X") ++count[{e["name"].get<std::string>(), e["args"]["layer"].get<int64_t>()}];
  EXPECT_EQ(count[std::make_pair(std::string("stage_layers"), int64_t{0})], 4) << one;  // a prompt step and three decoded tokens
  EXPECT_EQ(count[std::make_pair(std::string("stage_layers"), int64_t{1})], 4);
  EXPECT_EQ(count[std::make_pair(std::string("stage_hop"), int64_t{1})], 8);
  fs::remove(trace);
}

}  // namespace
}  // namespace hotcold::test
