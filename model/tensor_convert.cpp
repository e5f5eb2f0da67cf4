#include "model/tensor_convert.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"

namespace hotcold {

std::vector<uint8_t> convert_rows(std::span<const float> x, int64_t ne0, tensor_type type) {
  const auto& tt = traits(type);
  if (ne0 <= 0 || ne0 % tt.block_size != 0 || x.size() % static_cast<size_t>(ne0) != 0)
    throw std::invalid_argument(fmt::format("convert_rows: rows of {} elements cannot be stored as {} (block {})", ne0, tt.name, tt.block_size));
  const size_t n = x.size();
  std::vector<uint8_t> out(n / tt.block_size * tt.block_bytes);
  using namespace kernels;
  switch (type) {
    case tensor_type::f32: std::memcpy(out.data(), x.data(), n * 4); break;
    case tensor_type::f16: fp32_to_fp16_row(x.data(), reinterpret_cast<uint16_t*>(out.data()), n); break;
    case tensor_type::bf16:
      for (size_t i = 0; i < n; ++i) reinterpret_cast<uint16_t*>(out.data())[i] = fp32_to_bf16(x[i]);
      break;
    case tensor_type::q8_0: quantize_row_q8_0(x.data(), reinterpret_cast<block_q8_0*>(out.data()), static_cast<int64_t>(n)); break;
    case tensor_type::q4_0: quantize_row_q4_0(x.data(), reinterpret_cast<block_q4_0*>(out.data()), static_cast<int64_t>(n)); break;
    case tensor_type::q6_k: quantize_row_q6_k(x.data(), reinterpret_cast<block_q6_k*>(out.data()), static_cast<int64_t>(n)); break;
    case tensor_type::q4_k: quantize_row_q4_k(x.data(), reinterpret_cast<block_q4_k*>(out.data()), static_cast<int64_t>(n)); break;
    case tensor_type::q5_k: quantize_row_q5_k(x.data(), reinterpret_cast<block_q5_k*>(out.data()), static_cast<int64_t>(n)); break;
    default: throw std::invalid_argument(fmt::format("convert_rows: cannot write {}", tt.name));
  }
  return out;
}

}  // namespace hotcold
