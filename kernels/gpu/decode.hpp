#pragma once
// The hot executor's GPU kernels (CUDA; the same sources build as HIP through portability.hpp), for
// one decode token. Pointers are device memory; `stream` is a cudaStream_t / hipStream_t (null: the
// default stream). Each returns "" when the launch was accepted, else the error. Weights are F16
// (hot FFN rows also Q8_0 and Q4_0), activations F32, laid out as on the CPU (model/model.hpp): a matrix is `rows` rows of `cols`.
//
//   matvec_f16      y = W x                                   (attention projections, head, predictor)
//   hot_ffn         the hot share of a sparse FFN, rows F16, Q8_0 or Q4_0: for the hot neurons chosen
//                   (their rows in the device's copy), h = act(gate . x, up . x) and out = sum_k h_k
//                   down_t[k], the down rows split across blocks by chunks of neurons and reduced
//   predictor_f16   the activation predictor: s = fc2 relu(fc1 x), chosen[i] = s_i >= threshold
//   attend_f32      one token's attention over a KV cache of F32 rows (grouped-query heads)
#include <cstddef>
#include <cstdint>
#include <string>

namespace hotcold::kernels::gpu {

// The FFN activations the hot executor meets (model/arch.hpp's, by value).
enum class ffn_act : int { relu = 0, silu = 1, gelu = 2, drelu = 3 };

std::string matvec_f16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y, void* stream = nullptr);

// The types hot rows keep on the device (the file's own: a hot row is never converted).
enum class row_type : int { f16 = 0, q8_0 = 1, q4_0 = 2 };
int64_t row_bytes(row_type t, int64_t d);  // one row of d values (Q8_0 / Q4_0: d a multiple of 32)

// The down projection is split into at most this many chunks of neurons, summed in order.
inline constexpr int64_t hot_ffn_max_chunks = 64;
int64_t hot_ffn_scratch(int64_t d);  // floats of device scratch hot_ffn needs (its chunks' partial sums)

// slots[k]: row of hot neuron k in gate/up/down_t (rows of `d` values in type t); hidden[k] receives
// its value; out (d) is overwritten. gated: false for Falcon-style FFNs (up only). scratch:
// hot_ffn_scratch(d) floats of device memory; calls on one stream may share it.
std::string hot_ffn(row_type t, const void* gate, const void* up, const void* down_t, const int32_t* slots, int64_t count, int64_t d, const float* x,
                    bool gated, ffn_act act, float* hidden, float* out, float* scratch, void* stream = nullptr);

// y = W x and the predictor with rows of type t (F16, Q8_0, Q4_0; quantized rows need a multiple of 32
// values), in the file's own bytes.
std::string matvec(row_type t, const void* w, int64_t rows, int64_t cols, const float* x, float* y, void* stream = nullptr);
std::string predictor(row_type t, const void* fc1, const void* fc2, int64_t d, int64_t rank, int64_t n_ff, const float* x, float threshold, float* scratch,
                      float* scores, uint8_t* chosen, void* stream = nullptr);

// fc1: rank x d, fc2: n_ff x rank; scratch: rank floats; scores: n_ff; chosen: n_ff bytes.
std::string predictor_f16(const uint16_t* fc1, const uint16_t* fc2, int64_t d, int64_t rank, int64_t n_ff, const float* x, float threshold, float* scratch,
                          float* scores, uint8_t* chosen, void* stream = nullptr);

// q: n_head x head_dim; k_cache/v_cache: (pos + 1) rows of n_head_kv x head_dim; out: n_head x head_dim.
std::string attend_f32(const float* q, const float* k_cache, const float* v_cache, int64_t pos, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                       float* out, void* stream = nullptr);

}  // namespace hotcold::kernels::gpu
