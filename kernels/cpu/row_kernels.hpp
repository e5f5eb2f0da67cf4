#pragma once
// One table from a tensor type to its CPU kernels on one row: what the engine reads a weight row with,
// whatever its type. Filled once per process (from cpu_kernels(), so with the instruction sets this CPU has).
#include <cstdint>

#include "kernels/cpu/quants.hpp"
#include "kernels/tensor_types.hpp"

namespace hotcold::kernels {

struct row_kernels {
  tensor_type type;
  uint32_t block_size;   // elements per block (1 for plain types): a row's length is a multiple of it
  uint32_t block_bytes;  // bytes per block
  // The activation's side of a product: rows of this type are dotted with the input quantized to
  // Q8_0 (Q8_0 and Q4_0 rows, as llama.cpp does), else with the floats.
  bool q8_input;
  // row . x (n values); xq: x quantized to Q8_0, read when q8_input.
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

}  // namespace hotcold::kernels
