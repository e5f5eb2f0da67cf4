// Device discovery: the CPU is always there; GPUs are found or skipped cleanly.
#include <gtest/gtest.h>

#include <vector>

#include "devices/device_info.hpp"

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
  EXPECT_EQ(p.compiled, HOTCOLD_BUILT_WITH_GPU != 0);  // set by CMake for this test
  if (p.devices.empty()) {
    EXPECT_FALSE(p.unavailable.empty());
  } else {
    for (const auto& d : p.devices) {
      EXPECT_TRUE(d.kind == "cuda" || d.kind == "hip") << d.kind;
      EXPECT_GT(d.total_memory, 0u);
    }
  }
}

}  // namespace
}  // namespace hotcold::devices
