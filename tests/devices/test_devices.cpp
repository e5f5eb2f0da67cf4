// Device discovery: the CPU is always there; GPUs are found or skipped cleanly.
#include <gtest/gtest.h>

#include <vector>

#include "devices/device_info.hpp"
#include "kernels/cpu/fp16.hpp"
#ifdef HOTCOLD_HAVE_CUDA
#include "kernels/gpu/convert.hpp"
#endif

namespace hotcold::devices {
namespace {

TEST(Devices, CpuComesFirstWithItsMemory) {
  auto all = list_devices();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all[0].kind, "cpu");
  EXPECT_FALSE(all[0].name.empty());
  EXPECT_GT(all[0].total_memory, uint64_t{256} << 20);
  EXPECT_LE(all[0].free_memory, all[0].total_memory);
  EXPECT_GT(all[0].free_memory, 0u);
}

TEST(Devices, CudaProbeReportsDevicesOrWhyNot) {
  auto p = probe_cuda();
#ifdef HOTCOLD_HAVE_CUDA
  EXPECT_TRUE(p.compiled);
#else
  EXPECT_FALSE(p.compiled);
#endif
  if (p.devices.empty()) {
    EXPECT_FALSE(p.unavailable.empty());
  } else {
    for (const auto& d : p.devices) {
      EXPECT_EQ(d.kind, "cuda");
      EXPECT_GT(d.total_memory, 0u);
    }
  }
}

TEST(GpuKernels, Fp16ConversionMatchesTheCpu) {
#ifndef HOTCOLD_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
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
#endif
}

}  // namespace
}  // namespace hotcold::devices
