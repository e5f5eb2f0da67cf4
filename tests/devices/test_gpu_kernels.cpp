// The GPU kernels against the CPU's, where a CUDA device is present (built only where nvcc is).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "devices/device.hpp"
#include "devices/device_info.hpp"
#include "devices/gpu_jobs.hpp"
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

// Weights go up in pinned chunks of 16 MiB through two staging buffers: an upload of several chunks
// and a tail, at an odd offset, arrives whole; a small one goes straight through.
TEST(GpuDevice, ChunkedUploadsArriveWhole) {
  if (probe_cuda().devices.empty()) GTEST_SKIP() << "no CUDA device: " << probe_cuda().unavailable;
  device_options o;
  o.kind = "auto";
  o.budget = 64ull << 20;
  auto dev = make_device(o);
  ASSERT_NE(dev->kind(), device_kind::cpu);
  std::mt19937 rng(7);
  for (const uint64_t bytes : {uint64_t{4096}, uint64_t{(40u << 20) + 12345}}) {
    std::vector<uint8_t> in(bytes), back(bytes);
    for (auto& b : in) b = static_cast<uint8_t>(rng());
    auto buf = dev->allocate(bytes + 3, "upload test");
    const auto before = dev->traffic();
    dev->copy_in(*buf, 3, in.data(), bytes)->wait();
    dev->copy_out(back.data(), *buf, 3, bytes)->wait();
    EXPECT_EQ(back, in) << bytes;
    // The copies and waits the GPU made are those sim counts for it.
    auto want = gpu_copy_traffic(bytes, true);
    want += gpu_copy_traffic(bytes, false);
    EXPECT_EQ(dev->traffic() - before, want) << bytes;
  }
}

}  // namespace
}  // namespace hotcold::devices
