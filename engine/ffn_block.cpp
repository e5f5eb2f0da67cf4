// The FFN block (engine/ffn_block.hpp): which neurons each token computes and how, with its counts,
// stats and observers.
#include "engine/ffn_block.hpp"

#include <algorithm>
#include <bit>
#include <optional>

#include "engine/layer_ops.hpp"
#include "engine/matmul.hpp"
#include "engine/ram_tier.hpp"
#include "engine/row_groups.hpp"
#include "engine/trace.hpp"

namespace hotcold {

ffn_block::ffn_block(block_env& env, moe_block& moe) : env_(env), moe_(moe), predictor_(*env.m, *env.cpu.pool) {
  const hparams& hp = env.hp();
  union_.reserve(static_cast<size_t>(hp.n_ff));
  stats_.resize(static_cast<size_t>(hp.n_layer));
  cost_.resize(static_cast<size_t>(hp.n_layer));
  choices_.resize(static_cast<size_t>(hp.n_layer));
}

void ffn_block::every_neuron(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, float* g, float* h, bool margins) {
  const hparams& hp = env_.hp();
  const float t = hp.act_threshold_of(layer);
  const int64_t n = B.n, n_ff = hp.n_ff;
  if (hp.gated_ffn) {  // gate and up in one pass (one split across the threads, the input quantized once)
    const tensor_view* ws[2] = {&l.ffn_gate, &l.ffn_up};
    float* ys[2] = {g, h};
    matmul_same_input(*on.pool, ws, in, n, ys, *on.xq);
  } else {
    matmul(*on.pool, l.ffn_up, in, n, h, *on.xq);
  }
  if (margins) {
    // A neuron's firing margin: positive exactly when it fires (firing_margin).
    if (static_cast<int64_t>(B.margin.size()) < n * n_ff) B.margin.resize(static_cast<size_t>(n * n_ff));
    for (int64_t k = 0; k < n * n_ff; ++k) B.margin[static_cast<size_t>(k)] = firing_margin(hp, t, hp.gated_ffn ? g[k] : 0.0f, h[k]);
    const float* pre = hp.gated_ffn ? g : h;
    B.preact.assign(pre, pre + n * n_ff);
  }
  hidden_values(hp, t, g, h, h, n * n_ff);
}

ffn_step_counts ffn_block::run(step_state& B, int64_t layer, const float* in, const float* pred_in, bool may_go_dense, float* out) {
  // A dense layer the hot device holds whole: its FFN on the device's queue, over its copies.
  const auto& dev = env_.device;
  if (dev && dev->ffn(layer)) {
    env_.device_read += dev->ffn_bytes(layer);
    ffn_step_counts c;
    if (!dev->device().runs_host_work()) c = gpu_job(B, layer, in, pred_in, out);
    else dev->run([&] { c = run(B, layer, dev->layer(layer), env_.on_device(), in, pred_in, may_go_dense, out); });
    c.device_bytes = dev->ffn_bytes(layer);
    return c;
  }
  return run(B, layer, env_.m->weights().layers[static_cast<size_t>(layer)], env_.cpu, in, pred_in, may_go_dense, out);
}

bool ffn_block::whole_on_gpu(int64_t layer) const {
  const auto& dev = env_.device;
  return dev && dev->ffn(layer) && !dev->device().runs_host_work() && !env_.watch;
}

devices::dense_ffn_job ffn_block::gpu_part(step_state& B, int64_t layer) const {
  const hparams& hp = env_.hp();
  const layer_weights& g = env_.device->layer(layer);
  devices::dense_ffn_job job;
  job.gate = g.ffn_gate ? g.ffn_gate.data : nullptr, job.up = g.ffn_up.data, job.down = g.ffn_down.data;
  job.t_gate = g.ffn_gate ? g.ffn_gate.type : g.ffn_up.type, job.t_up = g.ffn_up.type, job.t_down = g.ffn_down.type;
  job.gated = hp.gated_ffn;
  job.act = hp.act;
  job.act_threshold = hp.act_threshold_of(layer);
  job.n = B.n, job.d = hp.n_embd, job.n_ff = hp.n_ff;
  job.hidden = stats_on_ || env_.watch ? B.hidden.data() : nullptr;  // each neuron's value, where something reads it
  return job;
}

ffn_step_counts ffn_block::gpu_part_done(step_state& B, int64_t layer) {
  const int64_t n = B.n, n_ff = env_.hp().n_ff;
  // Every neuron computed, as the dense path counts it.
  ++choices_[static_cast<size_t>(layer)].dense;
  if (stats_on_) {
    auto& st = stats_[static_cast<size_t>(layer)];
    for (int64_t t = 0; t < n; ++t) {
      const float* h = B.hidden.data() + t * n_ff;
      st.tokens += 1, st.neurons += n_ff, st.computed += n_ff;
      for (int64_t i = 0; i < n_ff; ++i) st.truly_active += h[i] != 0.0f, st.active_computed += h[i] != 0.0f;
    }
  }
  ffn_step_counts c;
  c.computed = n * n_ff;
  c.rows = c.down_rows = n_ff;
  c.device_bytes = env_.device->ffn_bytes(layer);
  return c;
}

ffn_step_counts ffn_block::gpu_job(step_state& B, int64_t layer, const float* in, const float* pred_in, float* out) {
  const device_layers& dev = *env_.device;
  {
    trace_scope span(env_.trace, step_part::ffn, B.step, layer, B.n);
    devices::dense_ffn_job job = gpu_part(B, layer);
    job.x = in, job.out = out;
    job.scratch = dev.scratch(), job.scratch_bytes = dev.scratch_bytes();
    dev.run([&] { dev.device().compute(job); });
  }
  observe(B, layer, pred_in, false);
  return gpu_part_done(B, layer);
}

void ffn_block::observe(const step_state& B, int64_t layer, const float* pred_in, bool margins) const {
  if (!env_.watch) return;
  const int64_t n_ff = env_.hp().n_ff, d = env_.hp().n_embd;
  for (int64_t t = 0; t < B.n; ++t) {
    env_.watch(observed::ffn_pred_in, layer, std::span<const float>(pred_in + t * d, static_cast<size_t>(d)));
    if (margins) {
      env_.watch(observed::ffn_margin, layer, std::span<const float>(B.margin.data() + t * n_ff, static_cast<size_t>(n_ff)));
      env_.watch(observed::ffn_preact, layer, std::span<const float>(B.preact.data() + t * n_ff, static_cast<size_t>(n_ff)));
    }
    env_.watch(observed::ffn_act, layer, std::span<const float>(B.hidden.data() + t * n_ff, static_cast<size_t>(n_ff)));
  }
}

ffn_block::plan ffn_block::plan_for(int64_t layer, const layer_weights& l, int64_t n, bool may_go_dense) {
  const hparams& hp = env_.hp();
  auto& cost = cost_[static_cast<size_t>(layer)];
  plan p;
  p.cost_class = std::min(batch_cost::classes - 1, static_cast<int>(std::bit_width(static_cast<uint64_t>(n))) - 1);
  // Sparse only where it pays: the predictor's bytes plus the union's share of the FFN rows against
  // all the rows, with the union share this layer measured at this batch size (re-probed every 16
  // dense batches). Bytes, not seconds: the choice, and so the result, is the same on every run.
  p.sparse = env_.mode == ffn_mode::sparse && l.pred_fc1;
  if (p.sparse && may_go_dense && !stats_on_) {
    const double u = cost.union_share[p.cost_class];
    const double rows = static_cast<double>(l.ffn_gate.bytes() + l.ffn_up.bytes() + l.ffn_down_t.bytes() + l.ffn_down.bytes());
    const double predictor = static_cast<double>(l.pred_fc1.bytes() + l.pred_fc2.bytes());
    if (u >= 0 && predictor + u * rows >= rows && ++cost.dense_since_probe[p.cost_class] % 16 != 0) p.sparse = false;
  }
  p.oracle = env_.mode == ffn_mode::oracle;
  p.choose = p.sparse || p.oracle;  // each token computes a chosen set, not every neuron
  // Every neuron's values first where the choice needs them (the oracle's) or the stats do (the
  // truth a sparse choice is measured against); the margins go to an observer whenever every neuron
  // is computed. (Without a sparse activation — a SiLU file being calibrated — the margin is |act| itself.)
  p.all_first = p.oracle || (p.sparse && stats_on_);
  p.margins = env_.watch && (p.all_first || !p.choose);
  // Every neuron as matrix products: for eight tokens or more; for one token of a dense file (a
  // matrix-vector product streams the rows: ~10% faster a dense F16 token than neuron by neuron; a
  // sparse file's dense mode keeps the sparse pieces, so that the neurons that fire meet the same
  // float sums in both modes); interleaved gate and up rows (dense Q4_0 files) are readable only so,
  // and so are the margins. A thresholded layer of quantized rows too (its exact variant): their
  // integer products sum each block exactly, and the matrix kernels read them at about twice the
  // bytes per second that scattered rows go (Q4_0 ~1B SiLU file at S = 0.5: 46 tokens/s gate rows
  // first and up rows of the kept neurons, 81 for the dense file).
  const bool down_t = static_cast<bool>(l.ffn_down_t);
  const bool interleaved = l.ffn_gate.interleaved16 || l.ffn_up.interleaved16;
  const bool quantized_thresholded = hp.act_threshold_of(layer) > 0.0f && traits(l.ffn_up.type).quantized;
  p.as_matrices = !p.choose && (p.margins || (!(executor_ && down_t) && ((n == 1 && (!down_t || quantized_thresholded)) || n >= 8 || interleaved)));
  return p;
}

void ffn_block::choose(step_state& B, int64_t layer, const float* pred_in, const plan& p) {
  const int64_t n = B.n, n_ff = env_.hp().n_ff;
  std::optional<trace_scope> predict_span;
  if (p.sparse) predict_span.emplace(env_.trace, step_part::predict, B.step, layer, n);
  std::vector<int32_t>& chosen_union = union_;
  chosen_union.clear();
  if (static_cast<int64_t>(B.chosen.size()) < n * n_ff) B.chosen.resize(static_cast<size_t>(n * n_ff));
  if (p.sparse) {
    predictor_.predict(layer, pred_in, n, B.chosen.data(), chosen_union);
    if (env_.trace) env_.trace->record_active(B.step, layer, n, n_ff, B.chosen.data());
  } else if (p.oracle) {  // the neurons that fired, for any token
    for (int64_t k = 0; k < n * n_ff; ++k) B.chosen[static_cast<size_t>(k)] = B.truth[static_cast<size_t>(k)] != 0.0f;
    for (int64_t i = 0; i < n_ff; ++i)
      for (int64_t t = 0; t < n; ++t)
        if (B.chosen[static_cast<size_t>(t * n_ff + i)]) {
          chosen_union.push_back(static_cast<int32_t>(i));
          break;
        }
  } else {
    std::fill(B.chosen.begin(), B.chosen.begin() + n * n_ff, uint8_t{1});
    for (int64_t i = 0; i < n_ff; ++i) chosen_union.push_back(static_cast<int32_t>(i));
  }
}

void ffn_block::as_matrices(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, bool margins, float* out,
                            const uint8_t* mask) {
  // Every neuron of several tokens: gate and up as matrix products (each weight row read once for a
  // tile of tokens held in cache), then the down projection — a matrix product over ffn_down, or over
  // ffn_down_t rows, a block of 64 at a time (in cache) added into each token's sum for the neurons
  // that fired. Neuron by neuron, each row met every token's input again: at a 256-token prompt batch
  // those no longer fit in cache and dense prefill ran at half the speed.
  const int64_t n = B.n, n_ff = env_.hp().n_ff;
  float* h = B.hidden.data();
  every_neuron(B, layer, l, on, in, B.truth.data(), h, margins);
  if (mask)
    for (int64_t k = 0; k < n * n_ff; ++k) h[k] = mask[k] ? h[k] : 0.0f;
  if (!l.ffn_down_t) return;
  // Most neurons fired (a thresholded layer keeps about half): the down rows as one matrix product
  // (the rows added neuron by neuron for each token took 2.3 times a product's time per value there).
  const bool product = n >= 8 && transposed_product_reads(l.ffn_down_t) &&
                       std::count_if(h, h + n * n_ff, [](float v) { return v != 0.0f; }) * 5 >= n * n_ff * 2;
  if (product) {
    transposed_product(*on.pool, l.ffn_down_t, h, n, out);
    return;
  }
  down_rows_by_blocks(B, l, on, h, out);
}

// The down rows of the neurons that fired, each thread a range of the neurons, 64 at a time (in cache)
// added into each token's sum.
void ffn_block::down_rows_by_blocks(step_state& B, const layer_weights& l, const workers& on, const float* h, float* out) {
  const int64_t n = B.n, n_ff = env_.hp().n_ff, d = env_.hp().n_embd;
  const int threads = on.pool->size();
  on.pool->parallel_for(threads, [&](int64_t th0, int64_t th1) {
    for (int64_t th = th0; th < th1; ++th) {
      float* acc = B.acc.data() + th * n * d;
      std::fill(acc, acc + n * d, 0.0f);
      const int64_t i0 = n_ff * th / threads, i1 = n_ff * (th + 1) / threads;
      for (int64_t c0 = i0; c0 < i1; c0 += 64) {
        const int64_t c1 = std::min(i1, c0 + 64);
        for (int64_t t = 0; t < n; ++t) {
          axpy_batcher add(l.ffn_down_t, acc + t * d);
          const float* ht = h + t * n_ff;
          for (int64_t i = c0; i < c1; ++i)
            if (ht[i] != 0.0f) add.add(static_cast<int32_t>(i), ht[i]);
        }
      }
    }
  });
  std::fill(out, out + n * d, 0.0f);
  for (int th = 0; th < threads; ++th) {
    const float* acc = B.acc.data() + th * n * d;
    for (int64_t k = 0; k < n * d; ++k) out[k] += acc[k];
  }
}

void ffn_block::chosen_rows(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, bool choose,
                            const ram_tier::use* disk, float* out) {
  // The chosen neurons row by row: the input quantized once for them where the rows read Q8_0 (the
  // matrix products quantize their own).
  const hparams& hp = env_.hp();
  const int64_t n = B.n, n_ff = hp.n_ff, d = hp.n_embd;
  const int threads = on.pool->size();
  const bool down_t = static_cast<bool>(l.ffn_down_t);
  const std::vector<int32_t>& chosen_union = union_;
  const int64_t n_union = static_cast<int64_t>(chosen_union.size());
  const neuron_set all{chosen_union.data(), disk ? disk->rows_of(chosen_union).data() : chosen_union.data(), n_union};
  const batch_ffn_input x{in, quantize_for_rows(l.ffn_up, in, n, d, B.ffn_in_q8), B.chosen.data(), n, d, n_ff};
  const float threshold = hp.act_threshold_of(layer);
  if (executor_ && down_t) {
    executor_->run_batch(B.step, layer, x, chosen_union, B.hidden.data(), out);
  } else if (!choose && n == 1 && down_t && threshold > 0.0f && hp.gated_ffn) {
    // The exact variant of a thresholded layer, one token: every gate row as one matrix-vector
    // product (streams from memory), then the up and down rows of the neurons that pass only.
    if (static_cast<int64_t>(B.gate.size()) < n_ff) B.gate.resize(static_cast<size_t>(n_ff));
    matmul(*on.pool, l.ffn_gate, in, 1, B.gate.data(), *on.xq);
    neuron_shards pieces(n_union, threads);
    run_pieces(*on.pool, pieces, d, B.acc, out, [&](int64_t k0, int64_t k1, float* acc) {
      token_neurons(hp, threshold, {l.ffn_gate, l.ffn_up, l.ffn_down_t}, all.from(k0, k1), {in, x.xq, B.hidden.data(), acc, B.gate.data()});
    });
  } else {
    // Each thread its own shard of the chosen neurons first, then what is left of the others'
    // (neuron_shards); one token goes through the single-token routine (batch_neurons picks it).
    neuron_shards pieces(n_union, threads);
    // (a piece whose rows are still being read waits for them; one whose read failed is skipped, and
    // the error thrown after)
    run_pieces(*on.pool, pieces, n * d, B.acc, down_t ? out : nullptr, [&](int64_t k0, int64_t k1, float* acc) {
      if (!disk || disk->ready(k0, k1)) batch_neurons(hp, threshold, {l.ffn_gate, l.ffn_up, l.ffn_down_t}, all.from(k0, k1), x, B.hidden.data(), acc);
    });
    if (disk) disk->ready();
  }
}

ffn_step_counts ffn_block::record(step_state& B, int64_t layer, const layer_weights& l, const float* pred_in, const plan& p, int64_t down_blocks) {
  const int64_t n = B.n, n_ff = env_.hp().n_ff;
  const int64_t n_union = static_cast<int64_t>(union_.size());
  // What this batch measured.
  auto& choice = choices_[static_cast<size_t>(layer)];
  if (p.sparse) {
    const double u = static_cast<double>(n_union) / static_cast<double>(n_ff);
    double& avg = cost_[static_cast<size_t>(layer)].union_share[p.cost_class];
    avg = avg < 0 ? u : 0.8 * avg + 0.2 * u;
    choice.union_fraction = u;
    ++choice.sparse;
  } else {
    ++choice.dense;
  }
  ffn_step_counts c;
  for (int64_t t = 0; t < n; ++t) {
    const uint8_t* ch = B.chosen.data() + t * n_ff;
    const int64_t computed_t = p.choose ? std::count(ch, ch + n_ff, uint8_t{1}) : n_ff;
    c.computed += computed_t;
    if (!stats_on_) continue;
    auto& st = stats_[static_cast<size_t>(layer)];
    st.tokens += 1;
    st.neurons += n_ff;
    st.computed += computed_t;
    const float* truth = (p.all_first ? B.truth.data() : B.hidden.data()) + t * n_ff;
    for (int64_t i = 0; i < n_ff; ++i) {
      bool truly = truth[i] != 0.0f;
      st.truly_active += truly;
      st.active_computed += truly && ch[i];
    }
  }
  observe(B, layer, pred_in, p.margins);
  c.rows = n_union;
  c.down_rows = l.ffn_down_t    ? fired_rows(B.hidden.data(), p.choose ? B.chosen.data() : nullptr, n, n_ff, union_.data(), n_union)
                : down_blocks >= 0 ? std::min(n_ff, down_blocks * kernels::qk8_0)
                                   : n_union;
  return c;
}

ram_tier::id_filter ffn_block::host_only() const {
  if (!executor_) return {};
  return [this](int64_t layer, std::vector<int32_t>& ids) { executor_->keep_cold(layer, ids); };
}

void ffn_block::read_ahead_at_input(const step_state& B, int64_t il) {
  if (!env_.disk || env_.mode != ffn_mode::sparse || env_.hp().moe()) return;
  env_.disk->read_ahead_at_input(il, predictor_, B.x.data(), B.n, guess_, host_only());
}

ffn_step_counts ffn_block::run(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, const float* pred_in,
                               bool may_go_dense, float* out) {
  if (l.ffn_gate_inp) {  // a mixture of experts
    trace_scope span(env_.trace, step_part::ffn, B.step, layer, B.n);
    ++choices_[static_cast<size_t>(layer)].dense;
    return moe_.run(B, layer, l, on, in, out);
  }
  const int64_t n = B.n, n_ff = env_.hp().n_ff;
  const plan p = plan_for(layer, l, n, may_go_dense);
  // The disk tier: the rows this layer reads brought into place — every row where every neuron is
  // computed, else (below) the union the tokens chose.
  // (With a hot device's executor the cold share asks for its own rows: the hot ones are on the device.)
  const bool to_executor = executor_ && l.ffn_down_t && !p.as_matrices;
  std::optional<ram_tier::use> rows_in;
  if (env_.disk && (p.all_first || (!p.choose && !to_executor))) rows_in.emplace(env_.disk->all_rows(layer));
  if (p.all_first) {
    if (static_cast<int64_t>(B.gate.size()) < n * n_ff) B.gate.resize(static_cast<size_t>(n * n_ff));
    trace_scope span(env_.trace, step_part::ffn, B.step, layer, n);
    every_neuron(B, layer, l, on, in, B.gate.data(), B.truth.data(), p.margins);
  }
  if (to_executor) rows_in.reset();
  choose(B, layer, pred_in, p);
  // A batch (8 tokens or more) whose union holds nine in ten neurons or more — a prompt of a
  // thresholded SwiGLU file, where a token chooses two thirds — reads every row anyway: every neuron
  // as matrix products (the integer sixteen-row kernels), then each token's unchosen neurons set to
  // zero, the same choice as neuron by neuron. Row against its tokens, a ~1B Q4_0 file thresholded at
  // 50% prefilled at half its dense file's speed (pp128 ~130 against ~250 tokens/s, 2 threads, Zen 4).
  const bool masked = p.sparse && !p.all_first && !executor_ && n >= 8 && static_cast<int64_t>(union_.size()) * 10 >= n_ff * 9;
  if (env_.disk && !rows_in && !to_executor) rows_in.emplace(masked ? env_.disk->all_rows(layer) : env_.disk->rows(layer, union_, !p.as_matrices));
  if (env_.disk && p.sparse) {
    env_.disk->read_ahead_next(layer, predictor_, pred_in, n, guess_, host_only());
  }
  // The neurons of the union: each row read once, each token computing the neurons it chose. Threads
  // take contiguous shares of the union and own their rows of hidden and their accumulators; or the
  // executor (the hot/cold split) computes them.
  std::fill(B.hidden.begin(), B.hidden.begin() + n * n_ff, 0.0f);
  const bool down_t = static_cast<bool>(l.ffn_down_t);
  int64_t down_blocks = -1;  // the down matrix's blocks read, where the product skipped some
  {
    // An executor records its own intervals (hot_ffn, cold_ffn).
    std::optional<trace_scope> ffn_span;
    if (p.as_matrices || masked || !(executor_ && down_t)) ffn_span.emplace(env_.trace, step_part::ffn, B.step, layer, n);
    if (p.as_matrices || masked) as_matrices(B, layer, l, on, in, p.margins, out, masked ? B.chosen.data() : nullptr);
    else chosen_rows(B, layer, l, on, in, p.choose, rows_in ? &*rows_in : nullptr, out);
    // With down rows, out is written above (by the executor, or summed from the threads' or the
    // pieces' accumulators); without, the down projection is a matrix product — for a few tokens of
    // a Q4_0 matrix over the blocks of 32 neurons where one fired only (a sparse file written with
    // --down-layout blocks, a ReLU file's dense mode).
    if (!down_t) {
      down_blocks = zero_block_skipping_products(*on.pool, l.ffn_down, B.hidden.data(), n, out, *on.xq);
      if (down_blocks < 0) matmul(*on.pool, l.ffn_down, B.hidden.data(), n, out, *on.xq);
    }
  }
  return record(B, layer, l, pred_in, p, down_blocks);
}

}  // namespace hotcold
