#pragma once
// Converting float rows to a weight type's bytes (what a file stores).
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/tensor_types.hpp"

namespace hotcold {

// `x` holds rows of ne0 floats. Supported: F32, F16, BF16, Q8_0, Q4_0, Q6_K; ne0 must be a multiple
// of the type's block size (std::invalid_argument otherwise).
std::vector<uint8_t> convert_rows(std::span<const float> x, int64_t ne0, tensor_type type);

}  // namespace hotcold
