#pragma once
// The machine's memory read bandwidth, measured: the ceiling a memory-bound decode step is held
// against (bytes of weights read per second / this).
#include <cstdint>

#include "model/thread_pool.hpp"

namespace hotcold {

// Bytes per second that the pool's threads reach reading `bytes` of memory (far larger than the
// caches), each its own contiguous slice; the best of `repetitions` passes after one that faults the
// pages in. Takes about (repetitions + 2) x bytes / bandwidth.
double measure_read_bandwidth(thread_pool& pool, uint64_t bytes = uint64_t{256} << 20, int repetitions = 3);

}  // namespace hotcold
