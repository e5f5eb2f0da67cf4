// The thread pool: every index of a parallel_for once, in chunks that respect the grain; every
// thread once in for_each_thread.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/thread_pool.hpp"

namespace hotcold {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnceInGrainedChunks) {
  for (int threads : {1, 2, 3, 4}) {
    thread_pool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 100, 1000, 4099}) {
      for (int64_t grain : {1, 3, 8, 64}) {
        std::vector<int> seen(static_cast<size_t>(n), 0);
        std::vector<std::pair<int64_t, int64_t>> chunks;
        std::mutex m;
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
          std::lock_guard lock(m);
          chunks.emplace_back(b, e);
          for (int64_t i = b; i < e; ++i) ++seen[static_cast<size_t>(i)];
        }, grain);
        SCOPED_TRACE(testing::Message() << threads << " threads, n " << n << ", grain " << grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "index " << i;
        for (auto [b, e] : chunks) {
          EXPECT_LT(b, e);
          EXPECT_EQ(b % grain, 0);
          if (e != n) {
            EXPECT_EQ((e - b) % grain, 0) << "chunk [" << b << ", " << e << ")";
          }
        }
        // One thread, or one grain of work: a single call. Else guided chunks: the first a
        // (2 x threads)-th of all (at least a grain), and far fewer chunks than grains when the work
        // is long.
        std::sort(chunks.begin(), chunks.end());
        const int64_t blocks = (n + grain - 1) / grain;
        if (threads == 1 || n <= grain) {
          EXPECT_EQ(chunks.size(), 1u);
        } else {
          EXPECT_EQ(chunks.front().second - chunks.front().first, std::min(n, std::max<int64_t>(1, blocks / (2 * threads)) * grain));
          if (blocks >= 64) {
            EXPECT_LT(static_cast<int64_t>(chunks.size()), blocks / 2);
          }
        }
      }
    }
  }
}

TEST(ThreadPool, ForEachThreadRunsOncePerThread) {
  for (int threads : {1, 2, 5}) {
    thread_pool pool(threads);
    for (int round = 0; round < 3; ++round) {
      std::vector<int> calls(static_cast<size_t>(threads), 0);
      std::mutex m;
      pool.for_each_thread([&](int t) {
        std::lock_guard lock(m);
        ++calls[static_cast<size_t>(t)];
      });
      for (int t = 0; t < threads; ++t) EXPECT_EQ(calls[static_cast<size_t>(t)], 1) << threads << " threads, thread " << t;
    }
  }
}

// A job's start wakes workers only when one sleeps: after rest() (asleep at once) or a pause
// longer than their spin (asleep by then), the next jobs still reach every thread, from different
// OS threads. A start that skipped a needed wake-up would hang here (ctest's timeout).
TEST(ThreadPool, SleepingWorkersWakeForTheNextJob) {
  for (int threads : {2, 3}) {
    thread_pool pool(threads);
    for (int round = 0; round < 60; ++round) {
      if (round % 3 == 0) pool.rest();
      if (round % 3 != 2) std::this_thread::sleep_for(std::chrono::milliseconds(round % 3 == 0 ? 1 : 20));
      std::vector<int> calls(static_cast<size_t>(threads), 0);
      std::vector<std::thread::id> ids(static_cast<size_t>(threads));
      std::mutex m;
      pool.for_each_thread([&](int t) {
        std::lock_guard lock(m);
        ++calls[static_cast<size_t>(t)];
        ids[static_cast<size_t>(t)] = std::this_thread::get_id();
      });
      std::vector<int> seen(100, 0);
      pool.parallel_for(100, [&](int64_t b, int64_t e) {
        std::lock_guard lock(m);
        for (int64_t i = b; i < e; ++i) ++seen[static_cast<size_t>(i)];
      });
      SCOPED_TRACE(testing::Message() << threads << " threads, round " << round);
      for (int t = 0; t < threads; ++t) EXPECT_EQ(calls[static_cast<size_t>(t)], 1) << "thread " << t;
      std::sort(ids.begin(), ids.end());
      EXPECT_EQ(std::unique(ids.begin(), ids.end()) - ids.begin(), threads);
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 100);
    }
  }
}

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// Threads the system will not give (here: address space capped, 8 MiB stacks) are a clear error, and
// the threads already started end: no std::terminate. Runs in a child process, whose limit it sets.
TEST(ThreadPool, ThreadsThatCannotStartAreAClearError) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    long vm_kb = 0;
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
      char line[256];
      while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "VmSize: %ld kB", &vm_kb) == 1) break;
      std::fclose(f);
    }
    rlimit cap{};
    cap.rlim_cur = cap.rlim_max = static_cast<rlim_t>(vm_kb + (256 << 10)) * 1024;  // room for ~30 stacks
    if (setrlimit(RLIMIT_AS, &cap) != 0) _exit(3);
    try {
      thread_pool pool(1000);
      _exit(1);  // every thread started: the cap did not bite
    } catch (const std::runtime_error& e) {
      _exit(std::string(e.what()).find("cannot start 1000 threads") != std::string::npos ? 0 : 2);
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace hotcold
