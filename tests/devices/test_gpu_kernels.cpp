// The GPU kernels against the CPU's, where a CUDA device is present (built only where nvcc is).
#include <gtest/gtest.h>

#include <vector>

#include "devices/device_info.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/gpu/convert.hpp"

namespace hotcold::devices {
namespace {

TEST(GpuKernels, Fp16ConversionMatchesTheCpu) {
  if (probe_cuda().devices.empty()) GTEST_SKIP() << "no CUDA device: " << probe_cuda().unavailable;
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> gpu(h.size());
  ASSERT_EQ(kernels::gpu::fp16_to_fp32_host(h.data(), gpu.data(), h.size()), "");
  for (uint32_t i = 0; i < h.size(); ++i) {
    float cpu = kernels::fp16_to_fp32(h[i]);
    if (cpu != cpu) continue;  // NaN
    ASSERT_EQ(gpu[i], cpu) << i;
  }
}

}  // namespace
}  // namespace hotcold::devices
