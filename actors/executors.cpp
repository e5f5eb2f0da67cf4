// The compute actors: predictor, cold pool and hot executor. Each is detached (a thread of its own,
// so its compute never holds one of CAF's scheduler threads) and borrows the CPU workers of the
// shared context for the parallel part of its work; the layer chain (attention, then predictor, then
// hot and cold FFN) means no two of them use the workers at once. A failure answers the pending
// request with an error and ends the actor: the scheduler, their supervisor, starts new ones.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>

#include <pthread.h>
#include <sched.h>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/pipeline.hpp"
#include "engine/sparse_ffn.hpp"
#include "engine/predictor.hpp"

namespace hotcold::actors {

std::string describe(const caf::error& e) {
  if (!e) return "no error";
  const auto& ctx = e.context();
  if (ctx.size() > 0 && ctx.match_element<std::string>(0)) return ctx.get_as<std::string>(0);
  return caf::to_string(e);
}

namespace {

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
      if (hp.gated_ffn && hp.act != hotcold::activation::drelu && g <= 0.0f) continue;  // ReLU family: no need for up
      if (hidden_value(hp, g, row_dot(l.ffn_up, i, x, xq)) == 0.0f) continue;
      ++t;
      f += chosen[i] != 0;
    }
    truly += t, found += f;
  }, 256);
  p.stats->add_recall(job.layer, truly.load(), found.load());
}

active_set predict(predictor_runner& runner, const compute_resources& p, const predict_job& job, bool recall = true) {
  if (p.fault) p.fault(stage::predict, job.layer, job.requests);
  trace_scope span(p.trace, stage::predict, job.input.step, job.layer, job.input.rows);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n_ff = p.m->hp().n_ff;
  auto chosen = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(job.input.rows * n_ff));
  auto ids = std::make_shared<std::vector<int32_t>>();
  runner.predict(job.layer, job.input.data(), job.input.rows, chosen->data(), *ids);
  p.stats->add_time(stage::predict, job.layer, std::chrono::steady_clock::now() - t0);
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

// The cold pool's scratch: the cold neurons' values (n, n_ff) and the sums of the pieces of them.
struct cold_scratch {
  std::vector<float> hidden, acc;
};

ffn_part cold_ffn(cold_scratch& st, const compute_resources& p, const cold_job& job) {
  if (p.fault) p.fault(stage::cold_ffn, job.layer, job.requests);
  const hparams& hp = p.m->hp();
  const int64_t n = job.input.rows, d = hp.n_embd;
  thread_pool& pool = p.ctx->pool();
  if (static_cast<int64_t>(st.hidden.size()) < n * hp.n_ff) st.hidden.resize(static_cast<size_t>(n * hp.n_ff));
  const batch_ffn_input x{job.input.data(), job.input_q8 ? job.input_q8->data() : nullptr, job.chosen.chosen->data(), n, d, hp.n_ff};
  std::vector<float> sum(static_cast<size_t>(n * d));
  const auto t0 = std::chrono::steady_clock::now();
  cold_share(pool, *p.m, job.input.step, job.layer, *job.cold_ids, x, st.hidden.data(), st.acc, sum.data(), p.trace);
  p.stats->add_time(stage::cold_ffn, job.layer, std::chrono::steady_clock::now() - t0);
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

// One micro-batch of a step (see run_lanes): whole sequences of the step's tokens, its own activations
// and its own progress through the layers.
struct lane {
  std::shared_ptr<inference_context::step_state> s = std::make_shared<inference_context::step_state>();
  int64_t begin = 0, end = 0;         // its tokens: the plan's [begin, end)
  std::vector<int64_t> logit_rows;    // the plan's logit rows among them, relative to begin
  int64_t layer = 0;                  // the layer in flight
  active_set active;                  // its choice there
  ffn_split split;
  std::shared_ptr<q8_rows> xq;
  std::vector<float> hidden, hot_out, out;
  devices::event ready;     // the device's chain for the layer: attention, predictor, split
  devices::event hot_done;  // the hot rows
  int64_t computed = 0, union_size = 0, hot_chosen = 0;
  void wait_all() {
    for (auto* e : {&ready, &hot_done})
      if (*e) try {
          (*e)->wait();
        } catch (...) {
        }
  }
};

struct hot_executor_state {
  std::shared_ptr<compute_resources> p;
  predictor_actor predictor;
  cold_pool_actor cold;
  // Without a hot device the predictor's and the cold pool's work run on this actor's thread (see
  // run_layer), and so do predictors a hot device holds: their own scratch.
  std::unique_ptr<predictor_runner> runner;
  cold_scratch cold_rows;
  // The step in flight.
  // Its activations; shared, because the views of them that messages carry keep them alive.
  std::shared_ptr<inference_context::step_state> s = std::make_shared<inference_context::step_state>();
  step_plan plan;
  caf::typed_response_promise<step_result> promise;
  int64_t hot_neurons = 0, cold_neurons = 0;
  std::chrono::steady_clock::time_point started;  // the step's
  uint64_t host_bytes = 0, device_bytes = 0;      // weights the step read so far
  int64_t hot_chosen = 0;                         // the layer's (token, neuron) pairs on the hot device
  ffn_split split;
  active_set active;  // the layer's choice, held until its FFN is done (the device reads it)
  std::shared_ptr<q8_rows> xq;
  std::vector<float> hidden, hot_out, out;  // (n, n_ff), (n, n_embd), (n, n_embd)
  std::shared_ptr<std::vector<float>> logits_out;  // the last step's answer
  devices::event hot_done;
  // A step split into micro-batches (run_lanes): the lanes, the order their device chains were
  // queued in (the device runs them in that order), and how many are through every layer.
  std::vector<lane> lanes;
  std::deque<size_t> queued;
  size_t lanes_done = 0;
  static inline const char* name = "hot_executor";
  ~hot_executor_state() {  // the device may still read this state's buffers
    if (hot_done) try {
        hot_done->wait();
      } catch (...) {
      }
    for (auto& l : lanes) l.wait_all();
  }
};
using hot_executor_ptr = hot_executor_actor::stateful_pointer<hot_executor_state>;

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
  ctx.step_ffn_done(*st.s, layer, st.out.data(), computed, union_size, cold_fired + hot_fired);
  auto& stats = *st.p->stats;
  const auto& costs = stats.costs();
  const auto hot_rows = static_cast<int64_t>(st.split.hot_ids.size());
  stats.add_ffn(layer, in.n, computed, st.hot_chosen);
  st.device_bytes += costs.ffn_rows(static_cast<size_t>(layer), static_cast<uint64_t>(hot_rows), static_cast<uint64_t>(hot_fired));
  st.host_bytes += costs.ffn_rows(static_cast<size_t>(layer), static_cast<uint64_t>(union_size - hot_rows), static_cast<uint64_t>(cold_fired));
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
                                    [stats](int64_t l, std::chrono::steady_clock::duration t) { stats->add_time(stage::hot_ffn, l, t); });
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
                   union_size};
  if (job)
    self->request(st.cold, caf::infinite, cold_atom::value, std::move(*job))
        .then([self, layer](ffn_part& part) { finish_layer(self, layer, &part.out, part.computed, part.union_size, part.fired); },
              [self](caf::error& e) { fail(self, describe(e)); });
  if (!job) finish_layer(self, layer, nullptr, computed, union_size, 0);
}

void run_layer(hot_executor_ptr self, int64_t layer) {
  auto& st = self->state;
  inference_context& ctx = *st.p->ctx;
  const model& m = *st.p->m;
  try {
    auto& stats = *st.p->stats;
    const auto& costs = stats.costs();
    if (layer == m.hp().n_layer) {  // the head: logits of the rows the scheduler wants
      auto t0 = std::chrono::steady_clock::now();
      auto logits = ctx.step_logits(*st.s, st.plan.logit_rows);
      // The step's last product is done: the workers sleep rather than spin through the step boundary,
      // where the scheduler's and sampler's threads want the cores (the gap from the head to the next
      // step's first layer, median of a 32-token trace: 165 -> 137 us).
      ctx.pool().rest();
      stats.add_time(stage::output, layer, std::chrono::steady_clock::now() - t0);
      const auto n = static_cast<int64_t>(st.plan.tokens.size());
      const auto& dev = ctx.device();
      const uint64_t head_there = dev && dev->output() ? costs.output : 0;  // the head on the device
      st.host_bytes += costs.output - head_there + costs.embedding_row * static_cast<uint64_t>(n);
      st.device_bytes += head_there;
      stats.add_step(n, std::chrono::duration<double>(std::chrono::steady_clock::now() - st.started).count(), st.host_bytes, st.device_bytes);
      // The logits leave in a buffer of this actor's that nobody else holds any more (the last
      // step's, once its receivers let go), so the copy goes to memory already paged in: a fresh
      // 128 KB each step cost ~100 us here, the heap giving the pages back and taking them again.
      if (!st.logits_out || st.logits_out.use_count() > 1) st.logits_out = std::make_shared<std::vector<float>>();
      st.logits_out->assign(logits.begin(), logits.end());
      step_result r{st.plan.step,
                    shared_tensor::view(st.logits_out, st.logits_out->data(), static_cast<int64_t>(st.plan.logit_rows.size()), m.hp().n_vocab,
                                     st.plan.step, layer),
                    st.hot_neurons, st.cold_neurons};
      st.promise.deliver(std::move(r));
      return;
    }
    if (st.p->fault) st.p->fault(stage::attention, layer, st.plan.requests);
    auto t0 = std::chrono::steady_clock::now();
    ctx.step_attention(*st.s, layer);
    stats.add_time(stage::attention, layer, std::chrono::steady_clock::now() - t0);
    // Attention's, the FFN norm's and the predictor's weights: on the device where it holds them.
    const auto& dev = ctx.device();
    const uint64_t fixed_there = dev ? dev->attention_bytes(layer) + dev->predictor_bytes(layer) : 0;
    st.host_bytes += costs.layer_fixed[static_cast<size_t>(layer)] - fixed_there;
    st.device_bytes += fixed_there;
    const layer_weights& l = m.weights().layers[static_cast<size_t>(layer)];
    const bool sparse = ctx.mode() == ffn_mode::sparse && l.pred_fc1 && l.ffn_down_t;
    if (!sparse) {  // every neuron, here (dense files, dense mode)
      t0 = std::chrono::steady_clock::now();
      const size_t li = static_cast<size_t>(layer);
      const int64_t rows_before = ctx.read_neurons()[li], down_before = ctx.read_down_rows()[li];
      ctx.step_ffn(*st.s, layer);
      stats.add_time(stage::ffn, layer, std::chrono::steady_clock::now() - t0);
      // Every gate and up row; the down rows it read (transposed rows: the neurons that fired).
      const uint64_t rows = costs.ffn_rows(li, static_cast<uint64_t>(ctx.read_neurons()[li] - rows_before), static_cast<uint64_t>(ctx.read_down_rows()[li] - down_before));
      (dev && dev->ffn(layer) ? st.device_bytes : st.host_bytes) += rows;  // a dense layer the device holds whole
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
      // of three hand-offs between detached actors (each a thread wake-up, 13-17 us on a VM: ~6% of
      // a token's time; docs/actors.md).
      active_set s = predict(*st.runner, *st.p, job);
      auto cold_ids = s.union_ids;
      const int64_t computed = std::count(s.chosen->begin(), s.chosen->end(), uint8_t{1});
      const int64_t union_size = static_cast<int64_t>(cold_ids->size());
      const ffn_part part = cold_ffn(st.cold_rows, *st.p,
                                     cold_job{layer, job.ffn_input, st.xq, std::move(s), std::move(cold_ids), st.plan.requests, computed, union_size});
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

// ---- micro-batches --------------------------------------------------------------------------------
//
// A step of several sequences split into lanes of whole sequences. Per layer, each lane's chain of
// device stages (attention, predictor, the split by placement) is queued on the hot device; as each
// finishes, in queue order, its hot rows go to the device and its cold share to the cold pool; when
// both are back its layer is done and its next layer's chain is queued. So while the cold pool
// computes one lane's cold neurons, the device runs another lane's attention and hot rows. Only
// where the device holds every layer's attention and predictor (the chains never touch the CPU's
// workers, which the cold pool uses meanwhile).

bool use_lanes(const hot_executor_state& st) {
  const auto& p = *st.p;
  const auto& dev = p.ctx->device();
  if (p.micro_batches.load() < 2 || !p.hot || !dev || p.ctx->mode() != ffn_mode::sparse) return false;
  for (int64_t l = 0; l < p.m->hp().n_layer; ++l)
    if (!dev->attention(l) || !dev->predictor(l)) return false;
  // At least two sequences.
  const auto& slots = st.plan.slots;
  return std::any_of(slots.begin(), slots.end(), [&](int64_t s) { return s != slots.front(); });
}

void lane_step_done(hot_executor_ptr self);
void drain_queued(hot_executor_ptr self);

// Queues lane i's chain for its layer on the device.
void queue_chain(hot_executor_ptr self, size_t i) {
  auto& st = self->state;
  lane& ln = st.lanes[i];
  auto p = st.p;
  const int64_t layer = ln.layer;
  predictor_runner* runner = st.runner.get();
  ln.ready = p->ctx->device()->submit([p, runner, &ln, layer, requests = st.plan.requests] {
    inference_context& ctx = *p->ctx;
    const model& m = *p->m;
    const auto t0 = std::chrono::steady_clock::now();
    ctx.step_attention(*ln.s, layer);
    p->stats->add_time(stage::attention, layer, std::chrono::steady_clock::now() - t0);
    const auto in = ctx.step_ffn_inputs(*ln.s);
    const layer_weights& l = m.weights().layers[static_cast<size_t>(layer)];
    ln.xq = quantize_for_rows(l.ffn_up, in.in, in.n, m.hp().n_embd);
    predict_job job{layer, shared_tensor::view(ln.s, in.pred_in, in.n, m.hp().n_embd, in.step, layer), requests, {}, {}};
    // (No recall check: it reads every neuron on the CPU's workers, which the cold pool is using.)
    ln.active = predict(*runner, *p, job, /*recall=*/false);
    p->hot->split(layer, *ln.active.union_ids, ln.split);
  });
  st.queued.push_back(i);
}

// The lanes whose chains have run, in queue order: each one's hot rows to the device, its cold share
// to the cold pool.
void drain_queued(hot_executor_ptr self) {
  auto& st = self->state;
  try {
    while (!st.queued.empty()) {
      const size_t i = st.queued.front();
      st.queued.pop_front();
      lane& ln = st.lanes[i];
      ln.ready->wait();
      ln.ready.reset();
      const hparams& hp = st.p->m->hp();
      const int64_t layer = ln.layer;
      const auto in = st.p->ctx->step_ffn_inputs(*ln.s);
      const active_set& chosen = ln.active;
      ln.hot_chosen = 0;
      for (int32_t k : ln.split.hot_ids)
        for (int64_t t = 0; t < in.n; ++t) ln.hot_chosen += (*chosen.chosen)[static_cast<size_t>(t * hp.n_ff + k)];
      st.hot_neurons += static_cast<int64_t>(ln.split.hot_ids.size());
      st.cold_neurons += static_cast<int64_t>(ln.split.cold_ids.size());
      ln.union_size = static_cast<int64_t>(chosen.union_ids->size());
      ln.computed = std::count(chosen.chosen->begin(), chosen.chosen->end(), uint8_t{1});
      const batch_ffn_input x{in.in, ln.xq ? ln.xq->data() : nullptr, chosen.chosen->data(), in.n, hp.n_embd, hp.n_ff};
      if (static_cast<int64_t>(ln.hidden.size()) < in.n * hp.n_ff) ln.hidden.resize(static_cast<size_t>(in.n * hp.n_ff));
      std::fill(ln.hidden.begin(), ln.hidden.begin() + in.n * hp.n_ff, 0.0f);
      ln.hot_out.assign(static_cast<size_t>(in.n * hp.n_embd), 0.0f);
      if (!ln.split.hot_ids.empty()) {
        live_stats* stats = st.p->stats.get();
        ln.hot_done = st.p->hot->submit(in.step, layer, ln.split, x, ln.hidden.data(), ln.hot_out.data(), st.p->trace,
                                        [stats](int64_t l, std::chrono::steady_clock::duration t) { stats->add_time(stage::hot_ffn, l, t); });
      }
      cold_job job{layer,
                   shared_tensor::view(ln.s, in.in, in.n, hp.n_embd, in.step, layer),
                   ln.xq,
                   chosen,
                   std::make_shared<const std::vector<int32_t>>(ln.split.cold_ids),
                   st.plan.requests,
                   ln.computed,
                   ln.union_size};
      self->request(st.cold, caf::infinite, cold_atom::value, std::move(job))
          .then(
              [self, i, layer](ffn_part& part) {
                auto& st = self->state;
                lane& ln = st.lanes[i];
                if (ln.layer != layer) return fail(self, "hot executor: a cold share came back for another layer");
                try {
                  const hparams& hp = st.p->m->hp();
                  const auto in = st.p->ctx->step_ffn_inputs(*ln.s);
                  const int64_t nd = in.n * hp.n_embd;
                  int64_t hot_fired = 0;
                  if (ln.hot_done) {
                    ln.hot_done->wait();
                    ln.hot_done.reset();
                    hot_fired = fired_rows(ln.hidden.data(), ln.active.chosen->data(), in.n, hp.n_ff, ln.split.hot_ids.data(),
                                           static_cast<int64_t>(ln.split.hot_ids.size()));
                  }
                  ln.out.assign(ln.hot_out.begin(), ln.hot_out.begin() + nd);
                  for (int64_t k = 0; k < nd; ++k) ln.out[static_cast<size_t>(k)] += part.out.data()[k];
                  st.p->ctx->step_ffn_done(*ln.s, layer, ln.out.data(), ln.computed, ln.union_size, part.fired + hot_fired);
                  auto& stats = *st.p->stats;
                  const auto& costs = stats.costs();
                  const auto hot_rows = static_cast<int64_t>(ln.split.hot_ids.size());
                  stats.add_ffn(layer, in.n, ln.computed, ln.hot_chosen);
                  const auto& dev = st.p->ctx->device();
                  const uint64_t fixed_there = dev->attention_bytes(layer) + dev->predictor_bytes(layer);
                  st.host_bytes += costs.layer_fixed[static_cast<size_t>(layer)] - fixed_there;
                  st.device_bytes += fixed_there + costs.ffn_rows(static_cast<size_t>(layer), static_cast<uint64_t>(hot_rows), static_cast<uint64_t>(hot_fired));
                  st.host_bytes += costs.ffn_rows(static_cast<size_t>(layer), static_cast<uint64_t>(ln.union_size - hot_rows), static_cast<uint64_t>(part.fired));
                  ln.active = {};
                  if (++ln.layer == st.p->m->hp().n_layer) {
                    if (++st.lanes_done == st.lanes.size()) return lane_step_done(self);
                    return drain_queued(self);
                  }
                  queue_chain(self, i);
                  drain_queued(self);
                } catch (const std::exception& e) {
                  fail(self, fmt::format("hot executor: {}", e.what()));
                }
              },
              [self](caf::error& e) { fail(self, describe(e)); });
    }
  } catch (const std::exception& e) {
    fail(self, fmt::format("hot executor: {}", e.what()));
  }
}

// Splits the step into lanes of whole sequences (about equal tokens each) and queues each lane's
// first layer.
void run_lanes(hot_executor_ptr self) {
  auto& st = self->state;
  const auto& plan = st.plan;
  const int64_t n = static_cast<int64_t>(plan.tokens.size());
  const int64_t want = std::min<int64_t>(st.p->micro_batches.load(), n);
  st.lanes.clear();
  st.queued.clear();
  st.lanes_done = 0;
  int64_t begin = 0;
  for (int64_t t = 1; t <= n; ++t) {
    const bool boundary = t == n || plan.slots[static_cast<size_t>(t)] != plan.slots[static_cast<size_t>(t - 1)];
    const int64_t lanes_left = want - static_cast<int64_t>(st.lanes.size());
    if (!boundary) continue;
    // Close the lane here when it has its share of the tokens (or at the end).
    if (t == n || (lanes_left > 1 && t - begin >= (n - begin + lanes_left - 1) / lanes_left)) {
      lane ln;
      ln.begin = begin, ln.end = t;
      for (int64_t r : plan.logit_rows)
        if (r >= begin && r < t) ln.logit_rows.push_back(r - begin);
      st.lanes.push_back(std::move(ln));
      begin = t;
    }
  }
  try {
    for (auto& ln : st.lanes) {
      const auto b = static_cast<size_t>(ln.begin), e = static_cast<size_t>(ln.end);
      st.p->ctx->step_begin(*ln.s, std::span<const token_id>(plan.tokens).subspan(b, e - b), std::span<const int64_t>(plan.slots).subspan(b, e - b),
                            std::span<const int64_t>(plan.positions).subspan(b, e - b));
    }
  } catch (const std::exception& e) {
    auto rp = st.promise;
    st.lanes.clear();
    rp.deliver(caf::make_error(caf::sec::runtime_error, fmt::format("hot executor: {}", e.what())));
    return;
  }
  for (size_t i = 0; i < st.lanes.size(); ++i) queue_chain(self, i);
  drain_queued(self);
}

// Every lane is through every layer: the head, lane by lane, and the step's answer.
void lane_step_done(hot_executor_ptr self) {
  auto& st = self->state;
  inference_context& ctx = *st.p->ctx;
  const model& m = *st.p->m;
  try {
    auto& stats = *st.p->stats;
    const auto& costs = stats.costs();
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t n_vocab = m.hp().n_vocab;
    if (!st.logits_out || st.logits_out.use_count() > 1) st.logits_out = std::make_shared<std::vector<float>>();
    st.logits_out->clear();
    for (auto& ln : st.lanes) {  // lanes in token order, so their rows come out in the plan's order
      if (ln.logit_rows.empty()) continue;
      auto l = ctx.step_logits(*ln.s, ln.logit_rows);
      st.logits_out->insert(st.logits_out->end(), l.begin(), l.end());
    }
    ctx.pool().rest();
    stats.add_time(stage::output, m.hp().n_layer, std::chrono::steady_clock::now() - t0);
    const auto n = static_cast<int64_t>(st.plan.tokens.size());
    const auto& dev = ctx.device();
    const uint64_t head_there = dev->output() ? costs.output : 0;
    const uint64_t heads = static_cast<uint64_t>(std::count_if(st.lanes.begin(), st.lanes.end(), [](const lane& l) { return !l.logit_rows.empty(); }));
    st.host_bytes += (costs.output - head_there) * heads + costs.embedding_row * static_cast<uint64_t>(n);
    st.device_bytes += head_there * heads;
    stats.add_step(n, std::chrono::duration<double>(std::chrono::steady_clock::now() - st.started).count(), st.host_bytes, st.device_bytes);
    step_result r{st.plan.step,
                  shared_tensor::view(st.logits_out, st.logits_out->data(), static_cast<int64_t>(st.plan.logit_rows.size()), n_vocab, st.plan.step,
                                      m.hp().n_layer),
                  st.hot_neurons, st.cold_neurons};
    st.lanes.clear();
    st.promise.deliver(std::move(r));
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

}  // namespace

predictor_actor spawn_predictor(caf::actor_system& sys, std::shared_ptr<compute_resources> parts) {
  return sys.spawn<caf::detached>(predictor_fn, std::move(parts));
}
cold_pool_actor spawn_cold_pool(caf::actor_system& sys, std::shared_ptr<compute_resources> parts) {
  return sys.spawn<caf::detached>(cold_pool_fn, std::move(parts));
}
hot_executor_actor spawn_hot_executor(caf::actor_system& sys, std::shared_ptr<compute_resources> parts, predictor_actor predictor, cold_pool_actor cold) {
  return sys.spawn<caf::detached>(hot_executor_fn, std::move(parts), std::move(predictor), std::move(cold));
}

}  // namespace hotcold::actors
