#pragma once
// The one table of the CPU kernels that have a version per instruction set: each entry the version
// this CPU runs, chosen once per process from cpu() (kernel_table.cpp) — every kind's file puts its
// scalar reference in first, then each instruction set the CPU has replaces the entries it implements
// (its choose_* function, beside the versions). The kernels' public functions (dot.hpp, gemm.hpp,
// quants.hpp, select.hpp, attention.hpp) call through it; nothing else asks cpu() which version to run.
#include <cstdint>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/tensor_types.hpp"

namespace hotcold::kernels {

struct kernel_table {
  // Rows of every type against vectors (dot.hpp; rows_float.cpp, rows_quant.cpp).
  float (*dot_f32)(const float* w, const float* x, int64_t n);
  float (*dot_f16)(const uint16_t* w, const float* x, int64_t n);
  float (*dot_bf16)(const uint16_t* w, const float* x, int64_t n);
  float (*dot_q8_0)(const block_q8_0* w, const block_q8_0* x, int64_t n);
  float (*dot_q4_0)(const block_q4_0* w, const block_q8_0* x, int64_t n);
  float (*dot_q6_k)(const block_q6_k* w, const float* x, int64_t n);
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n);
  void (*axpy_f16)(float a, const uint16_t* x, float* y, int64_t n);
  void (*axpy_bf16)(float a, const uint16_t* x, float* y, int64_t n);
  void (*axpy_q8_0)(float a, const block_q8_0* x, float* y, int64_t n);
  void (*axpy_q4_0)(float a, const block_q4_0* x, float* y, int64_t n);
  void (*axpy_q6_k)(float a, const block_q6_k* x, float* y, int64_t n);
  void (*axpy4_f32)(const float* a, const float* const* x, float* y, int64_t n);
  void (*axpy4_f16)(const float* a, const uint16_t* const* x, float* y, int64_t n);
  void (*axpy4_f16_ahead)(const float* a, const uint16_t* const* x, float* y, int64_t n, const uint16_t* const* next);
  void (*axpy4_bf16)(const float* a, const uint16_t* const* x, float* y, int64_t n);
  void (*axpy4_q8_0)(const float* a, const block_q8_0* const* x, float* y, int64_t n);
  void (*axpy4_q4_0)(const float* a, const block_q4_0* const* x, float* y, int64_t n);
  void (*axpy4_q4_0_ahead)(const float* a, const block_q4_0* const* x, float* y, int64_t n, const block_q4_0* const* next);
  void (*dotn_f32)(const float* w, const float* const* x, int nx, int64_t n, float* out);
  void (*dotn_f16)(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out);
  void (*dotn_bf16)(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out);
  void (*dot2n_f32)(const float* w0, const float* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1);
  void (*dot2n_f16)(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1);
  void (*dot2n_bf16)(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1);
  void (*dot2_f16_ahead)(const uint16_t* w0, const uint16_t* w1, const float* x, int64_t n, float* out0, float* out1, const uint16_t* next0, const uint16_t* next1);
  void (*dot4_f16_ahead)(const uint16_t* const* w, const float* x, int64_t n, float* out, const uint16_t* const* next);
  void (*dot4n_f32)(const float* const* w, const float* const* x, int nx, int64_t n, float* out);
  void (*dot4n_f16)(const uint16_t* const* w, const float* const* x, int nx, int64_t n, float* out);
  void (*dot4n_bf16)(const uint16_t* const* w, const float* const* x, int nx, int64_t n, float* out);
  void (*dotn_q4_0)(const block_q4_0* w, const block_q8_0* const* x, int nx, int64_t n, float* out);
  void (*dotn_q4_0_x4)(const block_q4_0* w, const block_q8_0* const* xq, const q8_0_x4* const* x4, int nx, int64_t n, float* out);
  void (*dotn_q8_0)(const block_q8_0* w, const block_q8_0* const* x, int nx, int64_t n, float* out);
  void (*dot4r_q4_0)(const block_q4_0* const* w, const block_q8_0* x, int64_t n, float* out);
  void (*dot4r_q4_0_x4)(const block_q4_0* const* w, const block_q8_0* xq, const q8_0_x4* x4, int64_t n, float* out);
  void (*dot4r_q4_0_x4_ahead)(const block_q4_0* const* w, const block_q8_0* xq, const q8_0_x4* x4, int64_t n, float* out, const block_q4_0* const* next);
  // K-quant rows (k_quants.cpp, dot_q6_k.cpp).
  float (*dot_q4_k)(const block_q4_k* w, const float* x, int64_t n);
  float (*dot_q5_k)(const block_q5_k* w, const float* x, int64_t n);
  void (*axpy_q4_k)(float a, const block_q4_k* x, float* y, int64_t n);
  void (*axpy_q5_k)(float a, const block_q5_k* x, float* y, int64_t n);
  float (*dot_q4_k_q8_k)(const block_q4_k* w, const block_q8_k* x, int64_t n);
  float (*dot_q5_k_q8_k)(const block_q5_k* w, const block_q8_k* x, int64_t n);
  float (*dot_q6_k_q8_k)(const block_q6_k* w, const block_q8_k* x, int64_t n);
  void (*to_float_q4_k)(const block_q4_k* x, float* y, int64_t n);
  void (*to_float_q5_k)(const block_q5_k* x, float* y, int64_t n);
  void (*dot4t_q6_k_q8_k)(const block_q6_k* w, const block_q8_k* const* x, int64_t n, float* out);
  // Sixteen interleaved rows (dot_f16x16.cpp, dot_q4_0x16.cpp, dot_q4_kx16.cpp, dot_q6_kx16.cpp).
  void (*dot16r_f16)(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out);
  void (*dot16r2_f16)(const uint16_t* wa, const uint16_t* wb, const float* x, int64_t n, float* oa, float* ob);
  void (*dot16r_q4_0)(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, int64_t n, float* out);
  void (*dot16r2_q4_0)(const block_q4_0x16* wa, const block_q4_0x16* wb, const block_q8_0* x, const q8_0_terms* xt, int64_t n, float* oa, float* ob);
  void (*dot16r_q4_0_at)(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, const int32_t* blocks, int64_t count, float* out);
  void (*dot16r2_q4_0_at)(const block_q4_0x16* wa, const block_q4_0x16* wb, const block_q8_0* x, const q8_0_terms* xt, const int32_t* blocks, int64_t count, float* oa,
                          float* ob);
  void (*dot16r_q4_k)(const block_q4_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const* xg, int nx, int64_t n, float* out);
  void (*dot16r2_q4_k)(const block_q4_kx16* wa, const block_q4_kx16* wb, const block_q8_k* x, const q8_k_group_sums* xg, int64_t n, float* oa, float* ob);
  void (*dot16r_q5_k)(const block_q5_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const* xg, int nx, int64_t n, float* out);
  void (*dot16r2_q5_k)(const block_q5_kx16* wa, const block_q5_kx16* wb, const block_q8_k* x, const q8_k_group_sums* xg, int64_t n, float* oa, float* ob);
  void (*dot16r_q6_k)(const block_q6_kx16* w, const block_q8_k* const* x, int nx, int64_t n, float* out);
  void (*dot16r2_q6_k)(const block_q6_kx16* wa, const block_q6_kx16* wb, const block_q8_k* x, int64_t n, float* oa, float* ob);
  // The prompt tile (gemm.cpp).
  void (*gemm_unpack_q4_0)(const block_q4_0* x, float* y, int64_t n);
  void (*gemm_pack_f16_columns)(const uint16_t* w, int64_t ws, int64_t kc, float* xp);
  void (*gemm_pack_tokens)(const float* x, int64_t n, int64_t d, int64_t t0, int64_t k0, int64_t kc, float* xp);
  void (*gemm_tile)(const float* w, int64_t ws, const float* xp, int64_t kc, float* c, int64_t cs, bool first);
  bool gemm_vectorized;  // whether the tile has a vector version here
  // Activations to Q8_0 and Q8_K (quants.cpp); the predictor's choice (select.cpp).
  void (*quantize_row_q8_0)(const float* x, block_q8_0* y, int64_t n);
  void (*quantize_row_q8_k)(const float* x, block_q8_k* y, int64_t n);
  int64_t (*select_at_least)(const float* scores, int64_t n, float threshold, uint8_t* chosen, int32_t* ids);
  // One head's attention (attention.cpp): the vector versions for head sizes that are multiples of 16,
  // null where the CPU has none (the scalar reference then).
  void (*attend_block_f32)(const float* const* q, int nq, const float* k, const float* v, int64_t stride, int64_t hd, int64_t pos0, float scale,
                           float* const* out, float* scratch);
  void (*attend_block_f16)(const float* const* q, int nq, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t hd, int64_t pos0, float scale,
                           float* const* out, float* scratch);
  // Decode attention over a range of keys, every head (attend_keys.cpp); null where attend_block is.
  void (*attend_keys_f32)(const float* q, const float* k, const float* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0, int64_t t1,
                          float scale, key_range_sums out, float* scratch);
  void (*attend_keys_f16)(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0,
                          int64_t t1, float scale, key_range_sums out, float* scratch);
  // The same over a cache of any kv_types (kv_rows.hpp, attend_keys_typed): each type's rows widened as they are read.
  void (*attend_keys_typed)(const float* q, kv_types t, const uint8_t* k, const uint8_t* v, int64_t k_row_bytes, int64_t v_row_bytes, int64_t n_head,
                            int64_t n_kv, int64_t hd, int64_t t0, int64_t t1, float scale, key_range_sums out, float* scratch);
  // Over keys in tiles (kv_rows.hpp, attend_key_tiles): F16 or F32 ones, and Q8_0 ones (their integer
  // dot products: null without VNNI); and tiles of F16 keys widened into rows.
  void (*attend_key_tiles)(const float* q, kv_types t, const uint8_t* k_tiles, const uint8_t* v, int64_t v_row_bytes, int64_t n_head, int64_t n_kv,
                           int64_t hd, int64_t t0, int64_t t1, float scale, key_range_sums out, float* scratch);
  void (*attend_q8_0_key_tiles)(const float* q, kv_types t, const uint8_t* k_tiles, const uint8_t* v, int64_t v_row_bytes, int64_t n_head, int64_t n_kv,
                                int64_t hd, int64_t t0, int64_t t1, float scale, key_range_sums out, float* scratch);
  void (*widen_key_tiles)(const uint16_t* tiles, int64_t width, int64_t pos, int64_t n, int64_t at, int64_t cols, float* out);
};
// The table as this CPU fills it (made once; what cpu_kernels() returns).
kernel_table make_kernel_table();
// (Inline: a kernel's call costs one load and one indirect call, however small the kernel.)
inline const kernel_table& cpu_kernels() {
  static const kernel_table k = make_kernel_table();
  return k;
}

// Each kind's choice, in its own file.
void choose_row_kernels(kernel_table& k, const cpu_features& f);
void choose_k_quant_kernels(kernel_table& k, const cpu_features& f);
void choose_q6_k_kernels(kernel_table& k, const cpu_features& f);
void choose_f16x16_kernels(kernel_table& k, const cpu_features& f);
void choose_q4_0x16_kernels(kernel_table& k, const cpu_features& f);
void choose_q4_kx16_kernels(kernel_table& k, const cpu_features& f);
void choose_q6_kx16_kernels(kernel_table& k, const cpu_features& f);
void choose_gemm_kernels(kernel_table& k, const cpu_features& f);
void choose_quantize_kernels(kernel_table& k, const cpu_features& f);
void choose_select_kernels(kernel_table& k, const cpu_features& f);
void choose_attention_kernels(kernel_table& k, const cpu_features& f);
void choose_attend_keys_kernels(kernel_table& k, const cpu_features& f);

}  // namespace hotcold::kernels
