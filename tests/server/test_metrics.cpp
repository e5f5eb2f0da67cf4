// The metrics' text exposition: the values observed, in Prometheus' format, accepted by promtool.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "server/metrics.hpp"

namespace hotcold::server {
namespace {

TEST(Metrics, TextHoldsWhatWasObserved) {
  metrics m;
  m.request_done("length", 5, 16);
  m.request_done("length", 3, 8);
  m.request_done("cancelled", 4, 2);
  m.time_to_first_token(0.004);
  m.time_to_first_token(0.2);
  for (int i = 0; i < 10; ++i) m.inter_token_latency(0.003);
  m.bad_frame();
  m.set_load(3, 7);
  const std::string t = m.text();
  auto has = [&](const std::string& line) { return t.find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("hotcold_requests_total{outcome=\"length\"} 2")) << t;
  EXPECT_TRUE(has("hotcold_requests_total{outcome=\"cancelled\"} 1")) << t;
  EXPECT_TRUE(has("hotcold_prompt_tokens_total 12")) << t;
  EXPECT_TRUE(has("hotcold_generated_tokens_total 26")) << t;
  EXPECT_TRUE(has("hotcold_bad_frames_total 1")) << t;
  EXPECT_TRUE(has("hotcold_active_sequences 3")) << t;
  EXPECT_TRUE(has("hotcold_queue_depth 7")) << t;
  EXPECT_TRUE(has("hotcold_time_to_first_token_seconds_count 2")) << t;
  EXPECT_TRUE(has("hotcold_time_to_first_token_seconds_bucket{le=\"0.005\"} 1")) << t;  // cumulative
  EXPECT_TRUE(has("hotcold_time_to_first_token_seconds_bucket{le=\"0.25\"} 2")) << t;
  EXPECT_TRUE(has("hotcold_inter_token_latency_seconds_bucket{le=\"0.0025\"} 0")) << t;
  EXPECT_TRUE(has("hotcold_inter_token_latency_seconds_bucket{le=\"0.005\"} 10")) << t;
  EXPECT_TRUE(has("# TYPE hotcold_time_to_first_token_seconds histogram")) << t;
}

// Debian's promtool (package prometheus) accepts the exposition without a complaint.
TEST(Metrics, PromtoolAcceptsTheText) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "no promtool";
  metrics m;
  m.request_done("stop", 5, 16);
  m.time_to_first_token(0.01);
  m.inter_token_latency(0.02);
  const auto path = std::filesystem::temp_directory_path() / ("hotcold-metrics-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(path) << m.text();
  FILE* p = popen(("promtool check metrics < '" + path.string() + "' 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  std::filesystem::remove(path);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "") << "promtool's remarks: " << out;
}

}  // namespace
}  // namespace hotcold::server
