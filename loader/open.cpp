#include "loader/open.hpp"

#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "devices/device_info.hpp"
#include "engine/read_costs.hpp"

namespace hotcold::loader {

namespace {

void say(const log_line& log, const std::string& line) {
  if (log) log(line);
}

// The KV cache (keys and values, every layer and sequence) must fit in this machine's memory.
void check_kv_fits(const hparams& hp, int64_t ctx, int64_t n_seq, kv_types kv) {
  const double kv_bytes = kv_read_per_token(hp, kv, 1) * static_cast<double>(hp.n_layer) * static_cast<double>(ctx) * static_cast<double>(n_seq);
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (ram > 0 && kv_bytes > ram)
    throw std::invalid_argument(fmt::format("-c {}: the KV cache for {} sequence{} would take {:.1f} GiB, more than this machine's {:.1f} GiB of memory",
                                            ctx, n_seq, n_seq == 1 ? "" : "s", kv_bytes / double(1ull << 30), ram / double(1ull << 30)));
}

// What the device can run besides hot rows, for the plan: everything on sim; on a GPU what its kernels
// read (attention, predictors, dense FFNs and the head with F16, Q8_0 or Q4_0 weights).
plan_options plan_options_for(const model& m, const devices::device& dev, const inference_context& ctx, const open_options& o) {
  const auto& hp = m.hp();
  const auto& w0 = m.weights().layers[0];
  const bool split_ffn = m.has_predictors();
  plan_options po;
  po.ctx = ctx.n_ctx();
  po.n_seq = ctx.n_seq();
  po.kv = ctx.cache_types();
  // A GPU's attention reads one f16 or f32 cache for keys and values: other types keep attention here.
  const bool gpu_cache = po.kv.plain();
  po.attention = attention_runs_on(dev, hp, w0) && (split_ffn || hp.moe() || dense_ffn_runs_on(dev, w0)) && (dev.runs_host_work() || gpu_cache);
  if (!dev.runs_host_work() && !gpu_cache && attention_runs_on(dev, hp, w0))
    say(o.log, fmt::format("hotcold: {}'s attention kernels read an f16 or f32 cache, not {}: attention and its cache stay on the CPU", dev.name(),
                           kv_types_name(po.kv)));
  po.experts = dense_ffn_reads(dev, {&w0.ffn_gate_exps, &w0.ffn_up_exps, &w0.ffn_down_exps});
  po.shared_experts = dense_ffn_reads(dev, {&w0.ffn_gate_shexp, &w0.ffn_up_shexp, &w0.ffn_down_shexp});
  po.n_cpu_moe = o.n_cpu_moe;
  po.predictors = w0.pred_fc1 && dev.supports(devices::operation::predict, w0.pred_fc1.type) && w0.pred_fc2.type == w0.pred_fc1.type;
  po.head = dev.supports(devices::operation::matvec, m.weights().output.type);
  po.n_gpu_layers = o.n_gpu_layers;
  po.first_layer = o.first_layer, po.last_layer = o.last_layer;
  po.step_bytes = split_ffn ? dev.reserve_bytes(devices::operation::ffn_rows, inference_context::max_batch, hp.n_embd, hp.n_ff) : 0;
  po.alloc = dev.allocation();
  po.output_norm = dev.runs_host_work();
  po.pinned_bytes = dev.pinned_bytes(po.alloc.charge(compute_buffer_bytes(m, po.ctx)), po.step_bytes);
  if (hp.moe() && !po.experts)
    say(o.log, fmt::format("hotcold: {}'s kernels do not read this mixture's {} experts (they read F16, Q8_0, Q4_0, Q6_K): every expert runs on the CPU",
                           dev.name(), tensor_type_name(w0.ffn_up_exps.type)));
  if (o.n_gpu_layers >= 0 && split_ffn)
    throw std::invalid_argument("--n-gpu-layers counts the layers of a dense file the device holds whole; a sparse file's plan puts attention "
                                "first and the hot neurons in what is left");
  if (!split_ffn && !hp.moe() && !gpu_cache && !dev.runs_host_work())
    throw std::invalid_argument(fmt::format("--device {} on a dense file holds whole layers, attention with its cache, and its attention kernels read an "
                                            "f16 or f32 cache, not {}: use --cache-type-k and --cache-type-v f16 (or --device cpu)",
                                            dev.name(), kv_types_name(po.kv)));
  if (!split_ffn && !po.attention && !dev.runs_host_work() && (hp.attn_softcap > 0 || hp.n_swa > 0))
    throw std::invalid_argument(fmt::format("--device {} on a dense {} file: its attention job has no soft-capped scores or sliding window, so the "
                                            "file's layers stay on the CPU; use --device cpu",
                                            dev.name(), architecture_name(hp.arch)));
  if (!split_ffn && !po.attention)
    throw std::invalid_argument(fmt::format("--device {} on a dense file: its kernels do not read this file's layers ({} attention, {} FFN weights: "
                                            "they read F16, Q8_0 and Q4_0); use --device cpu",
                                            dev.name(), tensor_type_name(w0.wo.type), tensor_type_name(w0.ffn_up.type)));
  return po;
}

// The plan for this device's budget, the context (the device holds that KV cache), its sequences and
// the KV cache's type: compute buffers, attention with its cache, predictors and the head first (on a
// device that runs them), hot FFN rows in what is left (docs/commands.md, "Devices"). A dense file
// offloads whole layers instead. `hot` gets the placement of a sparse file (the one beside it, or
// planned now).
placement_plan plan_for(const opened_model& r, const open_options& o, placement_data& hot) {
  const model& m = *r.m;
  const plan_options po = plan_options_for(m, *r.dev, *r.ctx, o);
  placement_plan plan = plan_device(m, r.dev->budget(), po);
  if (m.has_predictors() && !o.hot && !po.whole(m.hp().n_layer)) {  // a stage's layers: hot rows for them alone
    if (!o.placement.firing_counts) throw std::invalid_argument("a stage's hot rows need firing counts to plan from");
    plan = plan_placement(m, o.placement.firing_counts(m.path(), m), r.dev->budget(), po);
    hot = placement_data{plan.solution.bytes, plan.solution.hot, {}};
    say(o.log, fmt::format("hotcold: hot rows planned for layers {}-{} alone ({:.1f}% of their profiled firings on hot neurons; not written)", po.first_layer,
                           (po.last_layer < 0 ? m.hp().n_layer : po.last_layer) - 1, 100 * plan.hot_mass));
  } else if (m.has_predictors() && !o.hot) {
    auto placed = ensure_placement(m.path(), m, r.dev->budget(), po, o.placement);
    if (placed.made) {
      say(o.log, fmt::format("hotcold: {}: planned a placement for {:.4g} GiB at context {} ({:.1f}% of the profiled firings on hot neurons); wrote {}",
                             placed.reason, r.dev->budget() / double(1ull << 30), plan.ctx, 100 * placed.plan.hot_mass, placed.path));
      plan = placed.plan;
    }
    hot = std::move(placed.data);
  }
  if (!m.has_predictors() || !plan.solution.hot.empty() || plan.fixed.total() > plan.fixed.compute) {
    std::string table = plan.table();
    if (!table.empty() && table.back() == '\n') table.pop_back();
    say(o.log, table);
  }
  return plan;
}

// The disk tier (--ram-budget) of a model loaded with its FFN rows left in the file. hot: the neurons a
// hot device holds, per layer (sorted; empty: none): the pinned rows follow each layer's prefix of them,
// so that the budget holds the hottest the device does not.
void open_disk_tier(opened_model& r, const open_options& o, const placement_data& hot) {
  std::vector<int64_t> device_rows;  // (each layer's prefix of the hot ids: 0, 1, 2, ...)
  if (!hot.hot.empty()) {
    device_rows.assign(static_cast<size_t>(r.m->hp().n_layer), 0);
    for (size_t il = 0; il < hot.hot.size() && il < device_rows.size(); ++il)
      while (device_rows[il] < static_cast<int64_t>(hot.hot[il].size()) && hot.hot[il][static_cast<size_t>(device_rows[il])] == device_rows[il]) ++device_rows[il];
  }
  const ram_tier_plan plan = plan_ram_tier(*r.m, o.ram_budget, device_rows);
  r.disk = std::make_shared<ram_tier>(r.m, plan, o.disk_io);
  r.disk->input_guess = o.read_ahead_input, r.disk->input_guess_on_trial = o.read_ahead_input_on_trial;
  r.ctx->set_disk_tier(r.disk);
  say(o.log, "hotcold: " + describe(plan, o.ram_budget, r.m->path()));
}

// What the plan (or the caller) puts on the device, in its order: compute buffers, attention with its
// KV cache, predictors, the head; then a sparse file's hot rows, computed beside the cold pool.
void put_on_device(opened_model& r, const open_options& o) {
  const model& m = *r.m;
  const auto& hp = m.hp();
  placement_data hot;
  if (o.hot) hot = *o.hot;
  device_residency residency;
  if (o.residency) {
    residency = *o.residency;
    residency.ctx = r.ctx->n_ctx(), residency.n_seq = r.ctx->n_seq();
  } else {
    r.plan = plan_for(r, o, hot);
    residency = r.plan->residency();
  }
  if (m.ffn_rows_from_disk()) open_disk_tier(r, o, hot);
  expert_residency experts;
  if (o.experts) experts = *o.experts;
  else if (r.plan) experts = r.plan->expert_slots();
  if (o.expert_cache_policy) experts.policy = *o.expert_cache_policy;
  if (o.expert_upload_bytes) experts.upload_bytes_per_token = *o.expert_upload_bytes;
  experts.prefetch = o.expert_prefetch, experts.prefetch_on_trial = o.expert_prefetch_on_trial;
  if (!o.first_experts.empty()) experts.first = o.first_experts;
  if (!o.residency || residency.any() || residency.compute_bytes > 0 || experts.any()) {
    r.device = std::make_shared<const device_layers>(r.m, residency, r.dev, r.ctx->cache_types());
    r.ctx->set_device_layers(r.device);
  }
  if (hp.moe() && experts.any()) {
    r.experts = std::make_shared<device_experts>(r.m, experts, r.device, r.disk);  // (its uploads read through the disk tier, if any)
    r.ctx->set_device_experts(r.experts);
    int64_t held = 0;
    for (int64_t s : experts.slots) held += s;
    say(o.log, fmt::format("hotcold: {} of {} experts on {} ({:.1f} MiB){}", held, hp.n_layer * hp.n_expert, r.dev->name(), r.experts->bytes() / double(1 << 20),
                           held == hp.n_layer * hp.n_expert || experts.policy == expert_policy::fixed
                               ? std::string(", fixed")
                               : fmt::format(", a cache ({}) refilled by up to {:.1f} MiB a token{}", expert_policy_name(experts.policy),
                                             experts.upload_bytes_per_token / double(1 << 20), experts.prefetch ? ", the next layer's guess a layer early" : "")));
  }
  if (m.has_predictors()) {
    try {
      r.hot = std::make_shared<const hot_rows>(r.m, hot, r.dev, r.disk.get());
    } catch (const devices::out_of_device_memory& e) {
      throw std::invalid_argument(fmt::format("{}: the placement's hot rows ({:.1f} MiB) do not fit in what the plan leaves of the budget: {}",
                                              placement_path(m.path()), hot.vram_capacity / double(1 << 20), e.what()));
    }
    if (r.trace) r.trace->set_hot_neurons(hot.hot);
    r.split = std::make_shared<hot_cold_ffn>(r.m, r.hot, r.ctx->pool());  // one set of CPU workers
    r.split->set_trace(r.trace.get());
    r.split->set_disk_tier(r.disk.get());
    r.ctx->set_ffn_executor(r.split);
  }
  const auto on = [](const std::vector<uint8_t>& v) { return std::count(v.begin(), v.end(), uint8_t{1}); };
  say(o.log, fmt::format("hotcold: hot device {}: attention and KV cache of {} of {} layers, {} predictors, {} dense FFNs, the head {}; {:.1f} MiB of hot "
                         "FFN rows; {:.1f} of {:.1f} MiB allocated; the rest runs on the {} CPU threads",
                         r.dev->name(), on(residency.attention), hp.n_layer, on(residency.predictor), on(residency.ffn),
                         residency.output ? "there" : "on the CPU", r.hot ? r.hot->bytes() / double(1 << 20) : 0.0, r.dev->used() / double(1 << 20),
                         r.dev->budget() / double(1 << 20), r.ctx->pool().size()));
}

}  // namespace

std::shared_ptr<devices::device> choose_device(const model& m, devices::device_options o, const log_line& log) {
  if (o.sim_kernels && o.kind != "sim") throw std::invalid_argument("--sim-kernels needs --device sim");
  if (o.kind == "auto") {
    const auto gpus = devices::probe_cuda();
    std::string why_not;
    if (gpus.devices.empty()) why_not = "-";
    else if (const auto t = m.hp().moe() ? m.weights().layers[0].ffn_up_exps.type : m.weights().layers[0].ffn_up.type; t != tensor_type::f16 && t != tensor_type::q8_0 && t != tensor_type::q4_0)
      why_not = fmt::format("its kernels read F16, Q8_0 or Q4_0 FFN rows, not {}", tensor_type_name(t));
    if (why_not.empty()) {
      o.kind = gpus.kind;
      say(log, fmt::format("hotcold: --device auto: {} {} (use --device cpu to run on the CPU alone)", gpus.kind, gpus.devices[0].name));
    } else {
      if (why_not != "-") say(log, fmt::format("hotcold: --device auto: {} {} is present, but {}: the CPU runs everything", gpus.kind, gpus.devices[0].name, why_not));
      o.kind = "cpu";
    }
  }
  return devices::make_device(o);
}

bool leaves_cpu_ffn_work(const opened_model& o) {
  if (!o.plan || !o.device) return true;
  const hparams& hp = o.m->hp();
  for (size_t l = 0; l < o.plan->layers.size(); ++l) {
    const layer_placement& p = o.plan->layers[l];
    const bool shared_here = !o.m->weights().layers[l].ffn_gate_shexp || p.shared;
    const bool whole = p.ffn || (hp.moe() ? p.expert_slots >= hp.n_expert && shared_here : p.hot_neurons >= hp.n_ff);
    if (!whole) return true;
  }
  return false;
}

opened_model open_for_running(std::shared_ptr<const model> m, std::shared_ptr<devices::device> dev, const open_options& o) {
  const auto& hp = m->hp();
  const bool on_device = dev && dev->kind() != devices::device_kind::cpu;
  // Without a thread count: every hardware thread, but one left for a sim device's own thread (a
  // stand-in for an accelerator that computes beside the CPU, which it can only do with a core of its own).
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = o.threads > 0 ? o.threads : dev && dev->kind() == devices::device_kind::sim ? std::max(1, hw - 1) : hw;
  const int64_t ctx = o.ctx > 0 ? o.ctx : std::min<int64_t>(hp.n_ctx_train, 4096);
  const ffn_mode mode = o.mode ? *o.mode : m->has_predictors() ? ffn_mode::sparse : ffn_mode::dense;
  say(o.log, fmt::format("hotcold: context {} ({} KV cache), {} threads, {} FFN", ctx, kv_types_name(o.kv), threads,
                         ffn_mode_name(mode)));
  if (const auto* pl = m->placement()) {
    int64_t hot = 0;
    for (const auto& layer : pl->hot) hot += static_cast<int64_t>(layer.size());
    say(o.log, fmt::format("hotcold: placement {}: {} hot neurons ({:.1f}% of the FFN), {:.3f} GiB of FFN rows for the fast device", placement_path(m->path()),
                           hot, 100.0 * static_cast<double>(hot) / static_cast<double>(hp.n_layer * hp.n_ff), pl->vram_capacity / double(1ull << 30)));
  }
  check_kv_fits(hp, ctx, o.n_seq, o.kv);
  if (o.n_gpu_layers >= 0 && !on_device) throw std::invalid_argument("--n-gpu-layers needs a hot device (--device sim, cuda or hip)");
  if (o.n_cpu_moe >= 0 && !hp.moe()) throw std::invalid_argument("--n-cpu-moe and --cpu-moe are for a mixture of experts");
  if (o.n_cpu_moe >= 0 && !on_device) throw std::invalid_argument("--n-cpu-moe and --cpu-moe need a hot device (--device sim, cuda or hip)");
  opened_model r;
  r.m = m;
  r.dev = dev;
  r.ctx = std::make_shared<inference_context>(m, ctx, threads, o.n_seq, o.kv);
  r.ctx->set_mode(mode);
  if (o.trace) {
    r.trace = std::make_unique<trace_recorder>();
    r.ctx->set_trace(r.trace.get());
  }
  if (on_device) put_on_device(r, o);  // (the disk tier's opened there, past the device's neurons)
  else if (m->ffn_rows_from_disk()) open_disk_tier(r, o, {});
  return r;
}

}  // namespace hotcold::loader
