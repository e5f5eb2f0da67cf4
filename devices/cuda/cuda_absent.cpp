// Built when nvcc was not found: the CUDA backend reports itself as not compiled.
#include "devices/device_info.hpp"

namespace hotcold::devices {

gpu_probe probe_cuda() {
  gpu_probe p;
  p.unavailable = "hotcold was built without CUDA (nvcc not found at build time)";
  return p;
}

}  // namespace hotcold::devices
