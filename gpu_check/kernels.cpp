// hotcold-gpu-check kernels: every GPU kernel of the hot executor (kernels/gpu/decode.hpp) against a
// CPU reference on random inputs, by normalized mean squared error (as llama.cpp's test-backend-ops
// judges its back ends), at small shapes and at the ~1B and 7B shapes (one token and a batch), then
// the kernels' speed against the device's memory bandwidth. With --small only the small shapes (for
// a run under compute-sanitizer). Exit status: 0 all passed, 1 a kernel failed, 77 no CUDA device.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "devices/device_info.hpp"
#include "gpu_check/gpu_check.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/gpu/decode.hpp"
#include "kernels/gpu/portability.hpp"
#include "gpu_check/kernel_inputs.hpp"

namespace {

using namespace hotcold;
using namespace hotcold::gpu_check::inputs;

int failures = 0;
nlohmann::json checks = nlohmann::json::array(), speeds = nlohmann::json::array();

double nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  return den > 0 ? num / den : num;
}

void report(const std::string& name, const std::string& error, double err, double limit) {
  const bool ok = error.empty() && err <= limit && std::isfinite(err);
  failures += !ok;
  std::printf("%s %-52s error %.3e (limit %.0e)%s%s\n", ok ? "PASS" : "FAIL", name.c_str(), err, limit, error.empty() ? "" : " error: ", error.c_str());
  std::fflush(stdout);
  checks.push_back({{"name", name}, {"error", std::isfinite(err) ? err : -1.0}, {"limit", limit}, {"passed", ok}, {"message", error}});
}

double dot_ref(const uint16_t* w, const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(kernels::fp16_to_fp32(w[i])) * x[i];
  return s;
}

// Rows through RMSNorm with weights (a whole layer's job: the FFN's norm on the device), against double sums.
void check_rms_norm(int64_t rows, int64_t cols, std::mt19937& rng) {
  auto x = random_f32(static_cast<size_t>(rows * cols), rng), w = random_f32(static_cast<size_t>(cols), rng);
  std::vector<double> want(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < cols; ++i) ss += static_cast<double>(x[r * cols + i]) * x[r * cols + i];
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(cols) + 1e-5);
    for (int64_t i = 0; i < cols; ++i) want[static_cast<size_t>(r * cols + i)] = x[r * cols + i] * scale * w[i];
  }
  dev<float> dx(x), dw(w), dy(x.size());
  const std::string e = gpu::rms_norm(dx.p, dw.p, rows, cols, 1e-5f, dy.p);
  report("rms_norm " + std::to_string(rows) + "x" + std::to_string(cols), e, e.empty() ? nmse(dy.get(), want) : std::nan(""), 1e-10);
}

// y_t = W x_t for n vectors at once (n = 1 is matvec), F16 rows, written with a stride.
void check_matmul(int64_t rows, int64_t cols, int64_t n, std::mt19937& rng) {
  auto w = random_f16(static_cast<size_t>(rows * cols), rng, 0.05f);
  auto x = random_f32(static_cast<size_t>(n * cols), rng);
  const int64_t ldy = rows + 3;  // outputs land in wider rows (the attention's q/k/v layout)
  std::vector<double> want(static_cast<size_t>(n * ldy), 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) want[static_cast<size_t>(t * ldy + r)] = dot_ref(w.data() + r * cols, x.data() + t * cols, cols);
  dev<uint16_t> dw(w);
  dev<float> dx(x), dy(static_cast<size_t>(n * ldy));
  const std::string e = gpu::matmul(gpu::row_type::f16, dw.p, rows, cols, dx.p, n, dy.p, ldy);
  report("matmul f16 " + std::to_string(rows) + "x" + std::to_string(cols) + " n " + std::to_string(n), e, nmse(dy.get(), want), 1e-7);
}

double act_ref(hotcold::kernels::activation a, double v) {
  switch (a) {
    case hotcold::kernels::activation::silu: return v / (1 + std::exp(-v));
    case hotcold::kernels::activation::gelu: return 0.5 * v * (1 + std::tanh(0.7978845608 * (v + 0.044715 * v * v * v)));
    default: return v > 0 ? v : 0;
  }
}

void check_hot_ffn(int64_t n_rows, int64_t d, int64_t count, bool gated, hotcold::kernels::activation act, std::mt19937& rng) {
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
      h = act == hotcold::kernels::activation::drelu ? std::max(g, 0.0) * std::max(u, 0.0) : act_ref(act, g) * u;
    }
    hidden[static_cast<size_t>(k)] = h;
    for (int64_t c = 0; c < d; ++c) out[static_cast<size_t>(c)] += h * kernels::fp16_to_fp32(down[static_cast<size_t>(r * d + c)]);
  }
  dev<uint16_t> dg(gate), du(up), dd(down);
  dev<int32_t> ds(slots);
  dev<float> dx(x), dh(static_cast<size_t>(count)), dout(static_cast<size_t>(d)), scratch(static_cast<size_t>(gpu::hot_ffn_scratch(d)));
  const std::string e = gpu::hot_ffn(gpu::row_type::f16, dg.p, du.p, dd.p, ds.p, count, d, dx.p, gated, act, 0.0f, dh.p, dout.p, scratch.p);
  const char* names[] = {"silu", "relu", "drelu", "gelu"};  // (kernels::activation's order)
  const std::string name = std::string("hot_ffn f16 ") + names[static_cast<int>(act)] + (gated ? " gated" : "") + " " + std::to_string(count) + " of " +
                           std::to_string(n_rows) + " x" + std::to_string(d);
  report(name + " hidden", e, nmse(dh.get(), hidden), 1e-6);
  report(name + " out", e, nmse(dout.get(), out), 1e-6);
}

// What a product with rows of type t computes with for vectors of `cols` values: Q8_0 and Q4_0 rows
// meet x rounded to 8 bits (the CPU's Q8_0 bytes of it, their values); other rows, x itself.
std::vector<float> x_as_read(gpu::row_type t, std::vector<float> x, int64_t cols) {
  if (t != gpu::row_type::q8_0 && t != gpu::row_type::q4_0) return x;
  std::vector<kernels::block_q8_0> q(static_cast<size_t>(cols / 32));
  for (size_t at = 0; at < x.size(); at += static_cast<size_t>(cols)) {
    kernels::quantize_row_q8_0(x.data() + at, q.data(), cols);
    kernels::dequantize_row_q8_0(q.data(), x.data() + at, cols);
  }
  return x;
}

// The hot FFN on quantized rows (Q8_0, Q4_0: the file's bytes, as the CPU's quantizer writes them)
// against a double computation over the rows' dequantized values and x rounded to 8 bits as the
// CPU's kernels round it (a kernel that multiplied by x itself misses by ~1e-5).
void check_hot_ffn_quantized(gpu::row_type t, int64_t n_rows, int64_t d, int64_t count, std::mt19937& rng) {
  std::vector<uint8_t> bytes[3];
  std::vector<float> values[3];  // dequantized: what the kernel must compute with
  for (int m = 0; m < 3; ++m) bytes[m] = random_rows(t, n_rows, d, rng, &values[m]);
  auto x = random_f32(static_cast<size_t>(d), rng);
  const auto xr = x_as_read(t, x, d);
  std::vector<int32_t> slots(static_cast<size_t>(count));
  for (auto& sl : slots) sl = static_cast<int32_t>(rng() % n_rows);
  std::vector<double> hidden(static_cast<size_t>(count)), out(static_cast<size_t>(d), 0.0);
  auto dot = [&](const float* w) {
    double a = 0;
    for (int64_t i = 0; i < d; ++i) a += static_cast<double>(w[i]) * xr[static_cast<size_t>(i)];
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
  const std::string e = gpu::hot_ffn(t, dg.p, du.p, dd.p, ds.p, count, d, dx.p, true, hotcold::kernels::activation::relu, 0.0f, dh.p, dout.p, scratch.p);
  const std::string name = std::string("hot_ffn ") + type_name(t) + " relu gated " + std::to_string(count) + " of " +
                           std::to_string(n_rows) + " x" + std::to_string(d);
  report(name + " hidden", e, nmse(dh.get(), hidden), 1e-6);
  report(name + " out", e, nmse(dout.get(), out), 1e-6);
}

// Products with quantized rows (the head and predictors of Q8_0 / Q4_0 files) against double sums of
// the rows' dequantized values (and x as the rows' type reads it).
void check_matvec_quantized(gpu::row_type t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<float> values;
  const auto bytes = random_rows(t, rows, cols, rng, &values);
  // One vector (matvec), three at once and seven (two passes of the quantized kernel's four).
  for (int64_t n : {1, 3, 7}) {
    const auto x = random_f32(static_cast<size_t>(n * cols), rng);
    const auto xr = x_as_read(t, x, cols);
    std::vector<double> want(static_cast<size_t>(n * rows));
    for (int64_t t0 = 0; t0 < n; ++t0)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          want[static_cast<size_t>(t0 * rows + r)] += static_cast<double>(values[static_cast<size_t>(r * cols + c)]) * xr[static_cast<size_t>(t0 * cols + c)];
    dev<uint8_t> dw(bytes);
    dev<float> dx(x), dy(static_cast<size_t>(n * rows));
    const std::string e = n == 1 ? gpu::matvec(t, dw.p, rows, cols, dx.p, dy.p) : gpu::matmul(t, dw.p, rows, cols, dx.p, n, dy.p, rows);
    report(std::string(n == 1 ? "matvec " : "matmul ") + type_name(t) + " " + std::to_string(rows) + "x" + std::to_string(cols) + " n " +
               std::to_string(n),
           e, nmse(dy.get(), want), 1e-7);
  }
}

// n tokens at once (one: matvec's products; more: matmul's, each weight read once for the batch).
void check_predictor(int64_t d, int64_t rank, int64_t n_ff, int64_t n, std::mt19937& rng) {
  auto fc1 = random_f16(static_cast<size_t>(rank * d), rng, 0.05f), fc2 = random_f16(static_cast<size_t>(n_ff * rank), rng, 0.1f);
  auto x = random_f32(static_cast<size_t>(n * d), rng);
  std::vector<float> mid(static_cast<size_t>(rank));
  std::vector<double> scores(static_cast<size_t>(n * n_ff));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < rank; ++r) mid[static_cast<size_t>(r)] = static_cast<float>(std::max(0.0, dot_ref(fc1.data() + r * d, x.data() + t * d, d)));
    for (int64_t i = 0; i < n_ff; ++i) scores[static_cast<size_t>(t * n_ff + i)] = dot_ref(fc2.data() + i * rank, mid.data(), rank);
  }
  const float threshold = 0.1f;
  dev<uint16_t> d1(fc1), d2(fc2);
  dev<float> dx(x), dmid(static_cast<size_t>(n * rank)), dscores(static_cast<size_t>(n * n_ff));
  dev<uint8_t> dchosen(static_cast<size_t>(n * n_ff));
  const std::string shape = std::to_string(n_ff) + " rank " + std::to_string(rank) + " n " + std::to_string(n);
  const std::string e = gpu::predictor(gpu::row_type::f16, d1.p, d2.p, d, rank, n_ff, dx.p, n, threshold, dmid.p, dscores.p, dchosen.p);
  const auto got = dscores.get();
  report("predictor f16 scores " + shape, e, nmse(got, scores), 1e-6);
  const auto chosen = dchosen.get();
  int wrong = 0;
  for (size_t i = 0; i < chosen.size(); ++i)
    if (chosen[i] != (got[i] >= threshold)) ++wrong;
  report("predictor f16 chosen = scores >= threshold, n " + std::to_string(n), e, wrong, 0);
  // A thresholded file's rule: the scores are pre-activations, chosen = |silu(score)| >= threshold.
  // Scores within 1e-4 of the boundary may fall either way (the sums' order differs).
  const std::string e2 = gpu::predictor(gpu::row_type::f16, d1.p, d2.p, d, rank, n_ff, dx.p, n, threshold, dmid.p, dscores.p, dchosen.p, nullptr, true,
                                        hotcold::kernels::activation::silu);
  const auto chosen2 = dchosen.get();
  wrong = 0;
  for (size_t i = 0; i < chosen2.size(); ++i) {
    const double sc = scores[i], m = std::fabs(sc / (1 + std::exp(-sc)));
    if (std::fabs(m - threshold) > 1e-4 && chosen2[i] != (m >= threshold)) ++wrong;
  }
  report("predictor f16 chosen = |silu(scores)| >= threshold, n " + std::to_string(n), e2, wrong, 0);
}

// A batch's attention as a layer runs it: q/k/v rows rotated by given angles, k and v stored as F16
// (or F32) in a cache of two sequences that already holds `past` positions of each, then every token
// against its own sequence up to its position. Tokens: four of sequence 0 (past..past+3) and one of
// sequence 1 (at past); a decode step (n = 1): one token of sequence 0 at past. Against double sums
// over the same rotation and the same F16 rounding; where the past is long enough to split
// (flash-decoding), the split kernels too.
struct attention_case {
  int64_t past, n_head, n_head_kv, hd, n_rot;
  bool adjacent, f16;
  int64_t n = 5;  // tokens: five, or one (a decode step)
};
void check_attention(const attention_case& c, std::mt19937& rng) {
  const auto [past, n_head, n_head_kv, hd, n_rot, adjacent, f16, n] = c;
  const int64_t d = n_head * hd, kv = n_head_kv * hd, row = d + 2 * kv, ctx = past + 8, half = n_rot / 2;
  const gpu::attention_shape sh{d, n_head, n_head_kv, hd, n_rot, adjacent, ctx};
  auto qkv = random_f32(static_cast<size_t>(n * row), rng);
  std::vector<int32_t> seqpos{0, 0, 0, 0, 1, static_cast<int32_t>(past), static_cast<int32_t>(past + 1), static_cast<int32_t>(past + 2),
                              static_cast<int32_t>(past + 3), static_cast<int32_t>(past)};
  if (n == 1) seqpos = {0, static_cast<int32_t>(past)};
  std::vector<float> angles(static_cast<size_t>(n * n_rot));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double theta = seqpos[static_cast<size_t>(n + t)] * std::pow(10000.0, -2.0 * i / n_rot);
      angles[static_cast<size_t>(t * n_rot + i)] = static_cast<float>(std::cos(theta));
      angles[static_cast<size_t>(t * n_rot + half + i)] = static_cast<float>(std::sin(theta));
    }
  // The cache as the host sees it (floats rounded as it stores them); the past is random.
  const auto cache_values = static_cast<size_t>(2 * ctx * kv);
  std::vector<float> kc = random_f32(cache_values, rng), vc = random_f32(cache_values, rng);
  auto round = [&](float v) { return f16 ? kernels::fp16_to_fp32(kernels::fp32_to_fp16(v)) : v; };
  for (auto* c : {&kc, &vc})
    for (auto& v : *c) v = round(v);
  std::vector<float> rotated = qkv;
  for (int64_t t = 0; t < n; ++t) {
    const float *c = angles.data() + t * n_rot, *s = c + half;
    for (int64_t h = 0; h < n_head + n_head_kv; ++h) {
      float* x = rotated.data() + t * row + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + half;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * c[i] - x1 * s[i];
        x[b] = x0 * s[i] + x1 * c[i];
      }
    }
    const int64_t at = (seqpos[static_cast<size_t>(t)] * ctx + seqpos[static_cast<size_t>(n + t)]) * kv;
    for (int64_t i = 0; i < kv; ++i) {
      kc[static_cast<size_t>(at + i)] = round(rotated[static_cast<size_t>(t * row + d + i)]);
      vc[static_cast<size_t>(at + i)] = round(rotated[static_cast<size_t>(t * row + d + kv + i)]);
    }
  }
  std::vector<double> want(static_cast<size_t>(n * d), 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t base = seqpos[static_cast<size_t>(t)] * ctx * kv + h / (n_head / n_head_kv) * hd, pos = seqpos[static_cast<size_t>(n + t)];
      std::vector<double> sc(static_cast<size_t>(pos + 1));
      double m = -1e300, sum = 0;
      for (int64_t p = 0; p <= pos; ++p) {
        double a = 0;
        for (int64_t i = 0; i < hd; ++i) a += static_cast<double>(rotated[static_cast<size_t>(t * row + h * hd + i)]) * kc[static_cast<size_t>(base + p * kv + i)];
        m = std::max(m, sc[static_cast<size_t>(p)] = a / std::sqrt(static_cast<double>(hd)));
      }
      for (auto& x : sc) sum += (x = std::exp(x - m));
      for (int64_t p = 0; p <= pos; ++p)
        for (int64_t i = 0; i < hd; ++i) want[static_cast<size_t>(t * d + h * hd + i)] += sc[static_cast<size_t>(p)] / sum * vc[static_cast<size_t>(base + p * kv + i)];
    }
  // The device's cache starts as the same past (stored in its own type).
  std::vector<uint16_t> k16(cache_values), v16(cache_values);
  for (size_t i = 0; i < cache_values; ++i) k16[i] = kernels::fp32_to_fp16(kc[i]), v16[i] = kernels::fp32_to_fp16(vc[i]);
  dev<uint16_t> dk16(k16), dv16(v16);
  dev<float> dk32(kc), dv32(vc), dqkv(qkv), dangles(angles), dout(static_cast<size_t>(n * d));
  dev<int32_t> dsp(seqpos);
  void* dk = f16 ? static_cast<void*>(dk16.p) : static_cast<void*>(dk32.p);
  void* dv = f16 ? static_cast<void*>(dv16.p) : static_cast<void*>(dv32.p);
  std::string e = gpu::rope_store(sh, dqkv.p, n, dangles.p, dsp.p, dk, dv, f16);
  if (e.empty()) e = gpu::attend(sh, dqkv.p, n, dsp.p, dk, dv, f16, dout.p);
  const std::string name = "attention " + std::string(f16 ? "f16" : "f32") + " cache, past " + std::to_string(past) + ", heads " + std::to_string(n_head) + "/" +
                           std::to_string(n_head_kv) + " x" + std::to_string(hd) + (adjacent ? " adjacent" : " neox") + " rot " + std::to_string(n_rot);
  report(name, e, nmse(dout.get(), want), 1e-6);
  // The same tokens split across blocks (the cache and q already rotated and stored), the partial
  // sums in scratch, then joined.
  const int64_t max_pos = past + (n == 1 ? 0 : 3), partial_floats = int64_t{1} << 20;
  if (const int64_t splits = gpu::attend_splits(n, n_head, hd, max_pos, partial_floats); splits > 1) {
    dev<float> partial(static_cast<size_t>(partial_floats)), split_out(static_cast<size_t>(n * d));
    const std::string es = gpu::attend(sh, dqkv.p, n, dsp.p, dk, dv, f16, split_out.p, nullptr, partial.p, partial_floats, max_pos);
    report(name + ", split " + std::to_string(splits) + " ways", es, nmse(split_out.get(), want), 1e-6);
  }
  // The stored keys, where the rounding of the rotation is checked directly.
  std::vector<float> got_k(cache_values);
  if (f16) {
    const auto h = dk16.get();
    for (size_t i = 0; i < cache_values; ++i) got_k[i] = kernels::fp16_to_fp32(h[i]);
  } else {
    got_k = dk32.get();
  }
  report(name + " stored K", e, nmse(got_k, std::vector<double>(kc.begin(), kc.end())), 1e-7);
}

}  // namespace

namespace hotcold::gpu_check {

double published_bandwidth_gbs() {
  if (hotcold::devices::probe_cuda().devices.empty()) return 0;
  return published();
}

int check_gpu_kernels(bool small, const std::string& json_path, int from) {
  const auto probe = hotcold::devices::probe_cuda();
  if (probe.devices.empty()) {
    std::printf("SKIP no CUDA device: %s\n", probe.unavailable.c_str());
    return 77;
  }
  std::printf("device: %s\n", probe.devices.front().name.c_str());
  nlohmann::json result{{"device", probe.devices.front().name}, {"from", from}};
  // Each check by name, its inputs from a seed of its own (a rerun from check K makes the same ones).
  using rng_t = std::mt19937;
  std::vector<std::pair<std::string, std::function<void(rng_t&)>>> list{
      {"matmul f16 odd columns", [](rng_t& r) { check_matmul(333, 2047, 3, r); }},  // the unaligned path
      {"rms_norm", [](rng_t& r) { check_rms_norm(3, 4096, r), check_rms_norm(1, 100, r); }},
      {"matmul f16 5632x256 n 7", [](rng_t& r) { check_matmul(5632, 256, 7, r); }},
      {"hot_ffn f16 every activation", [](rng_t& r) {
         for (auto act : {hotcold::kernels::activation::relu, hotcold::kernels::activation::silu, hotcold::kernels::activation::gelu, hotcold::kernels::activation::drelu}) check_hot_ffn(1024, 512, 300, true, act, r);
       }},
      {"hot_ffn f16 ungated", [](rng_t& r) { check_hot_ffn(1024, 512, 300, false, hotcold::kernels::activation::gelu, r); }},
      {"hot_ffn f16 nothing chosen", [](rng_t& r) { check_hot_ffn(64, 2048, 0, true, hotcold::kernels::activation::relu, r); }},  // out is zero
      {"hot_ffn and products q8_0", [](rng_t& r) { check_hot_ffn_quantized(gpu::row_type::q8_0, 1024, 512, 300, r), check_matvec_quantized(gpu::row_type::q8_0, 1000, 512, r); }},
      {"hot_ffn and products q4_0", [](rng_t& r) { check_hot_ffn_quantized(gpu::row_type::q4_0, 1024, 512, 300, r), check_matvec_quantized(gpu::row_type::q4_0, 1000, 512, r); }},
      {"products q6_k", [](rng_t& r) { check_matvec_quantized(gpu::row_type::q6_k, 1000, 768, r); }},  // a llama.cpp Q4_0 file's head
      {"predictor 512", [](rng_t& r) { check_predictor(512, 64, 1000, 1, r), check_predictor(512, 64, 1000, 7, r); }},
      {"attention f16 cache", [](rng_t& r) { check_attention({0, 8, 8, 64, 64, false, true}, r); }},
      {"attention partial rotation, adjacent, f32 cache", [](rng_t& r) { check_attention({40, 4, 1, 64, 32, true, false}, r); }},
      {"attention head of 256", [](rng_t& r) { check_attention({33, 2, 2, 256, 64, false, true}, r); }},
  };
  if (!small) {
    // The real shapes: the ~1B file's (2048/5632, 8 KV heads) and 7B's (4096/11008), one token and a batch.
    const std::vector<std::pair<std::string, std::function<void(rng_t&)>>> real{
        {"matmul f16 real shapes", [](rng_t& r) {
           check_matmul(2048, 2048, 1, r), check_matmul(4096, 4096, 1, r), check_matmul(4096, 4096, 4, r), check_matmul(11008, 4096, 1, r);
         }},
        {"hot_ffn f16 long chunks", [](rng_t& r) { check_hot_ffn(8192, 256, 5000, true, hotcold::kernels::activation::relu, r); }},  // more neurons than chunks x 32
        {"hot_ffn f16 1B and 7B", [](rng_t& r) {
           check_hot_ffn(5632, 2048, 1400, true, hotcold::kernels::activation::relu, r), check_hot_ffn(11008, 4096, 1100, true, hotcold::kernels::activation::relu, r);
         }},
        {"q8_0 real shapes", [](rng_t& r) {
           check_matvec_quantized(gpu::row_type::q8_0, 4096, 4096, r), check_hot_ffn_quantized(gpu::row_type::q8_0, 5632, 2048, 1400, r),
               check_hot_ffn_quantized(gpu::row_type::q8_0, 11008, 4096, 1100, r);
         }},
        {"q4_0 real shapes", [](rng_t& r) {
           check_matvec_quantized(gpu::row_type::q4_0, 4096, 4096, r), check_hot_ffn_quantized(gpu::row_type::q4_0, 5632, 2048, 1400, r),
               check_hot_ffn_quantized(gpu::row_type::q4_0, 11008, 4096, 1100, r);
         }},
        {"products q6_k 4096", [](rng_t& r) { check_matvec_quantized(gpu::row_type::q6_k, 4096, 4096, r); }},
        {"predictors 1B and 7B", [](rng_t& r) { check_predictor(2048, 256, 5632, 1, r), check_predictor(4096, 1024, 11008, 1, r), check_predictor(4096, 1024, 11008, 64, r); }},
        {"attention 1B and 7B", [](rng_t& r) {
           check_attention({300, 32, 8, 64, 64, false, true}, r);    // 1B: grouped-query, several tiles
           check_attention({300, 32, 32, 128, 128, false, true}, r);  // 7B
         }},
        {"attention past 2048 positions", [](rng_t& r) { check_attention({2100, 32, 8, 64, 64, false, true}, r); }},
        {"attention decode step split across blocks", [](rng_t& r) {
           check_attention({2100, 32, 8, 64, 64, false, true, 1}, r);    // 1B: 8 splits of 263 positions
           check_attention({1000, 32, 32, 128, 128, false, false, 1}, r);  // 7B, F32 cache: 8 splits, the last short
           check_attention({130, 4, 2, 256, 64, true, true, 1}, r);        // 2 splits, heads of 256
         }},
        {"speed", [&result](rng_t& r) {
           const auto [spec, copy] = peak_bandwidth();
           std::printf("BANDWIDTH published %.0f GB/s, device-to-device copy %.0f GB/s\n", spec, copy);
           result["published_gb_per_s"] = spec;
           result["copy_gb_per_s"] = copy;
           speeds = time_kernels(r, copy > 0 ? copy : spec);
         }},
    };
    list.insert(list.end(), real.begin(), real.end());
  }
  // Each check waits for its kernels and reads the device's error itself, so a fault names its check;
  // the context may keep the error (every later call fails with it), so the process stops there and
  // the checks after it rerun in a fresh one (`kernels --from K`, which the full check does).
  for (int i = std::max(0, from); i < static_cast<int>(list.size()); ++i) {
    rng_t rng(2026u + static_cast<unsigned>(i));
    const auto& [name, run] = list[static_cast<size_t>(i)];
    try {
      run(rng);
    } catch (const std::exception& e) {
      report(name, e.what(), std::nan(""), 0);
    }
    const gpuError_t sync = gpuDeviceSynchronize();
    const gpuError_t last = gpuGetLastError();
    if (sync != gpuSuccess || last != gpuSuccess) {
      report(name + " (the device's error after it)", gpuGetErrorString(sync != gpuSuccess ? sync : last), std::nan(""), 0);
      if (i + 1 < static_cast<int>(list.size())) result["resume_from"] = i + 1;
      std::printf("STOP the device reported an error after check %d (%s); the checks from %d on need a fresh process\n", i, name.c_str(), i + 1);
      break;
    }
  }
  result["of"] = list.size();
  std::printf("%s: %d of %zu kernel checks failed\n", failures ? "FAILED" : "OK", failures, checks.size());
  result["checks"] = checks;
  result["speed"] = speeds;
  result["failed"] = failures;
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << result.dump(2) << "\n";
  }
  return failures ? 1 : 0;
}

}  // namespace hotcold::gpu_check
