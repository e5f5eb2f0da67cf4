// sim's plain computation of a GPU's jobs (--sim-kernels; devices/gpu_jobs.hpp): row by row in float
// and double from the device's copies alone, the inputs rounded as the GPU's kernels read them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "devices/gpu_jobs.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/gpu/decode.hpp"

namespace hotcold::devices {
namespace sim_kernels {

// Row r of a matrix of `cols` values in type t, as floats.
void row(tensor_type t, const void* rows, int64_t r, int64_t cols, float* out) {
  const auto* base = static_cast<const uint8_t*>(rows);
  switch (t) {
    case tensor_type::f16: kernels::fp16_to_fp32_row(reinterpret_cast<const uint16_t*>(base) + r * cols, out, static_cast<size_t>(cols)); return;
    case tensor_type::q8_0: kernels::dequantize_row_q8_0(reinterpret_cast<const kernels::block_q8_0*>(base) + r * (cols / 32), out, cols); return;
    case tensor_type::q4_0: kernels::dequantize_row_q4_0(reinterpret_cast<const kernels::block_q4_0*>(base) + r * (cols / 32), out, cols); return;
    case tensor_type::q6_k: kernels::dequantize_row_q6_k(reinterpret_cast<const kernels::block_q6_k*>(base) + r * (cols / 256), out, cols); return;
    default: throw std::invalid_argument(fmt::format("sim kernels: rows of type {}", tensor_type_name(t)));
  }
}

// n vectors of cols values as a GPU's product with rows of type t reads them: rounded to 8 bits for
// Q8_0 and Q4_0 rows (kernels/gpu/decode.hpp's reads_x_in_8_bits: the CPU's Q8_0 bytes of each
// vector, their values), else as they are.
std::vector<float> as_read(tensor_type t, const float* x, int64_t n, int64_t cols) {
  std::vector<float> v(x, x + n * cols);
  if (!kernels::gpu::reads_x_in_8_bits(gpu_row_type(t), cols)) return v;
  std::vector<kernels::block_q8_0> q(static_cast<size_t>(cols / 32));
  for (int64_t k = 0; k < n; ++k) {
    kernels::quantize_row_q8_0(v.data() + k * cols, q.data(), cols);
    kernels::dequantize_row_q8_0(q.data(), v.data() + k * cols, cols);
  }
  return v;
}

float dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(s);
}

float activate(kernels::activation a, float v) {
  switch (a) {
    case kernels::activation::silu: return v / (1.0f + std::exp(-v));
    case kernels::activation::gelu: return 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
    default: return v > 0.0f ? v : 0.0f;
  }
}

// A neuron's value from its gate and up dots: act(gate) up, act(up) without a gate, relu(gate) relu(up)
// for dReLU; 0 where |act(..)| < t.
float hidden(kernels::activation a, float t, bool gated, float gate, float up) {
  if (a == kernels::activation::drelu) return std::max(gate, 0.0f) * std::max(up, 0.0f);
  const float v = activate(a, gated ? gate : up);
  if (std::fabs(v) < t) return 0.0f;
  return gated ? v * up : v;
}

void ffn_rows(const ffn_rows_job& job) {
  std::vector<float> g(static_cast<size_t>(job.d)), u(g.size()), dn(g.size());
  std::fill(job.out, job.out + job.n * job.d, 0.0f);
  for (int64_t t = 0; t < job.n; ++t) {
    const std::vector<float> xr = as_read(job.type, job.x + t * job.d, 1, job.d);
    const float* x = xr.data();
    float* out = job.out + t * job.d;
    for (int64_t k = 0; k < job.count; ++k) {
      const int32_t id = job.ids[k];
      if (job.chosen && !job.chosen[t * job.n_ff + id]) continue;
      row(job.type, job.up, job.slots[k], job.d, u.data());
      const float up = dot(u.data(), x, job.d);
      float gate = 0;
      if (job.gated) {
        row(job.type, job.gate, job.slots[k], job.d, g.data());
        gate = dot(g.data(), x, job.d);
      }
      const float h = hidden(job.act, job.act_threshold, job.gated, gate, up);
      job.hidden[t * job.n_ff + id] = h;
      if (h == 0.0f) continue;
      row(job.type, job.down_t, job.slots[k], job.d, dn.data());
      for (int64_t c = 0; c < job.d; ++c) out[c] += h * dn[static_cast<size_t>(c)];
    }
  }
}

void predict(const predict_job& job) {
  std::vector<float> r(static_cast<size_t>(std::max(job.d, job.rank))), mid(static_cast<size_t>(job.rank));
  for (int64_t t = 0; t < job.n; ++t) {
    const std::vector<float> x = as_read(job.type, job.x + t * job.d, 1, job.d);
    for (int64_t i = 0; i < job.rank; ++i) {
      row(job.type, job.fc1, i, job.d, r.data());
      mid[static_cast<size_t>(i)] = std::max(dot(r.data(), x.data(), job.d), 0.0f);
    }
    const std::vector<float> mid_read = as_read(job.type, mid.data(), 1, job.rank);
    for (int64_t i = 0; i < job.n_ff; ++i) {
      row(job.type, job.fc2, i, job.rank, r.data());
      const float s = dot(r.data(), mid_read.data(), job.rank);
      job.chosen[t * job.n_ff + i] = (job.on_act ? std::fabs(activate(job.act, s)) : s) >= job.threshold ? 1 : 0;
    }
  }
}

void matvec(const matvec_job& job) {
  std::vector<float> r(static_cast<size_t>(job.cols));
  const std::vector<float> x = as_read(job.type, job.x, job.n, job.cols);
  for (int64_t i = 0; i < job.rows; ++i) {
    row(job.type, job.w, i, job.cols, r.data());
    for (int64_t t = 0; t < job.n; ++t) job.y[t * job.rows + i] = dot(r.data(), x.data() + t * job.cols, job.cols);
  }
}

void dense_ffn(const dense_ffn_job& job);

namespace {
// A whole layer's FFN after its attention: h = residual + the output product, its RMSNorm (a double sum
// of squares, the scale in float, as the CPU's), the FFN on it, out = h + the FFN's output.
void ffn_after(const attention_job& job) {
  const int64_t n = job.n, d = job.d;
  std::vector<float> h(static_cast<size_t>(n * d)), xn(h.size()), y(h.size());
  for (int64_t k = 0; k < n * d; ++k) h[static_cast<size_t>(k)] = job.residual[k] + job.out[k];
  for (int64_t t = 0; t < n; ++t) {
    const float* x = h.data() + t * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(d)) + job.norm_eps);
    for (int64_t i = 0; i < d; ++i) xn[static_cast<size_t>(t * d + i)] = x[i] * scale * job.ffn_norm[i];
  }
  dense_ffn_job f = *job.ffn;
  f.n = n, f.d = d, f.x = xn.data(), f.out = y.data();
  dense_ffn(f);
  for (int64_t k = 0; k < n * d; ++k) job.out[k] = h[static_cast<size_t>(k)] + y[static_cast<size_t>(k)];
}
}  // namespace

// Attention the plain way: each token's q, k, v row by row, RoPE by the job's angles, k and v rounded
// to the cache's type and stored, then each head's softmax over its sequence's cached rows (in double).
void attention(const attention_job& job) {
  if (job.attn_norm) {  // the layer's input (the residual stream, plus the sum left pending), its norm; out: + the product
    const int64_t n = job.n, d = job.d;
    std::vector<float> in(static_cast<size_t>(n * d)), xn(in.size());
    for (int64_t t = 0; t < n; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) {
        const float v = job.residual[t * d + i] + (job.pending ? job.pending[t * d + i] : 0.0f);
        in[static_cast<size_t>(t * d + i)] = v, ss += static_cast<double>(v) * v;
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(d)) + job.norm_eps);
      for (int64_t i = 0; i < d; ++i) xn[static_cast<size_t>(t * d + i)] = in[static_cast<size_t>(t * d + i)] * scale * job.attn_norm[i];
    }
    attention_job plain = job;
    plain.attn_norm = nullptr, plain.pending = nullptr, plain.x = xn.data(), plain.residual = in.data();
    attention(plain);
    if (!job.ffn)
      for (int64_t k = 0; k < n * d; ++k) job.out[k] += in[static_cast<size_t>(k)];
    return;
  }
  const int64_t n = job.n, d = job.d, dq = job.dq(), kv = job.n_head_kv * job.head_dim, hd = job.head_dim, row_len = dq + 2 * kv;
  std::vector<float> qkv(static_cast<size_t>(n * row_len)), r(static_cast<size_t>(std::max(d, dq)));
  auto product = [&](tensor_type t, const void* w, int64_t rows, int64_t at) {  // rows of w into columns at.. of each token's row
    const std::vector<float> x = as_read(t, job.x, n, d);
    for (int64_t i = 0; i < rows; ++i) {
      row(t, w, i, d, r.data());
      for (int64_t k = 0; k < n; ++k) qkv[static_cast<size_t>(k * row_len + at + i)] = dot(r.data(), x.data() + k * d, d);
    }
  };
  if (job.wqkv) {
    product(job.t_qkv, job.wqkv, row_len, 0);
  } else {
    product(job.t_q, job.wq, dq, 0);
    product(job.t_k, job.wk, kv, dq);
    product(job.t_v, job.wv, kv, dq + kv);
  }
  const int64_t half = job.n_rot / 2;
  for (int64_t k = 0; k < n; ++k) {
    float* q = qkv.data() + k * row_len;
    if (job.bq)
      for (int64_t i = 0; i < row_len; ++i) q[i] += i < dq ? job.bq[i] : i < dq + kv ? job.bk[i - dq] : job.bv[i - dq - kv];
    if (job.q_norm)
      for (int64_t h = 0; h < job.n_head + job.n_head_kv; ++h) {
        float* x = q + h * hd;
        const float* w = h < job.n_head ? job.q_norm : job.k_norm;
        double ss = 0;
        for (int64_t i = 0; i < hd; ++i) ss += static_cast<double>(x[i]) * x[i];
        const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(hd) + job.norm_eps));
        for (int64_t i = 0; i < hd; ++i) x[i] = x[i] * scale * w[i];
      }
    const float *c = job.angles + k * job.n_rot, *s = c + half;
    for (int64_t h = 0; h < job.n_head + job.n_head_kv; ++h) {
      float* x = q + h * hd;  // the query heads, then the key heads right after them
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = job.adjacent_pairs ? 2 * i : i, b = job.adjacent_pairs ? 2 * i + 1 : i + half;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * c[i] - x1 * s[i];
        x[b] = x0 * s[i] + x1 * c[i];
      }
    }
    const int64_t at = (static_cast<int64_t>(job.seqs[k]) * job.ctx + job.positions[k]) * kv;
    for (int which = 0; which < 2; ++which) {
      const float* from = q + dq + which * kv;
      void* cache = which == 0 ? job.k_cache : job.v_cache;
      if (job.kv_type == tensor_type::f16) kernels::fp32_to_fp16_row(from, static_cast<uint16_t*>(cache) + at, static_cast<size_t>(kv));
      else std::copy(from, from + kv, static_cast<float*>(cache) + at);
    }
  }
  auto cached = [&](const void* cache, int64_t index) {
    return job.kv_type == tensor_type::f16 ? kernels::fp16_to_fp32(static_cast<const uint16_t*>(cache)[index]) : static_cast<const float*>(cache)[index];
  };
  std::vector<float> attn(static_cast<size_t>(n * dq));
  std::vector<double> p(static_cast<size_t>(job.ctx));
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (int64_t k = 0; k < n; ++k)
    for (int64_t h = 0; h < job.n_head; ++h) {
      const float* q = qkv.data() + k * row_len + h * hd;
      const int64_t base = static_cast<int64_t>(job.seqs[k]) * job.ctx * kv + h / (job.n_head / job.n_head_kv) * hd, last = job.positions[k];
      double m = -INFINITY, sum = 0;
      for (int64_t t = 0; t <= last; ++t) {
        double a = 0;
        for (int64_t i = 0; i < hd; ++i) a += static_cast<double>(q[i]) * cached(job.k_cache, base + t * kv + i);
        p[static_cast<size_t>(t)] = a * scale;
        m = std::max(m, a * scale);
      }
      for (int64_t t = 0; t <= last; ++t) sum += (p[static_cast<size_t>(t)] = std::exp(p[static_cast<size_t>(t)] - m));
      for (int64_t i = 0; i < hd; ++i) {
        double a = 0;
        for (int64_t t = 0; t <= last; ++t) a += p[static_cast<size_t>(t)] * cached(job.v_cache, base + t * kv + i);
        attn[static_cast<size_t>(k * dq + h * hd + i)] = static_cast<float>(a / sum);
      }
    }
  const std::vector<float> attn_read = as_read(job.t_o, attn.data(), n, dq);
  for (int64_t i = 0; i < d; ++i) {
    row(job.t_o, job.wo, i, dq, r.data());
    for (int64_t k = 0; k < n; ++k) job.out[k * d + i] = dot(r.data(), attn_read.data() + k * dq, dq);
  }
  if (job.ffn) return ffn_after(job);
  if (!job.fc1) return;
  // The predictor on the layer's input (plus the output product): what predict() computes.
  std::vector<float> pred_in(static_cast<size_t>(n * d));
  for (int64_t k = 0; k < n * d; ++k) pred_in[static_cast<size_t>(k)] = job.layer_in[k] + (job.pred_adds_out ? job.out[k] : 0.0f);
  predict_job choice;
  choice.type = job.t_pred, choice.fc1 = job.fc1, choice.fc2 = job.fc2;
  choice.n = n, choice.d = d, choice.rank = job.rank, choice.n_ff = job.n_ff;
  choice.x = pred_in.data(), choice.threshold = job.threshold, choice.chosen = job.chosen;
  predict(choice);
}

// A dense FFN the plain way: every neuron's gate and up rows, the activation, then the down rows.
void dense_ffn(const dense_ffn_job& job) {
  if (job.combine_into) {  // the rows' outputs, then their weighted sum into the device's memory
    std::vector<float> y(static_cast<size_t>(job.n * job.d));
    dense_ffn_job rows = job;
    rows.combine_into = nullptr, rows.out = y.data();
    dense_ffn(rows);
    for (int64_t c = 0; c < job.d; ++c) {
      float s = 0;
      for (int64_t r = 0; r < job.n; ++r) s += job.weights[r] * y[static_cast<size_t>(r * job.d + c)];
      job.combine_into[c] = s;
    }
    return;
  }
  if (job.n_parts > 0) {  // each part on its rows
    for (const ffn_part& p : ffn_parts(job)) {
      dense_ffn_job one = job;
      one.parts = nullptr, one.n_parts = 0;
      one.gate = p.gate, one.up = p.up, one.down = p.down, one.t_gate = p.t_gate, one.t_up = p.t_up, one.t_down = p.t_down;
      one.n = p.n, one.n_ff = p.n_ff, one.x = job.x + p.first * job.d, one.out = job.out + p.first * job.d;
      if (p.n > 0) dense_ffn(one);
    }
    return;
  }
  const int64_t n = job.n, d = job.d, n_ff = job.n_ff;
  std::vector<float> r(static_cast<size_t>(std::max(d, n_ff))), h(static_cast<size_t>(n * n_ff)), g(static_cast<size_t>(n));
  const std::vector<float> xg = as_read(job.t_gate, job.x, n, d), xu = as_read(job.t_up, job.x, n, d);
  for (int64_t i = 0; i < n_ff; ++i) {
    if (job.gated) {
      row(job.t_gate, job.gate, i, d, r.data());
      for (int64_t t = 0; t < n; ++t) g[static_cast<size_t>(t)] = dot(r.data(), xg.data() + t * d, d);
    }
    row(job.t_up, job.up, i, d, r.data());
    for (int64_t t = 0; t < n; ++t) {
      h[static_cast<size_t>(t * n_ff + i)] = hidden(job.act, job.act_threshold, job.gated, g[static_cast<size_t>(t)], dot(r.data(), xu.data() + t * d, d));
    }
  }
  const std::vector<float> h_read = as_read(job.t_down, h.data(), n, n_ff);
  for (int64_t c = 0; c < d; ++c) {
    row(job.t_down, job.down, c, n_ff, r.data());
    for (int64_t t = 0; t < n; ++t) job.out[t * d + c] = dot(r.data(), h_read.data() + t * n_ff, n_ff);
  }
  if (job.hidden) std::copy(h.begin(), h.end(), job.hidden);
}

}  // namespace sim_kernels

}  // namespace hotcold::devices
