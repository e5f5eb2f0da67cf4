// The sampler and telemetry actors: light work, so they run on CAF's scheduler threads.
#include <map>

#include <caf/all.hpp>

#include "actors/pipeline.hpp"

namespace hotcold::actors {
namespace {

// Each request's sampler (its parameters, generator and recent tokens) lives here between steps.
struct sampler_state {
  std::map<int64_t, sampler> samplers;
  static inline const char* name = "sampler";
};

sampler_actor::behavior_type sampler_fn(sampler_actor::stateful_pointer<sampler_state> self, std::shared_ptr<compute_resources> p) {
  return {
      [self, p](open_atom, int64_t request, const sampling_params& params, const std::vector<token_id>& history) {
        // (A request's grammar was checked where it came in.)
        auto [it, fresh] = self->state.samplers.insert_or_assign(request, sampler(params, params.grammar.empty() ? nullptr : &p->m->grammar_tokens()));
        for (token_id t : history) it->second.accept(t);
      },
      [self, p](sample_atom, const sample_job& job) -> caf::result<sampled_tokens> {
        p->stats->set_mailbox(actor_id::sampler, static_cast<int64_t>(self->mailbox().size()));
        trace_scope span(p->trace, step_part::sample, job.logits.step, p->m->hp().n_layer, static_cast<int64_t>(job.requests.size()));
        sampled_tokens out;
        out.tokens.reserve(job.requests.size());
        for (size_t k = 0; k < job.requests.size(); ++k) {
          auto it = self->state.samplers.find(job.requests[k]);
          if (it == self->state.samplers.end()) return caf::make_error(caf::sec::runtime_error, "sampler: unknown request " + std::to_string(job.requests[k]));
          const std::span<const float> logits(job.logits.row(job.rows[k]), static_cast<size_t>(job.logits.cols));
          token_id t = 0;
          try {
            t = it->second.sample(logits);
          } catch (const logits_error& e) {  // (this request fails; the others in the step go on)
            out.errors.resize(job.requests.size());
            out.errors[k] = e.what();
            out.tokens.push_back(t);
            continue;
          }
          it->second.accept(t);
          out.tokens.push_back(t);
          if (const int32_t n = it->second.params().logprobs; n >= 0) {
            out.probs.resize(job.requests.size());
            out.probs[k] = logprobs_of(logits, t, n);
          }
        }
        return out;
      },
      [self](close_atom, int64_t request) { self->state.samplers.erase(request); },
  };
}

struct telemetry_state {
  telemetry_totals totals;
  static inline const char* name = "telemetry";
};

telemetry_actor::behavior_type telemetry_fn(telemetry_actor::stateful_pointer<telemetry_state> self, std::shared_ptr<live_stats> stats) {
  return {
      [self, stats](step_atom, const step_record& r) {
        if (stats) stats->set_mailbox(actor_id::telemetry, static_cast<int64_t>(self->mailbox().size()));
        auto& t = self->state.totals;
        ++t.steps;
        t.failed_steps += r.failed;
        t.busy_s += r.seconds;
        if (!r.failed) t.prompt_tokens += r.prompt_tokens, t.generated_tokens += r.generated_tokens;
      },
      [self](const done_event& d) {
        auto& t = self->state.totals;
        ++t.requests_done;
        t.requests_failed += d.finish == "error";
        t.prompt_tokens_cached += d.cached_tokens;
      },
      [self](totals_atom, int64_t restarts) { self->state.totals.restarts += restarts; },
      [self](totals_atom) { return self->state.totals; },
  };
}

}  // namespace

sampler_actor spawn_sampler(caf::actor_system& sys, std::shared_ptr<compute_resources> parts) { return sys.spawn(sampler_fn, std::move(parts)); }
telemetry_actor spawn_telemetry(caf::actor_system& sys, std::shared_ptr<live_stats> stats) { return sys.spawn(telemetry_fn, std::move(stats)); }

}  // namespace hotcold::actors
