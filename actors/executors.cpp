// The compute actors: predictor, cold pool and hot executor. Each is detached (a thread of its own,
// so its compute never holds one of CAF's scheduler threads) and borrows the CPU workers of the
// shared context for the parallel part of its work; the layer chain (attention, then predictor, then
// hot and cold FFN) means no two of them use the workers at once. A failure answers the pending
// request with an error and ends the actor: the scheduler, their supervisor, starts new ones.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>

#include <pthread.h>
#include <sched.h>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/hot_executor.hpp"
#include "engine/ram_tier.hpp"
#include "engine/sparse_ffn.hpp"

namespace hotcold::actors {

std::string describe(const caf::error& e) {
  if (!e) return "no error";
  const auto& ctx = e.context();
  if (ctx.size() > 0 && ctx.match_element<std::string>(0)) return ctx.get_as<std::string>(0);
  return caf::to_string(e);
}

namespace detail {

// Names the actor's thread (what traces show) and, when the CPU workers are pinned, puts it on the
// core they leave free (theirs are 1..n-1): the compute actors hand each layer on to one another and
// run one at a time, so one core serves them all, and the thread the next hand-off wakes starts
// where the last one just went to sleep instead of beside a pinned worker.
void take_thread(const compute_resources& p, const char* name) {
  pthread_setname_np(pthread_self(), name);
  if (p.actor_core >= 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(p.actor_core, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
  }
}

caf::error failure(std::string_view who, const std::exception& e) { return caf::make_error(caf::sec::runtime_error, fmt::format("{}: {}", who, e.what())); }

// ---- predictor ----------------------------------------------------------------------------------

struct predictor_state {
  std::unique_ptr<predictor_runner> runner;
  static inline const char* name = "predictor";
};

// The recall check: the first token's FFN over every neuron (gate and up rows, as the dense path
// computes them), counting the neurons that fire and how many of those the predictor chose.
void check_recall(const compute_resources& p, const predict_job& job, const uint8_t* chosen) {
  const hparams& hp = p.m->hp();
  const layer_weights& l = p.m->weights().layers[static_cast<size_t>(job.layer)];
  const float* x = job.ffn_input.data();
  const auto* xq = job.ffn_input_q8 ? job.ffn_input_q8->data() : nullptr;
  if (!x || (wants_q8_input(l.ffn_up.type) && !xq)) return;
  std::atomic<int64_t> truly{0}, found{0};
  p.ctx->pool().parallel_for(hp.n_ff, [&](int64_t i0, int64_t i1) {
    int64_t t = 0, f = 0;
    for (int64_t i = i0; i < i1; ++i) {
      const float g = hp.gated_ffn ? row_dot(l.ffn_gate, i, x, xq) : 0.0f;
      if (hp.gated_ffn && hp.act == hotcold::activation::relu && g <= 0.0f) continue;  // ReLU: no need for up
      if (hidden_value(hp, hp.act_threshold_of(job.layer), g, row_dot(l.ffn_up, i, x, xq)) == 0.0f) continue;
      ++t;
      f += chosen[i] != 0;
    }
    truly += t, found += f;
  }, 256);
  p.stats->add_recall(job.layer, truly.load(), found.load());
}

active_set predict(predictor_runner& runner, const compute_resources& p, const predict_job& job, bool recall) {
  if (p.fault) p.fault(step_part::predict, job.layer, job.requests);
  trace_scope span(p.trace, step_part::predict, job.input.step, job.layer, job.input.rows);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n_ff = p.m->hp().n_ff;
  auto chosen = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(job.input.rows * n_ff));
  auto ids = std::make_shared<std::vector<int32_t>>();
  runner.predict(job.layer, job.input.data(), job.input.rows, chosen->data(), *ids);
  p.stats->add_time(step_part::predict, job.layer, std::chrono::steady_clock::now() - t0);
  if (p.trace) p.trace->record_active(job.input.step, job.layer, job.input.rows, n_ff, chosen->data());
  if (recall && p.recall_every > 0 && job.input.step % p.recall_every == 0) check_recall(p, job, chosen->data());
  return active_set{std::move(chosen), std::move(ids)};
}

predictor_actor::behavior_type predictor_fn(predictor_actor::stateful_pointer<predictor_state> self, std::shared_ptr<compute_resources> p) {
  self->state.runner = std::make_unique<predictor_runner>(*p->m, p->ctx->pool());
  self->state.runner->set_device_layers(p->ctx->device());  // predictors the hot device holds run there
  take_thread(*p, "predictor");
  return {
      [self, p](predict_atom, const predict_job& job) -> caf::result<active_set> {
        try {
          p->stats->set_mailbox(actor_id::predictor, static_cast<int64_t>(self->mailbox().size()));
          return predict(*self->state.runner, *p, job);
        } catch (const std::exception& e) {
          auto err = failure("predictor", e);
          self->quit(err);
          return err;
        }
      },
  };
}

// ---- cold pool ----------------------------------------------------------------------------------

// The disk tier's guesses keep the neurons the host reads: with a hot device, not its own.
ram_tier::id_filter cold_only(const compute_resources& p) {
  if (!p.hot) return {};
  return [hot = p.hot.get()](int64_t il, std::vector<int32_t>& ids) { hot->keep_cold(il, ids); };
}


ffn_part cold_ffn(cold_scratch& st, const compute_resources& p, const cold_job& job, const std::function<void()>& rows_asked = {}) {
  if (p.fault) p.fault(step_part::cold_ffn, job.layer, job.requests);
  const hparams& hp = p.m->hp();
  const int64_t n = job.input.rows, d = hp.n_embd;
  thread_pool& pool = p.ctx->pool();
  if (static_cast<int64_t>(st.hidden.size()) < n * hp.n_ff) st.hidden.resize(static_cast<size_t>(n * hp.n_ff));
  // The disk tier: the cold rows this layer reads asked for (engine/ram_tier; read while the share computes).
  const std::optional<ram_tier::use> own_rows = job.rows_in ? std::nullopt : cold_rows(p.ctx->disk_tier(), job.layer, *job.cold_ids, hp.n_ff);
  const std::optional<ram_tier::use>& rows_in = job.rows_in ? *job.rows_in : own_rows;
  if (rows_asked) rows_asked();  // (the next layer's read-ahead after this layer's own reads: they go first)
  const batch_ffn_input x{job.input.data(), job.input_q8 ? job.input_q8->data() : nullptr, job.chosen.chosen->data(), n, d, hp.n_ff};
  std::vector<float> sum(static_cast<size_t>(n * d));
  const auto t0 = std::chrono::steady_clock::now();
  cold_share(pool, *p.m, {p.trace, step_part::cold_ffn, job.input.step, job.layer}, cold_of(*job.cold_ids, rows_in), x, st.hidden.data(), st.acc,
             sum.data());
  p.stats->add_time(step_part::cold_ffn, job.layer, std::chrono::steady_clock::now() - t0);
  const int64_t fired = fired_rows(st.hidden.data(), job.chosen.chosen->data(), n, hp.n_ff, job.cold_ids->data(), static_cast<int64_t>(job.cold_ids->size()));
  return ffn_part{shared_tensor::wrap(std::move(sum), n, d, job.input.step, job.layer), job.computed, job.union_size, fired};
}

struct cold_pool_state {
  cold_scratch scratch;
  static inline const char* name = "cold_pool";
};

cold_pool_actor::behavior_type cold_pool_fn(cold_pool_actor::stateful_pointer<cold_pool_state> self, std::shared_ptr<compute_resources> p) {
  take_thread(*p, "cold_pool");
  return {
      [self, p](cold_atom, const cold_job& job) -> caf::result<ffn_part> {
        try {
          p->stats->set_mailbox(actor_id::cold_pool, static_cast<int64_t>(self->mailbox().size()));
          return cold_ffn(self->state.scratch, *p, job);
        } catch (const std::exception& e) {
          auto err = failure("cold pool", e);
          self->quit(err);
          return err;
        }
      },
  };
}

// ---- hot executor -------------------------------------------------------------------------------


void fail(hot_executor_ptr self, const std::string& what) {
  auto& st = self->state;
  if (st.hot_done) {  // device work reads this actor's buffers: let it finish first
    try {
      st.hot_done->wait();
    } catch (...) {
    }
    st.hot_done.reset();
  }
  for (auto& l : st.lanes) l.wait_all();
  auto err = caf::make_error(caf::sec::runtime_error, what);
  if (st.promise.pending()) st.promise.deliver(err);
  self->quit(err);
}

void run_layer(hot_executor_ptr self, int64_t layer);

// Bytes a layer read on each side, added to the step's counts: attention's, the FFN norm's and the
// predictor's weights where the device holds them, else on the host.
void count_fixed_bytes(hot_executor_state& st, int64_t layer) {
  const auto& dev = st.p->ctx->device();
  // (A mixture's shared expert, counted with the router, where the device holds it.)
  const uint64_t there = dev ? dev->attention_bytes(layer) + dev->predictor_bytes(layer) + (dev->shared_expert(layer) ? dev->ffn_bytes(layer) : 0) : 0;
  st.host_bytes += st.p->stats->costs().layer_fixed[static_cast<size_t>(layer)] - there;
  st.device_bytes += there;
}
// And its FFN rows split by placement: the hot rows' (gate and up of each, down of those that fired)
// on the device, the cold ones' on the host; with the layer's counts for the live stats.
void count_ffn(hot_executor_state& st, int64_t layer, const hot_cold_counts& c) {
  const auto& costs = st.p->stats->costs();
  st.p->stats->add_ffn(layer, c.tokens, c.computed, c.hot_chosen);
  st.device_bytes += costs.ffn_rows(static_cast<size_t>(layer), static_cast<uint64_t>(c.hot_rows), static_cast<uint64_t>(c.hot_fired));
  st.host_bytes += costs.ffn_rows(static_cast<size_t>(layer), static_cast<uint64_t>(c.union_size - c.hot_rows), static_cast<uint64_t>(c.cold_fired));
}

// What a layer's FFN run by the context did (ffn_step_counts): a mixture's choices and device slots
// for the live stats; every gate and up row it read and the down rows (transposed rows: the neurons
// that fired) — on the device where it holds the layer whole, or a mixture's experts its slots held —
// added to the step's bytes.
void count_dense_ffn(hot_executor_state& st, int64_t layer, const ffn_step_counts& c) {
  auto& stats = *st.p->stats;
  const auto li = static_cast<size_t>(layer);
  if (!c.expert_choices.empty()) stats.add_experts(layer, c.expert_choices.data(), c.experts_chosen, c.experts_guessed);
  if (st.p->ctx->experts()) {
    stats.add_expert_cache(layer, c.cache_lookups, c.cache_hits, c.cache_uploads);
    if (c.next_layer_uploads > 0) stats.add_expert_cache(layer + 1, 0, 0, c.next_layer_uploads);
  }
  const uint64_t rows = stats.costs().ffn_rows(li, static_cast<uint64_t>(c.rows), static_cast<uint64_t>(c.down_rows));
  const uint64_t experts_there = std::min<uint64_t>(rows, c.expert_device_bytes);
  const auto& dev = st.p->ctx->device();
  (dev && dev->ffn(layer) ? st.device_bytes : st.host_bytes) += rows - experts_there;
  st.device_bytes += experts_there;
}

// The step's logits are in st.logits_out (its `heads` head computations done): the bytes of the heads
// and the tokens' embedding rows, the step's stats, and the answer.
void deliver_step(hot_executor_ptr self, uint64_t heads, std::chrono::steady_clock::time_point head_start) {
  auto& st = self->state;
  inference_context& ctx = *st.p->ctx;
  const model& m = *st.p->m;
  auto& stats = *st.p->stats;
  const auto& costs = stats.costs();
  // The step's last product is done: the workers sleep rather than spin through the step boundary,
  // where the scheduler's and sampler's threads want the cores (docs/performance.md).
  ctx.pool().rest();
  stats.add_time(step_part::output, m.hp().n_layer, std::chrono::steady_clock::now() - head_start);
  const auto n = static_cast<int64_t>(st.plan.tokens.size());
  const auto& dev = ctx.device();
  const uint64_t head_there = dev && dev->output() ? costs.output : 0;  // the head on the device
  st.host_bytes += (costs.output - head_there) * heads + costs.embedding_row * static_cast<uint64_t>(n);
  st.device_bytes += head_there * heads;
  stats.add_step(n, std::chrono::duration<double>(std::chrono::steady_clock::now() - st.started).count(), st.host_bytes, st.device_bytes);
  step_result r{st.plan.step,
                shared_tensor::view(st.logits_out, st.logits_out->data(), static_cast<int64_t>(st.plan.logit_rows.size()), m.hp().n_vocab, st.plan.step,
                                    m.hp().n_layer),
                st.hot_neurons, st.cold_neurons};
  st.promise.deliver(std::move(r));
}

// The buffer the step's logits leave in: one of this actor's that nobody else holds any more (the last
// step's, once its receivers let go), so the copy goes to memory already paged in, not pages the
// heap gave back and takes again.
std::vector<float>& logits_buffer(hot_executor_state& st) {
  if (!st.logits_out || st.logits_out.use_count() > 1) st.logits_out = std::make_shared<std::vector<float>>();
  st.logits_out->clear();
  return *st.logits_out;
}

// A layer's FFN is done: the hot share (when there is one) and the cold share are summed into the
// residual stream, and the next layer starts.
void finish_layer(hot_executor_ptr self, int64_t layer, const shared_tensor* cold_out, int64_t computed, int64_t union_size, int64_t cold_fired) {
  auto& st = self->state;
  inference_context& ctx = *st.p->ctx;
  const auto in = ctx.step_ffn_inputs(*st.s);
  const int64_t nd = in.n * st.p->m->hp().n_embd;
  st.out.assign(static_cast<size_t>(nd), 0.0f);
  int64_t hot_fired = 0;  // the down rows each side read: its neurons that fired
  if (st.hot_done) {
    st.hot_done->wait();
    st.hot_done.reset();
    std::copy(st.hot_out.begin(), st.hot_out.begin() + nd, st.out.begin());
    hot_fired = fired_rows(st.hidden.data(), st.active.chosen->data(), in.n, st.p->m->hp().n_ff, st.split.hot_ids.data(),
                           static_cast<int64_t>(st.split.hot_ids.size()));
  }
  if (cold_out)
    for (int64_t k = 0; k < nd; ++k) st.out[static_cast<size_t>(k)] += cold_out->data()[k];
  ffn_step_counts c;
  c.computed = computed, c.rows = union_size, c.down_rows = cold_fired + hot_fired;
  ctx.step_ffn_done(*st.s, layer, st.out.data(), c);
  count_ffn(st, layer, {in.n, computed, st.hot_chosen, static_cast<int64_t>(st.split.hot_ids.size()), hot_fired, union_size, cold_fired});
  run_layer(self, layer + 1);
}

void on_active_set(hot_executor_ptr self, int64_t layer, active_set chosen_now) {
  auto& st = self->state;
  st.active = std::move(chosen_now);
  const active_set& chosen = st.active;
  const hparams& hp = st.p->m->hp();
  const auto in = st.p->ctx->step_ffn_inputs(*st.s);
  const auto& ids = *chosen.union_ids;
  if (st.p->hot) {
    st.p->hot->split(layer, ids, st.split);
  } else {
    st.split.hot_ids.clear(), st.split.hot_slots.clear();
    st.split.cold_ids.assign(ids.begin(), ids.end());
  }
  st.hot_chosen = 0;
  for (int32_t i : st.split.hot_ids)
    for (int64_t t = 0; t < in.n; ++t) st.hot_chosen += (*chosen.chosen)[static_cast<size_t>(t * hp.n_ff + i)];
  st.hot_neurons += static_cast<int64_t>(st.split.hot_ids.size());
  st.cold_neurons += static_cast<int64_t>(st.split.cold_ids.size());
  const batch_ffn_input x{in.in, st.xq ? st.xq->data() : nullptr, chosen.chosen->data(), in.n, hp.n_embd, hp.n_ff};
  const int64_t union_size = static_cast<int64_t>(ids.size());
  const int64_t computed = std::count(chosen.chosen->begin(), chosen.chosen->end(), uint8_t{1});
  // The hot share goes to the device's queue first (as a GPU launch would), then the cold share to
  // the cold pool: on a machine with few cores the device's thread is then running before the pool's
  // wakes, and the two overlap.
  if (!st.split.hot_ids.empty()) {
    if (static_cast<int64_t>(st.hidden.size()) < in.n * hp.n_ff) st.hidden.resize(static_cast<size_t>(in.n * hp.n_ff));
    st.hot_out.resize(static_cast<size_t>(in.n * hp.n_embd));
    live_stats* stats = st.p->stats.get();
    st.hot_done = st.p->hot->submit(in.step, layer, st.split, x, st.hidden.data(), st.hot_out.data(), st.p->trace,
                                    [stats](int64_t l, std::chrono::steady_clock::duration t) { stats->add_time(step_part::hot_ffn, l, t); });
  }
  std::optional<cold_job> job;
  if (!st.split.cold_ids.empty())
    job = cold_job{layer,
                   shared_tensor::view(st.s, in.in, in.n, hp.n_embd, in.step, layer),
                   st.xq,
                   chosen,
                   std::make_shared<const std::vector<int32_t>>(st.split.cold_ids),
                   st.plan.requests,
                   computed,
                   union_size,
                   nullptr};  // (rows_in: below)
  // The disk tier: the cold share's rows asked for here, then the next layer's read-ahead (its cold
  // neurons: the device holds its hot ones), so that this layer's reads go first; the cold pool
  // computes with the rows asked.
  if (ram_tier* tier = st.p->ctx->disk_tier(); job && tier) {
    job->rows_in = std::make_shared<const std::optional<ram_tier::use>>(cold_rows(tier, layer, st.split.cold_ids, hp.n_ff));
    tier->read_ahead_next(layer, *st.runner, in.pred_in, in.n, st.guess, cold_only(*st.p));
  }
  if (job)
    self->request(st.cold, caf::infinite, cold_atom::value, std::move(*job))
        .then([self, layer](ffn_part& part) { finish_layer(self, layer, &part.out, part.computed, part.union_size, part.fired); },
              [self](caf::error& e) { fail(self, describe(e)); });
  if (!job) finish_layer(self, layer, nullptr, computed, union_size, 0);
}

// A step's rows through a stage: what the stage answered, counted (live_stats) and traced.
void record_stage(hot_executor_state& st, const remote_stage& rs, int64_t rows, uint64_t sent, uint64_t received, int64_t compute_ns, int64_t round_trip_ns) {
  const size_t k = static_cast<size_t>(&rs - st.p->stages.data());
  st.p->stats->add_stage_step(k, rows, compute_ns, round_trip_ns, sent, received);
  if (!st.p->trace) return;
  // The hop's halves each way (a guess: only their sum is measured) around the worker's layers.
  const auto end = std::chrono::steady_clock::now(), begin = end - std::chrono::nanoseconds(round_trip_ns);
  const auto half = std::chrono::nanoseconds(std::max<int64_t>(0, round_trip_ns - compute_ns) / 2);
  st.p->trace->record("stage_hop", st.plan.step, rs.first, rows, begin, begin + half);
  st.p->trace->record("stage_layers", st.plan.step, rs.first, rows, begin + half, end - half);
  st.p->trace->record("stage_hop", st.plan.step, rs.first, rows, end - half, end);
}

// Rows [begin, end) of the step (whole sequences) going stage to stage on their own.
struct stage_group {
  size_t begin = 0, end = 0;
  std::vector<int64_t> seqs, positions;
};
struct stage_groups {
  std::vector<stage_group> groups;
  size_t left = 0;        // groups not yet through the last stage of the chain
  int64_t after = 0;      // the layer after the chain
};

void send_group(hot_executor_ptr self, std::shared_ptr<stage_groups> g, size_t i, size_t k, float_bytes x);

// Layers first..last-1 on stages of other hosts: the step's residual stream there and back (the hot
// executor answers other messages meanwhile), then the layers after them here. With micro-batches
// (pipeline_options::micro_batches, at least two sequences in the step) the step's sequences go in
// that many groups, each on through the chain of contiguous stages as soon as a stage answers it: a
// worker takes its requests in order, so stage k works on group i while stage k+1 works on group i-1.
void run_stage(hot_executor_ptr self, const remote_stage& rs) {
  auto& st = self->state;
  const auto n = static_cast<size_t>(st.s->n), d = static_cast<size_t>(st.p->m->hp().n_embd);
  const auto& stages = st.p->stages;
  auto g = std::make_shared<stage_groups>();
  size_t k = static_cast<size_t>(&rs - stages.data()), last = k;
  while (last + 1 < stages.size() && stages[last + 1].first == stages[last].last) ++last;
  g->after = stages[last].last;
  // Runs of rows of one sequence (the plan keeps a sequence's tokens together), then groups of them.
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t r = 0; r < n; ++r)
    if (runs.empty() || st.s->seqs[r] != st.s->seqs[runs.back().first]) runs.push_back({r, r + 1});
    else runs.back().second = r + 1;
  const size_t want = std::clamp<size_t>(static_cast<size_t>(std::max(1, st.p->micro_batches.load())), 1, runs.size());
  for (size_t r = 0; r < runs.size();) {  // about n / want rows each: group j closes where a sequence starts past its share
    const size_t j = g->groups.size();
    size_t until = r + 1;
    while (until < runs.size() && (j + 1 == want || runs[until].first < n * (j + 1) / want)) ++until;
    stage_group grp;
    grp.begin = runs[r].first, grp.end = runs[until - 1].second;
    grp.seqs.assign(st.s->seqs.begin() + static_cast<std::ptrdiff_t>(grp.begin), st.s->seqs.begin() + static_cast<std::ptrdiff_t>(grp.end));
    grp.positions.assign(st.s->positions.begin() + static_cast<std::ptrdiff_t>(grp.begin), st.s->positions.begin() + static_cast<std::ptrdiff_t>(grp.end));
    g->groups.push_back(std::move(grp));
    r = until;
  }
  g->left = g->groups.size();
  for (size_t i = 0; i < g->groups.size(); ++i) {
    const auto& grp = g->groups[i];
    send_group(self, g, i, k,
               pack_floats(st.s->x.data() + grp.begin * d, (grp.end - grp.begin) * d));
  }
}

void send_group(hot_executor_ptr self, std::shared_ptr<stage_groups> g, size_t i, size_t k, float_bytes x) {
  auto& st = self->state;
  const remote_stage& rs = st.p->stages[k];
  const auto& grp = g->groups[i];
  const size_t rows = grp.end - grp.begin, d = static_cast<size_t>(st.p->m->hp().n_embd);
  const uint64_t sent = rows * d * sizeof(float) + 2 * rows * sizeof(int64_t);
  // The first group carries the step's moves of cached rows to each stage, which makes them first.
  std::vector<int64_t> ops;
  if (i == 0)
    for (const cache_op& o : st.plan.cache_ops) ops.insert(ops.end(), {static_cast<int64_t>(o.what), o.slot, o.from, o.pos, o.count});
  self->request(rs.actor, caf::infinite, layers_atom::value, grp.seqs, grp.positions, std::move(x), std::move(ops))
      .then(
          [self, g, i, k, rows, d, sent](float_bytes& out, int64_t compute_ns, int64_t round_trip_ns) {
            auto& st = self->state;
            const remote_stage& rs = st.p->stages[k];
            if (out.size() != rows * d * sizeof(float))
              return fail(self, fmt::format("stage {}: {} bytes back for {} x {} floats", rs.where, out.size(), rows, d));
            record_stage(st, rs, static_cast<int64_t>(rows), sent, out.size(), compute_ns, round_trip_ns);
            if (rs.last != g->after) return send_group(self, g, i, k + 1, std::move(out));
            unpack_floats(out, st.s->x.data() + g->groups[i].begin * d);
            if (--g->left == 0) run_layer(self, g->after);
          },
          [self, k](caf::error& e) {
            auto& st = self->state;
            if (st.promise.pending()) fail(self, fmt::format("stage {}: {}", st.p->stages[k].where, describe(e)));
          });
}

void run_layer(hot_executor_ptr self, int64_t layer) {
  auto& st = self->state;
  inference_context& ctx = *st.p->ctx;
  const model& m = *st.p->m;
  for (const auto& rs : st.p->stages)
    if (rs.first == layer) return run_stage(self, rs);
  try {
    auto& stats = *st.p->stats;
    if (layer == m.hp().n_layer) {  // the head: logits of the rows the scheduler wants
      const auto t0 = std::chrono::steady_clock::now();
      auto logits = ctx.step_logits(*st.s, st.plan.logit_rows);
      logits_buffer(st).assign(logits.begin(), logits.end());
      return deliver_step(self, 1, t0);
    }
    if (st.p->fault) st.p->fault(step_part::attention, layer, st.plan.requests);
    auto t0 = std::chrono::steady_clock::now();
    if (const auto whole = ctx.step_whole_layer(*st.s, layer)) {  // attention and FFN as one GPU job (its time: attention's)
      stats.add_time(step_part::attention, layer, std::chrono::steady_clock::now() - t0);
      count_fixed_bytes(st, layer);
      count_dense_ffn(st, layer, *whole);
      return run_layer(self, layer + 1);
    }
    if (ram_tier* tier = ctx.disk_tier(); tier && ctx.mode() == ffn_mode::sparse && !m.hp().moe()) {  // (read while attention computes)
      tier->read_ahead_at_input(layer, *st.runner, st.s->x.data(), st.s->n, st.guess, cold_only(*st.p));
    }
    ctx.step_attention(*st.s, layer);
    stats.add_time(step_part::attention, layer, std::chrono::steady_clock::now() - t0);
    count_fixed_bytes(st, layer);
    const layer_weights& l = m.weights().layers[static_cast<size_t>(layer)];
    const bool sparse = ctx.mode() == ffn_mode::sparse && l.pred_fc1 && l.ffn_down_t;
    if (!sparse) {  // every neuron, here (dense files, dense mode)
      t0 = std::chrono::steady_clock::now();
      const ffn_step_counts c = ctx.step_ffn(*st.s, layer);
      stats.add_time(step_part::ffn, layer, std::chrono::steady_clock::now() - t0);
      count_dense_ffn(st, layer, c);
      return run_layer(self, layer + 1);
    }
    const auto in = ctx.step_ffn_inputs(*st.s);
    st.xq = quantize_for_rows(l.ffn_up, in.in, in.n, m.hp().n_embd);  // quantized once for both sides
    predict_job job{layer, shared_tensor::view(st.s, in.pred_in, in.n, m.hp().n_embd, in.step, layer), st.plan.requests, {}, {}};
    job.ffn_input = shared_tensor::view(st.s, in.in, in.n, m.hp().n_embd, in.step, layer);  // (the recall check reads it too)
    job.ffn_input_q8 = st.xq;
    if (!st.p->hot) {
      // Every neuron cold: nothing runs beside the CPU workers, so the layer's chain stays on this
      // thread — the predictor's and the cold pool's code called here, on the same workers, instead
      // of three hand-offs between detached actors (each a thread wake-up; docs/performance.md).
      active_set s = predict(*st.runner, *st.p, job);
      // The disk tier's read-ahead: the next layer's rows submitted while this layer computes (once
      // this layer's own are asked for: a disk serves reads in turn).
      auto read_ahead = [&] {
        if (ram_tier* tier = ctx.disk_tier()) tier->read_ahead_next(layer, *st.runner, in.pred_in, in.n, st.guess);
      };
      auto cold_ids = s.union_ids;
      const int64_t computed = std::count(s.chosen->begin(), s.chosen->end(), uint8_t{1});
      const int64_t union_size = static_cast<int64_t>(cold_ids->size());
      const ffn_part part = cold_ffn(st.cold_rows, *st.p,
                                     cold_job{layer, job.ffn_input, st.xq, std::move(s), std::move(cold_ids), st.plan.requests, computed, union_size, nullptr}, read_ahead);
      st.cold_neurons += union_size;
      return finish_layer(self, layer, &part.out, part.computed, part.union_size, part.fired);
    }
    if (ctx.device() && ctx.device()->predictor(layer)) {
      // The predictor is on the hot device, where this layer's input already is: its work goes
      // straight to the device's queue from here (one hand-off to the device and back, instead of
      // waking the predictor actor to hand it on).
      return on_active_set(self, layer, predict(*st.runner, *st.p, job));
    }
    self->request(st.predictor, caf::infinite, predict_atom::value, std::move(job))
        .then([self, layer](active_set& s) { on_active_set(self, layer, std::move(s)); }, [self](caf::error& e) { fail(self, describe(e)); });
  } catch (const std::exception& e) {
    fail(self, fmt::format("hot executor: {}", e.what()));
  }
}

hot_executor_actor::behavior_type hot_executor_fn(hot_executor_ptr self, std::shared_ptr<compute_resources> p, predictor_actor predictor, cold_pool_actor cold) {
  take_thread(*p, "hot_executor");
  self->state.p = std::move(p);
  self->state.predictor = std::move(predictor);
  self->state.cold = std::move(cold);
  // Its own predictor runner: for every layer without a hot device, and for the predictors a hot
  // device holds (see run_layer).
  self->state.runner = std::make_unique<predictor_runner>(*self->state.p->m, self->state.p->ctx->pool());
  self->state.runner->set_device_layers(self->state.p->ctx->device());
  return {
      [self](step_atom, step_plan& plan) -> caf::typed_response_promise<step_result> {
        auto& st = self->state;
        st.promise = self->make_response_promise<step_result>();
        st.plan = std::move(plan);
        st.hot_neurons = st.cold_neurons = 0;
        st.host_bytes = st.device_bytes = 0;
        st.hot_chosen = 0;
        st.started = std::chrono::steady_clock::now();
        st.p->stats->set_mailbox(actor_id::hot_executor, static_cast<int64_t>(self->mailbox().size()));
        auto rp = st.promise;
        try {
          st.p->ctx->apply(st.plan.cache_ops);
        } catch (const std::exception& e) {
          rp.deliver(caf::make_error(caf::sec::runtime_error, fmt::format("hot executor: moving cached rows: {}", e.what())));
          return rp;
        }
        if (use_lanes(st)) {
          run_lanes(self);
          return rp;
        }
        try {
          st.p->ctx->step_begin(*st.s, st.plan.tokens, st.plan.slots, st.plan.positions);
        } catch (const std::exception& e) {
          // A plan the context refuses is the scheduler's mistake, not this actor's: answer, stay.
          rp.deliver(caf::make_error(caf::sec::runtime_error, fmt::format("hot executor: {}", e.what())));
          return rp;
        }
        run_layer(self, 0);
        return rp;
      },
  };
}

}  // namespace detail

using namespace detail;

namespace {
// Detached (runtime.hpp, deterministic: scheduled under CAF's test coordinator).
template <class F, class... Ts>
auto spawn_compute(caf::actor_system& sys, F fn, Ts&&... xs) {
  if (deterministic(sys)) return sys.spawn(fn, std::forward<Ts>(xs)...);
  return sys.spawn<caf::detached>(fn, std::forward<Ts>(xs)...);
}
}  // namespace

predictor_actor spawn_predictor(caf::actor_system& sys, std::shared_ptr<compute_resources> parts) { return spawn_compute(sys, predictor_fn, std::move(parts)); }
cold_pool_actor spawn_cold_pool(caf::actor_system& sys, std::shared_ptr<compute_resources> parts) { return spawn_compute(sys, cold_pool_fn, std::move(parts)); }
hot_executor_actor spawn_hot_executor(caf::actor_system& sys, std::shared_ptr<compute_resources> parts, predictor_actor predictor, cold_pool_actor cold) {
  return spawn_compute(sys, hot_executor_fn, std::move(parts), std::move(predictor), std::move(cold));
}

}  // namespace hotcold::actors
