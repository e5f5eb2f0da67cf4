#pragma once
// The machine's memory read bandwidth, measured: the ceiling a memory-bound decode step is held
// against (bytes of weights read per second / this).
#include <cstdint>

#include "model/thread_pool.hpp"

namespace hotcold {

// Bytes per second that the pool's threads reach reading `bytes` of memory (far larger than the
// caches), each its own contiguous slice, read as one stream and (the next pass) as two streams, its
// two halves side by side; the best of 2 x `repetitions` passes after one that faults the pages in
// (a ceiling: the products read two rows at a time, and one stream alone read 5-15% less than that
// here, so that decodes reached more than "the bandwidth"). Takes about (2 x repetitions + 2) x bytes
// / bandwidth.
double measure_read_bandwidth(thread_pool& pool, uint64_t bytes = uint64_t{256} << 20, int repetitions = 3);

}  // namespace hotcold
