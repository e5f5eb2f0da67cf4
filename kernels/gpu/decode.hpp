#pragma once
// The hot executor's GPU kernels (CUDA; the same sources build as HIP through portability.hpp), for
// one decode token. Pointers are device memory; `stream` is a cudaStream_t / hipStream_t (null: the
// default stream). Each returns "" when the launch was accepted, else the error. Weights are F16,
// activations F32, laid out as on the CPU (model/model.hpp): a matrix is `rows` rows of `cols`.
//
//   matvec_f16      y = W x                                   (attention projections, head, predictor)
//   hot_ffn_f16     the hot share of a sparse FFN: for the hot neurons chosen (their rows in the
//                   device's copy), h = act(gate . x, up . x) and out = sum_k h_k down_t[k]
//   predictor_f16   the activation predictor: s = fc2 relu(fc1 x), chosen[i] = s_i >= threshold
//   attend_f32      one token's attention over a KV cache of F32 rows (grouped-query heads)
#include <cstddef>
#include <cstdint>
#include <string>

namespace hotcold::kernels::gpu {

// The FFN activations the hot executor meets (model/arch.hpp's, by value).
enum class ffn_act : int { relu = 0, silu = 1, gelu = 2, drelu = 3 };

std::string matvec_f16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y, void* stream = nullptr);

// slots[k]: row of hot neuron k in gate/up/down_t (each `count` rows of `d`); hidden[k] receives its
// value; out (d) is overwritten. gated: false for Falcon-style FFNs (up only).
std::string hot_ffn_f16(const uint16_t* gate, const uint16_t* up, const uint16_t* down_t, const int32_t* slots, int64_t count, int64_t d, const float* x,
                        bool gated, ffn_act act, float* hidden, float* out, void* stream = nullptr);

// fc1: rank x d, fc2: n_ff x rank; scratch: rank floats; scores: n_ff; chosen: n_ff bytes.
std::string predictor_f16(const uint16_t* fc1, const uint16_t* fc2, int64_t d, int64_t rank, int64_t n_ff, const float* x, float threshold, float* scratch,
                          float* scores, uint8_t* chosen, void* stream = nullptr);

// q: n_head x head_dim; k_cache/v_cache: (pos + 1) rows of n_head_kv x head_dim; out: n_head x head_dim.
std::string attend_f32(const float* q, const float* k_cache, const float* v_cache, int64_t pos, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                       float* out, void* stream = nullptr);

}  // namespace hotcold::kernels::gpu
