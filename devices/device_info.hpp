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
  bool compiled = false;         // was this backend built (nvcc present at build time)?
  std::vector<device_info> devices;
  std::string unavailable;       // why no device is usable ("no CUDA driver", ...), empty if some are
};
gpu_probe probe_cuda();

}  // namespace hotcold::devices
