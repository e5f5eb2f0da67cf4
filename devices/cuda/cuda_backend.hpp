#pragma once
// The GPU back end this build has (-DHOTCOLD_GPU): CUDA or HIP, from the same sources. Its device
// copies weights in through pinned buffers, keeps a step's scratch, and launches kernels/gpu's kernels
// on its own stream from its queue's thread (cuda_backend.cpp); make_device chooses it.
#include <memory>
#include <string>

#include "devices/device.hpp"

namespace hotcold::devices {

// Its kind and name.
#if defined(HOTCOLD_GPU_HIP)
inline constexpr device_kind gpu_kind = device_kind::hip;
inline constexpr const char* gpu_name = "hip";
#else
inline constexpr device_kind gpu_kind = device_kind::cuda;
inline constexpr const char* gpu_name = "cuda";
#endif

// A device on GPU `index` named `name`, its buffers counted against `budget` bytes. In a build
// without a GPU back end, its jobs throw (make_device never gets that far: no GPU is found).
// deadline_s: how long one job may run before the device is lost (0: no limit).
std::shared_ptr<device> make_gpu_device(std::string name, uint64_t budget, int index, double deadline_s = 0);

}  // namespace hotcold::devices
