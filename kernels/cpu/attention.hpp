#pragma once
// Causal attention of one head for a block of consecutive queries of one sequence (a prompt's
// tokens): the block's scores against every cached key in one pass, as small matrix products with
// no horizontal sums, then each query's softmax and its weighted sum of the values. Keys and values
// are float32 or F16 (uint16_t, the KV cache's default type), read as floats.
#include <cstdint>

namespace hotcold::kernels {

// At most this many queries a block.
inline constexpr int attend_block_max = 32;

// Floats of scratch attend_block needs for `keys` cached keys (pos0 + nq) and head size hd.
int64_t attend_block_scratch(int64_t keys, int64_t hd);

// Whether attend_block has a vector implementation for head size hd on this CPU (AVX-512, hd a
// multiple of 16); elsewhere callers keep their own path (the scalar one here is the reference).
bool attend_block_vectorized(int64_t hd);

// q[j] (j < nq <= attend_block_max): the query at position pos0 + j, hd floats. Key and value t (t <=
// pos0 + nq - 1) at k + t stride and v + t stride. out[j] = sum over t <= pos0 + j of
// softmax_t(scale q[j] . k_t) v_t.
void attend_block(const float* const* q, int nq, const float* k, const float* v, int64_t stride, int64_t hd, int64_t pos0, float scale,
                  float* const* out, float* scratch);
void attend_block(const float* const* q, int nq, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t hd, int64_t pos0, float scale,
                  float* const* out, float* scratch);

// Decode attention over keys t0 .. t1 - 1 for every head of one token (q: n_head x hd; head h reads
// KV head h / (n_head / n_kv), at h's slice of each row: rows `stride` values apart, a position's KV
// heads side by side), as sums that merge_key_ranges joins: per head the largest scaled score m, the
// sum l of exp(score - m), and o (hd) the values weighted by exp(score - m). Each row of K and V is
// read once for all heads. scratch: attend_keys_scratch floats. Ranges of one token computed apart
// (by different threads) merge into the one softmax over their union.
struct key_range_sums {
  float* m;  // n_head
  float* l;  // n_head
  float* o;  // n_head x hd
};
int64_t attend_keys_scratch(int64_t n_head, int64_t hd);
// A range's sums before any key: no maximum yet (m = -inf), nothing summed.
void clear_key_range(key_range_sums out, int64_t n_head, int64_t hd);
void attend_keys(const float* q, const float* k, const float* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0, int64_t t1,
                 float scale, key_range_sums out, float* scratch);
void attend_keys(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0,
                 int64_t t1, float scale, key_range_sums out, float* scratch);
// out (n_head x hd) = the attention over the union of n ranges' keys (an empty range: m = -inf).
void merge_key_ranges(const key_range_sums* parts, int n, int64_t n_head, int64_t hd, float* out);

namespace scalar {
void attend_block(const float* const* q, int nq, const float* k, const float* v, int64_t stride, int64_t hd, int64_t pos0, float scale,
                  float* const* out, float* scratch);
void attend_block(const float* const* q, int nq, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t hd, int64_t pos0, float scale,
                  float* const* out, float* scratch);
void attend_keys(const float* q, const float* k, const float* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0, int64_t t1,
                 float scale, key_range_sums out, float* scratch);
void attend_keys(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0,
                 int64_t t1, float scale, key_range_sums out, float* scratch);
}

}  // namespace hotcold::kernels
