// Busy time from a trace: unions per name, the span, and the time two names overlap.
#include <gtest/gtest.h>

#include <thread>

#include "engine/trace.hpp"

namespace hotcold {
namespace {

TEST(Trace, BusyTimeCountsOverlapsOnce) {
  trace_recorder r;
  const auto t0 = trace_recorder::clock::now();
  auto at = [&](int ms) { return t0 + std::chrono::milliseconds(ms); };
  // hot: [0, 10) and [5, 20) (one busy piece of 20 ms); cold: [15, 30) on another thread; attention [40, 50).
  r.record("hot_ffn", 1, 0, 1, at(0), at(10));
  r.record("hot_ffn", 1, 0, 1, at(5), at(20));
  std::thread([&] { r.record("cold_ffn", 1, 0, 1, at(15), at(30)); }).join();
  r.record("attention", 2, 0, 1, at(40), at(50));
  const auto b = busy_time(r.entries());
  EXPECT_NEAR(b.span_s, 0.050, 1e-9);
  EXPECT_NEAR(b.busy_s.at("hot_ffn"), 0.020, 1e-9);
  EXPECT_NEAR(b.busy_s.at("cold_ffn"), 0.015, 1e-9);
  EXPECT_NEAR(b.busy_s.at("attention"), 0.010, 1e-9);
  EXPECT_NEAR(b.both_s, 0.005, 1e-9);  // [15, 20)
  EXPECT_EQ(busy_time({}).span_s, 0.0);
}

}  // namespace
}  // namespace hotcold
