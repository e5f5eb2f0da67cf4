// Built when nvcc was not found: the CUDA backend reports itself as not compiled.
#include "devices/device_info.hpp"

namespace hotcold::devices {

gpu_probe probe_cuda() {
  gpu_probe p;
  p.unavailable = "hotcold was built without a GPU back end (neither nvcc nor hipcc found at build time, or -DHOTCOLD_GPU=none)";
  return p;
}

uint64_t gpu_free_memory(int) { return 0; }

}  // namespace hotcold::devices

// Without CUDA there is no GPU memory to manage; make_device refuses "cuda" before these are reached.
#include <stdexcept>

#include "devices/cuda/cuda_memory.hpp"

namespace hotcold::devices {

namespace {
[[noreturn]] void absent() { throw std::runtime_error("hotcold was built without a GPU back end (nvcc and hipcc not found at build time, or -DHOTCOLD_GPU=none)"); }
}  // namespace

void* cuda_allocate(int, uint64_t) { absent(); }
void cuda_free(int, void*) {}
void cuda_copy_to_device(int, void*, const void*, uint64_t) { absent(); }
void cuda_copy_to_host(int, void*, const void*, uint64_t) { absent(); }
void cuda_synchronize(int) { absent(); }
void cuda_zero(int, void*, uint64_t, void*) { absent(); }
void cuda_use(int) { absent(); }
void* cuda_stream_create(int) { absent(); }
void cuda_stream_destroy(int, void*) {}
void cuda_copy_async(void*, const void*, uint64_t, bool, void*) { absent(); }
void cuda_stream_wait(void*, void*, int) { absent(); }
void* cuda_blocking_event_create(int) { absent(); }
bool cuda_context_alive(int, std::string& why) {
  why = "hotcold was built without a GPU back end";
  return false;
}
void* cuda_event_create(int) { absent(); }
void cuda_event_destroy(void*) {}
void cuda_event_record(void*, void*) { absent(); }
void cuda_event_synchronize(void*) { absent(); }
void* cuda_host_allocate(uint64_t) { absent(); }
void cuda_host_free(void*) {}

}  // namespace hotcold::devices
