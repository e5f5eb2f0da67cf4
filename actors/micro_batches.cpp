// Micro-batches: a step of several sequences run as lanes of whole sequences (the hot executor's
// second way of running a step; executors.cpp has the first and what both share).
#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "actors/hot_executor.hpp"
#include "engine/sparse_ffn.hpp"

namespace hotcold::actors::detail {

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
  if (p.micro_batches.load() < 2 || !p.hot || !dev || p.ctx->mode() != ffn_mode::sparse || !p.stages.empty()) return false;
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
  ln.ready = p->ctx->device()->submit([p, runner, &ln, layer, requests = ln.requests] {
    inference_context& ctx = *p->ctx;
    const model& m = *p->m;
    if (p->fault) p->fault(step_part::attention, layer, requests);
    const auto t0 = std::chrono::steady_clock::now();
    ctx.step_attention(*ln.s, layer);
    p->stats->add_time(step_part::attention, layer, std::chrono::steady_clock::now() - t0);
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
                                        [stats](int64_t l, std::chrono::steady_clock::duration t) { stats->add_time(step_part::hot_ffn, l, t); });
      }
      cold_job job{layer,
                   shared_tensor::view(ln.s, in.in, in.n, hp.n_embd, in.step, layer),
                   ln.xq,
                   chosen,
                   std::make_shared<const std::vector<int32_t>>(ln.split.cold_ids),
                   ln.requests,
                   ln.computed,
                   ln.union_size,
                   nullptr};
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
                  ffn_step_counts c;
                  c.computed = ln.computed, c.rows = ln.union_size, c.down_rows = part.fired + hot_fired;
                  st.p->ctx->step_ffn_done(*ln.s, layer, ln.out.data(), c);
                  count_fixed_bytes(st, layer);
                  count_ffn(st, layer, {in.n, ln.computed, ln.hot_chosen, static_cast<int64_t>(ln.split.hot_ids.size()), hot_fired, ln.union_size, part.fired});
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
      ln.requests.assign(plan.requests.begin() + begin, plan.requests.begin() + t);
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
  try {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float>& out = logits_buffer(st);
    uint64_t heads = 0;
    for (auto& ln : st.lanes) {  // lanes in token order, so their rows come out in the plan's order
      if (ln.logit_rows.empty()) continue;
      auto l = st.p->ctx->step_logits(*ln.s, ln.logit_rows);
      out.insert(out.end(), l.begin(), l.end());
      ++heads;
    }
    st.lanes.clear();
    deliver_step(self, heads, t0);
  } catch (const std::exception& e) {
    fail(self, fmt::format("hot executor: {}", e.what()));
  }
}

}  // namespace hotcold::actors::detail
