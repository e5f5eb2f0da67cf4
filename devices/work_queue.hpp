#pragma once
// A device's queue of work: producers hand closures to one worker thread through a bounded ring
// (producers take turns by a mutex, uncontended in practice: a step's stages submit one after
// another, from the hot executor, the predictor or the forward pass); the worker's side is
// lock-free, and an idle worker sleeps on an atomic (a futex), not a mutex. Each submission returns an event that completes
// when the work has run, carrying the exception if it threw.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hotcold::devices {

// How a thread waits for a device (chosen once for the process, `--device-wait`): spin polls with a
// pause for a while before sleeping (waiters on a job up to 1 ms, a queue's idle worker up to 200 us;
// a GPU's stream polled), yield polls as long but gives the core away between polls (sched_yield),
// block sleeps at once (a futex; a GPU's blocking-sync event). Spinning answers a few microseconds
// sooner; it takes a core from the CPU's cold pool while it lasts (docs/gpu.md has the measurements).
enum class device_wait : int { spin = 0, yield = 1, block = 2 };
void set_device_wait(device_wait w);
device_wait current_device_wait();
const char* device_wait_name(device_wait w);
// "spin", "yield" or "block"; std::invalid_argument naming the choices otherwise.
device_wait parse_device_wait(const std::string& s);

// A queue's deadline for one piece of work: a wait that passes it calls on_stall (the device marks
// itself lost) and throws job_overdue naming the queue and the deadline, so that a job that never
// returns (a GPU kernel that hangs) does not hang its waiter for ever.
struct stall_watch {
  std::chrono::steady_clock::duration deadline{};  // 0: none
  std::string name;                                // the device's
  std::function<void(const std::string& why)> on_stall;
};
struct job_overdue : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class completion {
 public:
  bool ready() const { return done_.load(std::memory_order_acquire) != 0; }
  // Blocks until the work ran; rethrows what it threw. With a deadline (the queue's stall_watch),
  // a wait that passes it, counted from when the work started to run, throws job_overdue.
  void wait() const;

 private:
  friend class work_queue;
  friend std::shared_ptr<completion> completed_event(std::exception_ptr);
  void finish(std::exception_ptr e);
  void started();
  void sleep(int64_t ns) const;  // on done_, at most ns (< 0: no limit), counted as a waiter
  std::atomic<uint32_t> done_{0};     // (32 bits: a futex word)
  mutable std::atomic<uint32_t> waiters_{0};  // threads asleep (or about to be) on done_: finish wakes them
  std::atomic<int64_t> started_ns_{0};  // steady clock, when the queue began the work (0: not yet)
  std::exception_ptr error_;
  std::shared_ptr<const stall_watch> watch_;
};
using event = std::shared_ptr<completion>;

// An event that is already complete (work that ran inline).
event completed_event(std::exception_ptr error = nullptr);

class work_queue {
 public:
  // capacity: rounded up to a power of two. The worker thread is named `name` (first 15 characters).
  explicit work_queue(const std::string& name, size_t capacity = 1024);
  ~work_queue();  // runs what is queued, then joins
  work_queue(const work_queue&) = delete;
  work_queue& operator=(const work_queue&) = delete;

  // From any thread. Waits (yielding) while the ring is full.
  event submit(std::function<void()> work);
  // From now on, each submission's waits keep this deadline (before the first submission).
  void set_stall_watch(stall_watch w) { watch_ = std::make_shared<const stall_watch>(std::move(w)); }
  // Blocks until everything submitted so far has run.
  void drain();
  std::thread::id worker_id() const { return worker_.get_id(); }

 private:
  struct item {
    std::function<void()> work;
    event done;
  };
  void run();

  std::vector<item> ring_;
  size_t mask_;
  alignas(64) std::atomic<uint64_t> head_{0};  // next to run (worker)
  alignas(64) std::atomic<uint64_t> tail_{0};  // next free slot (producer)
  alignas(64) std::atomic<uint32_t> signal_{0};
  std::atomic<bool> stop_{false};
  std::mutex producers_;  // guards tail_'s writes and last_
  event last_;
  std::shared_ptr<const stall_watch> watch_;
  std::thread worker_;
};

}  // namespace hotcold::devices
