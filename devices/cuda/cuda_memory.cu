#include "devices/cuda/cuda_memory.hpp"

#include <stdexcept>
#include <string>

#include "devices/device.hpp"
#include "kernels/gpu/portability.hpp"

namespace hotcold::devices {

namespace {
void check(gpuError_t err, const char* what) {
  if (err != gpuSuccess) throw std::runtime_error(std::string(what) + ": " + gpuGetErrorString(err));
}
}  // namespace

void* cuda_allocate(int index, uint64_t bytes) {
  check(gpuSetDevice(index), "cudaSetDevice");
  void* p = nullptr;
  gpuError_t err = gpuMalloc(&p, bytes);
  if (err != gpuSuccess) throw out_of_device_memory(std::string("cudaMalloc: ") + gpuGetErrorString(err));
  return p;
}

void cuda_free(int index, void* p) {
  if (gpuSetDevice(index) == gpuSuccess) gpuFree(p);
}

void cuda_copy_to_device(int index, void* dst, const void* src, uint64_t bytes) {
  check(gpuSetDevice(index), "cudaSetDevice");
  check(gpuMemcpy(dst, src, bytes, gpuMemcpyHostToDevice), "cudaMemcpy to the device");
}

void cuda_copy_to_host(int index, void* dst, const void* src, uint64_t bytes) {
  check(gpuSetDevice(index), "cudaSetDevice");
  check(gpuMemcpy(dst, src, bytes, gpuMemcpyDeviceToHost), "cudaMemcpy to the host");
}

void cuda_synchronize(int index) {
  check(gpuSetDevice(index), "cudaSetDevice");
  check(gpuDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  // namespace hotcold::devices
