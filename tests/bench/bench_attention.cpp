// Decode attention over a long F16 cache (kernels/cpu/attend_keys.cpp): one token's 32 query heads
// over 8 KV heads of 64 (the ~1B files' shape) against `keys` cached positions of 16 layers, each
// layer's cache its own memory as in the KV cache — 400 keys mostly from the last-level cache, 2000
// from memory; then the same over Q8_0 and Q4_0 caches (kv_rows.hpp, attend_keys_typed), and with the
// keys in tiles (attend_key_tiles). Reports the
// cache's bytes read per second. Not a test: run
//   build/bin/bench_attention [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/kv_rows.hpp"

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

// The same over a quantized cache of type state.range(1) (8: Q8_0, 2: Q4_0), rows of ones and halves.
void attend_layers_quantized(benchmark::State& state) {
  using namespace hotcold;
  const int64_t n_head = 32, n_kv = 8, hd = 64, layers = 16, keys = state.range(0), width = n_kv * hd;
  const auto type = static_cast<tensor_type>(state.range(1));
  const int64_t row = static_cast<int64_t>(values_bytes(type, width));
  std::vector<float> ones(static_cast<size_t>(width), 1.0f), halves(static_cast<size_t>(width), 0.5f);
  std::vector<std::vector<uint8_t>> k(layers), v(layers);
  for (int64_t l = 0; l < layers; ++l) {
    k[static_cast<size_t>(l)].resize(static_cast<size_t>(keys * row));
    v[static_cast<size_t>(l)].resize(static_cast<size_t>(keys * row));
    for (int64_t t = 0; t < keys; ++t) {
      kernels::kv_store_row(type, ones.data(), k[static_cast<size_t>(l)].data() + t * row, width);
      kernels::kv_store_row(type, halves.data(), v[static_cast<size_t>(l)].data() + t * row, width);
    }
  }
  std::vector<float> q(static_cast<size_t>(n_head * hd), 0.01f), m(n_head), l(n_head), o(static_cast<size_t>(n_head * hd));
  std::vector<float> scratch(static_cast<size_t>(kernels::attend_keys_typed_scratch(n_head, n_kv, hd)));
  const kernels::key_range_sums sums{m.data(), l.data(), o.data()};
  for (auto _ : state) {
    for (int64_t layer = 0; layer < layers; ++layer)
      kernels::attend_keys_typed(q.data(), kv_types{type}, k[static_cast<size_t>(layer)].data(), v[static_cast<size_t>(layer)].data(), row, row, n_head, n_kv,
                                 hd, 0, keys, 0.125f, sums, scratch.data());
    benchmark::DoNotOptimize(o.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * layers * keys * row * 2);
}

// The same with the keys in tiles of sixteen positions (as an F16 or Q8_0 cache keeps them in host
// memory, kv_rows.hpp) of type state.range(1) (1: F16, 8: Q8_0), the values rows of the same type.
void attend_layers_tiles(benchmark::State& state) {
  using namespace hotcold;
  const int64_t n_head = 32, n_kv = 8, hd = 64, layers = 16, keys = state.range(0), width = n_kv * hd;
  const auto type = static_cast<tensor_type>(state.range(1));
  const int64_t row = static_cast<int64_t>(values_bytes(type, width));
  std::vector<float> ones(static_cast<size_t>(width), 1.0f), halves(static_cast<size_t>(width), 0.5f);
  std::vector<std::vector<uint8_t>> k(layers), v(layers);
  for (int64_t l = 0; l < layers; ++l) {
    k[static_cast<size_t>(l)].resize(static_cast<size_t>((keys + 15) / 16 * 16 * row));
    v[static_cast<size_t>(l)].resize(static_cast<size_t>(keys * row));
    for (int64_t t = 0; t < keys; ++t) {
      kernels::store_key_tile(type, ones.data(), k[static_cast<size_t>(l)].data(), width, t);
      kernels::kv_store_row(type, halves.data(), v[static_cast<size_t>(l)].data() + t * row, width);
    }
  }
  std::vector<float> q(static_cast<size_t>(n_head * hd), 0.01f), m(n_head), l(n_head), o(static_cast<size_t>(n_head * hd));
  std::vector<float> scratch(static_cast<size_t>(kernels::attend_keys_typed_scratch(n_head, n_kv, hd)));
  const kernels::key_range_sums sums{m.data(), l.data(), o.data()};
  for (auto _ : state) {
    for (int64_t layer = 0; layer < layers; ++layer)
      kernels::attend_key_tiles(q.data(), kv_types{type}, k[static_cast<size_t>(layer)].data(), v[static_cast<size_t>(layer)].data(), row, n_head, n_kv, hd,
                                0, keys, 0.125f, sums, scratch.data());
    benchmark::DoNotOptimize(o.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * layers * keys * row * 2);
}

}  // namespace

BENCHMARK(attend_layers_tiles)->Args({400, 1})->Args({2000, 1})->Args({400, 8})->Args({2000, 8})->Unit(benchmark::kMillisecond);
BENCHMARK(attend_layers)->Arg(400)->Arg(2000)->Unit(benchmark::kMillisecond);
BENCHMARK(attend_layers_quantized)->Args({400, 8})->Args({2000, 8})->Args({2000, 2})->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
