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

// One query (decode) against keys 0 .. keys - 1: out = sum over t of softmax_t(scale q . k_t) v_t.
// Sixteen keys' scores at a time (sixteen vector sums folded into one vector), softmax with a vector
// exp, the values summed in registers. scores: `keys` floats of scratch. Where attend_block is
// vectorized (attend_block_vectorized(hd)); elsewhere the scalar reference.
void attend_one(const float* q, const float* k, const float* v, int64_t stride, int64_t hd, int64_t keys, float scale, float* out, float* scores);
void attend_one(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t hd, int64_t keys, float scale, float* out, float* scores);

namespace scalar {
void attend_one(const float* q, const float* k, const float* v, int64_t stride, int64_t hd, int64_t keys, float scale, float* out, float* scores);
void attend_one(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t hd, int64_t keys, float scale, float* out, float* scores);
void attend_block(const float* const* q, int nq, const float* k, const float* v, int64_t stride, int64_t hd, int64_t pos0, float scale,
                  float* const* out, float* scratch);
void attend_block(const float* const* q, int nq, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t hd, int64_t pos0, float scale,
                  float* const* out, float* scratch);
}

}  // namespace hotcold::kernels
