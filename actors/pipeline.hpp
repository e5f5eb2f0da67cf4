#pragma once
// The actor pipeline (DESIGN.md, "The walk of one token"):
//
//   scheduler ── step ──▶ hot executor: per layer attention, then
//                           predictor ── active set ──▶ split by placement:
//                             hot rows on the hot device's queue  ┐ at the same time,
//                             cold pool: cold rows on CPU workers ┘ summed
//                         head ── logits ──▶ scheduler ──▶ sampler ── tokens ──▶ scheduler ──▶ clients
//   telemetry: step and request records from the scheduler
//
// The scheduler admits requests into KV slots, forms one step at a time from every running sequence
// (continuous batching: sequences join and leave at step boundaries), chunks long prompts so running
// streams keep producing tokens, and supervises the compute actors: when one fails it restarts them,
// the sequences of the failed step are retried one at a time, and the one whose step fails alone
// gets an error while the rest go on. Compute runs on detached actors (threads of their own) and the
// CPU workers, never on CAF's scheduler threads.
#include <chrono>
#include <functional>
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "engine/hot_cold_ffn.hpp"
#include "actors/live_stats.hpp"
#include "actors/messages.hpp"
#include "engine/prefix_index.hpp"
#include "actors/runtime.hpp"
#include "actors/stages.hpp"
#include "engine/forward.hpp"

namespace hotcold::actors {

// Called by the compute actors before each layer's work (stage attention, predict, cold_ffn) with the
// requests of its tokens (the step's, or a micro-batch's own); a test throws from it to inject a
// fault, or holds a stage to see what runs meanwhile.
using fault_hook = std::function<void(step_part s, int64_t layer, const std::vector<int64_t>& requests)>;

struct pipeline_options {
  int64_t prefill_chunk = 32;  // prompt tokens per step while other sequences are decoding
  std::shared_ptr<const hot_rows> hot;  // the hot device's rows; null: every FFN neuron on the CPU workers
  trace_recorder* trace = nullptr;      // must outlive the pipeline
  fault_hook fault;
  runtime_options runtime;
  // Every recall_every-th step, each sparse layer also computes its first token's FFN gates densely
  // and counts the firing neurons its predictor missed (predictor recall in live_stats; 0: never).
  int64_t recall_every = 0;
  bool pin_workers = true;  // pin the CPU workers (the cold pool's) to cores; HOTCOLD_NO_PIN=1 in the environment also says no
  // Micro-batches a step of several sequences is split into, so that the hot device works on one
  // (attention, predictor, hot rows) while the cold pool works on another. Used where the device holds
  // every layer's attention and predictor (and for steps of at least two sequences); 1: never.
  int micro_batches = 1;
  // Stages of layers on other hosts (`hotcold worker`s; docs/distributed.md): each runs its layers
  // on the step's residual stream; this process runs the embeddings, every layer no stage holds, the
  // head and sampling. Connected, checked against the plan's file_id (model/file_identity) and
  // assigned when the pipeline starts (std::runtime_error naming a stage that cannot be had).
  stage_plan stages;
  // Reusing cached prompt beginnings across requests (actors/prefix_reuse.hpp): each slot's rows, and
  // a prefix store of up to prefix_store_bytes (blocks of prefix_block_tokens positions; 0: slots
  // alone), each stage on another host keeping its layers' rows of as many blocks.
  bool reuse_prefixes = true;
  uint64_t prefix_store_bytes = 0;
  int64_t prefix_block_tokens = 16;
  prefix_index::hash_fn prefix_hash;  // the index's (tests force collisions)
  // A sequence that fills its context goes on after dropping half of what follows its first `keep`
  // tokens (and BOS; -1: its whole prompt), as llama.cpp's --context-shift; without, it ends
  // ("context"). Stages on other hosts shift their layers' rows as they are told with each step.
  bool context_shift = false;
  int64_t keep = 0;
  std::string model_identity;  // the model file's (model/file_identity): what slot files are checked against
};

// What the compute actors share. The context holds the KV caches (one slot per sequence in flight)
// and the CPU workers; it outlives any actor, so a restarted executor finds the caches intact.
struct compute_resources {
  std::shared_ptr<const model> m;
  std::shared_ptr<inference_context> ctx;
  std::shared_ptr<const hot_rows> hot;
  trace_recorder* trace = nullptr;
  fault_hook fault;
  std::shared_ptr<live_stats> stats;  // what the actors measure (always present)
  int64_t recall_every = 0;
  int actor_core = -1;  // the core the compute actors' threads share when the workers are pinned (-1: any)
  std::atomic<int> micro_batches{1};  // read at each step (pipeline::set_micro_batches)
  std::vector<remote_stage> stages;   // layers on other hosts (pipeline_options::stages)
  bool reuse_prefixes = true;         // pipeline_options'
  prefix_index::hash_fn prefix_hash;
  bool context_shift = false;
  int64_t keep = 0;
  std::string model_identity;
  // Why a stage's worker is gone or silent, by stage (its link tells the scheduler, which sets and
  // clears these); empty while every stage answers. Like a lost device, nothing runs meanwhile.
  void set_stage_lost(size_t stage, std::string why) {
    std::lock_guard lock(stage_mutex_);
    if (stage_lost_.size() <= stage) stage_lost_.resize(stage + 1);
    stage_lost_[stage] = std::move(why);
  }
  // The first lost stage's why, or empty.
  std::string stage_lost() const {
    std::lock_guard lock(stage_mutex_);
    for (const auto& why : stage_lost_)
      if (!why.empty()) return why;
    return {};
  }

 private:
  mutable std::mutex stage_mutex_;
  std::vector<std::string> stage_lost_;
};

// The scheduler: requests in (the sender of each hears its token, logits and done events, in order),
// cancellations, and the stage links' news (stages.hpp, watch_atom).
using scheduler_actor = caf::typed_actor<caf::reacts_to<submit_atom, int64_t, generation_request>, caf::reacts_to<cancel_atom, int64_t>,
                                         caf::reacts_to<stage_atom, int64_t, bool, std::string>, caf::reacts_to<slot_atom, slot_request>>;

using pipeline_event = std::variant<token_event, logits_event, done_event, slot_event>;

class pipeline {
 public:
  // ctx: its n_seq() slots are the sequences in flight at once; its mode says dense or sparse.
  pipeline(std::shared_ptr<inference_context> ctx, pipeline_options options);
  ~pipeline();  // cancels what is running, stops the actors
  pipeline(const pipeline&) = delete;
  pipeline& operator=(const pipeline&) = delete;

  // Queues a request; its events arrive through next(). Returns its id. A request that cannot run
  // (empty prompt, unknown token, longer than the context) ends at once with finish "error".
  int64_t submit(generation_request r);
  void cancel(int64_t request);
  // A slot's cache saved to `path`, restored from it, or erased (action: save, restore, erase), when no
  // step is in flight; its slot_event arrives through next(). Returns its id (from the requests').
  int64_t slot_action(std::string action, int64_t slot, std::string path);
  // The next event of any request, in the order each request produced them; nullopt after `timeout`.
  std::optional<pipeline_event> next(std::chrono::milliseconds timeout = std::chrono::minutes(10));
  telemetry_totals totals();
  // Micro-batches for the steps that start from now on (pipeline_options::micro_batches).
  void set_micro_batches(int m) { parts_->micro_batches.store(std::max(1, m)); }
  // Live measurements (compute seconds per layer and stage, neurons, bytes read, mailboxes).
  std::shared_ptr<const live_stats> stats() const { return parts_->stats; }

  inference_context& context() { return *parts_->ctx; }

 private:
  std::shared_ptr<compute_resources> parts_;
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::unique_ptr<caf::scoped_actor> self_;
  scheduler_actor scheduler_;
  telemetry_actor telemetry_;
  int64_t next_id_ = 0;
};

// The actors, for the pipeline and for tests that drive one alone.
predictor_actor spawn_predictor(caf::actor_system& sys, std::shared_ptr<compute_resources> parts);
cold_pool_actor spawn_cold_pool(caf::actor_system& sys, std::shared_ptr<compute_resources> parts);
hot_executor_actor spawn_hot_executor(caf::actor_system& sys, std::shared_ptr<compute_resources> parts, predictor_actor predictor, cold_pool_actor cold);
sampler_actor spawn_sampler(caf::actor_system& sys, std::shared_ptr<compute_resources> parts);
telemetry_actor spawn_telemetry(caf::actor_system& sys, std::shared_ptr<live_stats> stats = nullptr);
scheduler_actor spawn_scheduler(caf::actor_system& sys, std::shared_ptr<compute_resources> parts, int64_t prefill_chunk, telemetry_actor telemetry);

// A CAF error's text for people (the context string when there is one).
std::string describe(const caf::error& e);

}  // namespace hotcold::actors
