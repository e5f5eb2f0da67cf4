#include "launcher/model_options.hpp"

#include <unistd.h>

#include "launcher/option_checks.hpp"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "devices/device.hpp"
#include "devices/device_info.hpp"
#include "launcher/default_model.hpp"
#include "launcher/progress.hpp"
#include "tools/auto_placement.hpp"

namespace hotcold::launcher {

void add_model_options(CLI::App* cmd, model_args& m, bool model_required) {
  auto* opt = cmd->add_option("-m,--model", m.model, model_required ? "GGUF model" : "GGUF model (default: the embedded default model)");
  if (model_required) opt->required();
  cmd->add_option("-t,--threads", m.threads, "CPU worker threads (default, or 0 or less: all hardware threads; with --device sim, one fewer)")
      ->check(thread_count());
  cmd->add_option("-c,--ctx", m.ctx, "Context length (default, or 0: the model's, at most 4096)")->check(whole_in(0, 1ll << 40));
  cmd->add_flag("--mmap", m.mmap, "Compute from the file's mmap'd pages instead of a private copy (slower here)");
  cmd->add_option("--device", m.device, "Hot device: auto, cpu, sim (a CPU-backed stand-in for a GPU), cuda, hip")
      ->check(CLI::IsMember({"auto", "cpu", "sim", "cuda", "hip"}))
      ->capture_default_str();
  cmd->add_option("--vram-budget", m.vram_budget_gib, "Hot device memory in GiB (default: its free memory; sim needs one)")
      ->check(finite_in(0, 1 << 20));
  cmd->add_option("--n-gpu-layers", m.n_gpu_layers, "Dense files: layers the hot device holds whole, front to back (default: as many as fit its budget)")
      ->check(whole_in(0, 1 << 20));
  cmd->add_flag("--sim-kernels", m.sim_kernels,
                "With --device sim: compute as a GPU back end does (its operation table's jobs from the device's plain copies: attention, predictors, "
                "FFN rows, dense FFNs, the head), "
                "so that what runs above a GPU's kernels runs here");
  cmd->add_option("--kv-type", m.kv_type, "The KV cache's values: f16 (llama.cpp's default: half the memory and reads) or f32")
      ->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--trace-out", m.trace_out, "Write a Chrome trace-event JSON of where each step's time went (docs/traces.md)");
  cmd->add_option("--mode", m.mode, "dense: every FFN neuron; sparse: the neurons the predictors choose (default: sparse when the file has predictors)")
      ->check(CLI::IsMember({"dense", "sparse"}));
}

void add_pipeline_option(CLI::App* cmd, std::string& pipeline) {
  cmd->add_option("--pipeline", pipeline, "actors: the actor runtime (scheduler, hot executor, cold pool, predictor, sampler); reference: the forward pass called directly")
      ->check(CLI::IsMember({"actors", "reference"}))
      ->capture_default_str();
}

loaded load(const model_args& a, int64_t ctx_override, int64_t n_seq) {
  std::string path = a.model.empty() ? ensure_default_model() : a.model;
  auto t0 = std::chrono::steady_clock::now();
  auto m = model::load(path, {a.mmap});
  const auto& hp = m->hp();
  // Without -t: every hardware thread, but one left for the sim device's own thread (a stand-in for
  // an accelerator that computes beside the CPU, which it can only do with a core of its own).
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int threads = a.threads > 0 ? a.threads : a.device == "sim" ? std::max(1, hw - 1) : hw;
  // A command's own context (bench: prompt + generation) unless -c asks for more.
  int64_t ctx = ctx_override > 0 ? std::max(ctx_override, a.ctx) : a.ctx > 0 ? a.ctx : std::min<int64_t>(hp.n_ctx_train, 4096);
  ffn_mode mode = a.mode == "dense" ? ffn_mode::dense : a.mode == "sparse" ? ffn_mode::sparse
                : m->has_predictors() ? ffn_mode::sparse : ffn_mode::dense;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(stderr, "hotcold: {} — {} {}, {} layers, embd {}, ffn {}, heads {}/{}, vocab {}, {:.1f} MiB of weights{}; loaded in {:.2f} s\n",
             path, architecture_name(hp.arch), activation_name(hp.act), hp.n_layer, hp.n_embd, hp.n_ff, hp.n_head, hp.n_head_kv,
             hp.n_vocab, m->weight_bytes() / double(1 << 20), a.mmap ? " (mmap)" : "", secs);
  fmt::print(stderr, "hotcold: context {} ({} KV cache), {} threads, {} FFN\n", ctx, a.kv_type == "f32" ? "F32" : "F16", threads,
             mode == ffn_mode::sparse ? "sparse" : "dense");
  if (const auto* pl = m->placement()) {
    int64_t hot = 0;
    for (const auto& layer : pl->hot) hot += static_cast<int64_t>(layer.size());
    fmt::print(stderr, "hotcold: placement {}: {} hot neurons ({:.1f}% of the FFN), {:.3f} GiB of FFN rows for the fast device\n", placement_path(path), hot,
               100.0 * static_cast<double>(hot) / static_cast<double>(hp.n_layer * hp.n_ff), pl->vram_capacity / double(1ull << 30));
  }
  for (const auto& w : m->vocabulary().warnings()) fmt::print(stderr, "hotcold: warning: {}\n", w);
  // The KV cache (keys and values, every layer and sequence) must fit in this machine's memory.
  const tensor_type kv_type = a.kv_type == "f32" ? tensor_type::f32 : tensor_type::f16;
  const double kv_bytes = 2.0 * (kv_type == tensor_type::f32 ? 4.0 : 2.0) * static_cast<double>(hp.n_layer) * static_cast<double>(hp.n_embd_kv()) * static_cast<double>(ctx) * static_cast<double>(n_seq);
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (ram > 0 && kv_bytes > ram)
    throw std::invalid_argument(fmt::format("-c {}: the KV cache for {} sequence{} would take {:.1f} GiB, more than this machine's {:.1f} GiB of memory",
                                            ctx, n_seq, n_seq == 1 ? "" : "s", kv_bytes / double(1ull << 30), ram / double(1ull << 30)));
  loaded l;
  l.m = m;
  l.ctx = std::make_shared<inference_context>(m, ctx, threads, n_seq, kv_type);
  l.ctx->set_mode(mode);
  if (!a.trace_out.empty() || a.record_choices) {
    l.trace = std::make_unique<trace_recorder>();
    l.trace_path = a.trace_out;
    l.ctx->set_trace(l.trace.get());
  }

  // The hot device. The CPU needs no split (every neuron is already where the cold pool computes);
  // another device holds the placement's hot rows and computes them while the cold pool does the rest.
  devices::device_options dopt;
  dopt.kind = a.device;
  dopt.budget = static_cast<uint64_t>(a.vram_budget_gib * double(1ull << 30));
  dopt.sim_kernels = a.sim_kernels;
  if (a.sim_kernels && a.device != "sim") throw std::invalid_argument("--sim-kernels needs --device sim");
  // auto: the first usable GPU of this build's back end, where its kernels read this file's FFN rows
  // (F16, Q8_0, Q4_0: a sparse file's hot rows, a dense file's whole layers).
  if (dopt.kind == "auto") {
    const auto gpus = devices::probe_cuda();
    std::string why_not;
    if (gpus.devices.empty()) why_not = "-";
    else if (const auto t = m->weights().layers[0].ffn_up.type; t != tensor_type::f16 && t != tensor_type::q8_0 && t != tensor_type::q4_0)
      why_not = fmt::format("its kernels read F16, Q8_0 or Q4_0 FFN rows, not {}", tensor_type_name(t));
    if (why_not.empty()) {
      dopt.kind = gpus.kind;
      fmt::print(stderr, "hotcold: --device auto: {} {} (use --device cpu to run on the CPU alone)\n", gpus.kind, gpus.devices[0].name);
    } else {
      if (why_not != "-") fmt::print(stderr, "hotcold: --device auto: {} {} is present, but {}: the CPU runs everything\n", gpus.kind, gpus.devices[0].name, why_not);
      dopt.kind = "cpu";
    }
  }
  auto dev = devices::make_device(dopt);
  if (a.n_gpu_layers >= 0 && dev->kind() == devices::device_kind::cpu)
    throw std::invalid_argument("--n-gpu-layers needs a hot device (--device sim, cuda or hip)");
  if (dev->kind() != devices::device_kind::cpu) {
    // The plan for this device's budget, the context this command runs (the device holds that KV
    // cache), the sequences and the KV cache's type: compute buffers, attention with
    // its cache, predictors and the head first (on a device that runs them), hot FFN rows in what is
    // left (docs/commands.md, "Devices"). A dense file offloads whole layers instead.
    tools::plan_options po;
    po.ctx = ctx;
    po.n_seq = n_seq;
    po.kv_value_bytes = kv_type == tensor_type::f32 ? 4 : 2;
    // What the device computes besides hot rows: everything on sim; on a GPU what its kernels read
    // (attention, predictors, dense FFNs and the head with F16, Q8_0 or Q4_0 weights).
    const bool split_ffn = m->has_predictors();
    {
      const auto& w0 = m->weights().layers[0];
      po.attention = attention_runs_on(*dev, w0) && (split_ffn || dense_ffn_runs_on(*dev, w0));
      po.predictors = w0.pred_fc1 && dev->supports(devices::operation::predict, w0.pred_fc1.type) && w0.pred_fc2.type == w0.pred_fc1.type;
      po.head = dev->supports(devices::operation::matvec, m->weights().output.type);
    }
    po.n_gpu_layers = a.n_gpu_layers;
    po.step_bytes = split_ffn ? dev->reserve_bytes(devices::operation::ffn_rows, inference_context::max_batch, hp.n_embd, hp.n_ff) : 0;
    if (a.n_gpu_layers >= 0 && split_ffn)
      throw std::invalid_argument("--n-gpu-layers counts the layers of a dense file the device holds whole; a sparse file's plan puts attention "
                                  "first and the hot neurons in what is left");
    if (!split_ffn && !po.attention)
      throw std::invalid_argument(fmt::format("--device {} on a dense file: its kernels do not read this file's layers ({} attention, {} FFN weights: "
                                              "they read F16, Q8_0 and Q4_0); use --device cpu",
                                              a.device, tensor_type_name(m->weights().layers[0].wo.type), tensor_type_name(m->weights().layers[0].ffn_up.type)));
    tools::placement_plan plan = tools::plan_device(*m, dev->budget(), po);
    placement_data hot_placement;
    if (split_ffn) {
      tools::auto_placement_options ao;
      ao.cache_dir = cache_dir();
      ao.threads = threads;
      progress_bar bar("hotcold: profiling for a placement");
      ao.progress = [&](int64_t done, int64_t total) { bar.update(done, total); };
      auto placed = tools::ensure_placement(path, *m, dev->budget(), po, ao);
      if (placed.made) {
        fmt::print(stderr, "hotcold: {}: planned a placement for {:.4g} GiB at context {} ({:.1f}% of the profiled firings on hot neurons); wrote {}\n",
                   placed.reason, dev->budget() / double(1ull << 30), plan.ctx, 100 * placed.plan.hot_mass, placed.path);
        plan = placed.plan;
      }
      hot_placement = std::move(placed.data);
    }
    if (!split_ffn || !plan.solution.hot.empty() || plan.fixed.total() > plan.fixed.compute) fmt::print(stderr, "{}", plan.table());
    // What the plan puts on the device, in its order: compute buffers, attention with its KV cache,
    // predictors, the head; then the hot rows.
    l.device = std::make_shared<const device_layers>(m, plan.residency(), dev, kv_type);
    l.ctx->set_device_layers(l.device);
    if (split_ffn) {
      try {
        l.hot = std::make_shared<const hot_rows>(m, hot_placement, dev);
      } catch (const devices::out_of_device_memory& e) {
        throw std::invalid_argument(fmt::format("{}: the placement's hot rows ({:.1f} MiB) do not fit in what the plan leaves of the budget: {}",
                                                placement_path(path), hot_placement.vram_capacity / double(1 << 20), e.what()));
      }
      if (l.trace) l.trace->set_hot_neurons(hot_placement.hot);
      l.split = std::make_shared<hot_cold_ffn>(m, l.hot, l.ctx->pool());  // one set of CPU workers
      l.split->set_trace(l.trace.get());
      l.ctx->set_ffn_executor(l.split);
    }
    const auto& r = plan.residency();
    const auto on = [](const std::vector<uint8_t>& v) { return std::count(v.begin(), v.end(), uint8_t{1}); };
    fmt::print(stderr, "hotcold: hot device {}: attention and KV cache of {} of {} layers, {} predictors, {} dense FFNs, the head {}; {:.1f} MiB of hot FFN "
                       "rows; {:.1f} of {:.1f} MiB allocated; the rest runs on the {} CPU threads\n",
               dev->name(), on(r.attention), hp.n_layer, on(r.predictor), on(r.ffn), r.output ? "there" : "on the CPU",
               l.hot ? l.hot->bytes() / double(1 << 20) : 0.0, dev->used() / double(1 << 20), dev->budget() / double(1 << 20), threads);
  }
  return l;
}

std::unique_ptr<actors::pipeline> loaded::make_pipeline(int64_t prefill_chunk, int64_t recall_every, int micro_batches) {
  actors::pipeline_options o;
  o.micro_batches = micro_batches;
  o.prefill_chunk = prefill_chunk;
  o.recall_every = recall_every;
  o.hot = hot;
  o.trace = trace.get();
  return std::make_unique<actors::pipeline>(ctx, o);
}

void loaded::finish() {
  if (!trace || trace_path.empty()) return;
  trace->write(trace_path);
  const auto entries = trace->entries();
  fmt::print(stderr, "hotcold: trace of {} intervals -> {}\n", entries.size(), trace_path);
  if (trace->has_activations()) {
    trace->write_activations(trace_path + ".activations");
    fmt::print(stderr, "hotcold: the steps' active neurons -> {}.activations (for hotcold replay --activations)\n", trace_path);
  }
  // With a hot device: how busy each side was, and how much of the time both worked at once.
  const auto busy = busy_time(entries);
  if (busy.busy_s.count("hot_ffn") && busy.busy_s.count("cold_ffn") && busy.span_s > 0)
    fmt::print(stderr, "hotcold: over {:.3f} s traced, the hot side (hot_ffn) was busy {:.1f}%, the cold side (cold_ffn) {:.1f}%, both at once {:.1f}%\n",
               busy.span_s, 100 * busy.busy_s.at("hot_ffn") / busy.span_s, 100 * busy.busy_s.at("cold_ffn") / busy.span_s,
               100 * busy.both_s / busy.span_s);
}

}  // namespace hotcold::launcher
