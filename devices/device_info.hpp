#pragma once
// What compute devices this machine has. The full device interface (buffers, queues, budgets)
// arrives with the actor runtime; this is the registry's first layer: name, kind, memory.
#include <cstdint>
#include <string>
#include <vector>

namespace hotcold::devices {

struct device_info {
  std::string kind;          // "cpu", "cuda", "hip"
  std::string name;          // e.g. "AMD EPYC 9R45", "NVIDIA H200"
  uint64_t total_memory = 0; // bytes
  uint64_t free_memory = 0;  // bytes, at the time of the query
  int index = 0;             // device ordinal within its kind
};

// The CPU first, then every GPU the compiled backends can see.
std::vector<device_info> list_devices();

device_info cpu_device();

struct gpu_probe {
  std::string kind = "gpu";      // the back end this build has: "cuda" or "hip" (-DHOTCOLD_GPU), "gpu" when none
  bool compiled = false;         // was a back end built (nvcc or hipcc present at build time)?
  std::vector<device_info> devices;
  std::string unavailable;       // why no device is usable ("no CUDA driver", ...), empty if some are
};
// The GPUs of this build's back end (CUDA or HIP; the name is historical), with their total memory:
// it opens no context on them (free_memory stays 0).
gpu_probe probe_cuda();
// GPU `index`'s free memory now (0 when it cannot say). Opens the runtime's context on that GPU.
uint64_t gpu_free_memory(int index);
// What a GPU's budget keeps back by default for the driver's context, the runtime's lazily loaded
// kernels and the allocator's slack (bytes): the plan gets the free memory less this.
inline constexpr uint64_t gpu_memory_margin = 512ull << 20;

}  // namespace hotcold::devices
