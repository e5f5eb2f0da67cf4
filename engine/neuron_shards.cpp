// The chosen neurons handed out to the threads in pieces (neuron_shards), and running them (run_pieces).
#include <algorithm>

#include "engine/sparse_ffn.hpp"
#include "engine/thread_pool.hpp"
#include "engine/trace.hpp"

namespace hotcold {

neuron_shards::neuron_shards(int64_t count, int threads, int per_shard) : threads_(std::max(1, threads)), per_shard_(std::max(1, per_shard)) {
  shards_ = std::make_unique<shard[]>(static_cast<size_t>(threads_));
  // Shard t's chosen [a, b) in pieces of halving size: [a, a + w/2), then a quarter, an eighth, ... and
  // the rest (w = b - a): the owner's first pieces are long, and what others help with at the end short.
  bounds_.push_back(0);
  for (int t = 0; t < threads_; ++t) {
    const int64_t a = count * t / threads_, b = count * (t + 1) / threads_, w = b - a;
    for (int j = 1; j <= per_shard_; ++j) bounds_.push_back(j < per_shard_ ? a + (w - (w >> j)) : b);
  }
}

bool neuron_shards::take(int t, int64_t& k0, int64_t& k1, int64_t& piece) {
  for (int k = 0; k < threads_; ++k) {
    const int s = (t + k) % threads_;
    for (int j; (j = shards_[s].next.fetch_add(1, std::memory_order_relaxed)) < per_shard_;) {
      piece = static_cast<int64_t>(s) * per_shard_ + j;
      k0 = bounds_[static_cast<size_t>(piece)], k1 = bounds_[static_cast<size_t>(piece + 1)];
      if (k0 == k1) continue;
      return true;
    }
  }
  return false;
}

void neuron_shards::sum(const float* acc, int64_t width, float* out) const {
  std::fill(out, out + width, 0.0f);
  for (int64_t p = 0; p < pieces(); ++p)
    if (bounds_[static_cast<size_t>(p)] != bounds_[static_cast<size_t>(p + 1)])  // taken, so written
      for (int64_t k = 0; k < width; ++k) out[k] += acc[p * width + k];
}

void run_pieces(thread_pool& pool, neuron_shards& pieces, int64_t width, std::vector<float>& scratch, float* out,
                const std::function<void(int64_t k0, int64_t k1, float* acc)>& work, const trace_span& span) {
  if (static_cast<int64_t>(scratch.size()) < pieces.pieces() * width) scratch.resize(static_cast<size_t>(pieces.pieces() * width));
  pool.for_each_thread([&](int t) {
    trace_scope interval(span);
    for (int64_t k0, k1, p; pieces.take(t, k0, k1, p);) {
      float* acc = scratch.data() + p * width;
      if (out) std::fill(acc, acc + width, 0.0f);
      work(k0, k1, acc);
    }
  });
  if (out) pieces.sum(scratch.data(), width, out);
}

}  // namespace hotcold
