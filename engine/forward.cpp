#include "engine/forward.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/matmul.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"

namespace hotcold {

using namespace kernels;

inference_context::inference_context(std::shared_ptr<const model> m, int64_t n_ctx, int n_threads, int64_t n_seq, tensor_type kv_type)
    : model_(std::move(m)), n_ctx_(n_ctx > 0 ? n_ctx : model_->hp().n_ctx_train), n_seq_(std::max<int64_t>(1, n_seq)), kv_type_(kv_type),
      kv_bytes_(kv_type == tensor_type::f16 ? 2 : 4), rope_factors_(model_->hp().rope_factors_for(n_ctx_)), pool_(n_threads), predictor_(*model_, pool_) {
  if (kv_type != tensor_type::f16 && kv_type != tensor_type::f32)
    throw std::invalid_argument(fmt::format("a KV cache of {} values: the cache holds f16 or f32", tensor_type_name(kv_type)));
  const hparams& hp = model_->hp();
  union_.reserve(static_cast<size_t>(hp.n_ff));
  int64_t max_rank = 0;
  for (const auto& l : model_->weights().layers)
    if (l.pred_fc1) max_rank = std::max(max_rank, l.pred_fc1.ne1);
  stats_.resize(static_cast<size_t>(hp.n_layer));
  cost_.resize(static_cast<size_t>(hp.n_layer));
  choices_.resize(static_cast<size_t>(hp.n_layer));
  computed_.assign(static_cast<size_t>(hp.n_layer), 0);
  read_.assign(static_cast<size_t>(hp.n_layer), 0);
  down_read_.assign(static_cast<size_t>(hp.n_layer), 0);
  experts_chosen_.assign(static_cast<size_t>(hp.n_layer), 0);
  experts_guessed_.assign(static_cast<size_t>(hp.n_layer), 0);
  expert_choices_.assign(static_cast<size_t>(hp.n_layer * hp.n_expert), 0);
  logits_.resize(static_cast<size_t>(hp.n_vocab));
  // Quantized activations for every product's input: n_embd, n_ff, or a predictor's rank (fc2).
  xq_.resize(static_cast<size_t>(std::max({hp.n_embd, hp.n_ff, max_rank}) / qk8_0 + 1));
  // Layer by layer: (n_seq, n_ctx, n_embd_kv) values each.
  const size_t layer_bytes = static_cast<size_t>(n_seq_ * n_ctx_ * hp.n_embd_kv() * kv_bytes_);
  k_cache_ = page_buffer(layer_bytes * static_cast<size_t>(hp.n_layer), "the KV cache");
  v_cache_ = page_buffer(layer_bytes * static_cast<size_t>(hp.n_layer), "the KV cache");
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    k_layers_.push_back(static_cast<uint8_t*>(k_cache_.data()) + layer_bytes * static_cast<size_t>(il));
    v_layers_.push_back(static_cast<uint8_t*>(v_cache_.data()) + layer_bytes * static_cast<size_t>(il));
  }
}

void inference_context::matmul(const workers& on, const tensor_view& w, const float* x, int64_t n, float* y) { hotcold::matmul(*on.pool, w, x, n, y, *on.xq); }

uint8_t* inference_context::k_at(int64_t seq, int64_t layer, int64_t pos) {
  return k_layers_[static_cast<size_t>(layer)] + (seq * n_ctx_ + pos) * model_->hp().n_embd_kv() * kv_bytes_;
}
uint8_t* inference_context::v_at(int64_t seq, int64_t layer, int64_t pos) {
  return v_layers_[static_cast<size_t>(layer)] + (seq * n_ctx_ + pos) * model_->hp().n_embd_kv() * kv_bytes_;
}

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

// One query at position pos against its head's cache: out (hd) = softmax(scale q.K) V; s: pos + 1
// floats of scratch.
template <typename T>
void attend_head(const float* q, const head_cache<T>& c, int64_t pos, float* s, float* out) {
  const T *kc = c.kc, *vc = c.vc;
  const int64_t kv = c.kv, hd = c.hd;
  const float scale = c.scale;
  if (attend_block_vectorized(hd)) return attend_one(q, kc, vc, kv, hd, pos + 1, scale, out, s);
  float max_s = -INFINITY;
  for (int64_t t = 0; t <= pos; ++t) {
    s[t] = dot_row(kc + t * kv, q, hd) * scale;
    max_s = std::max(max_s, s[t]);
  }
  double sum = 0;
  for (int64_t t = 0; t <= pos; ++t) sum += (s[t] = std::exp(s[t] - max_s));
  const float inv = static_cast<float>(1.0 / sum);
  std::fill(out, out + hd, 0.0f);
  for (int64_t t = 0; t <= pos; ++t) axpy_row(s[t] * inv, vc + t * kv, out, hd);
}

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

// A group of nq queries of head h (consecutive positions from pos0 of one sequence) against the
// head's cache slices kc, vc: one query, a block of up to 32 (the vector kernel) or up to four.
template <typename T>
void attend_group(const float* const* qs, int nq, const head_cache<T>& c, int64_t pos0, float* s, float* const* outs) {
  if (nq == 1) return attend_head(qs[0], c, pos0, s, outs[0]);
  if (attend_block_vectorized(c.hd)) return attend_block(qs, nq, c.kc, c.vc, c.kv, c.hd, pos0, c.scale, outs, s);
  attend_head4(qs, nq, c, pos0, s, outs);
}

}  // namespace

void inference_context::store_kv(uint8_t* to, const float* row, int64_t n) {
  if (kv_type_ == tensor_type::f16) fp32_to_fp16_row(row, reinterpret_cast<uint16_t*>(to), static_cast<size_t>(n));
  else std::memcpy(to, row, static_cast<size_t>(n) * sizeof(float));
}

void inference_context::set_mode(ffn_mode m) {
  if (m == ffn_mode::sparse && !model_->has_predictors())
    throw model_error(fmt::format("{}: --mode sparse needs a predictor in every layer (make one with `hotcold prepare`)", model_->path()));
  mode_ = m;
}


std::span<const float> inference_context::forward(token_id token, int64_t pos) {
  // One token is a batch of one (its own choice of neurons, never dense in place of the predictor).
  const int64_t seq = 0;
  check_step(std::span<const token_id>(&token, 1), std::span<const int64_t>(&seq, 1), std::span<const int64_t>(&pos, 1));
  run_batch(std::span<const token_id>(&token, 1), &seq, &pos, false, false, logits_.data());
  return logits_;
}

void inference_context::begin(step_state& B, int64_t n, const int64_t* seqs, const int64_t* positions) {
  const hparams& hp = model_->hp();
  const int64_t d = hp.n_embd, kv = hp.n_embd_kv(), n_ff = hp.n_ff;
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
  };
  for (auto* v : {&B.x, &B.xn, &B.xn2, &B.layer_in, &B.proj, &B.ffn_out}) grow(*v, n * d);
  grow(B.attn, n * hp.n_embd_q());
  grow(B.qkv, n * (hp.n_embd_q() + 2 * kv));
  for (auto* v : {&B.hidden, &B.truth}) grow(*v, n * n_ff);
  grow(B.acc, pool_.size() * n * d);
  B.n = n;
  B.seqs.assign(seqs, seqs + n);
  B.positions.assign(positions, positions + n);
  B.step = step_ = steps_++;
  if (experts_) experts_->begin_step(n);
}

void inference_context::embed(step_state& B, std::span<const token_id> tokens) {
  if (!model_->holds_globals()) throw std::logic_error("the embeddings: this process did not load them (load_options::globals)");
  const int64_t d = model_->hp().n_embd;
  for (size_t t = 0; t < tokens.size(); ++t) dequantize_row(model_->weights().token_embd, tokens[t], B.x.data() + static_cast<int64_t>(t) * d);
}

void inference_context::attention_block(step_state& B, int64_t il) {
  if (!model_->holds_layer(il))  // (its weights were never read: another process's stage runs it)
    throw std::logic_error(fmt::format("layer {}: this process did not load its weights (load_options::first_layer, last_layer)", il));
  // On the hot device when it holds the layer's attention (its weights and KV cache): the same
  // routine on the device's queue, over its copies.
  if (device_ && device_->attention(il)) {
    device_read_ += device_->attention_bytes(il);
    if (!device_->device().runs_host_work())  // a GPU: its kernels, the norms here
      return attention_block(B, il, model_->weights().layers[static_cast<size_t>(il)], cpu_workers(), &device_->layer(il));
    return device_->run([&] { attention_block(B, il, device_->layer(il), {&device_->pool(), &device_->xq()}); });
  }
  attention_block(B, il, model_->weights().layers[static_cast<size_t>(il)], cpu_workers());
}

const float* inference_context::predictor_input(const step_state& B, const layer_recipe& r) {
  if (r.predictor_reads_ffn_input) return B.ffn_in;
  return !r.parallel && r.predictor_reads_layer_input ? B.layer_in.data() : B.x.data();
}

void inference_context::attention_job(step_state& B, int64_t il, const layer_weights& g, const layer_recipe& r) {
  const hparams& hp = model_->hp();
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
  job.k_cache = k_layers_[static_cast<size_t>(il)], job.v_cache = v_layers_[static_cast<size_t>(il)];
  job.kv_type = kv_type_, job.ctx = n_ctx_, job.n_seq = n_seq_;
  job.out = B.proj.data();
  // The layer's predictor with it, where the device holds it and a sparse step will ask for its choice:
  // on the input the predictor reads (the layer's input, plus attention's output where that is added
  // before the FFN), kept for the predictor's call on that input.
  // (Not a predictor of the FFN's normalized input: that input is made after this job.)
  const bool predict_here = mode_ == ffn_mode::sparse && device_->predictor(il) && g.pred_fc1 && !r.predictor_reads_ffn_input;
  if (predict_here) {
    job.fc1 = g.pred_fc1.data, job.fc2 = g.pred_fc2.data, job.t_pred = g.pred_fc1.type;
    job.rank = g.pred_fc1.ne1, job.n_ff = hp.n_ff;
    job.threshold = hp.sparse_threshold[static_cast<size_t>(il)];
    job.pred_adds_out = !r.parallel && !r.predictor_reads_layer_input;
    job.layer_in = B.x.data();  // the residual stream is added to after this job
    if (static_cast<int64_t>(B.chosen.size()) < n * hp.n_ff) B.chosen.resize(static_cast<size_t>(n * hp.n_ff));
    job.chosen = B.chosen.data();
  }
  job.scratch = device_->scratch(), job.scratch_bytes = device_->scratch_bytes();
  device_->run([&] { device_->device().compute(job); });
  // Kept for the predictor's call on the input attention_tail gives it (none: an older one is dropped).
  device_->keep_choice(il, predict_here ? predictor_input(B, r) : nullptr, n, predict_here ? B.chosen.data() : nullptr, hp.n_ff);
}

void inference_context::attention_block(step_state& B, int64_t il, const layer_weights& l, const workers& on, const layer_weights* gpu) {
  const hparams& hp = model_->hp();
  const layer_recipe r = recipe_of(hp, l);
  const int64_t n = B.n, d = hp.n_embd;
  // What the predictor reads, when that is the layer's input and attention's output is added before
  // the FFN: a copy of it (parallel layers leave x as it is until the end of the layer).
  if (!r.parallel && r.predictor_reads_layer_input) std::copy(B.x.begin(), B.x.begin() + n * d, B.layer_in.begin());
  {
    trace_scope span(trace_, stage::attention, B.step, il, n);
    for (int64_t t = 0; t < n; ++t) apply_norm(r.norm, r.attn_norm, B.x.data() + t * d, B.xn.data() + t * d, d, hp.norm_eps);
    if (gpu) {
      attention_job(B, il, *gpu, r);
    } else {
      attention_products(B, il, l, r, on);
    }
  }
  attention_tail(B, r);
}

void inference_context::attention_products(step_state& B, int64_t il, const layer_weights& l, const layer_recipe& r, const workers& on) {
  const hparams& hp = model_->hp();
  const int64_t n = B.n, dq = hp.n_embd_q(), kv = hp.n_embd_kv(), hd = hp.head_dim();
  // q, k, v of token t: a fused product interleaves them per token; separate ones are three blocks.
  const int64_t qkv_row = dq + 2 * kv;
  auto q_of = [&](int64_t t) { return r.fused_qkv ? B.qkv.data() + t * qkv_row : B.qkv.data() + t * dq; };
  auto k_of = [&](int64_t t) { return r.fused_qkv ? B.qkv.data() + t * qkv_row + dq : B.qkv.data() + n * dq + t * kv; };
  auto v_of = [&](int64_t t) { return r.fused_qkv ? B.qkv.data() + t * qkv_row + dq + kv : B.qkv.data() + n * (dq + kv) + t * kv; };
  if (r.fused_qkv) {
    matmul(on, l.wqkv, B.xn.data(), n, B.qkv.data());
  } else {
    const tensor_view* ws[3] = {&l.wq, &l.wk, &l.wv};
    float* ys[3] = {q_of(0), k_of(0), v_of(0)};
    matmul_same_input(*on.pool, ws, B.xn.data(), n, ys, *on.xq);
  }
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
    store_kv(k_at(B.seqs[static_cast<size_t>(t)], il, B.positions[static_cast<size_t>(t)]), k_of(t), kv);
    store_kv(v_at(B.seqs[static_cast<size_t>(t)], il, B.positions[static_cast<size_t>(t)]), v_of(t), kv);
  }
  // Every (group, head) pair at once; causal: token t sees its sequence's cache up to its own
  // position. A group is tokens of one sequence at consecutive positions (a prompt chunk), which
  // read each cached key and value row once: up to 32 through the block kernel (scores as small
  // matrix products), else up to four; other tokens are groups of one.
  const bool blocks = attend_block_vectorized(hd);
  const int64_t group_max = blocks ? attend_block_max : 4;
  std::vector<int64_t>& groups = B.groups;  // first token of each group
  groups.clear();
  for (int64_t t = 0; t < n;) {
    groups.push_back(t);
    int64_t e = t + 1;
    while (e < n && e - t < group_max && B.seqs[static_cast<size_t>(e)] == B.seqs[static_cast<size_t>(t)] &&
           B.positions[static_cast<size_t>(e)] == B.positions[static_cast<size_t>(e - 1)] + 1)
      ++e;
    t = e;
  }
  groups.push_back(n);
  const int64_t n_groups = static_cast<int64_t>(groups.size()) - 1;
  on.pool->parallel_for(n_groups * hp.n_head, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scores;
    const int64_t need = std::max(4 * (n_ctx_ + 4), blocks ? attend_block_scratch(n_ctx_ + attend_block_max, hd) : 0);
    if (static_cast<int64_t>(scores.size()) < need) scores.resize(static_cast<size_t>(need));
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = i / hp.n_head, h = i % hp.n_head;
      const int64_t t0 = groups[static_cast<size_t>(g)], nq = groups[static_cast<size_t>(g) + 1] - t0;
      const int64_t seq = B.seqs[static_cast<size_t>(t0)], pos0 = B.positions[static_cast<size_t>(t0)];
      const float* qs[attend_block_max];
      float* outs[attend_block_max];
      for (int64_t j = 0; j < nq; ++j) qs[j] = q_of(t0 + j) + h * hd, outs[j] = B.attn.data() + (t0 + j) * dq + h * hd;
      const int64_t head_at = h / (hp.n_head / hp.n_head_kv) * hd * kv_bytes_;  // grouped-query: the head's KV head
      const uint8_t *kc = k_at(seq, il, 0) + head_at, *vc = v_at(seq, il, 0) + head_at;
      if (kv_type_ == tensor_type::f16)
        attend_group(qs, static_cast<int>(nq), head_cache<uint16_t>{reinterpret_cast<const uint16_t*>(kc), reinterpret_cast<const uint16_t*>(vc), kv, hd, scale},
                     pos0, scores.data(), outs);
      else
        attend_group(qs, static_cast<int>(nq), head_cache<float>{reinterpret_cast<const float*>(kc), reinterpret_cast<const float*>(vc), kv, hd, scale},
                     pos0, scores.data(), outs);
    }
  });
  matmul(on, l.wo, B.attn.data(), n, B.proj.data());
}

void inference_context::attention_tail(step_state& B, const layer_recipe& r) {
  const hparams& hp = model_->hp();
  const int64_t n = B.n, d = hp.n_embd;
  // The FFN's normalized input and what its predictor reads. In a parallel layer both read the
  // layer's input (proj is added with the FFN's output); otherwise attention's output is added first.
  if (!r.parallel) for (int64_t k = 0; k < n * d; ++k) B.x[static_cast<size_t>(k)] += B.proj[static_cast<size_t>(k)];
  std::vector<float>& in = r.ffn_shares_attn_input() ? B.xn : B.xn2;
  if (!r.ffn_shares_attn_input())
    for (int64_t t = 0; t < n; ++t) apply_norm(r.norm, r.ffn_norm, B.x.data() + t * d, B.xn2.data() + t * d, d, hp.norm_eps);
  if (r.ffn_input_q8_k) kernels::round_to_q8_k(in.data(), n * d);  // (attention has read xn already)
  B.ffn_in = in.data();
  B.pred_in = predictor_input(B, r);
}

void inference_context::add_ffn_output(step_state& B, int64_t layer, const float* out) {
  const hparams& hp = model_->hp();
  const int64_t nd = B.n * hp.n_embd;
  if (recipe_of(hp, model_->weights().layers[static_cast<size_t>(layer)]).parallel)
    for (int64_t k = 0; k < nd; ++k) B.x[static_cast<size_t>(k)] += B.proj[static_cast<size_t>(k)] + out[k];
  else
    for (int64_t k = 0; k < nd; ++k) B.x[static_cast<size_t>(k)] += out[k];
  if (hp.moe() && layer + 1 < hp.n_layer) guess_next_experts(B, layer);
}

void inference_context::head(step_state& B, std::span<const int64_t> rows, float* logits) {
  head_product(B, rows, logits);
  if (const tensor_view& b = model_->weights().output_b) {  // qwen2's and phi3's optional bias
    const float* bias = b.f32();
    const int64_t v = model_->hp().n_vocab;
    for (size_t k = 0; k < rows.size(); ++k)
      for (int64_t i = 0; i < v; ++i) logits[static_cast<int64_t>(k) * v + i] += bias[i];
  }
}

void inference_context::head_product(step_state& B, std::span<const int64_t> rows, float* logits) {
  const hparams& hp = model_->hp();
  const int64_t d = hp.n_embd, m = static_cast<int64_t>(rows.size());
  trace_scope span(trace_, stage::output, B.step, hp.n_layer, m);
  auto run = [&](const tensor_view& out, const tensor_view& norm, const tensor_view& norm_b, const workers& on) {
    // Row k of xn is token rows[k] normalized (rows ascending, so k <= rows[k]: nothing read is overwritten).
    model_weights w;
    w.output_norm = norm, w.output_norm_b = norm_b;
    for (int64_t k = 0; k < m; ++k)
      apply_norm(output_norm_kind(hp), output_norm_of(hp, w), B.x.data() + rows[static_cast<size_t>(k)] * d, B.xn.data() + k * d, d, hp.norm_eps);
    matmul(on, out, B.xn.data(), m, logits);
  };
  if (device_ && device_->output() && !device_->device().runs_host_work()) {
    // A GPU: the rows normalized here, the product by its kernel over its copy of the head.
    device_read_ += device_->output_bytes();
    const model_weights& w = model_->weights();
    for (int64_t k = 0; k < m; ++k)
      apply_norm(output_norm_kind(hp), output_norm_of(hp, w), B.x.data() + rows[static_cast<size_t>(k)] * d, B.xn.data() + k * d, d, hp.norm_eps);
    devices::matvec_job job;
    job.type = device_->output_weights().type;
    job.w = device_->output_weights().data;
    job.n = m, job.rows = hp.n_vocab, job.cols = d;
    job.x = B.xn.data(), job.y = logits;
    job.scratch = device_->scratch(), job.scratch_bytes = device_->scratch_bytes();
    return device_->run([&] { device_->device().compute(job); });
  }
  if (device_ && device_->output()) {
    device_read_ += device_->output_bytes();
    return device_->run([&] { run(device_->output_weights(), device_->output_norm(), device_->output_norm_b(), {&device_->pool(), &device_->xq()}); });
  }
  const model_weights& w = model_->weights();
  run(w.output, w.output_norm, w.output_norm_b, cpu_workers());
}

void inference_context::set_device_layers(std::shared_ptr<const device_layers> d) {
  const hparams& hp = model_->hp();
  if (steps_ > 0) throw std::logic_error("the device's layers are given before the first step (the KV cache moves there)");
  if (d) {
    const device_residency& r = d->residency();
    if (r.ctx != n_ctx_ || r.n_seq != n_seq_ || d->kv_type() != kv_type_)
      throw std::invalid_argument(fmt::format("the device's KV cache holds {} x {} positions of {}, this context {} x {} of {}", r.n_seq, r.ctx,
                                              tensor_type_name(d->kv_type()), n_seq_, n_ctx_, tensor_type_name(kv_type_)));
  }
  const size_t layer_bytes = static_cast<size_t>(n_seq_ * n_ctx_ * hp.n_embd_kv() * kv_bytes_);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const bool there = d && d->attention(il);
    k_layers_[static_cast<size_t>(il)] = there ? d->k_cache(il) : static_cast<uint8_t*>(k_cache_.data()) + layer_bytes * static_cast<size_t>(il);
    v_layers_[static_cast<size_t>(il)] = there ? d->v_cache(il) : static_cast<uint8_t*>(v_cache_.data()) + layer_bytes * static_cast<size_t>(il);
  }
  predictor_.set_device_layers(d);
  device_ = std::move(d);
}

void inference_context::set_device_experts(std::shared_ptr<device_experts> e) {
  if (e && (!device_ || &e->layers() != device_.get()))
    throw std::invalid_argument("a mixture's experts go on the device that holds the context's device layers (set_device_layers first)");
  if (e && !model_->hp().moe()) throw std::invalid_argument(fmt::format("{}: experts on a device for a model without experts", model_->path()));
  experts_ = std::move(e);
}

void inference_context::run_batch(std::span<const token_id> tokens, const int64_t* seqs, const int64_t* positions, bool all_logits, bool may_go_dense,
                                  float* logits) {
  step_state& B = b_;
  begin(B, static_cast<int64_t>(tokens.size()), seqs, positions);
  embed(B, tokens);
  for (int64_t il = 0; il < model_->hp().n_layer; ++il) {
    attention_block(B, il);
    ffn_block(B, il, B.ffn_in, B.pred_in, may_go_dense, B.ffn_out.data());
    add_ffn_output(B, il, B.ffn_out.data());
  }
  std::vector<int64_t>& rows = B.logit_rows;
  rows.clear();
  for (int64_t t = all_logits ? 0 : B.n - 1; t < B.n; ++t) rows.push_back(t);
  head(B, rows, logits);
}

void inference_context::check_step(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw std::invalid_argument("a step needs at least one token");
  if (seqs.size() != tokens.size() || positions.size() != tokens.size())
    throw std::invalid_argument(fmt::format("a step of {} tokens, {} sequence slots, {} positions", tokens.size(), seqs.size(), positions.size()));
  for (int64_t t = 0; t < n; ++t) {
    if (tokens[static_cast<size_t>(t)] < 0 || tokens[static_cast<size_t>(t)] >= model_->hp().n_vocab)
      throw std::out_of_range(fmt::format("token id {} is outside the vocabulary", tokens[static_cast<size_t>(t)]));
    check_slot(seqs[static_cast<size_t>(t)], positions[static_cast<size_t>(t)]);
  }
}

void inference_context::check_slot(int64_t seq, int64_t pos) const {
  if (seq < 0 || seq >= n_seq_) throw std::out_of_range(fmt::format("sequence slot {} is outside the {} this context holds", seq, n_seq_));
  if (pos < 0 || pos >= n_ctx_) throw std::out_of_range(fmt::format("position {} is outside the context of {}", pos, n_ctx_));
}

// ---- Stages, for the actor pipeline ------------------------------------------------------------

void inference_context::step_begin(step_state& s, std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions) {
  check_step(tokens, seqs, positions);
  if (static_cast<int64_t>(tokens.size()) > max_batch)
    throw std::invalid_argument(fmt::format("a step of {} tokens is more than {}", tokens.size(), max_batch));
  begin(s, static_cast<int64_t>(tokens.size()), seqs.data(), positions.data());
  embed(s, tokens);
}

void inference_context::step_begin_hidden(step_state& s, std::span<const float> x, std::span<const int64_t> seqs, std::span<const int64_t> positions) {
  const int64_t n = static_cast<int64_t>(seqs.size()), d = model_->hp().n_embd;
  if (n == 0) throw std::invalid_argument("a step needs at least one token");
  if (n > max_batch) throw std::invalid_argument(fmt::format("a step of {} tokens is more than {}", n, max_batch));
  if (positions.size() != seqs.size() || static_cast<int64_t>(x.size()) != n * d)
    throw std::invalid_argument(fmt::format("a step of {} sequence slots, {} positions and {} values (the residual stream needs {} a token)", seqs.size(),
                                            positions.size(), x.size(), d));
  for (int64_t t = 0; t < n; ++t) check_slot(seqs[static_cast<size_t>(t)], positions[static_cast<size_t>(t)]);
  begin(s, n, seqs.data(), positions.data());
  std::copy(x.begin(), x.end(), s.x.begin());
}

void inference_context::step_layers(step_state& s, int64_t first, int64_t last) {
  if (first < 0 || last > model_->hp().n_layer || first > last)
    throw std::out_of_range(fmt::format("layers {}..{} of a model of {}", first, last, model_->hp().n_layer));
  for (int64_t il = first; il < last; ++il) {
    attention_block(s, il);
    step_ffn(s, il);
  }
}

void inference_context::step_attention(step_state& s, int64_t layer) { attention_block(s, layer); }

inference_context::ffn_inputs inference_context::step_ffn_inputs(const step_state& s) const { return {s.ffn_in, s.pred_in, s.n, s.step}; }

void inference_context::step_ffn(step_state& s, int64_t layer) {
  ffn_block(s, layer, s.ffn_in, s.pred_in, false, s.ffn_out.data());
  add_ffn_output(s, layer, s.ffn_out.data());
}

void inference_context::step_ffn_done(step_state& s, int64_t layer, const float* out, int64_t computed, int64_t read, int64_t down_read) {
  computed_[static_cast<size_t>(layer)] += computed;
  read_[static_cast<size_t>(layer)] += read;
  down_read_[static_cast<size_t>(layer)] += down_read;
  add_ffn_output(s, layer, out);
}

std::span<const float> inference_context::step_logits(step_state& s, std::span<const int64_t> rows) {
  if (!model_->holds_globals()) throw std::logic_error("the head: this process did not load it (load_options::globals)");
  const int64_t n_vocab = model_->hp().n_vocab;
  for (size_t k = 0; k < rows.size(); ++k)
    if (rows[k] < 0 || rows[k] >= s.n || (k > 0 && rows[k] <= rows[k - 1]))
      throw std::out_of_range(fmt::format("logit rows must be ascending rows of the step's {} tokens", s.n));
  s.logits.resize(rows.size() * static_cast<size_t>(n_vocab));
  head(s, rows, s.logits.data());
  return s.logits;
}

std::span<const float> inference_context::forward_batch(std::span<const token_id> tokens, int64_t pos, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw std::invalid_argument("forward_batch: no tokens");
  if (pos < 0 || pos + n > n_ctx_)
    throw std::out_of_range(fmt::format("positions {}..{} are outside the context of {}", pos, pos + n - 1, n_ctx_));
  std::vector<int64_t> seqs(static_cast<size_t>(n), 0), positions(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) positions[static_cast<size_t>(t)] = pos + t;
  return run_batches(tokens, seqs, positions, all_logits, true);
}

std::span<const float> inference_context::forward_step(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions) {
  check_step(tokens, seqs, positions);
  return run_batches(tokens, seqs, positions, true, false);
}

std::span<const float> inference_context::run_batches(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions,
                                                      bool all_logits, bool may_go_dense) {
  const hparams& hp = model_->hp();
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (token_id t : tokens)
    if (t < 0 || t >= hp.n_vocab) throw std::out_of_range(fmt::format("token id {} is outside the vocabulary", t));
  if (all_logits) batch_logits_.resize(static_cast<size_t>(n * hp.n_vocab));
  for (int64_t s = 0; s < n; s += max_batch) {
    const int64_t m = std::min(max_batch, n - s);
    float* out = all_logits ? batch_logits_.data() + s * hp.n_vocab : logits_.data();
    run_batch(tokens.subspan(static_cast<size_t>(s), static_cast<size_t>(m)), seqs.data() + s, positions.data() + s, all_logits, may_go_dense, out);
  }
  if (all_logits) return std::span<const float>(batch_logits_.data(), static_cast<size_t>(n * hp.n_vocab));
  return logits_;
}

}  // namespace hotcold
