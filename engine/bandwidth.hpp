#pragma once
// The machine's memory read bandwidth, measured: the ceiling a memory-bound decode step is held
// against (bytes of weights read per second / this).
#include <cstdint>

#include "model/page_buffer.hpp"
#include "engine/thread_pool.hpp"

namespace hotcold {

// A buffer of `bytes` (at most a quarter of the memory available), in 2 MB pages where the system
// gives them, as the weights' copy is, written by the pool's threads, each its own slice; reserve
// and measure make it larger when asked for more (never smaller).
//
// measure(n): bytes per second that the pool's threads reach reading the buffer's first n bytes, each
// its own contiguous slice, read in turn as one stream, as two streams (its two halves side by side)
// as one stream asking for the start of the block two on, and as one stream asking for every line
// 2 KiB ahead (what the products do on Intel); the best of 4 x `repetitions` passes (a ceiling: the
// products read two rows at a time, and one plain stream alone read less, so that decodes reached
// more than "the bandwidth"). A buffer under 256 MB is swept several times a
// pass. The rate falls with how much is read (docs/performance.md), so a token's roofline is measured
// over as many bytes as the token reads, which it reads again at the next token as the probe does.
class read_probe {
 public:
  read_probe(thread_pool& pool, uint64_t bytes);
  uint64_t bytes() const { return words_ * 8; }
  void reserve(uint64_t bytes);
  double measure(uint64_t bytes, int repetitions = 3);

 private:
  thread_pool& pool_;
  size_t words_ = 0;
  page_buffer buffer_;
};

// One probe of `bytes` (default: 1 GiB, far more than this machine's caches serve), measured once.
// Takes about (4 x repetitions + 1) x bytes / bandwidth.
double measure_read_bandwidth(thread_pool& pool, uint64_t bytes = uint64_t{1} << 30, int repetitions = 3);

}  // namespace hotcold
