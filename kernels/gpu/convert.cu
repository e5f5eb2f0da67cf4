#include "kernels/gpu/convert.hpp"
#include "kernels/gpu/portability.hpp"

namespace hotcold::kernels::gpu {

__global__ void fp16_to_fp32_kernel(const __half* src, float* dst, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = __half2float(src[i]);
}

std::string fp16_to_fp32(const uint16_t* d_src, float* d_dst, size_t n) {
  if (n == 0) return {};
  constexpr unsigned threads = 256;
  unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  fp16_to_fp32_kernel<<<blocks, threads>>>(reinterpret_cast<const __half*>(d_src), d_dst, n);
  gpuError_t err = gpuGetLastError();
  return err == gpuSuccess ? std::string() : gpuGetErrorString(err);
}

std::string fp16_to_fp32_host(const uint16_t* src, float* dst, size_t n) {
  uint16_t* d_src = nullptr;
  float* d_dst = nullptr;
  std::string error;
  auto check = [&](gpuError_t e) {
    if (e != gpuSuccess && error.empty()) error = gpuGetErrorString(e);
    return error.empty();
  };
  if (check(gpuMalloc(reinterpret_cast<void**>(&d_src), n * sizeof(uint16_t))) &&
      check(gpuMalloc(reinterpret_cast<void**>(&d_dst), n * sizeof(float))) &&
      check(gpuMemcpy(d_src, src, n * sizeof(uint16_t), gpuMemcpyHostToDevice))) {
    error = fp16_to_fp32(d_src, d_dst, n);
    if (error.empty() && check(gpuDeviceSynchronize())) check(gpuMemcpy(dst, d_dst, n * sizeof(float), gpuMemcpyDeviceToHost));
  }
  if (d_src) (void)gpuFree(d_src);
  if (d_dst) (void)gpuFree(d_dst);
  return error;
}

}  // namespace hotcold::kernels::gpu
