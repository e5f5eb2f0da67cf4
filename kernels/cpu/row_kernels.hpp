#pragma once
// One table from a tensor type to its CPU kernels on one row: what the engine reads a weight row with,
// whatever its type. Filled once per process (from cpu_kernels(), so with the instruction sets this CPU has).
#include <cstdint>

#include "kernels/cpu/quants.hpp"
#include "kernels/tensor_types.hpp"

namespace hotcold::kernels {

// The activation's side of a product with rows of a type (ggml's vec_dot_type): the floats; Q8_0
// blocks (Q8_0 and Q4_0 rows: the input quantized to Q8_0 once, the row dot reads it); or Q8_K (the
// K-quants: the matrix kernels quantize the input to Q8_K; the row dot reads floats, which the sparse
// paths round to Q8_K first, so that both give one sum).
enum class input_format { floats, q8_0, q8_k };

struct row_kernels {
  tensor_type type;
  uint32_t block_size;   // elements per block (1 for plain types): a row's length is a multiple of it
  uint32_t block_bytes;  // bytes per block
  input_format input;  // what products with these rows read of the input
  // row . x (n values); xq: x quantized to Q8_0, read when input is q8_0.
  float (*dot)(const void* row, const float* x, const block_q8_0* xq, int64_t n);
  // y += a * row.
  void (*axpy)(float a, const void* row, float* y, int64_t n);
  // y += a[0] rows[0] + ... + a[3] rows[3], y loaded and stored once where the type has a kernel for it.
  void (*axpy4)(const float* a, const void* const* rows, float* y, int64_t n);
  // The row as floats.
  void (*to_float)(const void* row, float* out, int64_t n);
};

// The kernels for rows of type t; null when the CPU engine does not compute with that type.
const row_kernels* row_kernels_for(tensor_type t);
// The input format of t's products (floats for a type without kernels).
inline input_format input_format_of(tensor_type t) {
  const row_kernels* k = row_kernels_for(t);
  return k ? k->input : input_format::floats;
}

}  // namespace hotcold::kernels
