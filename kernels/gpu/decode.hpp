#pragma once
#include "kernels/activation.hpp"
// The hot executor's GPU kernels (CUDA; the same sources build as HIP through portability.hpp), for
// one decode token. Pointers are device memory; `stream` is a cudaStream_t / hipStream_t (null: the
// default stream). Each returns "" when the launch was accepted, else the error. Weights are F16
// (hot FFN rows also Q8_0 and Q4_0), activations F32, laid out as on the CPU (model/model.hpp): a matrix is `rows` rows of `cols`.
//
//   matmul       y_t = W x_t for a few vectors at once (the attention products, the head), rows F16,
//                Q8_0 or Q4_0; matvec is one vector
//   hot_ffn      the hot share of a sparse FFN, rows F16, Q8_0 or Q4_0: for the hot neurons chosen
//                (their rows in the device's copy), h = act(gate . x, up . x) and out = sum_k h_k
//                down_t[k], the down rows split across blocks by chunks of neurons and reduced
//   predictor    the activation predictor: s = fc2 relu(fc1 x), chosen[i] = s_i >= threshold
//   rope_store   RoPE on each token's q and k heads by given angles, k and v stored in the KV cache
//   attend       each token's heads against its sequence's cache up to its position (causal,
//                grouped-query), an online softmax over tiles of positions, F16 or F32 cache; a long
//                past split across blocks and joined (flash-decoding)
#include <cstddef>
#include <cstdint>
#include <string>

namespace hotcold::kernels::gpu {

// Kernels the calling thread has launched with these functions (each counted once launched).
uint64_t launches_by_this_thread();

// The FFN activations the hot executor meets (model/arch.hpp's, by value).

// The types hot rows keep on the device (the file's own: a hot row is never converted).
// Q6_K (blocks of 256) only for products (matmul, matvec, the predictor): llama.cpp's presets give a
// Q4_0 file a Q6_K head.
enum class row_type : int { f16 = 0, q8_0 = 1, q4_0 = 2, q6_k = 3 };
int64_t row_bytes(row_type t, int64_t d);  // one row of d values (Q8_0 / Q4_0: d a multiple of 32; Q6_K: of 256)

// Q8_0 and Q4_0 rows meet x rounded to 8 bits (blocks of 32 as the CPU's Q8_0: d = max |x| / 127 in
// F16, values rounded to the nearest, ties to even), their products in integers (dp4a), where one
// vector's rounded copy fits a block's shared memory; otherwise x itself. Products, predictors and
// the hot FFN's gate and up dots alike (not the down rows: those scale by each neuron's value).
inline constexpr int64_t x_q8_max_bytes = 40 * 1024;
// Bytes of shared memory nv rounded vectors of cols values take: their scales (floats), then values.
// Each block's 32 values sit 36 bytes apart (4 bytes of padding): the 32 lanes of a warp each read
// their own block, and 36-byte steps (9 words, prime to the 32 banks) put them in 32 banks where
// 32-byte steps put eight lanes in each of four (an 8-way conflict on every read of x).
inline constexpr int64_t x_q8_block_stride = 36;
inline int64_t x_q8_bytes(int64_t nv, int64_t cols) { return nv * (cols / 32) * (4 + x_q8_block_stride); }
inline bool reads_x_in_8_bits(row_type t, int64_t cols) {
  return (t == row_type::q8_0 || t == row_type::q4_0) && cols % 32 == 0 && x_q8_bytes(1, cols) <= x_q8_max_bytes;
}

// The down projection is split into at most this many chunks of neurons, summed in order.
inline constexpr int64_t hot_ffn_max_chunks = 64;
int64_t hot_ffn_scratch(int64_t d);  // floats of device scratch hot_ffn needs (its chunks' partial sums)

// slots[k]: row of hot neuron k in gate/up/down_t (rows of `d` values in type t); hidden[k] receives
// its value; out (d) is overwritten. gated: false for Falcon-style FFNs (up only). scratch:
// hot_ffn_scratch(d) floats of device memory; calls on one stream may share it.
// threshold: a neuron's value is 0 where |act(..)| < it (0: none).
std::string hot_ffn(row_type t, const void* gate, const void* up, const void* down_t, const int32_t* slots, int64_t count, int64_t d, const float* x,
                    bool gated, activation act, float threshold, float* hidden, float* out, float* scratch, void* stream = nullptr);

// y = W x and the predictor with rows of type t (F16, Q8_0, Q4_0; quantized rows need a multiple of 32
// values), in the file's own bytes.
std::string matvec(row_type t, const void* w, int64_t rows, int64_t cols, const float* x, float* y, void* stream = nullptr);
// The predictor for n tokens at once (x: n rows of d; scratch: n rank floats; scores and chosen: n
// rows of n_ff): the two products as matvec for one token, matmul for more (each weight read once a
// batch). on_act (thresholded files): chosen[i] = |act(s_i)| >= threshold, the scores being
// estimated pre-activations.
std::string predictor(row_type t, const void* fc1, const void* fc2, int64_t d, int64_t rank, int64_t n_ff, const float* x, int64_t n, float threshold,
                      float* scratch, float* scores, uint8_t* chosen, void* stream = nullptr, bool on_act = false, activation act = activation::silu);

// y + t ldy (rows floats) = W (x + t cols), for t < n; rows of type t (quantized: cols a multiple of
// the block, 32 or 256 for Q6_K).
std::string matmul(row_type t, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy, void* stream = nullptr);

// out[i] = a[i] + b[i] for i < count (b null: a copy).
std::string add(const float* a, const float* b, int64_t count, float* out, void* stream = nullptr);
// out (d) = sum over r < rows of w[r] y[r] (y: rows x d), added to out where accumulate.
std::string weighted_sum(const float* y, const float* w, int64_t rows, int64_t d, bool accumulate, float* out, void* stream = nullptr);
// out (rows x cols) = each row of x through RMSNorm with weights w (cols): x / sqrt(mean(x^2) + eps) w.
std::string rms_norm(const float* x, const float* w, int64_t rows, int64_t cols, float eps, float* out, void* stream = nullptr);
// up[i] = act(gate[i]) up[i] for i < count (act(up[i]) when not gated; relu(gate) relu(up) for dReLU),
// 0 where |act(..)| < threshold.
std::string activate(float* gate, float* up, int64_t count, bool gated, activation act, float threshold, void* stream = nullptr);

// A layer's attention shape: the embedding, heads, KV heads, values per head (at most
// attend_max_head_dim), values rotated, the RoPE pairs' layout, positions per sequence in the cache.
struct attention_shape {
  int64_t d, n_head, n_head_kv, head_dim, n_rot;  // d: the queries' width, n_head x head_dim
  bool adjacent_pairs;  // (2i, 2i + 1), else (i, i + n_rot / 2)
  int64_t ctx;
};
inline constexpr int64_t attend_max_head_dim = 256;
// qkv: n rows of d + 2 kv floats (q, then k, then v; kv = n_head_kv head_dim), rotated in place by
// angles (n rows of n_rot: n_rot / 2 cosines, then the sines); k and v then stored in the caches
// (n_seq x ctx x kv values, F16 when f16 else F32) at row seqpos[n + t] of sequence seqpos[t].
// Before the rotation, where non-null (device memory, F32): biases added to q (d), k and v (kv each), then
// each head of q and of k through RMSNorm with q_norm / k_norm (head_dim weights) and eps.
struct qkv_adjust {
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  float eps = 1e-6f;
};
std::string rope_store(const attention_shape& s, float* qkv, int64_t n, const float* angles, const int32_t* seqpos, void* k_cache, void* v_cache, bool f16,
                       void* stream = nullptr, const qkv_adjust& adjust = {});
// Flash-decoding: where few (token, head) pairs face a long past, each pair's positions are split
// across blocks (a split of at least attend_split_positions; at most attend_split_blocks blocks in
// all, attend_max_splits a pair) whose partial softmaxes a second kernel joins. The number of splits
// attend() takes for n tokens whose latest position is max_pos, with partial_floats floats of device
// scratch (a split holds head_dim + 2); 1: no split, one kernel.
inline constexpr int64_t attend_split_blocks = 256, attend_split_positions = 128, attend_max_splits = 64;
inline int64_t attend_splits(int64_t n, int64_t n_head, int64_t head_dim, int64_t max_pos, int64_t partial_floats) {
  const int64_t pairs = n * n_head;
  if (pairs <= 0 || max_pos < 0) return 1;
  int64_t s = attend_split_blocks / pairs;
  s = s < (max_pos + attend_split_positions) / attend_split_positions ? s : (max_pos + attend_split_positions) / attend_split_positions;
  s = s < attend_max_splits ? s : attend_max_splits;
  s = s < partial_floats / (pairs * (head_dim + 2)) ? s : partial_floats / (pairs * (head_dim + 2));
  return s < 2 ? 1 : s;
}
// out (n x d): token t's heads, softmax(q.K / sqrt(head_dim)) V over positions 0..seqpos[n + t] of its
// sequence. partial (device memory, partial_floats of it; null: never split) holds the splits' partial
// sums; max_pos: the largest seqpos[n + t] (the host knows it).
std::string attend(const attention_shape& s, const float* qkv, int64_t n, const int32_t* seqpos, const void* k_cache, const void* v_cache, bool f16,
                   float* out, void* stream = nullptr, float* partial = nullptr, int64_t partial_floats = 0, int64_t max_pos = -1);

}  // namespace hotcold::kernels::gpu
