#pragma once
// A device's queue of work: producers hand closures to one worker thread through a bounded ring
// (producers take turns by a mutex, uncontended in practice: a step's stages submit one after
// another, from the hot executor, the predictor or the forward pass); the worker's side is
// lock-free, and an idle worker sleeps on an atomic (a futex), not a mutex. Each submission returns an event that completes
// when the work has run, carrying the exception if it threw.
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hotcold::devices {

class completion {
 public:
  bool ready() const { return done_.load(std::memory_order_acquire); }
  // Blocks until the work ran; rethrows what it threw.
  void wait() const;

 private:
  friend class work_queue;
  friend std::shared_ptr<completion> completed_event(std::exception_ptr);
  void finish(std::exception_ptr e);
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
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
  std::thread worker_;
};

}  // namespace hotcold::devices
