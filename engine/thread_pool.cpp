#include "engine/thread_pool.hpp"

#include <fmt/format.h>
#include <stdexcept>
#include <system_error>

#include <pthread.h>
#include <sched.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hotcold {

thread_pool::thread_pool(int n_threads, const std::string& name) : n_threads_(std::max(1, n_threads)) {
  try {
    for (int i = 1; i < n_threads_; ++i) {
      workers_.emplace_back([this, i] { worker(i); });
      pthread_setname_np(workers_.back().native_handle(), (name.substr(0, 12) + "-" + std::to_string(i)).c_str());
    }
  } catch (const std::system_error& e) {
    // The system gives no more threads (a limit on processes or memory): the ones started end, and
    // the caller hears how many were asked for.
    const size_t started = workers_.size();
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    throw std::runtime_error(fmt::format("cannot start {} threads (the system gave {}): {}; ask for fewer with -t", n_threads_, started + 1, e.what()));
  }
}

thread_pool::~thread_pool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

int thread_pool::pin_workers() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return -1;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (cpus.size() < 2) return -1;  // one CPU: nothing to keep apart
  for (size_t i = 0; i < workers_.size(); ++i) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[(i + 1) % cpus.size()], &one);
    if (pthread_setaffinity_np(workers_[i].native_handle(), sizeof one, &one) != 0) return -1;
  }
  return cpus[0];
}

void thread_pool::run_chunks(int index) {
  if (per_thread_job_) return (*per_thread_job_)(index);
  const int64_t blocks = (n_ + grain_ - 1) / grain_;
  // Guided: each take is a (2 x threads)-th of what is left (at least one block), so the first
  // chunks are long (a product's rows read in a few long streams, each of which the hardware has to
  // start afresh) and the last short (no thread left waiting long for a slow one).
  for (;;) {
    int64_t b0 = next_block_.load(std::memory_order_relaxed), take = 0;
    do {
      if (b0 >= blocks) return;
      take = std::max<int64_t>(1, (blocks - b0) / (2 * n_threads_));
    } while (!next_block_.compare_exchange_weak(b0, b0 + take, std::memory_order_relaxed));
    (*job_)(b0 * grain_, std::min(n_, (b0 + take) * grain_));
  }
}

void thread_pool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little (jobs come in quick succession within a token), then sleep.
    for (int spin = 0; spin < 20000 && generation_.load(std::memory_order_acquire) == seen && !resting_.load(std::memory_order_relaxed); ++spin) {
#if defined(__x86_64__)
      _mm_pause();
#endif
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      // Counted, so that a job's start pays for a wake-up only when someone sleeps: either start()
      // sees this count or this thread's wait sees the new generation (both sequentially consistent).
      sleepers_.fetch_add(1);
      generation_.wait(seen);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed)) return;
    run_chunks(index);
    pending_.fetch_sub(1, std::memory_order_release);  // (the caller spins on it)
  }
}

void thread_pool::rest() { resting_.store(true, std::memory_order_relaxed); }

void thread_pool::start(int64_t n, int64_t grain) {
  resting_.store(false, std::memory_order_relaxed);
  n_ = n;
  grain_ = grain;
  next_block_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();
  run_chunks(0);
  for (int left; (left = pending_.load(std::memory_order_acquire)) != 0;) {
#if defined(__x86_64__)
    _mm_pause();
#endif
  }
  job_ = nullptr;
  per_thread_job_ = nullptr;
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  start(n, grain);
}

void thread_pool::for_each_thread(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) return fn(0);
  per_thread_job_ = &fn;
  start(0, 1);
}

}  // namespace hotcold
