#include "devices/work_queue.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>
#include <fmt/format.h>

#include <bit>
#include <chrono>

namespace hotcold::devices {

namespace {
std::atomic<int> wait_mode{static_cast<int>(device_wait::spin)};

// Polls `ready` for at most `limit` as the process's wait mode says (pausing between polls, or
// yielding the core; block: not at all); whether it became true.
template <typename F>
bool spin_until(F ready, std::chrono::microseconds limit) {
  const auto mode = static_cast<device_wait>(wait_mode.load(std::memory_order_relaxed));
  if (mode == device_wait::block) return ready();
  const auto until = std::chrono::steady_clock::now() + limit;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if (mode == device_wait::yield) std::this_thread::yield();
    else __builtin_ia32_pause();
    if ((mode == device_wait::yield || i % 64 == 63) && std::chrono::steady_clock::now() >= until) return ready();
  }
}
}  // namespace

void set_device_wait(device_wait w) { wait_mode.store(static_cast<int>(w), std::memory_order_relaxed); }
device_wait current_device_wait() { return static_cast<device_wait>(wait_mode.load(std::memory_order_relaxed)); }
const char* device_wait_name(device_wait w) {
  switch (w) {
    case device_wait::yield: return "yield";
    case device_wait::block: return "block";
    default: return "spin";
  }
}
device_wait parse_device_wait(const std::string& s) {
  for (auto w : {device_wait::spin, device_wait::yield, device_wait::block})
    if (s == device_wait_name(w)) return w;
  throw std::invalid_argument(fmt::format("a device wait of spin, yield or block, not '{}'", s));
}

namespace {
// The futex calls on a completion's word: sleep while it is 0 (at most `ns`, < 0: no limit), wake all.
void futex_wait(const std::atomic<uint32_t>& word, int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&word), FUTEX_WAIT_PRIVATE, 0u, ns < 0 ? nullptr : &ts, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>& word) { syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0); }
int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

void completion::wait() const {
  // A spin of up to 1 ms first: a device's stage (a layer's attention, its hot rows) usually ends
  // within that, and waking a sleeping thread costs tens of microseconds on a VM whose idle vCPU halted
  // (docs/performance.md). The waiters are
  // the actors' threads, on the core the CPU workers leave them.
  spin_until([this] { return ready(); }, std::chrono::microseconds(1000));
  const int64_t deadline = watch_ ? std::chrono::duration_cast<std::chrono::nanoseconds>(watch_->deadline).count() : 0;
  while (!ready()) {
    if (deadline <= 0) {
      sleep(-1);
      continue;
    }
    // The deadline counts from when the work began: time queued behind other work is theirs.
    const int64_t began = started_ns_.load(std::memory_order_acquire);
    const int64_t left = began == 0 ? deadline : began + deadline - now_ns();
    if (left <= 0) {
      const std::string why = fmt::format("a job on its queue has run {:.1f} s, past the {:.1f} s deadline", static_cast<double>(now_ns() - began) / 1e9,
                                          static_cast<double>(deadline) / 1e9);
      if (watch_->on_stall) watch_->on_stall(why);
      throw job_overdue(fmt::format("{}: {}", watch_->name, why));
    }
    sleep(std::min<int64_t>(left, 100000000));  // (rechecked every 0.1 s: the start may come later)
  }
  if (error_) std::rethrow_exception(error_);
}

void completion::sleep(int64_t ns) const {
  // (seq_cst both sides: either this thread sees the work done, or finish sees it waiting and wakes it)
  waiters_.fetch_add(1);
  if (done_.load() == 0) futex_wait(done_, ns);
  waiters_.fetch_sub(1);
}

void completion::started() { started_ns_.store(now_ns(), std::memory_order_release); }

void completion::finish(std::exception_ptr e) {
  error_ = std::move(e);
  done_.store(1);
  if (waiters_.load() > 0) futex_wake(done_);
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
  done->watch_ = watch_;
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
  while (!last->ready()) last->sleep(-1);
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
    it.done->started();
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
