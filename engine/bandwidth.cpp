#include "engine/bandwidth.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

namespace hotcold {
namespace {

using u64 = unsigned long long;

// Sums 64-bit words, four independent streams of 32-byte loads on AVX2 (one load port is not enough
// to keep up with memory on a wide core), a plain loop elsewhere. The sum keeps the loads alive.
#if defined(__x86_64__)
typedef u64 v4u64 __attribute__((vector_size(32)));
// Ahead: with the first two lines of the 4 KiB block two blocks ahead asked for (non-temporal, as
// the products ask for the rows two ahead): faster than two plain streams (docs/performance.md).
// Lines: every line asked for into L1 2 KiB ahead, as the products do where the CPU wants that
// (kernels::cpu().stream_ahead), which reads faster than plain streams on cores that keep few lines
// in flight (docs/performance.md).
template <bool Ahead, bool Lines = false>
__attribute__((target("avx2"))) u64 sum_avx2(const u64* p, size_t n) {
  constexpr size_t block = 4096 / sizeof(u64), ahead = 2 * block, line = 64 / sizeof(u64), lines_ahead = 2048 / sizeof(u64);
  v4u64 a{}, b{}, c{}, d{};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (Ahead && i % block == 0 && i + ahead + 8 < n) {
      __builtin_prefetch(p + i + ahead, 0, 0);
      __builtin_prefetch(p + i + ahead + 8, 0, 0);
    }
    if (Lines && i + lines_ahead + 16 <= n) {
      __builtin_prefetch(p + i + lines_ahead, 0, 3);
      __builtin_prefetch(p + i + lines_ahead + line, 0, 3);
    }
    v4u64 x, y, z, w;
    std::memcpy(&x, p + i, 32), std::memcpy(&y, p + i + 4, 32), std::memcpy(&z, p + i + 8, 32), std::memcpy(&w, p + i + 12, 32);
    a += x, b += y, c += z, d += w;
  }
  v4u64 s = a + b + c + d;
  u64 r = s[0] + s[1] + s[2] + s[3];
  for (; i < n; ++i) r += p[i];
  return r;
}

// The same words read as two streams at once, the slice's two halves side by side: on this
// machine's cores (Zen 5, shared) that reads 5-15% faster than one stream, as the products' two
// rows at a time do, so the probe takes the best of its patterns.
__attribute__((target("avx2"))) u64 sum2_avx2(const u64* p, size_t n) {
  const size_t half = n / 2;
  const u64* q = p + half;
  v4u64 a{}, b{}, c{}, d{};
  size_t i = 0;
  for (; i + 8 <= half; i += 8) {
    v4u64 x, y, z, w;
    std::memcpy(&x, p + i, 32), std::memcpy(&y, p + i + 4, 32), std::memcpy(&z, q + i, 32), std::memcpy(&w, q + i + 4, 32);
    a += x, b += y, c += z, d += w;
  }
  v4u64 s = a + b + c + d;
  u64 r = s[0] + s[1] + s[2] + s[3];
  for (; i < half; ++i) r += p[i] + q[i];
  for (size_t k = 2 * half; k < n; ++k) r += p[k];
  return r;
}
#endif

u64 sum_plain(const u64* p, size_t n) {
  u64 a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) a += p[i], b += p[i + 1], c += p[i + 2], d += p[i + 3];
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
}

// The read patterns the probe tries: 0 one stream, 1 two streams, 2 one stream asking ahead for the
// start of the block two on, 3 one stream asking for every line 2 KiB ahead.
constexpr int patterns = 4;
u64 sum_words(const u64* p, size_t n, int pattern) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) {
    switch (pattern) {
      case 1: return sum2_avx2(p, n);
      case 2: return sum_avx2<true>(p, n);
      case 3: return sum_avx2<false, true>(p, n);
      default: return sum_avx2<false>(p, n);
    }
  }
#endif
  (void)pattern;
  return sum_plain(p, n);
}

// A quarter of the memory the system has available now (Linux's MemAvailable), so that a probe
// sized by a large model's token cannot push the model out; no limit where that is not known.
uint64_t probe_memory_limit() {
  std::ifstream f("/proc/meminfo");
  for (std::string line; std::getline(f, line);) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) return std::max<uint64_t>(uint64_t{64} << 20, kib * 1024 / 4);
  }
  return std::numeric_limits<uint64_t>::max();
}

}  // namespace

read_probe::read_probe(thread_pool& pool, uint64_t bytes) : pool_(pool) { reserve(bytes); }

void read_probe::reserve(uint64_t bytes) {
  const size_t words = std::max<size_t>(1, static_cast<size_t>(std::min(bytes, probe_memory_limit()) / sizeof(u64)));
  if (words <= words_) return;
  buffer_ = page_buffer();  // (the old one gone before the new one is faulted in)
  buffer_ = page_buffer(words * sizeof(u64), "the read-bandwidth probe");
  words_ = words;
  u64* data = static_cast<u64*>(buffer_.data());
  const int threads = pool_.size();
  // Each thread writes (faults in) the slice it later reads, so its pages sit near it.
  pool_.for_each_thread([&](int t) {
    const size_t lo = words_ * static_cast<size_t>(t) / static_cast<size_t>(threads), hi = words_ * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
    for (size_t i = lo; i < hi; ++i) data[i] = i;
  });
}

double read_probe::measure(uint64_t bytes, int repetitions) {
  reserve(bytes);
  const size_t words = std::clamp<size_t>(static_cast<size_t>(bytes / sizeof(u64)), 1, words_);
  const u64* data = static_cast<const u64*>(buffer_.data());
  const int threads = pool_.size();
  // A small buffer (a small model's token, read from the caches) is swept several times a pass, so
  // that each pass still takes long enough to time.
  const size_t sweeps = std::max<size_t>(1, ((size_t{256} << 20) / sizeof(u64) + words - 1) / words);
  std::atomic<u64> sink{0};
  double best = 0;
  for (int r = 0; r < patterns * std::max(1, repetitions); ++r) {
    const int pattern = r % patterns;  // each in turn
    const auto t0 = std::chrono::steady_clock::now();
    pool_.for_each_thread([&](int t) {
      const size_t lo = words * static_cast<size_t>(t) / static_cast<size_t>(threads), hi = words * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
      u64 sum = 0;
      for (size_t k = 0; k < sweeps; ++k) sum += sum_words(data + lo, hi - lo, pattern);
      sink.fetch_add(sum, std::memory_order_relaxed);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, static_cast<double>(sweeps * words * sizeof(u64)) / s);
  }
  return best;
}

double measure_read_bandwidth(thread_pool& pool, uint64_t bytes, int repetitions) {
  if (bytes < sizeof(u64)) return 0;
  read_probe probe(pool, bytes);
  return probe.measure(bytes, repetitions);
}

}  // namespace hotcold
