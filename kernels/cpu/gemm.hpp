#pragma once
// The register tile of the float matrix products of prompt batches: twelve weight rows against 32
// tokens, 24 vector sums held in registers for a block of the inner dimension. The tokens come
// packed (element k of 32 tokens side by side) so that each step loads two vectors of tokens and
// broadcasts one weight per row: 24 multiply-adds per 14 loads, no horizontal sums.
#include <cstdint>

#include "kernels/cpu/quants.hpp"

namespace hotcold::kernels {

inline constexpr int gemm_rows = 12, gemm_tokens = 32;

// Whether gemm_tile has a vector implementation on this CPU (AVX-512, or AVX2 with FMA).
bool gemm_tile_vectorized();

// c[i cs + t] (= if first, else +=) sum over k < kc of w[i ws + k] xp[32 k + t], for i < 12, t < 32.
void gemm_tile(const float* w, int64_t ws, const float* xp, int64_t kc, float* c, int64_t cs, bool first);

// xp[32 k + j] = x[(t0 + j) d + k0 + k] for k < kc, j < 32 (zero for t0 + j >= n): a panel of tokens.
void gemm_pack_tokens(const float* x, int64_t n, int64_t d, int64_t t0, int64_t k0, int64_t kc, float* xp);

// xp[32 k + j] = the F16 value w[k ws + j] as a float, for k < kc, j < 32: a panel of 32 columns of kc
// rows (the down rows of a transposed product, whose columns are the outputs).
void gemm_pack_f16_columns(const uint16_t* w, int64_t ws, int64_t kc, float* xp);

// y[0..n) = the Q4_0 blocks x as floats (dequantize_row_q4_0's values), for the products' conversions.
void gemm_unpack_q4_0(const block_q4_0* x, float* y, int64_t n);

namespace scalar {
void gemm_pack_f16_columns(const uint16_t* w, int64_t ws, int64_t kc, float* xp);
void gemm_tile(const float* w, int64_t ws, const float* xp, int64_t kc, float* c, int64_t cs, bool first);
void gemm_pack_tokens(const float* x, int64_t n, int64_t d, int64_t t0, int64_t k0, int64_t kc, float* xp);
}

}  // namespace hotcold::kernels
