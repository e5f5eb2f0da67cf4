#include "devices/device_info.hpp"
#include "kernels/gpu/portability.hpp"

namespace hotcold::devices {

gpu_probe probe_cuda() {
  gpu_probe p;
  p.compiled = true;
  int count = 0;
  gpuError_t err = gpuGetDeviceCount(&count);
  if (err != gpuSuccess) {
    p.unavailable = gpuGetErrorString(err);
    return p;
  }
  if (count == 0) {
    p.unavailable = "no CUDA device";
    return p;
  }
  for (int i = 0; i < count; ++i) {
    gpuDeviceProp_t prop{};
    if (gpuGetDeviceProperties(&prop, i) != gpuSuccess) continue;
    device_info d;
    d.kind = "cuda";
    d.name = prop.name;
    d.index = i;
    size_t free_b = 0, total_b = 0;
    if (gpuSetDevice(i) == gpuSuccess && gpuMemGetInfo(&free_b, &total_b) == gpuSuccess) {
      d.total_memory = total_b;
      d.free_memory = free_b;
    } else {
      d.total_memory = prop.totalGlobalMem;
    }
    p.devices.push_back(d);
  }
  return p;
}

}  // namespace hotcold::devices
