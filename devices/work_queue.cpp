#include "devices/work_queue.hpp"

#include <pthread.h>

#include <bit>
#include <chrono>

namespace hotcold::devices {

namespace {
// Polls `ready` (pausing between polls) for at most `limit`; whether it became true.
template <typename F>
bool spin_until(F ready, std::chrono::microseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    __builtin_ia32_pause();
    if (i % 64 == 63 && std::chrono::steady_clock::now() >= until) return ready();
  }
}
}  // namespace

void completion::wait() const {
  // A spin of up to 1 ms first: a device's stage (a layer's attention, its hot rows) usually ends
  // within that, and waking a sleeping thread costs 50-80 us on a VM whose idle vCPU halted (the
  // 1B file on sim: attention's end to the predictor's start, 84 -> 20 us median). The waiters are
  // the actors' threads, on the core the CPU workers leave them.
  spin_until([this] { return done_.load(std::memory_order_acquire); }, std::chrono::microseconds(1000));
  while (!done_.load(std::memory_order_acquire)) done_.wait(false, std::memory_order_acquire);
  if (error_) std::rethrow_exception(error_);
}

void completion::finish(std::exception_ptr e) {
  error_ = std::move(e);
  done_.store(true, std::memory_order_release);
  done_.notify_all();
}

event completed_event(std::exception_ptr error) {
  auto e = std::make_shared<completion>();
  e->finish(std::move(error));
  return e;
}

work_queue::work_queue(const std::string& name, size_t capacity)
    : ring_(std::bit_ceil(std::max<size_t>(capacity, 2))), mask_(ring_.size() - 1), last_(completed_event()) {
  worker_ = std::thread([this] { run(); });
  pthread_setname_np(worker_.native_handle(), name.substr(0, 15).c_str());
}

work_queue::~work_queue() {
  stop_.store(true, std::memory_order_release);
  signal_.fetch_add(1, std::memory_order_release);
  signal_.notify_one();
  worker_.join();
}

event work_queue::submit(std::function<void()> work) {
  std::lock_guard lock(producers_);
  const uint64_t t = tail_.load(std::memory_order_relaxed);
  while (t - head_.load(std::memory_order_acquire) > mask_) std::this_thread::yield();
  auto done = std::make_shared<completion>();
  ring_[t & mask_] = item{std::move(work), done};
  tail_.store(t + 1, std::memory_order_release);
  signal_.fetch_add(1, std::memory_order_release);
  signal_.notify_one();
  last_ = done;
  return done;
}

void work_queue::drain() {
  // FIFO: when the last submission has run, so has everything before it.
  event last;
  {
    std::lock_guard lock(producers_);
    last = last_;
  }
  if (!last) return;
  while (!last->ready()) last->done_.wait(false, std::memory_order_acquire);
}

void work_queue::run() {
  for (;;) {
    const uint64_t h = head_.load(std::memory_order_relaxed);
    if (h == tail_.load(std::memory_order_acquire)) {
      const uint32_t seen = signal_.load(std::memory_order_acquire);
      if (h != tail_.load(std::memory_order_acquire)) continue;
      if (stop_.load(std::memory_order_acquire)) return;
      // Spin up to 200 us before sleeping: work usually follows work (the next layer's stage comes
      // a hand-off later).
      const bool arrived = spin_until([&] { return h != tail_.load(std::memory_order_acquire); }, std::chrono::microseconds(200));
      if (!arrived) signal_.wait(seen, std::memory_order_acquire);
      continue;
    }
    item it = std::move(ring_[h & mask_]);
    ring_[h & mask_] = item{};
    std::exception_ptr error;
    try {
      it.work();
    } catch (...) {
      error = std::current_exception();
    }
    head_.store(h + 1, std::memory_order_release);
    it.done->finish(std::move(error));
  }
}

}  // namespace hotcold::devices
