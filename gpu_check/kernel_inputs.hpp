#pragma once
// The GPU kernel checks' inputs and device buffers (gpu_check/kernels.cpp: the checks;
// gpu_check/kernel_speed.cpp: the timed kernels). Built only with the CUDA back end.
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/gpu/decode.hpp"
#include "kernels/gpu/portability.hpp"

namespace hotcold::gpu_check::inputs {

namespace gpu = hotcold::kernels::gpu;

// Throws naming what failed when a runtime call did.
inline void checked(gpuError_t e, const char* what) {
  if (e != gpuSuccess) throw std::runtime_error(std::string(what) + ": " + gpuGetErrorString(e));
}

// Device copy of a host vector, freed at scope exit; every copy's error checked.
template <typename T>
struct dev {
  T* p = nullptr;
  size_t n = 0;
  explicit dev(const std::vector<T>& h) : n(h.size()) {
    checked(gpuMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, n) * sizeof(T)), "gpuMalloc");
    if (n) checked(gpuMemcpy(p, h.data(), n * sizeof(T), gpuMemcpyHostToDevice), "gpuMemcpy to the device");
  }
  explicit dev(size_t count) : dev(std::vector<T>(count)) {}
  ~dev() { (void)gpuFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    checked(gpuDeviceSynchronize(), "the kernels before a read-back");
    if (n) checked(gpuMemcpy(h.data(), p, n * sizeof(T), gpuMemcpyDeviceToHost), "gpuMemcpy to the host");
    return h;
  }
};

inline std::vector<uint16_t> random_f16(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = kernels::fp32_to_fp16(d(rng));
  return v;
}
inline std::vector<float> random_f32(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline const char* type_name(gpu::row_type t) {
  const char* names[] = {"f16", "q8_0", "q4_0", "q6_k"};
  return names[static_cast<int>(t)];
}

// Random rows (normal, sd 0.05) of type t as a file stores them (the CPU's quantizer writes the
// quantized ones) and, with `values`, what they hold (dequantized): what a kernel must compute with.
inline std::vector<uint8_t> random_rows(gpu::row_type t, int64_t rows, int64_t cols, std::mt19937& rng, std::vector<float>* values = nullptr) {
  const int64_t rb = gpu::row_bytes(t, cols);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * rb));
  if (values) values->resize(static_cast<size_t>(rows * cols));
  std::vector<float> f;
  for (int64_t r = 0; r < rows; ++r) {
    f = random_f32(static_cast<size_t>(cols), rng, 0.05f);
    uint8_t* row = bytes.data() + r * rb;
    float* v = values ? values->data() + r * cols : nullptr;
    switch (t) {
      case gpu::row_type::f16:
        for (int64_t c = 0; c < cols; ++c) {
          const uint16_t h = kernels::fp32_to_fp16(f[static_cast<size_t>(c)]);
          std::memcpy(row + 2 * c, &h, 2);
          if (v) v[c] = kernels::fp16_to_fp32(h);
        }
        break;
      case gpu::row_type::q8_0:
        kernels::quantize_row_q8_0(f.data(), reinterpret_cast<kernels::block_q8_0*>(row), cols);
        if (v) kernels::dequantize_row_q8_0(reinterpret_cast<const kernels::block_q8_0*>(row), v, cols);
        break;
      case gpu::row_type::q4_0:
        kernels::quantize_row_q4_0(f.data(), reinterpret_cast<kernels::block_q4_0*>(row), cols);
        if (v) kernels::dequantize_row_q4_0(reinterpret_cast<const kernels::block_q4_0*>(row), v, cols);
        break;
      case gpu::row_type::q6_k:
        kernels::quantize_row_q6_k(f.data(), reinterpret_cast<kernels::block_q6_k*>(row), cols);
        if (v) kernels::dequantize_row_q6_k(reinterpret_cast<const kernels::block_q6_k*>(row), v, cols);
        break;
    }
  }
  return bytes;
}

// The device's memory bandwidth: published (memory clock x bus width, double data rate) and what a
// device-to-device copy of 1 GiB reaches (bytes read plus bytes written), GB/s.
double published();
std::pair<double, double> peak_bandwidth();
// Each kernel's decode work timed and judged against `peak` (kernel_speed.cpp): one row a kernel.
nlohmann::json time_kernels(std::mt19937& rng, double peak);

}  // namespace hotcold::gpu_check::inputs
