#include "actors/pipeline.hpp"

#include <algorithm>
#include <cstdlib>

#include <caf/all.hpp>

#include "engine/read_costs.hpp"

namespace hotcold::actors {

pipeline::pipeline(std::shared_ptr<inference_context> ctx, pipeline_options options) {
  parts_ = std::make_shared<compute_resources>();
  parts_->m = ctx->shared_model();
  parts_->ctx = std::move(ctx);
  parts_->hot = std::move(options.hot);
  parts_->trace = options.trace;
  parts_->fault = std::move(options.fault);
  parts_->stats = std::make_shared<live_stats>(*parts_->m, parts_->hot ? parts_->hot->device().name() : std::string());
  parts_->recall_every = options.recall_every;
  parts_->micro_batches.store(std::max(1, options.micro_batches));
  parts_->reuse_prefixes = options.reuse_prefixes;
  parts_->prefix_hash = options.prefix_hash;
  parts_->context_shift = options.context_shift;
  parts_->keep = options.keep;
  parts_->model_identity = options.model_identity;
  {  // the store's blocks (none without reuse or memory for it; the stages hold as many blocks of their layers)
    const int64_t block_tokens = std::max<int64_t>(1, options.prefix_block_tokens);
    const uint64_t block = static_cast<uint64_t>(block_tokens) * parts_->ctx->cache_position_bytes();
    parts_->ctx->reserve_prefix_store(options.reuse_prefixes ? static_cast<int64_t>(options.prefix_store_bytes / block) : 0, block_tokens);
  }
  if (options.pin_workers && std::getenv("HOTCOLD_NO_PIN") == nullptr) parts_->actor_core = parts_->ctx->pool().pin_workers();
  configure(cfg_, options.runtime);
  if (!options.stages.empty()) configure_network(cfg_, options.stages.tls_dir);
  sys_ = std::make_unique<caf::actor_system>(cfg_);
  if (!options.stages.empty()) {
    const inference_context& c = *parts_->ctx;
    const read_costs costs(*parts_->m);
    std::vector<uint64_t> layer_bytes;
    for (size_t l = 0; l < costs.layer_fixed.size(); ++l) layer_bytes.push_back(costs.layer_fixed[l] + costs.ffn_dense[l]);
    auto plan = options.stages;
    std::vector<std::string> named;
    for (const auto& s : plan.stages) named.push_back(s.where());
    parts_->stats->set_stages(std::move(named));
    plan.kv_layer_row_bytes = static_cast<uint64_t>(kv_read_per_token(parts_->m->hp(), c.cache_types(), 1));
    const stage_context sc{plan.file_id, c.n_ctx(), c.n_seq(), c.cache_types(), c.mode(), c.prefix_store_blocks(), c.prefix_block_tokens()};
    parts_->stages = connect_stages(*sys_, plan, layer_bytes, sc, parts_->stats);
    std::vector<std::string> where;
    for (const auto& s : parts_->stages) where.push_back(s.where);
    parts_->stats->set_stages(std::move(where));
  }
  self_ = std::make_unique<caf::scoped_actor>(*sys_);
  telemetry_ = spawn_telemetry(*sys_, parts_->stats);
  scheduler_ = spawn_scheduler(*sys_, parts_, options.prefill_chunk, telemetry_);
}

pipeline::~pipeline() {
  for (const auto& s : parts_->stages) (*self_)->send_exit(s.actor, caf::exit_reason::user_shutdown);
  (*self_)->send_exit(scheduler_, caf::exit_reason::user_shutdown);
  (*self_)->send_exit(telemetry_, caf::exit_reason::user_shutdown);
  scheduler_ = nullptr;
  telemetry_ = nullptr;
  self_.reset();
  sys_.reset();  // waits for every actor to end
}

int64_t pipeline::submit(generation_request r) {
  const int64_t id = next_id_++;
  (*self_)->send(scheduler_, submit_atom::value, id, std::move(r));
  return id;
}

void pipeline::cancel(int64_t request) { (*self_)->send(scheduler_, cancel_atom::value, request); }

int64_t pipeline::slot_action(std::string action, int64_t slot, std::string path) {
  const int64_t id = next_id_++;
  (*self_)->send(scheduler_, slot_atom::value, slot_request{id, std::move(action), slot, std::move(path)});
  return id;
}

std::optional<pipeline_event> pipeline::next(std::chrono::milliseconds timeout) {
  std::optional<pipeline_event> ev;
  (*self_)->receive([&](token_event& e) { ev = std::move(e); }, [&](logits_event& e) { ev = std::move(e); },
                    [&](done_event& e) { ev = std::move(e); }, [&](slot_event& e) { ev = std::move(e); }, caf::after(timeout) >> [] {});
  return ev;
}

telemetry_totals pipeline::totals() {
  telemetry_totals t;
  (*self_)->request(telemetry_, caf::infinite, totals_atom::value).receive([&](telemetry_totals& r) { t = r; }, [](caf::error&) {});
  return t;
}

}  // namespace hotcold::actors
