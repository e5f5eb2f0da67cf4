#include "model/thread_pool.hpp"

#include <pthread.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hotcold {

thread_pool::thread_pool(int n_threads, const std::string& name) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) {
    workers_.emplace_back([this, i] { worker(i); });
    pthread_setname_np(workers_.back().native_handle(), (name.substr(0, 12) + "-" + std::to_string(i)).c_str());
  }
}

thread_pool::~thread_pool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void thread_pool::run_chunk(int index) {
  int64_t blocks = (n_ + grain_ - 1) / grain_;
  int64_t per = blocks / n_threads_, extra = blocks % n_threads_;
  int64_t b0 = index * per + std::min<int64_t>(index, extra);
  int64_t b1 = b0 + per + (index < extra ? 1 : 0);
  int64_t begin = std::min(n_, b0 * grain_), end = std::min(n_, b1 * grain_);
  if (begin < end) (*job_)(begin, end);
}

void thread_pool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little (jobs come in quick succession within a token), then sleep.
    for (int spin = 0; spin < 20000 && generation_.load(std::memory_order_acquire) == seen; ++spin) {
#if defined(__x86_64__)
      _mm_pause();
#endif
    }
    generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    run_chunk(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  n_ = n;
  grain_ = std::max<int64_t>(1, grain);
  pending_.store(n_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  run_chunk(0);
  for (int left; (left = pending_.load(std::memory_order_acquire)) != 0;) {
#if defined(__x86_64__)
    _mm_pause();
#endif
  }
}

}  // namespace hotcold
