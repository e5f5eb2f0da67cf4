#include "devices/gpu_jobs.hpp"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

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

}  // namespace hotcold::devices
