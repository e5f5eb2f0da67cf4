// hotcold-gpu-check: every GPU kernel of the hot executor (kernels/gpu/decode.hpp) against a CPU
// reference on random inputs, by normalized mean squared error (as llama.cpp's test-backend-ops
// judges its back ends), then the kernels' speed. Built wherever nvcc is; run by tools/gpu-check on
// a machine with a GPU. Exit status: 0 all passed, 1 a kernel failed, 77 no CUDA device.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "devices/device_info.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/gpu/decode.hpp"
#include "kernels/gpu/portability.hpp"

namespace {

using namespace hotcold;
namespace gpu = hotcold::kernels::gpu;

int failures = 0;

// Device copy of a host vector, freed at scope exit.
template <typename T>
struct dev {
  T* p = nullptr;
  size_t n = 0;
  explicit dev(const std::vector<T>& h) : n(h.size()) {
    if (gpuMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, n) * sizeof(T)) != gpuSuccess) throw std::runtime_error("gpuMalloc failed");
    if (n) gpuMemcpy(p, h.data(), n * sizeof(T), gpuMemcpyHostToDevice);
  }
  explicit dev(size_t count) : dev(std::vector<T>(count)) {}
  ~dev() { (void)gpuFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    (void)gpuDeviceSynchronize();
    if (n) gpuMemcpy(h.data(), p, n * sizeof(T), gpuMemcpyDeviceToHost);
    return h;
  }
};

std::vector<uint16_t> random_f16(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = kernels::fp32_to_fp16(d(rng));
  return v;
}
std::vector<float> random_f32(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  return den > 0 ? num / den : num;
}

void report(const std::string& name, const std::string& error, double err, double limit) {
  const bool ok = error.empty() && err <= limit && std::isfinite(err);
  failures += !ok;
  std::printf("%s %-44s error %.3e (limit %.0e)%s%s\n", ok ? "PASS" : "FAIL", name.c_str(), err, limit, error.empty() ? "" : " error: ", error.c_str());
}

double dot_ref(const uint16_t* w, const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(kernels::fp16_to_fp32(w[i])) * x[i];
  return s;
}

void check_matvec(int64_t rows, int64_t cols, std::mt19937& rng) {
  auto w = random_f16(static_cast<size_t>(rows * cols), rng, 0.05f);
  auto x = random_f32(static_cast<size_t>(cols), rng);
  std::vector<double> want(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) want[static_cast<size_t>(r)] = dot_ref(w.data() + r * cols, x.data(), cols);
  dev<uint16_t> dw(w);
  dev<float> dx(x), dy(static_cast<size_t>(rows));
  const std::string e = gpu::matvec_f16(dw.p, rows, cols, dx.p, dy.p);
  report("matvec_f16 " + std::to_string(rows) + "x" + std::to_string(cols), e, nmse(dy.get(), want), 1e-7);
}

double act_ref(gpu::ffn_act a, double v) {
  switch (a) {
    case gpu::ffn_act::silu: return v / (1 + std::exp(-v));
    case gpu::ffn_act::gelu: return 0.5 * v * (1 + std::tanh(0.7978845608 * (v + 0.044715 * v * v * v)));
    default: return v > 0 ? v : 0;
  }
}

void check_hot_ffn(int64_t n_rows, int64_t d, int64_t count, bool gated, gpu::ffn_act act, std::mt19937& rng) {
  auto gate = random_f16(static_cast<size_t>(n_rows * d), rng, 0.05f), up = random_f16(static_cast<size_t>(n_rows * d), rng, 0.05f),
       down = random_f16(static_cast<size_t>(n_rows * d), rng, 0.05f);
  auto x = random_f32(static_cast<size_t>(d), rng);
  std::vector<int32_t> slots(static_cast<size_t>(count));
  for (auto& s : slots) s = static_cast<int32_t>(rng() % n_rows);
  std::vector<double> hidden(static_cast<size_t>(count)), out(static_cast<size_t>(d), 0.0);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t r = slots[static_cast<size_t>(k)];
    const double u = dot_ref(up.data() + r * d, x.data(), d);
    double h;
    if (!gated) h = act_ref(act, u);
    else {
      const double g = dot_ref(gate.data() + r * d, x.data(), d);
      h = act == gpu::ffn_act::drelu ? std::max(g, 0.0) * std::max(u, 0.0) : act_ref(act, g) * u;
    }
    hidden[static_cast<size_t>(k)] = h;
    for (int64_t c = 0; c < d; ++c) out[static_cast<size_t>(c)] += h * kernels::fp16_to_fp32(down[static_cast<size_t>(r * d + c)]);
  }
  dev<uint16_t> dg(gate), du(up), dd(down);
  dev<int32_t> ds(slots);
  dev<float> dx(x), dh(static_cast<size_t>(count)), dout(static_cast<size_t>(d)), scratch(static_cast<size_t>(gpu::hot_ffn_scratch(d)));
  const std::string e = gpu::hot_ffn(gpu::row_type::f16, dg.p, du.p, dd.p, ds.p, count, d, dx.p, gated, act, dh.p, dout.p, scratch.p);
  const char* names[] = {"relu", "silu", "gelu", "drelu"};
  const std::string name = std::string("hot_ffn f16 ") + names[static_cast<int>(act)] + (gated ? " gated" : "") + " " + std::to_string(count) + " of " +
                           std::to_string(n_rows) + " x" + std::to_string(d);
  report(name + " hidden", e, nmse(dh.get(), hidden), 1e-6);
  report(name + " out", e, nmse(dout.get(), out), 1e-6);
}

// The hot FFN on quantized rows (Q8_0, Q4_0: the file's bytes, as the CPU's quantizer writes them)
// against a double computation over the rows' dequantized values.
void check_hot_ffn_quantized(gpu::row_type t, int64_t n_rows, int64_t d, int64_t count, std::mt19937& rng) {
  const int64_t rb = gpu::row_bytes(t, d);
  std::vector<uint8_t> bytes[3];
  std::vector<float> values[3];  // dequantized: what the kernel must compute with
  for (int m = 0; m < 3; ++m) {
    const auto f = random_f32(static_cast<size_t>(n_rows * d), rng, 0.05f);
    bytes[m].resize(static_cast<size_t>(n_rows * rb));
    values[m].resize(f.size());
    for (int64_t r = 0; r < n_rows; ++r) {
      uint8_t* row = bytes[m].data() + r * rb;
      float* v = values[m].data() + r * d;
      if (t == gpu::row_type::q8_0) {
        kernels::quantize_row_q8_0(f.data() + r * d, reinterpret_cast<kernels::block_q8_0*>(row), d);
        kernels::dequantize_row_q8_0(reinterpret_cast<const kernels::block_q8_0*>(row), v, d);
      } else {
        kernels::quantize_row_q4_0(f.data() + r * d, reinterpret_cast<kernels::block_q4_0*>(row), d);
        kernels::dequantize_row_q4_0(reinterpret_cast<const kernels::block_q4_0*>(row), v, d);
      }
    }
  }
  auto x = random_f32(static_cast<size_t>(d), rng);
  std::vector<int32_t> slots(static_cast<size_t>(count));
  for (auto& sl : slots) sl = static_cast<int32_t>(rng() % n_rows);
  std::vector<double> hidden(static_cast<size_t>(count)), out(static_cast<size_t>(d), 0.0);
  auto dot = [&](const float* w) {
    double a = 0;
    for (int64_t i = 0; i < d; ++i) a += static_cast<double>(w[i]) * x[static_cast<size_t>(i)];
    return a;
  };
  for (int64_t k = 0; k < count; ++k) {
    const int64_t r = slots[static_cast<size_t>(k)];
    const double h = std::max(dot(values[0].data() + r * d), 0.0) * dot(values[1].data() + r * d);  // ReLU-gated
    hidden[static_cast<size_t>(k)] = h;
    for (int64_t c = 0; c < d; ++c) out[static_cast<size_t>(c)] += h * values[2][static_cast<size_t>(r * d + c)];
  }
  dev<uint8_t> dg(bytes[0]), du(bytes[1]), dd(bytes[2]);
  dev<int32_t> ds(slots);
  dev<float> dx(x), dh(static_cast<size_t>(count)), dout(static_cast<size_t>(d)), scratch(static_cast<size_t>(gpu::hot_ffn_scratch(d)));
  const std::string e = gpu::hot_ffn(t, dg.p, du.p, dd.p, ds.p, count, d, dx.p, true, gpu::ffn_act::relu, dh.p, dout.p, scratch.p);
  const std::string name = std::string("hot_ffn ") + (t == gpu::row_type::q8_0 ? "q8_0" : "q4_0") + " relu gated " + std::to_string(count) + " of " +
                           std::to_string(n_rows) + " x" + std::to_string(d);
  report(name + " hidden", e, nmse(dh.get(), hidden), 1e-6);
  report(name + " out", e, nmse(dout.get(), out), 1e-6);
}

// Products with quantized rows (the head and predictors of Q8_0 / Q4_0 files) against double sums of
// the rows' dequantized values.
void check_matvec_quantized(gpu::row_type t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t rb = gpu::row_bytes(t, cols);
  const auto f = random_f32(static_cast<size_t>(rows * cols), rng, 0.05f);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * rb));
  std::vector<float> values(f.size());
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = bytes.data() + r * rb;
    if (t == gpu::row_type::q8_0) {
      kernels::quantize_row_q8_0(f.data() + r * cols, reinterpret_cast<kernels::block_q8_0*>(row), cols);
      kernels::dequantize_row_q8_0(reinterpret_cast<const kernels::block_q8_0*>(row), values.data() + r * cols, cols);
    } else {
      kernels::quantize_row_q4_0(f.data() + r * cols, reinterpret_cast<kernels::block_q4_0*>(row), cols);
      kernels::dequantize_row_q4_0(reinterpret_cast<const kernels::block_q4_0*>(row), values.data() + r * cols, cols);
    }
  }
  const auto x = random_f32(static_cast<size_t>(cols), rng);
  std::vector<double> want(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) want[static_cast<size_t>(r)] += static_cast<double>(values[static_cast<size_t>(r * cols + c)]) * x[static_cast<size_t>(c)];
  dev<uint8_t> dw(bytes);
  dev<float> dx(x), dy(static_cast<size_t>(rows));
  const std::string e = gpu::matvec(t, dw.p, rows, cols, dx.p, dy.p);
  report(std::string("matvec ") + (t == gpu::row_type::q8_0 ? "q8_0 " : "q4_0 ") + std::to_string(rows) + "x" + std::to_string(cols), e, nmse(dy.get(), want), 1e-7);
}

void check_predictor(int64_t d, int64_t rank, int64_t n_ff, std::mt19937& rng) {
  auto fc1 = random_f16(static_cast<size_t>(rank * d), rng, 0.05f), fc2 = random_f16(static_cast<size_t>(n_ff * rank), rng, 0.1f);
  auto x = random_f32(static_cast<size_t>(d), rng);
  std::vector<float> mid(static_cast<size_t>(rank));
  for (int64_t r = 0; r < rank; ++r) mid[static_cast<size_t>(r)] = static_cast<float>(std::max(0.0, dot_ref(fc1.data() + r * d, x.data(), d)));
  std::vector<double> scores(static_cast<size_t>(n_ff));
  for (int64_t i = 0; i < n_ff; ++i) scores[static_cast<size_t>(i)] = dot_ref(fc2.data() + i * rank, mid.data(), rank);
  const float threshold = 0.1f;
  dev<uint16_t> d1(fc1), d2(fc2);
  dev<float> dx(x), dmid(static_cast<size_t>(rank)), dscores(static_cast<size_t>(n_ff));
  dev<uint8_t> dchosen(static_cast<size_t>(n_ff));
  const std::string e = gpu::predictor_f16(d1.p, d2.p, d, rank, n_ff, dx.p, threshold, dmid.p, dscores.p, dchosen.p);
  const auto got = dscores.get();
  report("predictor_f16 scores " + std::to_string(n_ff) + " rank " + std::to_string(rank), e, nmse(got, scores), 1e-6);
  const auto chosen = dchosen.get();
  int wrong = 0;
  for (int64_t i = 0; i < n_ff; ++i)
    if (chosen[static_cast<size_t>(i)] != (got[static_cast<size_t>(i)] >= threshold)) ++wrong;
  report("predictor_f16 chosen = scores >= threshold", e, wrong, 0);
}

void check_attention(int64_t pos, int64_t n_head, int64_t n_head_kv, int64_t hd, std::mt19937& rng) {
  const int64_t kv = n_head_kv * hd;
  auto q = random_f32(static_cast<size_t>(n_head * hd), rng), k = random_f32(static_cast<size_t>((pos + 1) * kv), rng),
       v = random_f32(static_cast<size_t>((pos + 1) * kv), rng);
  std::vector<double> want(static_cast<size_t>(n_head * hd), 0.0);
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t kvh = h / (n_head / n_head_kv);
    std::vector<double> s(static_cast<size_t>(pos + 1));
    double m = -1e300, sum = 0;
    for (int64_t t = 0; t <= pos; ++t) {
      double a = 0;
      for (int64_t i = 0; i < hd; ++i) a += static_cast<double>(q[static_cast<size_t>(h * hd + i)]) * k[static_cast<size_t>(t * kv + kvh * hd + i)];
      s[static_cast<size_t>(t)] = a / std::sqrt(static_cast<double>(hd));
      m = std::max(m, s[static_cast<size_t>(t)]);
    }
    for (auto& x : s) sum += (x = std::exp(x - m));
    for (int64_t t = 0; t <= pos; ++t)
      for (int64_t i = 0; i < hd; ++i) want[static_cast<size_t>(h * hd + i)] += s[static_cast<size_t>(t)] / sum * v[static_cast<size_t>(t * kv + kvh * hd + i)];
  }
  dev<float> dq(q), dk(k), dv(v), dout(static_cast<size_t>(n_head * hd));
  const std::string e = gpu::attend_f32(dq.p, dk.p, dv.p, pos, n_head, n_head_kv, hd, dout.p);
  report("attend_f32 pos " + std::to_string(pos) + " heads " + std::to_string(n_head) + "/" + std::to_string(n_head_kv), e, nmse(dout.get(), want), 1e-7);
}

// The ~1B shape's decode work per token on the device: its attention projections and head as
// matrix-vector products, and a quarter of its FFN neurons hot, 10% of those chosen.
void bench(std::mt19937& rng) {
  const int64_t d = 2048, n_ff = 5632, hot = n_ff / 4, chosen = hot / 10 * 4;
  auto w = random_f16(static_cast<size_t>(d * d), rng, 0.05f);
  auto rows = random_f16(static_cast<size_t>(hot * d), rng, 0.05f);
  auto x = random_f32(static_cast<size_t>(d), rng);
  std::vector<int32_t> slots(static_cast<size_t>(chosen));
  for (auto& s : slots) s = static_cast<int32_t>(rng() % hot);
  dev<uint16_t> dw(w), dr(rows);
  dev<int32_t> ds(slots);
  dev<float> dx(x), dy(static_cast<size_t>(d)), dh(static_cast<size_t>(chosen));
  auto time = [&](auto f, int reps) {
    f();
    (void)gpuDeviceSynchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    (void)gpuDeviceSynchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  const double mv = time([&] { gpu::matvec_f16(dw.p, d, d, dx.p, dy.p); }, 200);
  std::printf("BENCH matvec_f16 %lldx%lld: %.1f us, %.0f GB/s\n", static_cast<long long>(d), static_cast<long long>(d), mv * 1e6, d * d * 2 / mv / 1e9);
  dev<float> scratch(static_cast<size_t>(gpu::hot_ffn_scratch(d)));
  const double ffn = time([&] { gpu::hot_ffn(gpu::row_type::f16, dr.p, dr.p, dr.p, ds.p, chosen, d, dx.p, true, gpu::ffn_act::relu, dh.p, dy.p, scratch.p); }, 200);
  std::printf("BENCH hot_ffn f16 %lld chosen rows of %lld: %.1f us, %.0f GB/s of rows\n", static_cast<long long>(chosen), static_cast<long long>(hot), ffn * 1e6,
              chosen * 3.0 * d * 2 / ffn / 1e9);
}

}  // namespace

int main() {
  const auto probe = hotcold::devices::probe_cuda();
  if (probe.devices.empty()) {
    std::printf("SKIP no CUDA device: %s\n", probe.unavailable.c_str());
    return 77;
  }
  std::printf("device: %s\n", probe.devices.front().name.c_str());
  std::mt19937 rng(2026);
  try {
    check_matvec(4096, 2048, rng);
    check_matvec(333, 2047, rng);  // odd columns: the unaligned path
    check_matvec(5632, 256, rng);
    for (auto act : {gpu::ffn_act::relu, gpu::ffn_act::silu, gpu::ffn_act::gelu, gpu::ffn_act::drelu}) check_hot_ffn(1024, 512, 300, true, act, rng);
    check_hot_ffn(1024, 512, 300, false, gpu::ffn_act::gelu, rng);
    check_hot_ffn(64, 2048, 0, true, gpu::ffn_act::relu, rng);  // nothing chosen: out is zero
    check_hot_ffn(8192, 256, 5000, true, gpu::ffn_act::relu, rng);  // more neurons than chunks x 32: longer chunks
    for (auto t : {gpu::row_type::q8_0, gpu::row_type::q4_0}) {
      check_hot_ffn_quantized(t, 1024, 512, 300, rng);
      check_matvec_quantized(t, 1000, 512, rng);
    }
    check_predictor(2048, 256, 5632, rng);
    check_attention(0, 8, 8, 64, rng);
    check_attention(300, 16, 4, 128, rng);
    bench(rng);
  } catch (const std::exception& e) {
    std::printf("FAIL %s\n", e.what());
    return 1;
  }
  std::printf("%s: %d kernel checks failed\n", failures ? "FAILED" : "OK", failures);
  return failures ? 1 : 0;
}
