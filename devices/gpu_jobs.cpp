#include "devices/gpu_jobs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/gpu/decode.hpp"

namespace hotcold::devices {

bool gpu_reads(tensor_type t) { return t == tensor_type::f16 || t == tensor_type::q8_0 || t == tensor_type::q4_0; }
bool gpu_reads(operation op, tensor_type t) {
  return gpu_reads(t) || (t == tensor_type::q6_k && (op == operation::matvec || op == operation::attention || op == operation::dense_ffn));
}

kernels::gpu::row_type gpu_row_type(tensor_type t) {
  switch (t) {
    case tensor_type::f16: return kernels::gpu::row_type::f16;
    case tensor_type::q8_0: return kernels::gpu::row_type::q8_0;
    case tensor_type::q4_0: return kernels::gpu::row_type::q4_0;
    case tensor_type::q6_k: return kernels::gpu::row_type::q6_k;
    default: throw std::invalid_argument(fmt::format("a GPU's kernels read rows of F16, Q8_0, Q4_0 or Q6_K, not {}", tensor_type_name(t)));
  }
}

void check_attention_job(const std::string& device, const attention_job& job) {
  if (job.n_head <= 0 || job.n_head_kv <= 0 || job.n_head % job.n_head_kv != 0 || job.head_dim <= 0 || job.n_rot > job.head_dim ||
      job.n_rot % 2 != 0)
    throw std::invalid_argument(fmt::format("{}: attention with {} heads ({} KV heads) of {} values, {} rotated, for an embedding of {}", device, job.n_head,
                                            job.n_head_kv, job.head_dim, job.n_rot, job.d));
  if (!job.wqkv && !(job.wq && job.wk && job.wv)) throw std::invalid_argument(fmt::format("{}: attention needs wqkv or wq, wk and wv", device));
  if ((job.bq || job.bk || job.bv) && !(job.bq && job.bk && job.bv)) throw std::invalid_argument(fmt::format("{}: biases on all of q, k, v or none", device));
  if (static_cast<bool>(job.q_norm) != static_cast<bool>(job.k_norm)) throw std::invalid_argument(fmt::format("{}: norms of both q and k or neither", device));
  if (job.kv_type != tensor_type::f16 && job.kv_type != tensor_type::f32) throw std::invalid_argument(fmt::format("{}: the KV cache holds f16 or f32", device));
  for (int64_t t = 0; t < job.n; ++t)
    if (job.seqs[t] < 0 || job.seqs[t] >= job.n_seq || job.positions[t] < 0 || job.positions[t] >= job.ctx)
      throw std::out_of_range(fmt::format("{}: token {} at sequence {} position {} is outside the cache ({} x {})", device, t, job.seqs[t], job.positions[t],
                                          job.n_seq, job.ctx));
  for (auto [w, t] : {std::pair{job.wqkv, job.t_qkv}, {job.wq, job.t_q}, {job.wk, job.t_k}, {job.wv, job.t_v}, {job.wo, job.t_o}})
    if (w && !gpu_reads(operation::attention, t))
      throw std::invalid_argument(fmt::format("{}: the GPU's attention takes F16, Q8_0, Q4_0 or Q6_K weights, not {}", device, tensor_type_name(t)));
  if (job.fc1 && !gpu_reads(operation::predict, job.t_pred))
    throw std::invalid_argument(fmt::format("{}: the GPU's predictor does not take {} weights", device, tensor_type_name(job.t_pred)));
  if (job.attn_norm && (job.fc1 || !job.residual))
    throw std::invalid_argument(fmt::format("{}: attention with its norm on the device needs the residual stream and takes no predictor", device));
  if (job.ffn) {
    if (job.fc1) throw std::invalid_argument(fmt::format("{}: attention with the FFN after it takes no predictor", device));
    if (!job.residual || !job.ffn_norm || !job.ffn->up || !job.ffn->down || (job.ffn->gated && !job.ffn->gate) || job.ffn->n_ff <= 0)
      throw std::invalid_argument(fmt::format("{}: attention with the FFN after it needs the residual stream, the FFN's norm and its weights", device));
    check_dense_ffn_job(device, *job.ffn);
  }
}

namespace {
void check_ffn_weights(const std::string& device, std::initializer_list<std::pair<const void*, tensor_type>> ws) {
  for (auto [w, t] : ws)
    if (w && !gpu_reads(operation::dense_ffn, t))
      throw std::invalid_argument(fmt::format("{}: the GPU's dense FFN takes F16, Q8_0, Q4_0 or Q6_K weights, not {}", device, tensor_type_name(t)));
}
}  // namespace

void check_dense_ffn_job(const std::string& device, const dense_ffn_job& job) {
  check_ffn_weights(device, {{job.gate, job.t_gate}, {job.up, job.t_up}, {job.down, job.t_down}});
  int64_t next = 0;
  for (int64_t k = 0; k < job.n_parts; ++k) {
    const ffn_part& p = job.parts[k];
    check_ffn_weights(device, {{p.gate, p.t_gate}, {p.up, p.t_up}, {p.down, p.t_down}});
    if (p.first != next || p.n < 0 || p.n_ff <= 0 || p.n_ff > job.n_ff || !p.up || !p.down || (job.gated && !p.gate))
      throw std::invalid_argument(fmt::format("{}: FFN part {} (rows {}..{}, {} neurons) does not follow the one before it in a job of {} rows and {} neurons",
                                              device, k, p.first, p.first + p.n, p.n_ff, job.n, job.n_ff));
    next += p.n;
  }
  if (job.combine_into && (!job.weights || job.hidden))
    throw std::invalid_argument(fmt::format("{}: an FFN summed on the device needs its rows' weights (and gives no hidden values)", device));
  if (job.n_parts > 0 && (next != job.n || job.hidden))
    throw std::invalid_argument(fmt::format("{}: FFN parts cover {} rows of a job of {}{}", device, next, job.n, job.hidden ? " (and give no hidden values)" : ""));
}

std::vector<ffn_part> ffn_parts(const dense_ffn_job& job) {
  if (job.n_parts > 0) return {job.parts, job.parts + job.n_parts};
  return {ffn_part{job.gate, job.up, job.down, job.t_gate, job.t_up, job.t_down, 0, job.n, job.n_ff}};
}

namespace {
// Lays values out one after another, each from a 16-byte boundary.
struct scratch_cursor {
  uint64_t at = 0;
  uint64_t take(uint64_t bytes) {
    const uint64_t here = (at + scratch_align - 1) / scratch_align * scratch_align;
    at = here + bytes;
    return here;
  }
  uint64_t end() const { return (at + scratch_align - 1) / scratch_align * scratch_align; }
};
// A dense FFN's input, gate and up values, and output for m tokens, from the cursor on.
dense_ffn_scratch take_dense_ffn(scratch_cursor& c, int64_t d, int64_t n_ff, int64_t m, bool weights = false) {
  const auto um = static_cast<uint64_t>(m), ud = static_cast<uint64_t>(d), uf = static_cast<uint64_t>(n_ff);
  dense_ffn_scratch s;
  s.x = c.take(4 * um * ud);
  if (weights) s.weights = c.take(4 * um);
  s.in_end = c.at;
  s.gate = c.take(4 * um * uf);
  s.up = c.take(4 * um * uf);
  s.out = c.take(4 * um * ud);
  s.end = c.end();
  return s;
}
// The largest m (at least 1 where it fits) whose layout ends within `bytes`: end(m) grows with m.
template <typename End>
int64_t largest_chunk(uint64_t bytes, uint64_t per_token, End end) {
  if (per_token == 0 || end(1) > bytes) return 0;
  int64_t m = static_cast<int64_t>(bytes / per_token);
  while (m > 1 && end(m) > bytes) --m;
  while (end(m + 1) <= bytes) ++m;
  return m;
}
}  // namespace

attention_scratch attention_scratch_of(const attention_job& job, int64_t m) {
  const auto um = static_cast<uint64_t>(m), d = static_cast<uint64_t>(job.d), dq = static_cast<uint64_t>(job.dq());
  const uint64_t kv = static_cast<uint64_t>(job.n_head_kv * job.head_dim), n_ff = job.fc1 ? static_cast<uint64_t>(job.n_ff) : 0;
  const uint64_t ffn_ff = job.ffn ? static_cast<uint64_t>(job.ffn->n_ff) : 0;
  scratch_cursor c;
  attention_scratch s;
  s.x = c.take(4 * um * d);
  s.angles = c.take(4 * um * static_cast<uint64_t>(job.n_rot));
  s.seqpos = c.take(4 * 2 * um);
  if (job.fc1 || job.ffn || job.attn_norm) s.layer_in = c.take(4 * um * d);
  s.in_end = c.at;
  s.qkv = c.take(4 * um * (dq + 2 * kv));
  s.attn = c.take(4 * um * dq);
  s.out = c.take(4 * um * d);
  if (job.fc1) {
    s.pred_in = c.take(4 * um * d);
    s.scores = c.take(4 * um * n_ff);
    s.chosen = c.take(um * n_ff);
    s.mid = c.take(4 * um * static_cast<uint64_t>(job.rank));
  }
  if (job.ffn) {
    s.resid = c.take(4 * um * d);
    const dense_ffn_scratch f = take_dense_ffn(c, job.d, static_cast<int64_t>(ffn_ff), m);
    s.ffn_x = f.x, s.gate = f.gate, s.up = f.up, s.ffn_out = f.out;
  }
  s.end = c.end();
  return s;
}

dense_ffn_scratch dense_ffn_scratch_of(int64_t d, int64_t n_ff, int64_t m, bool weights) {
  scratch_cursor c;
  return take_dense_ffn(c, d, n_ff, m, weights);
}

namespace {
void check_layout(const std::string& device, const void* scratch, uint64_t scratch_bytes, std::initializer_list<std::pair<const char*, uint64_t>> at,
                  uint64_t end) {
  if (reinterpret_cast<uintptr_t>(scratch) % scratch_align != 0)
    throw std::logic_error(fmt::format("{}: a job's scratch at {} is not on a {}-byte boundary", device, scratch, scratch_align));
  for (const auto& [what, offset] : at)
    if (offset % scratch_align != 0)
      throw std::logic_error(fmt::format("{}: the scratch's {} at byte {} is not on a {}-byte boundary (the kernels' wide loads need it)", device, what, offset,
                                         scratch_align));
  if (end > scratch_bytes) throw std::logic_error(fmt::format("{}: a chunk's scratch ends at byte {}, past the {} given", device, end, scratch_bytes));
}
}  // namespace

void check_scratch_layout(const std::string& device, const void* scratch, uint64_t scratch_bytes, const attention_scratch& s) {
  check_layout(device, scratch, scratch_bytes,
               {{"input", s.x}, {"angles", s.angles}, {"positions", s.seqpos}, {"layer input", s.layer_in}, {"q/k/v", s.qkv}, {"heads' outputs", s.attn},
                {"output product", s.out}, {"predictor input", s.pred_in}, {"scores", s.scores}, {"choices", s.chosen}, {"predictor values", s.mid},
                {"residual", s.resid}, {"FFN input", s.ffn_x}, {"gate values", s.gate}, {"up values", s.up}, {"FFN output", s.ffn_out}},
               s.end);
}

void check_scratch_layout(const std::string& device, const void* scratch, uint64_t scratch_bytes, const dense_ffn_scratch& s) {
  check_layout(device, scratch, scratch_bytes, {{"input", s.x}, {"weights", s.weights}, {"gate values", s.gate}, {"up values", s.up}, {"output", s.out}}, s.end);
}

int64_t attention_chunk(const std::string& device, const attention_job& job) {
  const int64_t kv = job.n_head_kv * job.head_dim, n_ff = job.fc1 ? job.n_ff : 0;
  uint64_t per_token = attention_scratch_per_token(job.d, job.dq(), kv, job.n_rot, n_ff, job.fc1 ? job.rank : 0);
  if (job.ffn) per_token += dense_ffn_scratch_per_token(job.d, job.ffn->n_ff) + 8 * static_cast<uint64_t>(job.d);  // (and the layer's input, the residual)
  const int64_t chunk = job.scratch ? largest_chunk(job.scratch_bytes, per_token, [&](int64_t m) { return attention_scratch_of(job, m).end; }) : 0;
  if (chunk < 1)
    throw std::invalid_argument(fmt::format("{}: attention needs {} bytes of scratch for a token{}, {} given", device, attention_scratch_of(job, 1).end,
                                            job.ffn ? " and the FFN after it" : "", job.scratch_bytes));
  return chunk;
}

scratch_tail attention_scratch_tail(const attention_job& job, int64_t m) {
  const auto end = static_cast<int64_t>(attention_scratch_of(job, m).end / 4);
  return {end, std::max<int64_t>(0, static_cast<int64_t>(job.scratch_bytes / 4) - end)};
}

int64_t attention_latest_position(const attention_job& job, int64_t t0, int64_t m) {
  return m > 0 ? *std::max_element(job.positions + t0, job.positions + t0 + m) : -1;
}

int64_t attention_splits(const attention_job& job, int64_t t0, int64_t m) {
  return kernels::gpu::attend_splits(m, job.n_head, job.head_dim, attention_latest_position(job, t0, m), attention_scratch_tail(job, m).floats);
}

int64_t dense_ffn_chunk(const std::string& device, const dense_ffn_job& job) {
  const uint64_t per_token = dense_ffn_scratch_per_token(job.d, job.n_ff);
  const bool w = job.combine_into != nullptr;
  const int64_t chunk = job.scratch ? largest_chunk(job.scratch_bytes, per_token, [&](int64_t m) { return dense_ffn_scratch_of(job.d, job.n_ff, m, w).end; }) : 0;
  if (chunk < 1) throw std::invalid_argument(fmt::format("{}: a dense FFN needs {} bytes of scratch a token, {} given", device, per_token, job.scratch_bytes));
  return chunk;
}

namespace {
void check_scratch(const std::string& device, const char* what, const void* scratch, uint64_t have, uint64_t need) {
  if (!scratch || have < need) throw std::invalid_argument(fmt::format("{}: a {} needs {} bytes of scratch, {} given", device, what, need, have));
}
}  // namespace

predict_scratch predict_scratch_of(int64_t d, int64_t rank, int64_t n_ff, int64_t m) {
  const auto um = static_cast<uint64_t>(m);
  scratch_cursor c;
  predict_scratch s;
  s.x = c.take(4 * um * static_cast<uint64_t>(d));
  s.mid = c.take(4 * um * static_cast<uint64_t>(rank));
  s.scores = c.take(4 * um * static_cast<uint64_t>(n_ff));
  s.chosen = c.take(um * static_cast<uint64_t>(n_ff));
  s.end = c.end();
  return s;
}

int64_t predict_chunk(const std::string& device, const predict_job& job) {
  const uint64_t per_token = 4 * static_cast<uint64_t>(job.d + job.rank + job.n_ff) + static_cast<uint64_t>(job.n_ff);
  const int64_t chunk =
      job.scratch ? largest_chunk(job.scratch_bytes, per_token, [&](int64_t m) { return predict_scratch_of(job.d, job.rank, job.n_ff, m).end; }) : 0;
  if (chunk < 1)
    throw std::invalid_argument(fmt::format("{}: a predictor needs {} bytes of scratch, {} given", device, predict_scratch_of(job.d, job.rank, job.n_ff, 1).end,
                                            job.scratch_bytes));
  return chunk;
}

void check_scratch(const std::string& device, const predict_job& job) { predict_chunk(device, job); }
void check_scratch(const std::string& device, const matvec_job& job) {
  check_scratch(device, "product", job.scratch, job.scratch_bytes, static_cast<uint64_t>(job.cols + job.rows) * sizeof(float));
}

// Each count follows the back end's code (devices/cuda/cuda_backend.cpp) call by call; a kernel
// wrapper of kernels/gpu/decode.cu launches nothing for an empty product.
namespace {
uint64_t matmul_launches(int64_t rows, int64_t n) { return rows > 0 && n > 0 ? 1 : 0; }
uint64_t predictor_launches(int64_t rank, int64_t n_ff) { return matmul_launches(rank, 1) + 1 + matmul_launches(n_ff, 1) + 1; }
}  // namespace

// The inputs in, each token's list in, a hot_ffn per token (its gate/up kernel where it chose any
// row, the down chunks and their sum), the sums out, each token's values out; one wait.
device_traffic gpu_traffic(const ffn_rows_job& job) {
  device_traffic t{0, 2 + 2 * static_cast<uint64_t>(job.n), 1};
  for (int64_t i = 0; i < job.n; ++i) {
    bool any = false;
    for (int64_t k = 0; k < job.count && !any; ++k) any = !job.chosen || job.chosen[i * job.n_ff + job.ids[k]];
    t.launches += (any ? 1 : 0) + 2;
  }
  return t;
}

// A chunk of tokens at a time: their inputs in, the predictor's four kernels, their choices out, a wait.
device_traffic gpu_traffic(const predict_job& job) {
  const int64_t chunk = predict_chunk("", job);
  const auto chunks = static_cast<uint64_t>((job.n + chunk - 1) / chunk);
  return {chunks * predictor_launches(job.rank, job.n_ff), 2 * chunks, chunks};
}

device_traffic gpu_traffic(const matvec_job& job) {
  const auto n = static_cast<uint64_t>(job.n);
  return {n * matmul_launches(job.rows, 1), 2 * n, n};
}

// Per chunk: its inputs in as one copy, the Q/K/V products (one fused or three), RoPE and the store,
// the attention (two kernels where a long past splits), the output product (with a predictor: the sum,
// then its kernels for the chunk; with the FFN after it: its kernels), the product out (and the
// choices, or the FFN's values); a wait.
device_traffic gpu_traffic(const attention_job& job) {
  const int64_t chunk = attention_chunk("", job);
  device_traffic t;
  for (int64_t t0 = 0; t0 < job.n; t0 += chunk) {
    const int64_t m = std::min(chunk, job.n - t0);
    t.copies += 2 + (job.fc1 ? 1 : 0);
    t.launches += job.wqkv ? 1 : 3;
    t.launches += 2 + (attention_splits(job, t0, m) > 1 ? 2 : 1);  // rope_store, attend (split: and the join), the output product
    if (job.fc1) t.launches += 1 + predictor_launches(job.rank, job.n_ff);
    if (job.attn_norm) t.launches += (job.pending ? 1 : 0) + 1 + (job.ffn ? 0 : 1);  // the pending sum, the norm; the residual
    if (job.ffn) {  // the residual, its norm, gate and up, the activation, down, the residual again; the values out
      t.launches += 6 + (job.ffn->gated ? 1 : 0);
      t.copies += job.ffn->hidden ? 1 : 0;
    }
    t.syncs += 1;
  }
  return t;
}

// Per chunk: the inputs in, gate and up products, the activation, the down product, the output out
// (and the hidden values); a wait.
device_traffic gpu_traffic(const dense_ffn_job& job) {
  const int64_t chunk = dense_ffn_chunk("", job);
  device_traffic t;
  const std::vector<ffn_part> parts = ffn_parts(job);
  for (int64_t t0 = 0; t0 < job.n; t0 += chunk) {
    if (job.combine_into) t.copies += 1, t.launches += 2;  // (in; the activation and the weighted sum; nothing back, no wait)
    else t.copies += 2 + (job.hidden ? 1 : 0), t.syncs += 1, t.launches += 1;  // (the activation, once a chunk)
    for (const ffn_part& p : parts)  // each part's rows in the chunk: gate, up and down products
      if (std::max(p.first, t0) < std::min(p.first + p.n, t0 + chunk)) t.launches += (job.gated ? 1 : 0) + 2;
  }
  return t;
}

// A small upload or any read: one copy and a wait; a large upload: a copy per pinned chunk, each
// waited on by its event (before the chunk's buffer is refilled, or at the end).
device_traffic gpu_copy_traffic(uint64_t bytes, bool to_device) {
  if (!to_device || bytes <= gpu_upload_chunk / 16) return {0, 1, 1};
  const uint64_t chunks = (bytes + gpu_upload_chunk - 1) / gpu_upload_chunk;
  return {0, chunks, chunks};
}

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
