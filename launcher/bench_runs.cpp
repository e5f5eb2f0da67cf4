#include "launcher/bench_runs.hpp"

#include <algorithm>
#include <chrono>
#include <set>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/read_costs.hpp"

namespace hotcold::launcher {

double bytes_per_step(const model& m, const rows_read& r, int64_t steps) {
  const read_costs c(m);
  double bytes = static_cast<double>(c.output + c.embedding_row);
  for (size_t l = 0; l < c.layer_fixed.size(); ++l)
    bytes += static_cast<double>(c.layer_fixed[l]) +
             static_cast<double>(c.ffn_rows(l, static_cast<uint64_t>(r.neurons[l]), static_cast<uint64_t>(r.down[l]))) / static_cast<double>(steps);
  return bytes;
}

std::vector<config> configs_of(const bench_args& a, ffn_mode mode, comparisons& c) {
  const bool actors_first = a.pipeline == "actors";
  std::vector<config> configs{{mode, actors_first, a.parallel, a.micro_batches}};
  if (a.vs_dense && mode != ffn_mode::dense) c.dense = static_cast<int>(configs.size()), configs.push_back({ffn_mode::dense, actors_first, a.parallel, a.micro_batches});
  if (a.vs_direct) c.other_pipeline = static_cast<int>(configs.size()), configs.push_back({mode, !actors_first, a.parallel, a.micro_batches});
  if (a.vs_parallel > 0) c.parallel = static_cast<int>(configs.size()), configs.push_back({mode, actors_first, a.vs_parallel, a.micro_batches});
  if (a.vs_micro_batches > 0) {
    if (!actors_first) throw std::invalid_argument("--vs-micro-batches: micro-batches are the actors' (--pipeline actors)");
    c.micro = static_cast<int>(configs.size()), configs.push_back({mode, true, a.parallel, a.vs_micro_batches});
  }
  if (a.vs_depth >= 0) c.depth = static_cast<int>(configs.size()), configs.push_back({mode, actors_first, a.parallel, a.micro_batches, a.vs_depth});
  if (a.vs_unconstrained) c.unconstrained = static_cast<int>(configs.size()), configs.push_back({mode, actors_first, a.parallel, a.micro_batches, -1, false});
  return configs;
}

bench_runner::bench_runner(loaded& l, bool with_actors, std::string grammar)
    : l_(l), ctx_(*l.ctx), untimed_(static_cast<size_t>(l.m->hp().n_layer)), grammar_(std::move(grammar)) {
  if (with_actors) {
    // No prefix store: a repetition must not find the prompt the one before it computed (a prompt at
    // depth reuses its slot's rows of the depth alone; see prompt()).
    l.prefix_store_bytes = 0;
    pipe_ = l.make_pipeline();
  }
}

void bench_runner::set(const config& c) {
  ctx_.set_mode(c.mode);
  if (pipe_) pipe_->set_micro_batches(c.micro);
  now_ = c.constrained ? grammar_ : std::string();
}

void bench_runner::fill(int sequences, int depth) {
  std::vector<token_id> tokens;
  std::vector<int64_t> seqs, positions;
  for (int s = 0; s < sequences; ++s)
    for (int p0 = 0; p0 < depth; p0 += static_cast<int>(max_step_tokens)) {
      const int n = std::min(depth - p0, static_cast<int>(max_step_tokens));
      tokens.clear(), seqs.assign(static_cast<size_t>(n), s), positions.clear();
      for (int i = 0; i < n; ++i) tokens.push_back(token_at(p0 + i + 101 * s)), positions.push_back(p0 + i);
      ctx_.forward_step(tokens, seqs, positions);
    }
}

double bench_runner::decode(bool actors_pipeline, int sequences, int n, int depth) {
  const int K = sequences;
  untimed_ = rows_read(static_cast<size_t>(l_.m->hp().n_layer));
  if (actors_pipeline && depth > 0) return decode_actors_at_depth(K, n, depth);
  slots_.resize(static_cast<size_t>(K)), positions_.resize(static_cast<size_t>(K)), step_tokens_.resize(static_cast<size_t>(K));
  for (int s = 0; s < K; ++s) slots_[static_cast<size_t>(s)] = s;
  const auto t0 = std::chrono::steady_clock::now();
  if (actors_pipeline) {
    for (int s = 0; s < K; ++s) {
      actors::generation_request r;
      // n steps, as the forward pass's n calls: the prompt's token, then n - 1 generated ones (the
      // n-th is sampled, never run).
      r.prompt = {token_at(101 * s)};
      r.n_predict = n;
      r.ignore_eos = true;
      r.sampling.temperature = 0;
      r.sampling.grammar = now_;
      pipe_->submit(std::move(r));
    }
    drain(K);
  } else {
    for (int i = 0; i < n; ++i) {
      if (K == 1) {
        ctx_.forward(token_at(i), depth + i);
        continue;
      }
      for (int s = 0; s < K; ++s) step_tokens_[static_cast<size_t>(s)] = token_at(i + 101 * s), positions_[static_cast<size_t>(s)] = depth + i;
      ctx_.forward_step(step_tokens_, slots_, positions_);
    }
  }
  return static_cast<double>(n) * K / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Prompts of depth + 1 tokens (untimed: the scheduler chunks them beside the others' decodes); from
// the moment the last sequence has its first token, every sequence decodes in the same steps, and the
// time runs until each has n more. Then they are cancelled.
double bench_runner::decode_actors_at_depth(int K, int n, int depth) {
  std::vector<int64_t> ids;
  const rows_read at_start(ctx_);
  for (int s = 0; s < K; ++s) {
    actors::generation_request r;
    for (int i = 0; i <= depth; ++i) r.prompt.push_back(token_at(i + 101 * s));
    r.n_predict = n + depth + 1;  // (more than a head start can take: a sequence never ends before its n)
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    r.sampling.grammar = now_;
    ids.push_back(pipe_->submit(std::move(r)));
  }
  std::set<int64_t> started;
  std::map<int64_t, int> after;  // tokens since every sequence started
  int reached = 0;
  std::chrono::steady_clock::time_point t0, t1;
  while (reached < K) {
    auto ev = pipe_->next();
    if (!ev) throw std::runtime_error("the pipeline stopped answering");
    if (auto* d = std::get_if<actors::done_event>(&*ev))
      throw std::runtime_error(fmt::format("a decode at depth {} ended before its {} tokens ({}{})", depth, n, d->finish, d->error.empty() ? "" : ": " + d->error));
    auto* t = std::get_if<actors::token_event>(&*ev);
    if (!t) continue;
    if (static_cast<int>(started.size()) < K) {
      if (started.insert(t->request).second && static_cast<int>(started.size()) == K) {
        t0 = std::chrono::steady_clock::now();
        untimed_ = rows_read(ctx_) -= at_start;
      }
      continue;
    }
    if (++after[t->request] == n && ++reached == K) t1 = std::chrono::steady_clock::now();
  }
  for (int64_t id : ids) pipe_->cancel(id);
  drain(K);
  return static_cast<double>(n) * K / std::chrono::duration<double>(t1 - t0).count();
}

// On the actors, a prompt at depth is a request whose first `depth` tokens a request before it left in
// its slot (untimed): the timed one reuses those rows (and no more: checked) and computes the n after.
double bench_runner::prompt(bool actors_pipeline, int n, int depth) {
  std::vector<token_id> prompt(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) prompt[static_cast<size_t>(i)] = token_at(depth + i);
  actors::generation_request r;
  if (actors_pipeline && depth > 0) {
    for (int i = 0; i < depth; ++i) r.prompt.push_back(token_at(i));
    r.cache_prompt = false;
    pipe_->submit(r);
    drain(1);
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (actors_pipeline) {
    r.prompt.insert(r.prompt.end(), prompt.begin(), prompt.end());
    r.cache_prompt = depth > 0;
    pipe_->submit(std::move(r));
    if (const int64_t reused = drain(1); reused != depth)
      throw std::runtime_error(fmt::format("a prompt at depth {} reused {} cached positions", depth, reused));
  } else {
    ctx_.forward_batch(prompt, depth);
  }
  return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t bench_runner::device_read(bool actors_pipeline) const {
  if (actors_pipeline) return pipe_ ? pipe_->stats()->read().device_bytes : uint64_t{0};
  return (l_.split ? l_.split->computed().hot_read : 0) + ctx_.device_read();
}

int64_t bench_runner::drain(int requests) {
  int64_t reused = 0;
  for (int done = 0; done < requests;) {
    auto ev = pipe_->next();
    if (!ev) throw std::runtime_error("the pipeline stopped answering");
    if (auto* d = std::get_if<actors::done_event>(&*ev)) {
      if (d->finish == "error") throw std::runtime_error(d->error);
      reused += d->cached_tokens;
      ++done;
    }
  }
  return reused;
}

namespace {

// Untimed, as llama-bench does before its repetitions: a prompt of the measured length and a short
// generation per configuration, so that the first repetition does not pay for first touches (the
// prompt's KV cache pages, the batch products' buffers, the actors' start). Counts what a step reads.
void warm_up(bench_runner& run, const bench_args& a, const std::vector<config>& configs, const loaded& l, int depth, measurement& out) {
  for (size_t k = 0; k < configs.size(); ++k) {
    const auto& c = configs[k];
    run.set(c);
    if (a.n_prompt > 0) run.prompt(c.actors, a.n_prompt, c.depth_at(depth));
    if (a.n_gen > 0) {
      const rows_read before(*l.ctx);
      run.decode(c.actors, c.sequences, 2, c.depth_at(depth));
      out.per_config[k].step_bytes = bytes_per_step(*l.m, rows_read(*l.ctx) -= before, 2);
    }
  }
}

// One configuration's decode repetition, with what it read and the device's traffic.
void decode_once(bench_runner& run, const bench_args& a, const config& c, const loaded& l, int depth, runs& r) {
  const rows_read before(*l.ctx);
  const uint64_t device_before = run.device_read(c.actors);
  const device_experts::counts experts_before = l.experts ? l.experts->counted() : device_experts::counts{};
  const int64_t guessed_before = l.experts ? l.experts->guess_trials().tokens_on : 0;
  const devices::device_traffic traffic_before = l.dev ? l.dev->traffic() : devices::device_traffic{};
  const auto jobs_before = l.dev ? l.dev->job_seconds() : std::array<double, devices::n_operations>{};
  const ram_tier::counts disk_before = l.disk ? l.disk->counted() : ram_tier::counts{};
  r.tg.push_back(run.decode(c.actors, c.sequences, a.n_gen, c.depth_at(depth)));
  r.computed += (rows_read(*l.ctx) -= before) -= run.untimed_rows();
  r.device_bytes += run.device_read(c.actors) - device_before;
  if (l.dev) {
    r.traffic += l.dev->traffic() - traffic_before;
    const auto jobs = l.dev->job_seconds();
    for (size_t op = 0; op < jobs.size(); ++op) r.job_seconds[op] += jobs[op] - jobs_before[op];
  }
  if (l.experts) {
    const auto& now = l.experts->counted();
    r.expert_lookups += now.lookups - experts_before.lookups, r.expert_hits += now.hits - experts_before.hits;
    r.expert_uploads += now.uploads - experts_before.uploads;
    const auto& res = l.experts->residency();
    r.expert_guess_tokens += !res.prefetch ? 0 : res.prefetch_on_trial ? l.experts->guess_trials().tokens_on - guessed_before : a.n_gen * c.sequences;
  }
  if (l.disk) {
    const auto now = l.disk->counted();
    r.disk_bytes += now.disk_bytes - disk_before.disk_bytes, r.ram_lookups += now.lookups - disk_before.lookups;
    r.ram_hits += now.hits - disk_before.hits, r.io_wait_seconds += now.wait_seconds - disk_before.wait_seconds;
    r.read_ahead += now.ahead - disk_before.ahead, r.read_missed += now.missed - disk_before.missed;
    r.disk_needed += now.needed_bytes - disk_before.needed_bytes;
    r.token_steps += now.token_steps - disk_before.token_steps, r.guessed_steps += now.guessed_steps - disk_before.guessed_steps;
  }
  r.tokens += a.n_gen;
}

}  // namespace

// The roofline: each configuration's read bandwidth, over as many bytes as its step reads
// (read_probe: this machine serves a few hundred MB read again and again partly from its caches; the
// warm-up's count first, then the repetitions' so far), measured before the first repetition and
// after each, so each repetition is held against the bandwidth of its own minute (the better of the
// measurements on either side of it): this machine's bandwidth drifts with its neighbours.
measurement measure(bench_runner& run, const bench_args& a, const std::vector<config>& configs, const loaded& l, int depth) {
  const model& m = *l.m;
  measurement out;
  out.per_config.assign(configs.size(), runs(static_cast<size_t>(m.hp().n_layer), static_cast<double>(read_costs(m).dense_step())));
  // The depth's tokens in every slot the direct configurations read, once: the timed tokens only ever
  // write the positions after them (what the cache holds changes no speed).
  int direct_slots = 0, deepest = 0;
  for (const auto& c : configs)
    if (!c.actors) direct_slots = std::max(direct_slots, c.sequences), deepest = std::max(deepest, c.depth_at(depth));
  if (deepest > 0 && direct_slots > 0) run.fill(direct_slots, deepest);
  if (!a.no_warmup) warm_up(run, a, configs, l, depth, out);
  auto probe_all = [&] {
    for (auto& r : out.per_config) r.probes.push_back(out.probe->measure(static_cast<uint64_t>(r.step_bytes)));
  };
  if (a.roofline && a.n_gen > 0) {
    // (It grows when the repetitions count more bytes a step than the warm-up's two steps did.)
    double most = 0;
    for (const auto& r : out.per_config) most = std::max(most, r.step_bytes);
    out.probe = std::make_unique<read_probe>(l.ctx->pool(), static_cast<uint64_t>(most));
    probe_all();
  }
  for (int i = 0; i < a.reps; ++i) {
    for (size_t k = 0; k < configs.size(); ++k) {
      auto& r = out.per_config[k];
      run.set(configs[k]);
      if (a.n_prompt > 0) {
        const devices::device_traffic before = l.dev ? l.dev->traffic() : devices::device_traffic{};
        r.pp.push_back(run.prompt(configs[k].actors, a.n_prompt, configs[k].depth_at(depth)));
        if (l.dev) r.prompt_traffic += l.dev->traffic() - before;
        r.prompt_tokens += a.n_prompt;
      }
      if (a.n_gen > 0) decode_once(run, a, configs[k], l, depth, r);
    }
    if (out.probe) {
      for (auto& r : out.per_config)
        if (r.tokens > 0) r.step_bytes = bytes_per_step(m, r.computed, r.tokens);
      probe_all();
    }
    if (!a.vs_llama_bench.empty())
      out.llama.push_back(run_llama_bench(a.vs_llama_bench, m.path(), static_cast<int>(l.ctx->pool().size()), a.n_prompt, a.n_gen, depth));
  }
  return out;
}

}  // namespace hotcold::launcher
