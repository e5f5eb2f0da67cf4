#include "devices/device_info.hpp"
#include "kernels/gpu/portability.hpp"

#include <string>

namespace hotcold::devices {

gpu_probe probe_cuda() {
  gpu_probe p;
  p.compiled = true;
#if defined(__HIPCC__)
  p.kind = "hip";
#else
  p.kind = "cuda";
#endif
  int count = 0;
  gpuError_t err = gpuGetDeviceCount(&count);
  if (err != gpuSuccess) {
    p.unavailable = gpuGetErrorString(err);
#if !defined(__HIPCC__)
    // Say which of the two it is: no driver at all, or one older than the runtime linked in.
    if (err == cudaErrorInsufficientDriver) {
      int runtime = 0, driver = 0;
      cudaRuntimeGetVersion(&runtime);
      cudaDriverGetVersion(&driver);
      if (driver == 0) p.unavailable = "no NVIDIA driver (libcuda.so.1 not found or not loadable)";
      else
        p.unavailable = "the NVIDIA driver supports CUDA " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) +
                        ", older than this build's CUDA runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
    }
#endif
    return p;
  }
  if (count == 0) {
#if defined(__HIPCC__)
    p.unavailable = "no HIP device";
#else
    p.unavailable = "no CUDA device";
#endif
    return p;
  }
  for (int i = 0; i < count; ++i) {
    gpuDeviceProp_t prop{};
    if (gpuGetDeviceProperties(&prop, i) != gpuSuccess) continue;
    device_info d;
#if defined(__HIPCC__)
    d.kind = "hip";
#else
    d.kind = "cuda";
#endif
    d.name = prop.name;
    d.index = i;
    // Properties need no context; free memory would open one (gpu_free_memory, for the GPU used).
    d.total_memory = prop.totalGlobalMem;
    p.devices.push_back(d);
  }
  return p;
}

uint64_t gpu_free_memory(int index) {
  size_t free_b = 0, total_b = 0;
  if (gpuSetDevice(index) != gpuSuccess || gpuMemGetInfo(&free_b, &total_b) != gpuSuccess) return 0;
  return free_b;
}

}  // namespace hotcold::devices
