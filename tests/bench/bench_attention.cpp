// Decode attention over a long F16 cache (kernels/cpu/attend_keys.cpp): one token's 32 query heads
// over 8 KV heads of 64 (the ~1B files' shape) against `keys` cached positions of 16 layers, each
// layer's cache its own memory as in the KV cache — 400 keys mostly from the last-level cache, 2000
// from memory. Reports the cache's bytes read per second. Not a test: run
//   build/bin/bench_attention [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/cpu/attention.hpp"

namespace {

void attend_layers(benchmark::State& state) {
  const int64_t n_head = 32, n_kv = 8, hd = 64, layers = 16, keys = state.range(0), stride = n_kv * hd;
  std::vector<std::vector<uint16_t>> k(layers), v(layers);
  for (int64_t l = 0; l < layers; ++l) {
    k[static_cast<size_t>(l)].assign(static_cast<size_t>(keys * stride), 0x3c00);  // 1.0
    v[static_cast<size_t>(l)].assign(static_cast<size_t>(keys * stride), 0x3800);  // 0.5
  }
  std::vector<float> q(static_cast<size_t>(n_head * hd), 0.01f), m(n_head), l(n_head), o(static_cast<size_t>(n_head * hd));
  std::vector<float> scratch(static_cast<size_t>(hotcold::kernels::attend_keys_scratch(n_head, hd)));
  const hotcold::kernels::key_range_sums sums{m.data(), l.data(), o.data()};
  for (auto _ : state) {
    for (int64_t layer = 0; layer < layers; ++layer)
      hotcold::kernels::attend_keys(q.data(), k[static_cast<size_t>(layer)].data(), v[static_cast<size_t>(layer)].data(), stride, n_head, n_kv, hd, 0, keys,
                                    0.125f, sums, scratch.data());
    benchmark::DoNotOptimize(o.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * layers * keys * stride * 2 * 2);
}

}  // namespace

BENCHMARK(attend_layers)->Arg(400)->Arg(2000)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
