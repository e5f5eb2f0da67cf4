#pragma once
// Work kept off the loop that streams tokens: tokenizing a long text takes a tenth of a second per
// MiB, and other clients' tokens must not wait for it. One thread runs the jobs in order; each job
// returns what the loop does with its result (send a reply, submit a generate), which the loop runs,
// in the same order, when it calls drain().
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>

#include <fmt/format.h>

namespace hotcold::server {

class text_worker {
 public:
  using completion = std::function<void()>;
  text_worker() {
    try {
      thread_ = std::thread([this] { loop(); });
    } catch (const std::system_error& e) {
      throw std::runtime_error(fmt::format("cannot start the tokenizer's thread: {}", e.what()));
    }
  }
  ~text_worker() {
    {
      std::lock_guard lock(mu_);
      quit_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  // `dropped` runs instead of the job's completion if drop_queued() takes the job before it starts.
  void post(std::function<completion()> job, completion dropped) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back({std::move(job), std::move(dropped)});
    }
    ++pending_;
    cv_.notify_one();
  }
  // The jobs not started yet are taken back; their `dropped` completions run now.
  void drop_queued() {
    std::deque<queued> taken;
    {
      std::lock_guard lock(mu_);
      taken.swap(jobs_);
    }
    for (auto& q : taken) {
      --pending_;
      q.dropped();
    }
  }
  void drain() {
    std::deque<completion> done;
    {
      std::lock_guard lock(mu_);
      done.swap(done_);
    }
    for (auto& c : done) {
      --pending_;
      c();
    }
  }
  int64_t pending() const { return pending_; }  // posted, their completions not run yet

 private:
  void loop() {
    for (;;) {
      std::function<completion()> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return quit_ || !jobs_.empty(); });
        if (quit_) return;
        job = std::move(jobs_.front().job);
        jobs_.pop_front();
      }
      completion c = job();
      std::lock_guard lock(mu_);
      done_.push_back(std::move(c));
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  struct queued {
    std::function<completion()> job;
    completion dropped;
  };
  std::deque<queued> jobs_;
  std::deque<completion> done_;
  bool quit_ = false;
  int64_t pending_ = 0;  // the loop's thread only
  std::thread thread_;
};

}  // namespace hotcold::server
