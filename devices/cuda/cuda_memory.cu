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

void cuda_use(int index) { check(gpuSetDevice(index), "cudaSetDevice"); }

void* cuda_stream_create(int index) {
  check(gpuSetDevice(index), "cudaSetDevice");
  gpuStream_t s = nullptr;
  check(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking), "cudaStreamCreate");
  return s;
}

void cuda_stream_destroy(int index, void* stream) {
  if (stream && gpuSetDevice(index) == gpuSuccess) (void)gpuStreamDestroy(static_cast<gpuStream_t>(stream));
}

void cuda_copy_async(void* dst, const void* src, uint64_t bytes, bool to_device, void* stream) {
  if (bytes == 0) return;
  check(gpuMemcpyAsync(dst, src, bytes, to_device ? gpuMemcpyHostToDevice : gpuMemcpyDeviceToHost, static_cast<gpuStream_t>(stream)),
        to_device ? "cudaMemcpyAsync to the device" : "cudaMemcpyAsync to the host");
}

void cuda_stream_synchronize(void* stream) { check(gpuStreamSynchronize(static_cast<gpuStream_t>(stream)), "cudaStreamSynchronize"); }

void* cuda_host_allocate(uint64_t bytes) {
  void* p = nullptr;
  check(gpuHostAlloc(&p, bytes, gpuHostAllocDefault), "cudaHostAlloc");
  return p;
}

void cuda_host_free(void* p) {
  if (p) (void)gpuFreeHost(p);
}

}  // namespace hotcold::devices
