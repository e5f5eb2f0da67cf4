#pragma once
// A fixed set of worker threads for splitting one operation (a matrix-vector product, the heads of
// attention) across cores. The caller's thread takes part. Between jobs workers spin briefly, then
// sleep on an atomic wait, so a token's many small jobs do not pay a wake-up each.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace hotcold {

class thread_pool {
 public:
  // Workers are named `name`-1, `name`-2, ... (what traces and debuggers show).
  explicit thread_pool(int n_threads, const std::string& name = "hotcold-pool");
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end) over [0, n) split into one contiguous chunk per thread; returns when all
  // chunks are done. Chunks are multiples of `grain` (except the last).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void worker(int index);
  void run_chunk(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0;
  int64_t grain_ = 1;
};

}  // namespace hotcold
