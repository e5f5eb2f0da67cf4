#include "engine/attention.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/layer_ops.hpp"
#include "engine/matmul.hpp"
#include "engine/step_part.hpp"
#include "engine/trace.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/kv_rows.hpp"

namespace hotcold {

using namespace kernels;

namespace {

// The cache's rows are float32 or F16: the same sums through the kernels for each.
inline float dot_row(const float* k, const float* q, int64_t n) { return dot_f32(k, q, n); }
inline float dot_row(const uint16_t* k, const float* q, int64_t n) { return dot_f16(k, q, n); }
inline void axpy_row(float a, const float* v, float* y, int64_t n) { axpy_f32(a, v, y, n); }
inline void axpy_row(float a, const uint16_t* v, float* y, int64_t n) { axpy_f16(a, v, y, n); }
inline void dot4n_rows(const float* const* k, const float* const* q, int nq, int64_t n, float* o) { dot4n_f32(k, q, nq, n, o); }
inline void dot4n_rows(const uint16_t* const* k, const float* const* q, int nq, int64_t n, float* o) { dot4n_f16(k, q, nq, n, o); }
inline void axpy4_rows(const float* a, const float* const* v, float* y, int64_t n) { axpy4_f32(a, v, y, n); }
inline void axpy4_rows(const float* a, const uint16_t* const* v, float* y, int64_t n) { axpy4_f16(a, v, y, n); }

// One head's cached keys and values: kc, vc at position 0 of the head's slice, rows `kv` elements
// apart, hd values a row; scale: the scores' (1 / sqrt(hd)).
template <typename T>
struct head_cache {
  const T* kc;
  const T* vc;
  int64_t kv, hd;
  float scale;
};

// Up to four queries of one head at consecutive positions pos0.. of one sequence (a prompt chunk):
// each cached key and value row is read once for all of them. q[j], out[j]: query j's head slices;
// s: scratch of 4 x (pos0 + 4) floats.
template <typename T>
void attend_head4(const float* const* q, int nq, const head_cache<T>& c, int64_t pos0, float* s, float* const* out) {
  const T *kc = c.kc, *vc = c.vc;
  const int64_t kv = c.kv, hd = c.hd;
  const float scale = c.scale;
  const int64_t last = pos0 + nq - 1, stride = pos0 + 4;  // query j sees positions 0..pos0 + j
  const float* qs[4] = {q[0], q[std::min(1, nq - 1)], q[std::min(2, nq - 1)], q[std::min(3, nq - 1)]};
  // Scores: four cached keys against the (up to) four queries per call.
  for (int64_t t = 0; t <= last; t += 4) {
    const T* ks[4] = {kc + t * kv, kc + std::min(t + 1, last) * kv, kc + std::min(t + 2, last) * kv, kc + std::min(t + 3, last) * kv};
    float o[16];
    dot4n_rows(ks, qs, nq, hd, o);
    for (int r = 0; r < 4 && t + r <= last; ++r)
      for (int j = 0; j < nq; ++j) s[j * stride + t + r] = o[4 * r + j] * scale;
  }
  // Softmax of each query over its own positions, then its output: values four rows at a time.
  for (int j = 0; j < nq; ++j) {
    float* sj = s + j * stride;
    const int64_t pos = pos0 + j;
    float max_s = -INFINITY;
    for (int64_t t = 0; t <= pos; ++t) max_s = std::max(max_s, sj[t]);
    double sum = 0;
    for (int64_t t = 0; t <= pos; ++t) sum += (sj[t] = std::exp(sj[t] - max_s));
    const float inv = static_cast<float>(1.0 / sum);
    std::fill(out[j], out[j] + hd, 0.0f);
    int64_t t = 0;
    for (; t + 4 <= pos + 1; t += 4) {
      const float a[4] = {sj[t] * inv, sj[t + 1] * inv, sj[t + 2] * inv, sj[t + 3] * inv};
      const T* vs[4] = {vc + t * kv, vc + (t + 1) * kv, vc + (t + 2) * kv, vc + (t + 3) * kv};
      axpy4_rows(a, vs, out[j], hd);
    }
    for (; t <= pos; ++t) axpy_row(sj[t] * inv, vc + t * kv, out[j], hd);
  }
}

// A group of nq (2 or more) queries of head h (consecutive positions from pos0 of one sequence)
// against the head's cache slices kc, vc: a block of up to 32 (the vector kernel) or up to four.
template <typename T>
void attend_group(const float* const* qs, int nq, const head_cache<T>& c, int64_t pos0, float* s, float* const* outs) {
  if (attend_block_vectorized(c.hd)) return attend_block(qs, nq, c.kc, c.vc, c.kv, c.hd, pos0, c.scale, outs, s);
  attend_head4(qs, nq, c, pos0, s, outs);
}

// One query at position pos against its head's cached positions first..pos, each score soft-capped
// (cap tanh(s / cap), as llama.cpp's Gemma 2 graph does before the softmax; cap 0: none): out (hd);
// s: pos + 1 floats of scratch.
template <typename T>
void capped_head(const float* q, const head_cache<T>& c, int64_t first, int64_t pos, float cap, float* s, float* out) {
  float max_s = -INFINITY;
  for (int64_t t = first; t <= pos; ++t) {
    float v = dot_row(c.kc + t * c.kv, q, c.hd) * c.scale;
    if (cap > 0) v = std::tanh(v * (1.0f / cap)) * cap;
    s[t] = v;
    max_s = std::max(max_s, v);
  }
  double sum = 0;
  for (int64_t t = first; t <= pos; ++t) sum += (s[t] = std::exp(s[t] - max_s));
  const float inv = static_cast<float>(1.0 / sum);
  std::fill(out, out + c.hd, 0.0f);
  for (int64_t t = first; t <= pos; ++t) axpy_row(s[t] * inv, c.vc + t * c.kv, out, c.hd);
}

}  // namespace

void attention_block::run(step_state& B, int64_t il) {
  const model& m = *env_.m;
  if (!m.holds_layer(il))  // (its weights were never read: another process's stage runs it)
    throw std::logic_error(fmt::format("layer {}: this process did not load its weights (load_options::first_layer, last_layer)", il));
  // On the hot device when it holds the layer's attention (its weights and KV cache): the same
  // routine on the device's queue, over its copies.
  const auto& dev = env_.device;
  if (B.pending) {  // the hot experts' sum of the layer before, left on the GPU
    if (takes_pending(il)) {
      env_.device_read += dev->attention_bytes(il);
      const layer_weights& l = m.weights().layers[static_cast<size_t>(il)];
      const layer_recipe r = recipe_of(env_.hp(), l);
      {
        trace_scope span(env_.trace, step_part::attention, B.step, il, B.n);
        pending_job(B, il, dev->layer(il), r);
      }
      return tail(B, r, true);
    }
    if (auto done = std::exchange(B.pending_done, nullptr)) done->wait();
    const int64_t d = env_.hp().n_embd;  // (else added here first)
    std::vector<float>& sum = B.ffn_normed;
    sum.resize(static_cast<size_t>(d));
    dev->read_pending(sum.data());
    for (int64_t k = 0; k < d; ++k) B.x[static_cast<size_t>(k)] += sum[static_cast<size_t>(k)];
    B.pending = nullptr;
  }
  if (dev && dev->attention(il)) {
    env_.device_read += dev->attention_bytes(il);
    if (!dev->device().runs_host_work())  // a GPU: its kernels, the norms here
      return run(B, il, m.weights().layers[static_cast<size_t>(il)], env_.cpu, &dev->layer(il));
    return dev->run([&] { run(B, il, dev->layer(il), env_.on_device()); });
  }
  run(B, il, m.weights().layers[static_cast<size_t>(il)], env_.cpu);
}

bool attention_block::takes_ffn(int64_t il) const {
  const auto& dev = env_.device;
  if (!dev || !dev->attention(il) || dev->device().runs_host_work()) return false;
  const layer_weights& l = env_.m->weights().layers[static_cast<size_t>(il)];
  const layer_recipe r = recipe_of(env_.hp(), l);
  return r.one_gpu_job() && dev->layer(il).ffn_norm;  // (the device's copy: held with attention)
}

bool attention_block::takes_pending(int64_t il) const {
  const auto& dev = env_.device;
  if (!dev || !dev->attention(il) || dev->device().runs_host_work() || env_.watch || !env_.m->holds_layer(il) || !dev->pending_sums()) return false;
  const layer_weights& l = env_.m->weights().layers[static_cast<size_t>(il)];
  const layer_recipe r = recipe_of(env_.hp(), l);
  const tensor_view& norm = dev->layer(il).attn_norm;
  return !r.parallel && r.norm == norm_kind::rms && !r.attn_out_norm.weight && !(r.attn_norm.bias && *r.attn_norm.bias) && !l.pred_fc1 && norm &&
         norm.type == tensor_type::f32;
}

void attention_block::pending_job(step_state& B, int64_t il, const layer_weights& g, const layer_recipe& r) {
  gpu_job(B, il, g, r, nullptr);
  B.x.swap(B.proj);  // (the job's output: the stream after attention)
  B.pending = nullptr;
  if (auto done = std::exchange(B.pending_done, nullptr)) done->wait();  // (ran before this job: an error it met is thrown here)
}

void attention_block::run_with_ffn(step_state& B, int64_t il, const devices::dense_ffn_job& ffn) {
  const hparams& hp = env_.hp();
  const layer_weights& l = env_.m->weights().layers[static_cast<size_t>(il)];
  const layer_recipe r = recipe_of(hp, l);
  const int64_t n = B.n, d = hp.n_embd;
  env_.device_read += env_.device->attention_bytes(il);
  trace_scope span(env_.trace, step_part::attention, B.step, il, n);
  for (int64_t t = 0; t < n; ++t) apply_norm(r.norm, r.attn_norm, B.x.data() + t * d, B.xn.data() + t * d, d, hp.norm_eps);
  gpu_job(B, il, env_.device->layer(il), r, &ffn);
  std::copy(B.proj.begin(), B.proj.begin() + n * d, B.x.begin());  // (the job's output: the layer's)
  B.ffn_in = nullptr, B.pred_in = nullptr;
}

const float* predictor_input(const step_state& B, const layer_recipe& r) {
  if (r.predictor_reads_ffn_input) return B.ffn_in;
  return !r.parallel && r.predictor_reads_layer_input ? B.layer_in.data() : B.x.data();
}

void attention_block::gpu_job(step_state& B, int64_t il, const layer_weights& g, const layer_recipe& r, const devices::dense_ffn_job* ffn) {
  const hparams& hp = env_.hp();
  const device_layers& dev = *env_.device;
  const int64_t n = B.n, n_rot = hp.n_rot, half = n_rot / 2;
  B.angles.resize(static_cast<size_t>(n * n_rot));
  B.seqs32.resize(static_cast<size_t>(n)), B.positions32.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const rope_angles a(hp, B.positions[static_cast<size_t>(t)], rope_factors_);
    std::copy(a.c, a.c + half, B.angles.begin() + t * n_rot);
    std::copy(a.s, a.s + half, B.angles.begin() + t * n_rot + half);
    B.seqs32[static_cast<size_t>(t)] = static_cast<int32_t>(B.seqs[static_cast<size_t>(t)]);
    B.positions32[static_cast<size_t>(t)] = static_cast<int32_t>(B.positions[static_cast<size_t>(t)]);
  }
  devices::attention_job job;
  if (g.wqkv) {
    job.wqkv = g.wqkv.data, job.t_qkv = g.wqkv.type;
  } else {
    job.wq = g.wq.data, job.wk = g.wk.data, job.wv = g.wv.data;
    job.t_q = g.wq.type, job.t_k = g.wk.type, job.t_v = g.wv.type;
  }
  job.wo = g.wo.data, job.t_o = g.wo.type;
  job.n = n, job.d = hp.n_embd, job.n_head = hp.n_head, job.n_head_kv = hp.n_head_kv, job.head_dim = hp.head_dim(), job.n_rot = n_rot;
  job.bq = g.bq.f32(), job.bk = g.bk.f32(), job.bv = g.bv.f32(), job.q_norm = g.q_norm.f32(), job.k_norm = g.k_norm.f32(), job.norm_eps = hp.norm_eps;
  job.adjacent_pairs = hp.rope == rope_style::adjacent_pairs;
  job.x = B.xn.data(), job.angles = B.angles.data(), job.seqs = B.seqs32.data(), job.positions = B.positions32.data();
  job.k_cache = kv_.k_layer(il), job.v_cache = kv_.v_layer(il);
  job.kv_type = kv_.types().k, job.ctx = kv_.n_ctx(), job.n_seq = kv_.n_seq();
  job.out = B.proj.data();
  // The layer's predictor with it, where the device holds it and a sparse step will ask for its choice:
  // on the input the predictor reads (the layer's input, plus attention's output where that is added
  // before the FFN), kept for the predictor's call on that input.
  // (Not a predictor of the FFN's normalized input: that input is made after this job.)
  const bool predict_here = !ffn && env_.mode == ffn_mode::sparse && dev.predictor(il) && g.pred_fc1 && !r.predictor_reads_ffn_input;
  if (ffn) job.ffn = ffn, job.residual = B.x.data(), job.ffn_norm = g.ffn_norm.f32();
  if (B.pending) {  // the layer's input on the device: the stream here plus the sum left there, normalized there
    job.residual = B.x.data(), job.pending = B.pending, job.attn_norm = g.attn_norm.f32();
    job.scratch = dev.scratch(), job.scratch_bytes = dev.scratch_beside_pending();
    dev.run([&] { dev.device().compute(job); });
    return;
  }
  if (predict_here) {
    job.fc1 = g.pred_fc1.data, job.fc2 = g.pred_fc2.data, job.t_pred = g.pred_fc1.type;
    job.rank = g.pred_fc1.ne1, job.n_ff = hp.n_ff;
    job.threshold = hp.sparse_threshold[static_cast<size_t>(il)];
    job.pred_adds_out = !r.parallel && !r.predictor_reads_layer_input;
    job.layer_in = B.x.data();  // the residual stream is added to after this job
    if (static_cast<int64_t>(B.chosen.size()) < n * hp.n_ff) B.chosen.resize(static_cast<size_t>(n * hp.n_ff));
    job.chosen = B.chosen.data();
  }
  job.scratch = dev.scratch(), job.scratch_bytes = dev.scratch_bytes();
  dev.run([&] { dev.device().compute(job); });
  // Kept for the predictor's call on the input attention_tail gives it (none: an older one is dropped).
  dev.keep_choice(il, predict_here ? predictor_input(B, r) : nullptr, n, predict_here ? B.chosen.data() : nullptr, hp.n_ff);
}

void attention_block::run(step_state& B, int64_t il, const layer_weights& l, const workers& on, const layer_weights* gpu) {
  const hparams& hp = env_.hp();
  const layer_recipe r = recipe_of(hp, l);
  const int64_t n = B.n, d = hp.n_embd;
  // What the predictor reads, when that is the layer's input and attention's output is added before
  // the FFN: a copy of it (parallel layers leave x as it is until the end of the layer).
  if (!r.parallel && r.predictor_reads_layer_input) std::copy(B.x.begin(), B.x.begin() + n * d, B.layer_in.begin());
  {
    trace_scope span(env_.trace, step_part::attention, B.step, il, n);
    for (int64_t t = 0; t < n; ++t) apply_norm(r.norm, r.attn_norm, B.x.data() + t * d, B.xn.data() + t * d, d, hp.norm_eps);
    if (gpu) gpu_job(B, il, *gpu, r);
    else products(B, il, l, r, on);
  }
  tail(B, r);
}

void attention_block::products(step_state& B, int64_t il, const layer_weights& l, const layer_recipe& r, const workers& on) {
  const hparams& hp = env_.hp();
  const int64_t n = B.n, dq = hp.n_embd_q(), kv = hp.n_embd_kv(), hd = hp.head_dim();
  // q, k, v of token t: a fused product interleaves them per token; separate ones are three blocks.
  const int64_t qkv_row = dq + 2 * kv;
  auto q_of = [&](int64_t t) { return r.fused_qkv ? B.qkv.data() + t * qkv_row : B.qkv.data() + t * dq; };
  auto k_of = [&](int64_t t) { return r.fused_qkv ? B.qkv.data() + t * qkv_row + dq : B.qkv.data() + n * dq + t * kv; };
  auto v_of = [&](int64_t t) { return r.fused_qkv ? B.qkv.data() + t * qkv_row + dq + kv : B.qkv.data() + n * (dq + kv) + t * kv; };
  if (r.fused_qkv) {
    matmul(*on.pool, l.wqkv, B.xn.data(), n, B.qkv.data(), *on.xq);
  } else {
    const tensor_view* ws[3] = {&l.wq, &l.wk, &l.wv};
    float* ys[3] = {q_of(0), k_of(0), v_of(0)};
    matmul_same_input(*on.pool, ws, B.xn.data(), n, ys, *on.xq);
  }
  const bool quantized_keys = traits(kv_.types().k).quantized;
  for (int64_t t = 0; t < n; ++t) {
    if (l.bq) {  // qwen2's biases
      const float *bq = l.bq.f32(), *bk = l.bk.f32(), *bv = l.bv.f32();
      float *q = q_of(t), *k = k_of(t), *v = v_of(t);
      for (int64_t i = 0; i < dq; ++i) q[i] += bq[i];
      for (int64_t i = 0; i < kv; ++i) k[i] += bk[i], v[i] += bv[i];
    }
    if (l.q_norm) {  // qwen3's per-head norms, before RoPE
      head_rms_norm(q_of(t), hp.n_head, hd, l.q_norm.f32(), hp.norm_eps);
      head_rms_norm(k_of(t), hp.n_head_kv, hd, l.k_norm.f32(), hp.norm_eps);
    }
    const rope_angles angles(hp, B.positions[static_cast<size_t>(t)], rope_factors_);
    rope(q_of(t), hp.n_head, hp, angles);
    rope(k_of(t), hp.n_head_kv, hp, angles);
    kv_.store_k(B.seqs[static_cast<size_t>(t)], il, B.positions[static_cast<size_t>(t)], k_of(t));
    kv_.store_v(kv_.v_row(B.seqs[static_cast<size_t>(t)], il, B.positions[static_cast<size_t>(t)]), v_of(t));
    if (quantized_keys) round_to_q8_0(q_of(t), dq);  // what quantized keys meet, as llama.cpp's attention
  }
  attend(B, il, on, B.qkv.data(), r.fused_qkv);
  matmul(*on.pool, l.wo, B.attn.data(), n, B.proj.data(), *on.xq);
}

void attention_block::attend(step_state& B, int64_t il, const workers& on, const float* qkv, bool fused) {
  const hparams& hp = env_.hp();
  const int64_t n = B.n, dq = hp.n_embd_q(), kv = hp.n_embd_kv(), hd = hp.head_dim(), n_ctx = kv_.n_ctx();
  auto q_of = [&](int64_t t) { return fused ? qkv + t * (dq + 2 * kv) : qkv + t * dq; };
  // Every (group, head) pair at once; causal: token t sees its sequence's cache up to its own
  // position. A group is tokens of one sequence at consecutive positions (a prompt chunk), which
  // read each cached key and value row once: up to 32 through the block kernel (scores as small
  // matrix products), else up to four; other tokens are groups of one, decoded by key ranges
  // (attend_decoded).
  // Gemma 2's soft-capped scores and sliding window: query by query (capped_head), not the block kernels.
  const bool capped = hp.attn_softcap > 0 || hp.sliding(il);
  const bool blocks = attend_block_vectorized(hd) && !capped;
  const int64_t group_max = capped ? 1 : blocks ? attend_block_max : 4;
  std::vector<int64_t>& groups = B.groups;  // first token of each group of several, then of each decoded token
  groups.clear();
  std::vector<int64_t>& decoded = B.decoded;
  decoded.clear();
  for (int64_t t = 0; t < n;) {
    int64_t e = t + 1;
    while (e < n && e - t < group_max && B.seqs[static_cast<size_t>(e)] == B.seqs[static_cast<size_t>(t)] &&
           B.positions[static_cast<size_t>(e)] == B.positions[static_cast<size_t>(e - 1)] + 1)
      ++e;
    if (e == t + 1 && !capped) decoded.push_back(t);
    else groups.push_back(t), groups.push_back(e);
    t = e;
  }
  if (!decoded.empty()) attend_decoded(B, il, on, decoded, q_of);
  const int64_t n_groups = static_cast<int64_t>(groups.size()) / 2;
  if (n_groups == 0) return;
  const kv_types types = kv_.types();
  // A quantized cache, keys and values of two types, or keys in tiles: a group's KV head's rows widened
  // once into the thread's floats (consecutive heads of one KV head share them), then the float kernels.
  const bool widen = !kv_.plain_rows(il);
  on.pool->parallel_for(n_groups * hp.n_head, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scores, kf, vf;
    const int64_t need = std::max(4 * (n_ctx + 4), blocks ? attend_block_scratch(n_ctx + attend_block_max, hd) : 0);
    if (static_cast<int64_t>(scores.size()) < need) scores.resize(static_cast<size_t>(need));
    if (widen && static_cast<int64_t>(kf.size()) < n_ctx * hd) kf.resize(static_cast<size_t>(n_ctx * hd)), vf.resize(static_cast<size_t>(n_ctx * hd));
    int64_t widened = -1;  // the (group, KV head) kf and vf hold
    const float scale = hp.attention_scale();
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = i / hp.n_head, h = i % hp.n_head, kvh = h / (hp.n_head / hp.n_head_kv);  // grouped-query: the head's KV head
      const int64_t t0 = groups[static_cast<size_t>(2 * g)], nq = groups[static_cast<size_t>(2 * g) + 1] - t0;
      const int64_t seq = B.seqs[static_cast<size_t>(t0)], pos0 = B.positions[static_cast<size_t>(t0)];
      const float* qs[attend_block_max];
      float* outs[attend_block_max];
      for (int64_t j = 0; j < nq; ++j) qs[j] = q_of(t0 + j) + h * hd, outs[j] = B.attn.data() + (t0 + j) * dq + h * hd;
      // Positions pos0 - n_swa + 1 .. pos0 where the layer slides its window (llama.cpp's standard one).
      const int64_t first = hp.sliding(il) ? std::max<int64_t>(0, pos0 - hp.n_swa + 1) : 0;
      if (widen) {
        const int64_t rows = pos0 + nq - first;
        if (widened != g * hp.n_head_kv + kvh) {
          kv_.load_k(seq, il, first, rows, kvh * hd, hd, kf.data() + first * hd);
          kv_load_rows(types.v, kv_.v_row(seq, il, first), kv_.row_bytes(true), kvh * hd, hd, rows, vf.data() + first * hd);
          widened = g * hp.n_head_kv + kvh;
        }
        const head_cache<float> c{kf.data(), vf.data(), hd, hd, scale};
        if (capped) capped_head(qs[0], c, first, pos0, hp.attn_softcap, scores.data(), outs[0]);
        else attend_group(qs, static_cast<int>(nq), c, pos0, scores.data(), outs);
        continue;
      }
      const int64_t head_at = kvh * hd * (types.k == tensor_type::f16 ? 2 : 4);
      const uint8_t *kc = kv_.k_row(seq, il, 0) + head_at, *vc = kv_.v_row(seq, il, 0) + head_at;
      const head_cache<uint16_t> c16{reinterpret_cast<const uint16_t*>(kc), reinterpret_cast<const uint16_t*>(vc), kv, hd, scale};
      const head_cache<float> c32{reinterpret_cast<const float*>(kc), reinterpret_cast<const float*>(vc), kv, hd, scale};
      if (capped && types.k == tensor_type::f16) capped_head(qs[0], c16, first, pos0, hp.attn_softcap, scores.data(), outs[0]);
      else if (capped) capped_head(qs[0], c32, first, pos0, hp.attn_softcap, scores.data(), outs[0]);
      else if (types.k == tensor_type::f16) attend_group(qs, static_cast<int>(nq), c16, pos0, scores.data(), outs);
      else attend_group(qs, static_cast<int>(nq), c32, pos0, scores.data(), outs);
    }
  });
}

// Tokens decoded alone (one of their sequence in the step): each token's keys cut into ranges across
// the workers, every head of the token in one pass over a range's rows (kernels::attend_keys), the
// ranges' sums then merged. At depth a token's cache is most of what its layer reads; read this way
// it streams at the rate of the weights.
template <class QOf>
void attention_block::attend_decoded(step_state& B, int64_t il, const workers& on, const std::vector<int64_t>& tokens, QOf q_of) {
  const hparams& hp = env_.hp();
  const int64_t dq = hp.n_embd_q(), kv = hp.n_embd_kv(), hd = hp.head_dim(), n_head = hp.n_head;
  const int64_t threads = on.pool->size();
  std::vector<int64_t>& ranges = B.key_ranges;  // (token, first key, end key), each token's in order
  ranges.clear();
  std::vector<int64_t>& first_range = B.first_range;
  first_range.clear();
  for (int64_t t : tokens) {
    first_range.push_back(static_cast<int64_t>(ranges.size()) / 3);
    const int64_t keys = B.positions[static_cast<size_t>(t)] + 1;
    // Ranges of at least 128 keys, at most one a worker (four a worker, for the balance: 0.86-0.80x
    // against 0.89-0.90x at depth 2,000), each starting on a block of 64 keys (no tile of sixteen
    // scored by two): a short cache is one range.
    const int64_t parts = std::clamp<int64_t>(keys / 128, 1, threads);
    auto cut = [&](int64_t r) { return r == parts ? keys : keys * r / parts / 64 * 64; };
    for (int64_t r = 0; r < parts; ++r) ranges.insert(ranges.end(), {t, cut(r), cut(r + 1)});
  }
  first_range.push_back(static_cast<int64_t>(ranges.size()) / 3);
  const int64_t n_ranges = first_range.back(), per_range = n_head * (hd + 2);
  if (static_cast<int64_t>(B.range_sums.size()) < n_ranges * per_range) B.range_sums.resize(static_cast<size_t>(n_ranges * per_range));
  auto sums_of = [&](int64_t r) {
    float* p = B.range_sums.data() + r * per_range;
    return key_range_sums{p, p + n_head, p + 2 * n_head};
  };
  const float scale = hp.attention_scale();
  const kv_types types = kv_.types();
  const bool plain = kv_.plain_rows(il);
  const int64_t scratch_floats = plain ? attend_keys_scratch(n_head, hd) : attend_keys_typed_scratch(n_head, hp.n_head_kv, hd);
  on.pool->parallel_for(n_ranges, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> scratch;
    if (static_cast<int64_t>(scratch.size()) < scratch_floats) scratch.resize(static_cast<size_t>(scratch_floats));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = ranges[static_cast<size_t>(3 * r)], k0 = ranges[static_cast<size_t>(3 * r + 1)], k1 = ranges[static_cast<size_t>(3 * r + 2)];
      const int64_t seq = B.seqs[static_cast<size_t>(t)];
      const uint8_t* vc = kv_.v_row(seq, il, 0);
      if (kv_.k_tiled(il)) {  // keys in tiles of sixteen positions
        attend_key_tiles(q_of(t), types, kv_.k_tiles(seq, il), vc, kv_.row_bytes(true), n_head, hp.n_head_kv, hd, k0, k1, scale, sums_of(r), scratch.data());
        continue;
      }
      const uint8_t* kc = kv_.k_row(seq, il, 0);
      if (!plain)  // each type's rows read by its reader
        attend_keys_typed(q_of(t), types, kc, vc, kv_.row_bytes(false), kv_.row_bytes(true), n_head, hp.n_head_kv, hd, k0, k1, scale, sums_of(r),
                          scratch.data());
      else if (types.k == tensor_type::f16)
        attend_keys(q_of(t), reinterpret_cast<const uint16_t*>(kc), reinterpret_cast<const uint16_t*>(vc), kv, n_head, hp.n_head_kv, hd, k0, k1, scale,
                    sums_of(r), scratch.data());
      else
        attend_keys(q_of(t), reinterpret_cast<const float*>(kc), reinterpret_cast<const float*>(vc), kv, n_head, hp.n_head_kv, hd, k0, k1, scale, sums_of(r),
                    scratch.data());
    }
  });
  thread_local std::vector<key_range_sums> parts;
  for (size_t i = 0; i < tokens.size(); ++i) {
    parts.clear();
    for (int64_t r = first_range[i]; r < first_range[i + 1]; ++r) parts.push_back(sums_of(r));
    merge_key_ranges(parts.data(), static_cast<int>(parts.size()), n_head, hd, B.attn.data() + tokens[i] * dq);
  }
}

void attention_block::tail(step_state& B, const layer_recipe& r, bool added) {
  const hparams& hp = env_.hp();
  const int64_t n = B.n, d = hp.n_embd;
  if (r.attn_out_norm.weight)  // gemma2: attention's output through its own norm first
    for (int64_t t = 0; t < n; ++t) apply_norm(r.norm, r.attn_out_norm, B.proj.data() + t * d, B.proj.data() + t * d, d, hp.norm_eps);
  // The FFN's normalized input and what its predictor reads. In a parallel layer both read the
  // layer's input (proj is added with the FFN's output); otherwise attention's output is added first.
  if (!r.parallel && !added) for (int64_t k = 0; k < n * d; ++k) B.x[static_cast<size_t>(k)] += B.proj[static_cast<size_t>(k)];
  std::vector<float>& in = r.ffn_shares_attn_input() ? B.xn : B.xn2;
  if (!r.ffn_shares_attn_input())
    for (int64_t t = 0; t < n; ++t) apply_norm(r.norm, r.ffn_norm, B.x.data() + t * d, B.xn2.data() + t * d, d, hp.norm_eps);
  if (r.ffn_input_q8_k) kernels::round_to_q8_k(in.data(), n * d);  // (attention has read xn already)
  B.ffn_in = in.data();
  B.pred_in = predictor_input(B, r);
}

}  // namespace hotcold
