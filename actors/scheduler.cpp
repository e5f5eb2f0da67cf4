// The scheduler: admits requests into KV slots, forms each step from every running sequence, hands
// logits to the sampler and tokens to the clients, and supervises the compute actors.
#include <algorithm>
#include <deque>
#include <map>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/pipeline.hpp"
#include "actors/prefix_reuse.hpp"
#include "actors/slot_files.hpp"

namespace hotcold::actors {
namespace {

using clock_type = std::chrono::steady_clock;
double seconds_between(clock_type::time_point a, clock_type::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct sequence {
  int64_t id = 0;
  generation_request req;
  caf::actor sink;
  int64_t slot = -1;
  int64_t cached = 0;  // positions whose keys and values are in the slot's cache
  int64_t reused = 0;  // of them, moved or kept from before instead of computed
  // Waiting for sequence `follow` (running, computing a prompt that begins as this one's) to have
  // computed its first follow_len positions, which this one then copies (-1: not waiting).
  int64_t follow = -1, follow_len = 0;
  int64_t moved_in = -1;  // the step whose moves brought it rows
  bool shifted = false;   // its context was shifted: its slot's rows are no longer its tokens' at their positions
  int64_t dropped = 0;    // positions its context shifts dropped (cached + dropped: tokens computed)
  std::vector<token_id> generated;
  bool isolated = false;   // runs alone until one step passes (it was in a step that failed)
  bool cancelled = false;
  clock_type::time_point submitted, admitted, first_token;
  bool prompt_done() const { return cached + dropped >= static_cast<int64_t>(req.prompt.size()); }
  // The tokens whose rows its slot holds, position by position.
  std::vector<token_id> computed() const {
    std::vector<token_id> t(req.prompt.begin(), req.prompt.begin() + std::min<int64_t>(cached, static_cast<int64_t>(req.prompt.size())));
    const int64_t more = cached - static_cast<int64_t>(t.size());
    t.insert(t.end(), generated.begin(), generated.begin() + std::min<int64_t>(more, static_cast<int64_t>(generated.size())));
    return t;
  }
};

// The compute actors of the moment; replaced together when one fails.
struct compute_set {
  predictor_actor predictor;
  cold_pool_actor cold;
  hot_executor_actor hot;
  sampler_actor sampler;
  // Ends the hot executor, predictor and cold pool (and the sampler too, with_sampler).
  void stop(caf::exit_reason why, bool with_sampler) {
    if (hot) caf::anon_send_exit(hot, why);
    if (cold) caf::anon_send_exit(cold, why);
    if (predictor) caf::anon_send_exit(predictor, why);
    if (sampler && with_sampler) caf::anon_send_exit(sampler, why);
  }
};

// Where a sequence's tokens sit in a step.
struct member {
  int64_t id;
  int64_t first_row, count;
  int64_t first_logit = -1, logits = 0;  // its rows among the step's logits
};

struct scheduler_state {
  std::shared_ptr<compute_resources> p;
  int64_t prefill_chunk = 32;
  telemetry_actor telemetry;
  std::shared_ptr<compute_set> compute;
  std::map<int64_t, sequence> seqs;
  std::deque<int64_t> waiting;
  std::vector<int64_t> running;  // admission order
  std::vector<int64_t> free_slots;
  std::unique_ptr<prefix_reuse> prefix;  // null: nothing reused (pipeline_options::reuse_prefixes)
  std::vector<cache_op> ops;             // the moves of rows the next step makes first, in order
  std::vector<std::pair<slot_request, caf::actor>> slot_requests;  // waiting for the step in flight to end
  bool busy = false;
  int64_t step = 0;  // the step in flight (or the last one)
  std::vector<member> members;
  clock_type::time_point step_start;
  static inline const char* name = "scheduler";
};
using scheduler_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

void schedule(scheduler_ptr self);

void start_compute(scheduler_ptr self) {
  auto& st = self->state;
  auto& c = *st.compute;
  auto& sys = self->system();
  c.predictor = spawn_predictor(sys, st.p);
  c.cold = spawn_cold_pool(sys, st.p);
  c.hot = spawn_hot_executor(sys, st.p, c.predictor, c.cold);
  self->monitor(c.predictor);
  self->monitor(c.cold);
  self->monitor(c.hot);
}

void start_sampler(scheduler_ptr self) {
  auto& st = self->state;
  st.compute->sampler = spawn_sampler(self->system(), st.p);
  self->monitor(st.compute->sampler);
  for (int64_t id : st.running) {  // each running request's sampler, again from its history
    const sequence& s = st.seqs.at(id);
    std::vector<token_id> history = s.req.prompt;
    history.insert(history.end(), s.generated.begin(), s.generated.end());
    self->send(st.compute->sampler, open_atom::value, id, s.req.sampling, history);
  }
}

std::string device_lost(const compute_resources& p);

void restart_compute(scheduler_ptr self) {
  if (!device_lost(*self->state.p).empty()) return;  // nothing would run on a lost device
  self->state.compute->stop(caf::exit_reason::kill, false);
  start_compute(self);
  self->send(self->state.telemetry, totals_atom::value, int64_t{1});
}

void finish(scheduler_ptr self, int64_t id, const std::string& reason, const std::string& error = {}) {
  auto& st = self->state;
  auto it = st.seqs.find(id);
  if (it == st.seqs.end()) return;
  sequence& s = it->second;
  const auto now = clock_type::now();
  done_event d{id,
               reason,
               error,
               static_cast<int64_t>(s.req.prompt.size()),
               static_cast<int64_t>(s.generated.size()),
               s.slot >= 0 ? seconds_between(s.submitted, s.admitted) : seconds_between(s.submitted, now),
               s.generated.empty() ? 0.0 : seconds_between(s.submitted, s.first_token),
               seconds_between(s.submitted, now),
               s.reused,
               std::max<int64_t>(0, std::min<int64_t>(s.cached + s.dropped, static_cast<int64_t>(s.req.prompt.size())) - s.reused)};
  if (s.sink) caf::anon_send(s.sink, d);  // (a typed actor sends to untyped ones anonymously)
  self->send(st.telemetry, d);
  if (s.slot >= 0) {
    if (st.prefix && (reason == "error" || s.shifted)) st.prefix->forget(s.slot);
    else if (st.prefix) st.prefix->release(s.slot, s.computed(), st.ops);
    st.free_slots.push_back(s.slot);
    st.p->stats->set_slot(s.slot, {-1, s.cached});
    if (st.compute->sampler) self->send(st.compute->sampler, close_atom::value, id);
  }
  st.running.erase(std::remove(st.running.begin(), st.running.end(), id), st.running.end());
  st.waiting.erase(std::remove(st.waiting.begin(), st.waiting.end(), id), st.waiting.end());
  st.seqs.erase(it);
}

// The rows s's prompt reuses now — its slot's, the store's, another running sequence's (each
// running one's slot holds its computed tokens, unless a shift moved them) — their moves queued.
void reuse_rows(scheduler_state& st, sequence& s) {
  std::vector<std::vector<token_id>> rows;
  rows.reserve(st.running.size());
  std::vector<prefix_reuse::holder> holders;
  for (int64_t id : st.running) {
    const sequence& r = st.seqs.at(id);
    if (r.shifted) continue;
    rows.push_back(r.computed());
    holders.push_back({r.slot, rows.back()});
  }
  const size_t ops_before = st.ops.size();
  s.cached = s.reused = st.prefix->begin(s.slot, s.req.prompt, holders, st.ops);
  if (st.ops.size() > ops_before) s.moved_in = st.step + 1;
}

// A sequence admitted into its slot: the rows of its prompt's beginning that it reuses (its slot's, the
// store's, another running sequence's), or, when a running sequence is still computing a longer run
// of the same tokens, a wait for it (follow).
void begin_prompt(scheduler_ptr self, sequence& s) {
  auto& st = self->state;
  if (!st.prefix) return;
  if (!s.req.cache_prompt) return st.prefix->forget(s.slot);
  reuse_rows(st, s);
  const int64_t limit = static_cast<int64_t>(s.req.prompt.size()) - 1;
  for (int64_t id : st.running) {  // worth waiting for: a block's worth more than it has
    const sequence& r = st.seqs.at(id);
    if (r.prompt_done() || r.follow >= 0 || !r.req.cache_prompt) continue;
    const int64_t c = std::min(prefix_reuse::common(r.req.prompt, s.req.prompt), limit);
    if (c > r.cached && c >= s.cached + st.prefix->block_tokens() && c > s.follow_len) s.follow = r.id, s.follow_len = c;
  }
}

// Followers whose leader has computed what they wait for (or has gone) take its rows now.
void resolve_followers(scheduler_ptr self) {
  auto& st = self->state;
  for (int64_t id : st.running) {
    sequence& s = st.seqs.at(id);
    if (s.follow < 0) continue;
    auto leader = st.seqs.find(s.follow);
    if (leader != st.seqs.end() && leader->second.slot >= 0 && leader->second.cached < s.follow_len && !leader->second.cancelled) continue;
    s.follow = -1, s.follow_len = 0;
    reuse_rows(st, s);
  }
}

void admit(scheduler_ptr self) {
  auto& st = self->state;
  while (!st.waiting.empty() && !st.free_slots.empty()) {
    const int64_t id = st.waiting.front();
    st.waiting.pop_front();
    sequence& s = st.seqs.at(id);
    s.slot = st.prefix ? st.prefix->pick_slot(st.free_slots, s.req.prompt) : st.free_slots.back();
    st.free_slots.erase(std::find(st.free_slots.begin(), st.free_slots.end(), s.slot));
    s.admitted = clock_type::now();
    begin_prompt(self, s);
    st.p->stats->set_slot(s.slot, {id, s.cached});
    st.running.push_back(id);
    self->send(st.compute->sampler, open_atom::value, id, s.req.sampling, s.req.prompt);
  }
}

// A sequence at the end of its context: with --context-shift (llama.cpp's), its first `keep` tokens
// (and a BOS before them) stay and half of the rest go, the rows after them moved down; false when it
// does not shift (it then ends, "context").
bool shift_context(scheduler_ptr self, sequence& s) {
  auto& st = self->state;
  if (!st.p->context_shift) return false;
  const token_id bos = st.p->m->vocabulary().bos();
  const cache_op op = context_shift(s.slot, s.cached, st.p->ctx->n_ctx(), st.p->keep, static_cast<int64_t>(s.req.prompt.size()),
                                    bos >= 0 && s.req.prompt.front() == bos);
  if (op.count < 1) return false;
  st.ops.push_back(op);
  s.cached -= op.count, s.dropped += op.count;
  s.shifted = true;
  s.moved_in = st.step + 1;
  return true;
}

void after_tokens(scheduler_ptr self, const std::vector<int64_t>& ids, sampled_tokens& sampled) {
  const std::vector<token_id>& tokens = sampled.tokens;
  auto& st = self->state;
  const vocab& v = st.p->m->vocabulary();
  const int64_t n_ctx = st.p->ctx->n_ctx();
  for (size_t k = 0; k < ids.size(); ++k) {
    auto it = st.seqs.find(ids[k]);
    if (it == st.seqs.end()) continue;
    sequence& s = it->second;
    if (s.cancelled) {
      finish(self, s.id, "cancelled");
      continue;
    }
    if (k < sampled.errors.size() && !sampled.errors[k].empty()) {
      finish(self, s.id, "error", sampled.errors[k]);
      continue;
    }
    const token_id t = tokens[k];
    if (v.is_end_of_generation(t) && !s.req.ignore_eos) {
      finish(self, s.id, "stop");
      continue;
    }
    if (s.generated.empty()) s.first_token = clock_type::now();
    s.generated.push_back(t);
    if (s.sink)
      caf::anon_send(s.sink, token_event{s.id, t, static_cast<int64_t>(s.generated.size()) - 1, clock_type::now(),
                                         k < sampled.probs.size() ? std::move(sampled.probs[k]) : std::nullopt});
    if (static_cast<int64_t>(s.generated.size()) >= s.req.n_predict) finish(self, s.id, "length");
    else if (s.cached >= n_ctx && !shift_context(self, s)) finish(self, s.id, "context");
  }
  st.busy = false;
  schedule(self);
}

void on_step(scheduler_ptr self, step_result& r) {
  auto& st = self->state;
  const int64_t n_ctx = st.p->ctx->n_ctx();
  step_record rec{st.step, 0, 0, 0, static_cast<int64_t>(st.members.size()), seconds_between(st.step_start, clock_type::now()), false};
  std::vector<int64_t> to_sample, rows;
  for (const member& mb : st.members) {
    sequence& s = st.seqs.at(mb.id);
    const bool prefill = !s.prompt_done();
    (prefill ? rec.prompt_tokens : rec.generated_tokens) += mb.count;
    rec.tokens += mb.count;
    if (s.req.all_logits && prefill && mb.logits > 0 && s.sink)
      caf::anon_send(s.sink, logits_event{s.id, s.cached, r.logits.slice(mb.first_logit, mb.logits)});
    s.cached += mb.count;
    s.isolated = false;
    st.p->stats->set_slot(s.slot, {s.id, s.cached});
    if (!s.prompt_done()) continue;
    if (prefill && st.prefix && s.req.cache_prompt && !s.shifted) st.prefix->keep(s.slot, s.req.prompt, st.ops);  // (others may share it from now on)
    if (s.cancelled) finish(self, s.id, "cancelled");
    else if (s.req.n_predict <= static_cast<int64_t>(s.generated.size())) finish(self, s.id, "length");
    else if (s.cached >= n_ctx && !shift_context(self, s)) finish(self, s.id, "context");
    else to_sample.push_back(s.id), rows.push_back(mb.first_logit + mb.logits - 1);
  }
  self->send(st.telemetry, step_atom::value, rec);
  if (st.prefix)
    st.p->stats->set_prefix_store(st.prefix->stored_blocks(), st.prefix->store_blocks(), st.prefix->evictions(),
                                  static_cast<uint64_t>(st.prefix->block_tokens()) * st.p->ctx->cache_position_bytes());
  if (to_sample.empty()) {
    sampled_tokens none;
    return after_tokens(self, {}, none);
  }
  sample_job job{to_sample, rows, std::move(r.logits)};
  self->request(st.compute->sampler, caf::infinite, sample_atom::value, std::move(job))
      .then([self, to_sample](sampled_tokens& tokens) { after_tokens(self, to_sample, tokens); },
            [self, to_sample](caf::error& e) {
              for (int64_t id : to_sample) finish(self, id, "error", describe(e));
              caf::anon_send_exit(self->state.compute->sampler, caf::exit_reason::kill);
              start_sampler(self);
              self->state.busy = false;
              schedule(self);
            });
}

// Why the hot device was lost (a sticky error) or a stage's worker is gone, or empty while they work.
std::string device_lost(const compute_resources& p) {
  if (std::string gone = p.stage_lost(); !gone.empty()) return gone;
  if (p.hot) return p.hot->device().lost();
  if (p.ctx->device()) return p.ctx->device()->device().lost();
  return {};
}

void on_step_failed(scheduler_ptr self, int64_t step, const std::string& why) {
  auto& st = self->state;
  if (!st.busy || step != st.step) return;  // already handled (an error reply and a down message)
  self->send(st.telemetry, step_atom::value, step_record{st.step, 0, 0, 0, static_cast<int64_t>(st.members.size()),
                                                          seconds_between(st.step_start, clock_type::now()), true});
  if (const std::string lost = device_lost(*st.p); !lost.empty()) {
    // Nothing will run on it again: every request ends now with why, and no retry or restart follows
    // (new requests end at once the same way).
    std::vector<int64_t> all(st.running.begin(), st.running.end());
    all.insert(all.end(), st.waiting.begin(), st.waiting.end());
    for (int64_t id : all) finish(self, id, "error", lost);
    st.busy = false;
    return;
  }
  restart_compute(self);
  // The step's moves may not have been made: nothing cached is trusted; what moved in is computed
  // again, and a sequence whose context shift was among them ends (its rows may be either way).
  st.ops.clear();
  if (st.prefix) st.prefix->forget_all();
  std::vector<int64_t> unsure;
  for (int64_t id : st.running) {
    sequence& s = st.seqs.at(id);
    if (s.moved_in != st.step) continue;
    if (s.shifted) unsure.push_back(id);
    else if (s.generated.empty()) s.cached = s.reused = 0;
  }
  for (int64_t id : unsure) finish(self, id, "error", "its context shift was in a step that failed: " + why);
  // Alone, the sequence is the cause; together, each is retried alone to find out which.
  if (st.members.size() == 1) finish(self, st.members[0].id, "error", why);
  else
    for (const member& mb : st.members)
      if (auto it = st.seqs.find(mb.id); it != st.seqs.end()) it->second.isolated = true;
  st.busy = false;
  schedule(self);
}

// A slot's file saved or restored, or the slot erased: between steps, on a free slot.
slot_event slot_action(scheduler_state& st, const slot_request& r) {
  slot_event e;
  e.request = r.id, e.action = r.action, e.slot = r.slot;
  const auto t0 = clock_type::now();
  try {
    const int64_t n_seq = st.p->ctx->n_seq();
    if (!st.prefix) throw std::runtime_error("slots are not kept here (prefix reuse is off)");
    if (!st.p->stages.empty() && r.action != "erase")
      throw std::runtime_error("slot files with --workers: the layers' rows are on the workers, which do not write or read them");
    if (r.slot < 0 || r.slot >= n_seq) throw std::invalid_argument(fmt::format("slot {} does not exist: this server has slots 0 to {} (--parallel)", r.slot, n_seq - 1));
    if (std::find(st.free_slots.begin(), st.free_slots.end(), r.slot) == st.free_slots.end())
      throw std::runtime_error(fmt::format("slot {} is busy with a request", r.slot));
    // No step is in flight: the moves the next step would make first are made now, in order.
    st.p->ctx->apply(std::exchange(st.ops, {}));
    kv_cache& kv = st.p->ctx->cache();
    if (r.action == "save") {
      const std::vector<token_id> tokens = st.prefix->held(r.slot);
      e.bytes = save_slot(kv, st.p->model_identity, r.slot, tokens, r.path);
      e.n_tokens = static_cast<int64_t>(tokens.size());
    } else if (r.action == "restore") {
      const std::vector<token_id> tokens = restore_slot(kv, st.p->model_identity, r.slot, r.path, e.bytes);
      st.prefix->release(r.slot, tokens, st.ops);  // held, and kept in the store, as a sequence's that ended
      e.n_tokens = static_cast<int64_t>(tokens.size());
    } else if (r.action == "erase") {
      e.n_tokens = static_cast<int64_t>(st.prefix->held(r.slot).size());
      st.prefix->forget(r.slot);
    } else {
      throw std::invalid_argument(fmt::format("unknown slot action '{}': save, restore or erase", r.action));
    }
    e.ok = true;
  } catch (const slot_file_missing& x) {
    e.error = x.what(), e.missing = true;
  } catch (const std::exception& x) {
    e.error = x.what();
  }
  e.ms = 1000 * seconds_between(t0, clock_type::now());
  return e;
}

void schedule(scheduler_ptr self) {
  auto& st = self->state;
  st.p->stats->set_mailbox(actor_id::scheduler, static_cast<int64_t>(self->mailbox().size()));
  if (st.busy) return;
  for (auto& [r, sink] : std::exchange(st.slot_requests, {})) caf::anon_send(sink, slot_action(st, r));
  // Cancelled sequences leave at the step boundary; waiting ones take the free slots.
  std::vector<int64_t> cancelled;
  for (int64_t id : st.running)
    if (st.seqs.at(id).cancelled) cancelled.push_back(id);
  for (int64_t id : cancelled) finish(self, id, "cancelled");
  admit(self);
  if (st.running.empty()) return;
  if (st.prefix) resolve_followers(self);

  // One sequence alone while any is isolated; else every running one.
  std::vector<int64_t> candidates;
  for (int64_t id : st.running)
    if (st.seqs.at(id).isolated) {
      candidates = {id};
      st.seqs.at(id).follow = -1;  // (alone: nothing to wait for)
      break;
    }
  if (candidates.empty()) candidates = st.running;

  step_plan plan;
  plan.step = ++st.step;
  st.members.clear();
  auto add = [&](sequence& s, int64_t count, bool logits_for_all, bool logits_for_last) {
    member mb{s.id, static_cast<int64_t>(plan.tokens.size()), count};
    for (int64_t k = 0; k < count; ++k) {
      const int64_t pos = s.cached + k;
      const bool prompt = pos < static_cast<int64_t>(s.req.prompt.size());
      plan.tokens.push_back(prompt ? s.req.prompt[static_cast<size_t>(pos)] : s.generated.back());
      plan.slots.push_back(s.slot);
      plan.positions.push_back(pos);
      plan.requests.push_back(s.id);
      if (logits_for_all || (logits_for_last && k == count - 1)) {
        if (mb.first_logit < 0) mb.first_logit = static_cast<int64_t>(plan.logit_rows.size());
        ++mb.logits;
        plan.logit_rows.push_back(static_cast<int64_t>(plan.tokens.size()) - 1);
      }
    }
    st.members.push_back(mb);
  };
  // Decoding sequences first (one token each), then prompt chunks in the room left.
  int64_t decoding = 0;
  for (int64_t id : candidates) {
    sequence& s = st.seqs.at(id);
    if (s.prompt_done()) add(s, 1, false, true), ++decoding;
  }
  int64_t budget = std::min(inference_context::max_batch - decoding, st.p->ctx->batch());  // (-ub: prompt tokens a step)
  if (decoding > 0) budget = std::min(budget, st.prefill_chunk);
  for (int64_t id : candidates) {
    sequence& s = st.seqs.at(id);
    if (s.prompt_done() || budget <= 0 || s.follow >= 0) continue;
    const int64_t left = static_cast<int64_t>(s.req.prompt.size()) - s.cached;
    const int64_t chunk = std::min(left, budget);
    budget -= chunk;
    add(s, chunk, s.req.all_logits, chunk == left && s.req.n_predict > 0);
  }

  if (plan.tokens.empty()) {  // (every candidate waits for another's prompt: not reached, as the leader runs)
    --st.step;
    return;
  }
  plan.cache_ops = std::exchange(st.ops, {});
  st.busy = true;
  st.step_start = clock_type::now();
  const int64_t step = st.step;
  self->request(st.compute->hot, caf::infinite, step_atom::value, std::move(plan))
      .then([self, step](step_result& r) {
              if (self->state.busy && step == self->state.step) on_step(self, r);
            },
            [self, step](caf::error& e) { on_step_failed(self, step, describe(e)); });
}

scheduler_actor::behavior_type scheduler_fn(scheduler_ptr self, std::shared_ptr<compute_resources> p, int64_t prefill_chunk, telemetry_actor telemetry) {
  auto& st = self->state;
  st.p = std::move(p);
  st.prefill_chunk = std::max<int64_t>(1, prefill_chunk);
  st.telemetry = std::move(telemetry);
  st.compute = std::make_shared<compute_set>();
  for (int64_t s = st.p->ctx->n_seq() - 1; s >= 0; --s) st.free_slots.push_back(s), st.p->stats->set_slot(s, {});
  if (st.p->reuse_prefixes)
    st.prefix = std::make_unique<prefix_reuse>(st.p->ctx->n_seq(), st.p->ctx->prefix_block_tokens(), st.p->ctx->prefix_store_blocks(), st.p->prefix_hash);
  start_compute(self);
  start_sampler(self);
  // The compute actors go when the scheduler does.
  self->attach_functor([compute = st.compute] { compute->stop(caf::exit_reason::user_shutdown, true); });
  // A compute actor that ends on its own (not stopped by a restart) fails the step in flight, or is
  // restarted at once when idle.
  // Stages on other hosts: each link tells when its worker is gone or silent (CAF's down message for
  // the worker, a heartbeat unanswered) and when it is back; the step in flight and every request
  // end with the stage's name and why, and new ones are refused with it until every stage is back.
  for (size_t k = 0; k < st.p->stages.size(); ++k) {
    self->monitor(st.p->stages[k].actor);
    caf::anon_send(st.p->stages[k].actor, watch_atom::value, caf::actor_cast<caf::actor>(self));
  }
  self->set_down_handler([self](caf::down_msg& m) {
    auto& st = self->state;
    for (size_t k = 0; k < st.p->stages.size(); ++k)
      if (m.source == st.p->stages[k].actor.address()) {  // (the link itself ended: only at shutdown)
        st.p->set_stage_lost(k, fmt::format("stage {}: its link ended ({})", st.p->stages[k].where, describe(m.reason)));
        if (st.busy) on_step_failed(self, st.step, st.p->stage_lost());
        return;
      }
    auto& c = *st.compute;
    const bool current = m.source == c.hot.address() || m.source == c.cold.address() || m.source == c.predictor.address();
    if (m.source == c.sampler.address() && m.reason) {
      start_sampler(self);
      return;
    }
    if (!current || !m.reason) return;
    if (st.busy) on_step_failed(self, st.step, describe(m.reason));
    else restart_compute(self);
  });
  return {
      [self](stage_atom, int64_t k, bool up, std::string& why) {
        auto& st = self->state;
        if (k < 0 || static_cast<size_t>(k) >= st.p->stages.size()) return;
        const auto& rs = st.p->stages[static_cast<size_t>(k)];
        st.p->stats->set_stage_up(static_cast<size_t>(k), up);
        // A stage lost, or back on a fresh assignment (a new worker, or one whose caches were reset):
        // the slots' keys and values are not all there any more, whichever way the loss came (a step
        // in flight fails and forgets them too; one between requests must as well).
        if (st.prefix) st.prefix->forget_all();
        if (!up) {
          st.p->set_stage_lost(static_cast<size_t>(k), fmt::format("stage {}: {}", rs.where, why));
          if (st.busy) on_step_failed(self, st.step, st.p->stage_lost());
          return;
        }
        st.p->set_stage_lost(static_cast<size_t>(k), {});
        // Back: the compute actors a failed step left are started again once nothing else is lost.
        if (!st.busy && device_lost(*st.p).empty()) restart_compute(self);
        schedule(self);
      },
      [self](submit_atom, int64_t id, generation_request& r) {
        auto& st = self->state;
        sequence s;
        s.id = id;
        s.sink = caf::actor_cast<caf::actor>(self->current_sender());
        s.submitted = clock_type::now();
        const hparams& hp = st.p->m->hp();
        std::string bad;
        if (r.prompt.empty()) bad = "the prompt is empty";
        else if (static_cast<int64_t>(r.prompt.size()) > st.p->ctx->n_ctx())
          bad = fmt::format("the prompt has {} tokens, more than the context of {}", r.prompt.size(), st.p->ctx->n_ctx());
        else if (r.n_predict < 0) bad = "n_predict is negative";
        for (token_id t : r.prompt)
          if (bad.empty() && (t < 0 || t >= hp.n_vocab)) bad = fmt::format("token id {} is outside the vocabulary of {}", t, hp.n_vocab);
        if (bad.empty()) bad = device_lost(*st.p);  // a lost device runs nothing more
        s.req = std::move(r);
        st.seqs.emplace(id, std::move(s));
        if (!bad.empty()) return finish(self, id, "error", bad);
        st.waiting.push_back(id);
        schedule(self);
      },
      [self](slot_atom, slot_request& r) {
        self->state.slot_requests.emplace_back(std::move(r), caf::actor_cast<caf::actor>(self->current_sender()));
        schedule(self);  // now when idle, else when the step in flight ends
      },
      [self](cancel_atom, int64_t id) {
        auto& st = self->state;
        auto it = st.seqs.find(id);
        if (it == st.seqs.end()) return;
        if (it->second.slot < 0) return finish(self, id, "cancelled");
        it->second.cancelled = true;
        schedule(self);  // when idle it leaves now; else at the end of the step
      },
  };
}

}  // namespace

scheduler_actor spawn_scheduler(caf::actor_system& sys, std::shared_ptr<compute_resources> parts, int64_t prefill_chunk, telemetry_actor telemetry) {
  return sys.spawn(scheduler_fn, std::move(parts), prefill_chunk, std::move(telemetry));
}

}  // namespace hotcold::actors
