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
  // Pins worker i (1..n-1) to the i-th CPU this process may run on (wrapping around), so each keeps
  // its caches and the memory it reads. Returns the first CPU, which no worker takes (for the threads
  // that call parallel_for), or -1 where affinity cannot be set.
  int pin_workers();

  // Calls fn(begin, end) over [0, n) in contiguous chunks (multiples of `grain`, except the last),
  // each thread taking the next chunk when it is done with one — so a thread slowed by a neighbour on
  // its core does less, not the others wait; returns when all are done. Chunks shrink as the work
  // runs out (each a 2 x size()-th of what is left): a few long streams through a matrix, short
  // ones at the end (against four equal chunks a thread: a sparse F16 token +1.7 to +3.8%, Q4_0 +1.6
  // to +4.7%, an F16 512-token prompt +6%, alternately in one process).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);
  // Calls fn(t) once on each thread t = 0..size()-1 (0: the caller's): for work split by owner, such
  // as the cold pool's shards, where each worker reads the same rows step after step.
  void for_each_thread(const std::function<void(int)>& fn);
  // Workers stop spinning and sleep until the next job: for a caller about to hand its thread and
  // cores to other threads for a while (the end of a decode step, when the sampler and scheduler run).
  void rest();

 private:
  void worker(int index);
  void run_chunks(int index);
  void start(int64_t n, int64_t grain);

  int n_threads_;
  std::vector<std::thread> workers_;
  // What the caller writes to start a job and the workers then only read, on one cache line; the
  // counters each thread writes during a job on lines of their own. The wake-up is skipped while
  // no worker sleeps: a sparse decoded token runs ~100 jobs (docs/performance.md).
  alignas(64) std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> resting_{false};
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  const std::function<void(int)>* per_thread_job_ = nullptr;
  int64_t n_ = 0;
  int64_t grain_ = 1;
  alignas(64) std::atomic<int64_t> next_block_{0};  // the first grain no thread has taken
  alignas(64) std::atomic<int> pending_{0};
  alignas(64) std::atomic<int> sleepers_{0};  // workers asleep in generation_.wait (or about to be)
};

}  // namespace hotcold
