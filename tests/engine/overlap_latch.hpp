#pragma once
// Proves that the hot device and the cold pool work on a layer at the same time, by construction and
// not by the clock: each hot_ffn interval is held at its start until the cold_ffn interval of the
// same (step, layer) has begun, and each cold_ffn interval until the hot one has begun. A run that
// gets through has had both sides of every layer in progress at once; a runtime that computes the
// sides one after the other never lets the other side begin, so the first wait gives up (after
// `patience`, far beyond any scheduling delay), counts a miss, and no later wait holds anything.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include "engine/trace.hpp"

namespace hotcold::test {

class overlap_latch {
 public:
  explicit overlap_latch(std::chrono::seconds patience = std::chrono::seconds(20)) : patience_(patience) {}
  void attach(trace_recorder& t) {
    t.on_begin([this](const char* name, int64_t step, int64_t layer) { began(name, step, layer); });
  }
  int misses() const {
    std::lock_guard<std::mutex> l(m_);
    return misses_;
  }
  // (step, layer) pairs where both sides began while the other was waiting or running.
  size_t pairs_met() const {
    std::lock_guard<std::mutex> l(m_);
    size_t n = 0;
    for (const auto& k : hot_) n += cold_.count(k);
    return n;
  }

 private:
  using key = std::pair<int64_t, int64_t>;
  void began(const char* name, int64_t step, int64_t layer) {
    const bool hot = std::strcmp(name, "hot_ffn") == 0, cold = std::strcmp(name, "cold_ffn") == 0;
    if (!hot && !cold) return;
    std::unique_lock<std::mutex> l(m_);
    const key k{step, layer};
    (hot ? hot_ : cold_).insert(k);
    cv_.notify_all();
    if (broken_) return;
    const std::set<key>& other = hot ? cold_ : hot_;
    if (!cv_.wait_for(l, patience_, [&] { return other.count(k) > 0 || broken_; })) {
      ++misses_;
      broken_ = true;
      cv_.notify_all();
    }
  }
  const std::chrono::seconds patience_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::set<key> hot_, cold_;
  int misses_ = 0;
  bool broken_ = false;
};

}  // namespace hotcold::test
