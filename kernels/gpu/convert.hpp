#pragma once
// GPU conversions (CUDA / HIP). Host-callable; pointers are device memory.
#include <cstddef>
#include <cstdint>
#include <string>

namespace hotcold::kernels::gpu {

// Converts n halves to floats on the device. Returns an empty string on success, else the error.
std::string fp16_to_fp32(const uint16_t* d_src, float* d_dst, size_t n);

// Host round trip used by tests and gpu_check/gpu-check: copies in, converts, copies out.
std::string fp16_to_fp32_host(const uint16_t* src, float* dst, size_t n);

}  // namespace hotcold::kernels::gpu
