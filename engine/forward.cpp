#include "engine/forward.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/layer_ops.hpp"
#include "engine/matmul.hpp"
#include "engine/ram_tier.hpp"

namespace hotcold {

void ffn_totals::add(int64_t layer, const ffn_step_counts& c) {
  const auto l = static_cast<size_t>(layer);
  computed[l] += c.computed, rows[l] += c.rows, down_rows[l] += c.down_rows;
  experts_chosen[l] += c.experts_chosen, experts_guessed[l] += c.experts_guessed;
  const size_t ne = c.expert_choices.size();
  for (size_t e = 0; e < ne; ++e) expert_choices[l * ne + e] += c.expert_choices[e];
  expert_device_bytes += c.expert_device_bytes;
}

namespace {

block_env make_env(std::shared_ptr<const model> m, thread_pool& pool, std::vector<kernels::block_q8_0>& xq) {
  block_env env;
  env.m = std::move(m);
  env.cpu = {&pool, &xq};
  return env;
}

}  // namespace

inference_context::inference_context(std::shared_ptr<const model> m, int64_t n_ctx, int n_threads, int64_t n_seq, kv_types kv)
    : pool_(n_threads), env_(make_env(std::move(m), pool_, xq_)),
      kv_(env_.hp(), n_ctx > 0 ? n_ctx : env_.hp().n_ctx_train, std::max<int64_t>(1, n_seq), kv),
      attention_(env_, kv_, env_.hp().rope_factors_for(kv_.n_ctx())), moe_(env_), ffn_(env_, moe_) {
  const hparams& hp = env_.hp();
  const auto n_layer = static_cast<size_t>(hp.n_layer);
  for (auto* v : {&totals_.computed, &totals_.rows, &totals_.down_rows, &totals_.experts_chosen, &totals_.experts_guessed}) v->assign(n_layer, 0);
  totals_.expert_choices.assign(n_layer * static_cast<size_t>(hp.n_expert), 0);
  logits_.resize(static_cast<size_t>(hp.n_vocab));
  // Quantized activations for every product's input: n_embd, n_ff, or a predictor's rank (fc2).
  int64_t max_rank = 0;
  for (const auto& l : env_.m->weights().layers)
    if (l.pred_fc1) max_rank = std::max(max_rank, l.pred_fc1.ne1);
  xq_.resize(static_cast<size_t>(std::max({hp.n_embd, hp.n_ff, max_rank}) / kernels::qk8_0 + 1));
  std::vector<uint8_t> held(n_layer);
  for (size_t il = 0; il < n_layer; ++il) held[il] = env_.m->holds_layer(static_cast<int64_t>(il)) ? 1 : 0;
  kv_.hold_layers(std::move(held));
}

void inference_context::set_mode(ffn_mode m) {
  if (m == ffn_mode::sparse && !env_.m->has_predictors())
    throw model_error(fmt::format("{}: --mode sparse needs a predictor in every layer (make one with `hotcold prepare`)", env_.m->path()));
  env_.mode = m;
}

void inference_context::set_device_layers(std::shared_ptr<const device_layers> d) {
  if (steps_ > 0) throw std::logic_error("the device's layers are given before the first step (the KV cache moves there)");
  kv_.place(d.get());
  ffn_.set_device_layers(d);
  env_.device = std::move(d);
}

void inference_context::set_device_experts(std::shared_ptr<device_experts> e) {
  if (e && (!env_.device || &e->layers() != env_.device.get()))
    throw std::invalid_argument("a mixture's experts go on the device that holds the context's device layers (set_device_layers first)");
  if (e && !env_.hp().moe()) throw std::invalid_argument(fmt::format("{}: experts on a device for a model without experts", env_.m->path()));
  moe_.set_experts(std::move(e));
}

// ---- The layer loop -------------------------------------------------------------------------------

void inference_context::begin(step_state& B, int64_t n, const int64_t* seqs, const int64_t* positions) {
  const hparams& hp = env_.hp();
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
  B.pending = nullptr, B.pending_done = nullptr, B.next_takes_pending = false;
  B.seqs.assign(seqs, seqs + n);
  B.positions.assign(positions, positions + n);
  B.step = steps_++;
  moe_.begin_step(n);
}

void inference_context::embed(step_state& B, std::span<const token_id> tokens) {
  if (!env_.m->holds_globals()) throw std::logic_error("the embeddings: this process did not load them (load_options::globals)");
  const int64_t d = env_.hp().n_embd;
  if (env_.disk) env_.disk->token_rows(tokens);  // (the embedding table left in the file: these rows read)
  for (size_t t = 0; t < tokens.size(); ++t) dequantize_row(env_.m->weights().token_embd, tokens[t], B.x.data() + static_cast<int64_t>(t) * d);
  if (env_.hp().embd_scaled) {  // Gemma 2: x sqrt(n_embd), as llama.cpp scales them (a float's square root)
    const float scale = std::sqrt(static_cast<float>(d));
    for (int64_t k = 0; k < static_cast<int64_t>(tokens.size()) * d; ++k) B.x[static_cast<size_t>(k)] *= scale;
  }
}

ffn_step_counts inference_context::ffn(step_state& B, int64_t layer, bool may_go_dense) {
  // A mixture's hot experts may leave their sum on the GPU when the next layer's attention job adds it.
  B.next_takes_pending = env_.hp().moe() && layer + 1 < env_.hp().n_layer && attention_.takes_pending(layer + 1);
  ffn_step_counts c = ffn_.run(B, layer, B.ffn_in, B.pred_in, may_go_dense, B.ffn_out.data());
  add_ffn_output(B, layer, B.ffn_out.data(), c);
  totals_.add(layer, c);
  return c;
}

bool inference_context::whole_layer_job(int64_t layer) const { return ffn_.whole_on_gpu(layer) && attention_.takes_ffn(layer); }

void inference_context::run_layer(step_state& B, int64_t il, bool may_go_dense) {
  if (!step_whole_layer(B, il)) {
    ffn_.read_ahead_at_input(B, il);  // (the disk tier's: read while attention computes)
    attention_.run(B, il);
    ffn(B, il, may_go_dense);
  }
}

std::optional<ffn_step_counts> inference_context::step_whole_layer(step_state& B, int64_t il) {
  if (!whole_layer_job(il)) return std::nullopt;
  if (!env_.m->holds_layer(il)) throw std::logic_error(fmt::format("layer {}: this process did not load its weights (load_options::first_layer, last_layer)", il));
  env_.device_read += env_.device->ffn_bytes(il);
  attention_.run_with_ffn(B, il, ffn_.gpu_part(B, il));
  ffn_step_counts c = ffn_.gpu_part_done(B, il);
  totals_.add(il, c);
  return c;
}

void inference_context::add_ffn_output(step_state& B, int64_t layer, const float* out, ffn_step_counts& c) {
  const hparams& hp = env_.hp();
  const int64_t d = hp.n_embd, nd = B.n * d;
  const layer_recipe r = recipe_of(hp, env_.m->weights().layers[static_cast<size_t>(layer)]);
  if (r.ffn_out_norm.weight) {  // gemma2: the FFN's output through its own norm first
    if (static_cast<int64_t>(B.ffn_normed.size()) < nd) B.ffn_normed.resize(static_cast<size_t>(nd));
    for (int64_t t = 0; t < B.n; ++t) apply_norm(r.norm, r.ffn_out_norm, out + t * d, B.ffn_normed.data() + t * d, d, hp.norm_eps);
    out = B.ffn_normed.data();
  }
  if (r.parallel)
    for (int64_t k = 0; k < nd; ++k) B.x[static_cast<size_t>(k)] += B.proj[static_cast<size_t>(k)] + out[k];
  else
    for (int64_t k = 0; k < nd; ++k) B.x[static_cast<size_t>(k)] += out[k];
  // (Not where the hot experts' sum is still on the device: the stream is partial until the next layer's
  // attention adds it; the experts then go without a guess, moe_block::run.)
  if (hp.moe() && layer + 1 < hp.n_layer && !B.pending) c.next_layer_uploads += moe_.guess_next(B, layer);
}

void inference_context::normalized_rows(step_state& B, std::span<const int64_t> rows) {
  // Row k of xn is token rows[k] normalized (rows ascending, so k <= rows[k]: nothing read is
  // overwritten); by the device's copy of the final norm where a device that runs host work holds it.
  const hparams& hp = env_.hp();
  const int64_t d = hp.n_embd;
  model_weights w;
  const auto& dev = env_.device;
  const bool there = dev && dev->output() && dev->device().runs_host_work();
  w.output_norm = there ? dev->output_norm() : env_.m->weights().output_norm;
  w.output_norm_b = there ? dev->output_norm_b() : env_.m->weights().output_norm_b;
  for (size_t k = 0; k < rows.size(); ++k)
    apply_norm(output_norm_kind(hp), output_norm_of(hp, w), B.x.data() + rows[k] * d, B.xn.data() + static_cast<int64_t>(k) * d, d, hp.norm_eps);
}

void inference_context::head(step_state& B, std::span<const int64_t> rows, float* logits) {
  const hparams& hp = env_.hp();
  const int64_t m = static_cast<int64_t>(rows.size());
  {
    trace_scope span(env_.trace, step_part::output, B.step, hp.n_layer, m);
    const auto& dev = env_.device;
    if (dev && dev->output()) env_.device_read += dev->output_bytes();
    if (dev && dev->output() && !dev->device().runs_host_work()) {  // a GPU: its kernel over its copy of the head
      normalized_rows(B, rows);
      devices::matvec_job job;
      job.type = dev->output_weights().type, job.w = dev->output_weights().data;
      job.n = m, job.rows = hp.n_vocab, job.cols = hp.n_embd;
      job.x = B.xn.data(), job.y = logits;
      job.scratch = dev->scratch(), job.scratch_bytes = dev->scratch_bytes();
      dev->run([&] { dev->device().compute(job); });
    } else if (dev && dev->output()) {  // a device that runs host work: the same routine on its queue
      dev->run([&] {
        normalized_rows(B, rows);
        const workers on = env_.on_device();
        matmul(*on.pool, dev->output_weights(), B.xn.data(), m, logits, *on.xq);
      });
    } else {
      normalized_rows(B, rows);
      matmul(pool_, env_.m->weights().output, B.xn.data(), m, logits, xq_);
    }
  }
  if (const tensor_view& b = env_.m->weights().output_b) {  // qwen2's and phi3's optional bias
    const float* bias = b.f32();
    for (int64_t k = 0; k < m; ++k)
      for (int64_t i = 0; i < hp.n_vocab; ++i) logits[k * hp.n_vocab + i] += bias[i];
  }
  if (hp.final_softcap > 0)  // Gemma 2: cap tanh(logit / cap), in llama.cpp's order of operations
    for (int64_t k = 0; k < m * hp.n_vocab; ++k) logits[k] = std::tanh(logits[k] * (1.0f / hp.final_softcap)) * hp.final_softcap;
}

void inference_context::run_batch(std::span<const token_id> tokens, const int64_t* seqs, const int64_t* positions, bool all_logits, bool may_go_dense,
                                  float* logits) {
  step_state& B = b_;
  begin(B, static_cast<int64_t>(tokens.size()), seqs, positions);
  embed(B, tokens);
  for (int64_t il = 0; il < env_.hp().n_layer; ++il) run_layer(B, il, may_go_dense);
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
    if (tokens[static_cast<size_t>(t)] < 0 || tokens[static_cast<size_t>(t)] >= env_.hp().n_vocab)
      throw std::out_of_range(fmt::format("token id {} is outside the vocabulary", tokens[static_cast<size_t>(t)]));
    kv_.check_slot(seqs[static_cast<size_t>(t)], positions[static_cast<size_t>(t)]);
  }
}

// ---- Whole steps ------------------------------------------------------------------------------------

void inference_context::apply(std::span<const cache_op> ops) {
  const hparams& hp = env_.hp();
  for (const cache_op& op : ops) {
    if (op.what != cache_op::kind::shift) {
      kv_.apply(op);
      continue;
    }
    // Keys were stored turned by RoPE at their positions; turned back by the positions they move
    // down (the rotation alone: the angles compose, and Phi-3's factor scaled them once already).
    const rope_angles back(hp, -op.count, hp.rope_factors_for(kv_.n_ctx()), false);
    kv_.shift(op, [&](float* key_row) { rope(key_row, hp.n_head_kv, hp, back); });
  }
}

std::span<const float> inference_context::forward(token_id token, int64_t pos) {
  // One token is a batch of one (its own choice of neurons, never dense in place of the predictor).
  const int64_t seq = 0;
  check_step(std::span<const token_id>(&token, 1), std::span<const int64_t>(&seq, 1), std::span<const int64_t>(&pos, 1));
  run_batch(std::span<const token_id>(&token, 1), &seq, &pos, false, false, logits_.data());
  return logits_;
}

std::span<const float> inference_context::forward_batch(std::span<const token_id> tokens, int64_t pos, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw std::invalid_argument("forward_batch: no tokens");
  if (pos < 0 || pos + n > n_ctx()) throw std::out_of_range(fmt::format("positions {}..{} are outside the context of {}", pos, pos + n - 1, n_ctx()));
  std::vector<int64_t> seqs(static_cast<size_t>(n), 0), positions(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) positions[static_cast<size_t>(t)] = pos + t;
  return run_batches(tokens, seqs, positions, all_logits, true);
}

std::vector<float> inference_context::hidden_states(std::span<const token_id> tokens) {
  const hparams& hp = env_.hp();
  const int64_t n = static_cast<int64_t>(tokens.size()), d = hp.n_embd;
  if (n == 0) throw std::invalid_argument("hidden_states: no tokens");
  if (n > n_ctx()) throw std::out_of_range(fmt::format("{} tokens are more than the context of {}", n, n_ctx()));
  for (token_id t : tokens)
    if (t < 0 || t >= hp.n_vocab) throw std::out_of_range(fmt::format("token id {} is outside the vocabulary", t));
  std::vector<float> out(static_cast<size_t>(n * d));
  std::vector<int64_t> seqs(static_cast<size_t>(max_batch), 0), positions(static_cast<size_t>(max_batch)), rows;
  for (int64_t s = 0; s < n; s += batch_) {
    const int64_t m = std::min(batch_, n - s);
    for (int64_t t = 0; t < m; ++t) positions[static_cast<size_t>(t)] = s + t;
    step_state& B = b_;
    begin(B, m, seqs.data(), positions.data());
    embed(B, tokens.subspan(static_cast<size_t>(s), static_cast<size_t>(m)));
    for (int64_t il = 0; il < hp.n_layer; ++il) run_layer(B, il, true);
    rows.resize(static_cast<size_t>(m));
    for (int64_t t = 0; t < m; ++t) rows[static_cast<size_t>(t)] = t;
    normalized_rows(B, rows);
    std::copy(B.xn.begin(), B.xn.begin() + m * d, out.begin() + s * d);
  }
  return out;
}

std::span<const float> inference_context::forward_step(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions) {
  check_step(tokens, seqs, positions);
  return run_batches(tokens, seqs, positions, true, false);
}

std::span<const float> inference_context::run_batches(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions,
                                                      bool all_logits, bool may_go_dense) {
  const hparams& hp = env_.hp();
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (token_id t : tokens)
    if (t < 0 || t >= hp.n_vocab) throw std::out_of_range(fmt::format("token id {} is outside the vocabulary", t));
  if (all_logits) batch_logits_.resize(static_cast<size_t>(n * hp.n_vocab));
  for (int64_t s = 0; s < n; s += batch_) {
    const int64_t m = std::min(batch_, n - s);
    float* out = all_logits ? batch_logits_.data() + s * hp.n_vocab : logits_.data();
    run_batch(tokens.subspan(static_cast<size_t>(s), static_cast<size_t>(m)), seqs.data() + s, positions.data() + s, all_logits, may_go_dense, out);
  }
  if (all_logits) return std::span<const float>(batch_logits_.data(), static_cast<size_t>(n * hp.n_vocab));
  return logits_;
}

// ---- A step in parts, for the actor pipeline ------------------------------------------------------------

void inference_context::step_begin(step_state& s, std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions) {
  check_step(tokens, seqs, positions);
  if (static_cast<int64_t>(tokens.size()) > max_batch) throw std::invalid_argument(fmt::format("a step of {} tokens is more than {}", tokens.size(), max_batch));
  begin(s, static_cast<int64_t>(tokens.size()), seqs.data(), positions.data());
  embed(s, tokens);
}

void inference_context::step_begin_hidden(step_state& s, std::span<const float> x, std::span<const int64_t> seqs, std::span<const int64_t> positions) {
  const int64_t n = static_cast<int64_t>(seqs.size()), d = env_.hp().n_embd;
  if (n == 0) throw std::invalid_argument("a step needs at least one token");
  if (n > max_batch) throw std::invalid_argument(fmt::format("a step of {} tokens is more than {}", n, max_batch));
  if (positions.size() != seqs.size() || static_cast<int64_t>(x.size()) != n * d)
    throw std::invalid_argument(fmt::format("a step of {} sequence slots, {} positions and {} values (the residual stream needs {} a token)", seqs.size(),
                                            positions.size(), x.size(), d));
  for (int64_t t = 0; t < n; ++t) kv_.check_slot(seqs[static_cast<size_t>(t)], positions[static_cast<size_t>(t)]);
  begin(s, n, seqs.data(), positions.data());
  std::copy(x.begin(), x.end(), s.x.begin());
}

void inference_context::step_layers(step_state& s, int64_t first, int64_t last) {
  if (first < 0 || last > env_.hp().n_layer || first > last)
    throw std::out_of_range(fmt::format("layers {}..{} of a model of {}", first, last, env_.hp().n_layer));
  for (int64_t il = first; il < last; ++il) run_layer(s, il, false);
}

void inference_context::step_attention(step_state& s, int64_t layer) { attention_.run(s, layer); }

inference_context::ffn_inputs inference_context::step_ffn_inputs(const step_state& s) const { return {s.ffn_in, s.pred_in, s.n, s.step}; }

ffn_step_counts inference_context::step_ffn(step_state& s, int64_t layer) { return ffn(s, layer, false); }

void inference_context::step_ffn_done(step_state& s, int64_t layer, const float* out, const ffn_step_counts& c) {
  ffn_step_counts joined = c;
  add_ffn_output(s, layer, out, joined);
  totals_.add(layer, joined);
}

std::span<const float> inference_context::step_logits(step_state& s, std::span<const int64_t> rows) {
  if (!env_.m->holds_globals()) throw std::logic_error("the head: this process did not load it (load_options::globals)");
  for (size_t k = 0; k < rows.size(); ++k)
    if (rows[k] < 0 || rows[k] >= s.n || (k > 0 && rows[k] <= rows[k - 1]))
      throw std::out_of_range(fmt::format("logit rows must be ascending rows of the step's {} tokens", s.n));
  s.logits.resize(rows.size() * static_cast<size_t>(env_.hp().n_vocab));
  head(s, rows, s.logits.data());
  return s.logits;
}

}  // namespace hotcold
