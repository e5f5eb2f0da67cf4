#include "launcher/model_options.hpp"

#include "launcher/llama_habits.hpp"
#include "launcher/option_checks.hpp"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "actors/pipeline.hpp"
#include "devices/device_info.hpp"
#include "launcher/default_model.hpp"
#include "launcher/progress.hpp"
#include "actors/stage_keys.hpp"
#include "model/file_identity.hpp"
#include "protocol/endpoint.hpp"
#include "loader/activation_record.hpp"
#include "loader/profile.hpp"

namespace hotcold::launcher {

// --workers' addresses (tcp://HOST:PORT each): another host's only with TLS links.
std::vector<actors::stage_address> worker_addresses(const std::vector<std::string>& workers, bool tls) {
  std::vector<actors::stage_address> out;
  for (const auto& w : workers) {
    const auto ep = protocol::parse_endpoint(w);
    if (ep.kind != protocol::transport::tcp) throw std::invalid_argument(fmt::format("--workers {}: a worker's address is tcp://HOST:PORT", w));
    if (!tls && !ep.is_loopback())
      throw std::invalid_argument(fmt::format("--workers {}: another host; links to other hosts are authenticated and encrypted: give --workers-tls DIR "
                                              "(hotcold keygen --tls DIR; docs/distributed.md)",
                                              w));
    out.push_back({ep.host, ep.port, 0, 0});
  }
  return out;
}

loader::auto_placement_options placement_sources(int threads) {
  // A sparse file on a device with no placement made for it: a profile beside it, or a short one now.
  loader::auto_placement_options p;
  p.cache_dir = cache_dir();
  p.firing_counts = [threads, dir = p.cache_dir](const std::string& model_path, const model& mm) {
    loader::short_profile_options so;
    so.cache_dir = dir;
    so.threads = threads;
    progress_bar bar("hotcold: profiling for a placement");
    so.progress = [&](int64_t done, int64_t total) { bar.update(done, total); };
    return loader::firing_counts_for(model_path, mm, so);
  };
  return p;
}

uint64_t prefix_store_bytes(int64_t cache_ram_mib) {
  const uint64_t machine = devices::cpu_device().total_memory;
  if (cache_ram_mib < 0) return machine / 2;
  return std::min(static_cast<uint64_t>(cache_ram_mib) << 20, machine / 4);
}

loaded load(const model_args& a, int64_t ctx_override, int64_t n_seq) {
  if (a.thread_list.size() > 1) throw std::invalid_argument("-t: one thread count here (a comma list is bench's)");
  std::string path = a.model.empty() ? ensure_default_model() : a.model;
  auto t0 = std::chrono::steady_clock::now();
  load_options lo{a.mmap};
  // With --workers (whose --split covers every layer) this process runs the embeddings, the head and
  // sampling only: the layers' weights are never read here, nor is a hot device of its own used.
  if (!a.workers.empty()) {
    if (a.device != "auto" && a.device != "cpu")
      throw std::invalid_argument(fmt::format("--device {} with --workers: the workers run every layer; this process keeps the embeddings, the head "
                                              "and sampling on its CPU",
                                              a.device));
    lo.first_layer = lo.last_layer = 0;
  }
  if (a.ram_budget_gib > 0) {
    if (a.mmap) throw std::invalid_argument("--ram-budget and --mmap: the disk tier reads rows into a private copy; give one");
    lo.ffn_rows_from_disk = true;
  }
  auto m = model::load(path, lo);
  const auto& hp = m->hp();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(stderr, "hotcold: {} — {} {}, {} layers, embd {}, ffn {}, heads {}/{}, vocab {}, {:.1f} MiB of weights{}; loaded in {:.2f} s\n",
             path, architecture_name(hp.arch), activation_name(hp.act), hp.n_layer, hp.n_embd, hp.n_ff, hp.n_head, hp.n_head_kv,
             hp.n_vocab, m->weight_bytes() / double(1 << 20), a.mmap ? " (mmap)" : "", secs);
  for (const auto& w : m->vocabulary().warnings()) fmt::print(stderr, "hotcold: warning: {}\n", w);

  loader::open_options o;
  // A command's own context (bench: prompt + generation) unless -c asks for more.
  o.ctx = ctx_override > 0 ? std::max(ctx_override, a.ctx) : a.ctx;
  o.n_seq = n_seq;
  o.threads = a.threads;
  o.kv = parse_cache_types(a.cache_type_k, a.cache_type_v);
  if (a.mode == "dense") o.mode = ffn_mode::dense;
  if (a.mode == "sparse") o.mode = ffn_mode::sparse;
  o.n_gpu_layers = std::min<int64_t>(a.n_gpu_layers, hp.n_layer);  // (-ngl 99: every layer, as llama.cpp reads it)
  if (a.cpu_moe && a.n_cpu_moe >= 0) throw std::invalid_argument("--cpu-moe and --n-cpu-moe: give one");
  o.n_cpu_moe = a.cpu_moe ? hp.n_layer : a.n_cpu_moe;
  if (!a.expert_policy.empty()) o.expert_cache_policy = parse_expert_policy(a.expert_policy);
  if (a.expert_upload_mib >= 0) o.expert_upload_bytes = static_cast<uint64_t>(a.expert_upload_mib * double(1 << 20));
  if (a.no_expert_prefetch && a.expert_guess == "on") throw std::invalid_argument("--no-expert-prefetch and --expert-guess on: give one");
  o.expert_prefetch = !a.no_expert_prefetch && a.expert_guess != "off";
  o.expert_prefetch_on_trial = a.expert_guess == "auto";
  if (!a.experts_from.empty()) {
    if (!hp.moe()) throw std::invalid_argument(fmt::format("--experts-from: {} is not a mixture of experts", path));
    const auto rec = loader::read_activation_record(a.experts_from);
    if (rec.n_layer != hp.n_layer || rec.n_ff != hp.n_expert)
      throw std::invalid_argument(fmt::format("--experts-from {}: it holds {} layers x {} choices; {} has {} layers x {} experts", a.experts_from, rec.n_layer,
                                              rec.n_ff, path, hp.n_layer, hp.n_expert));
    o.first_experts = loader::experts_by_popularity(rec);
  }
  o.trace = !a.trace_out.empty() || a.record_choices;
  o.ram_budget = static_cast<uint64_t>(a.ram_budget_gib * double(1ull << 30));
  o.read_ahead_input = a.read_ahead_input != "off", o.read_ahead_input_on_trial = a.read_ahead_input == "auto";
  o.log = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  o.placement = placement_sources(a.threads);
  devices::device_options dopt;
  dopt.kind = a.workers.empty() ? a.device : "cpu";
  dopt.budget = static_cast<uint64_t>(a.vram_budget_gib * double(1ull << 30));
  dopt.sim_kernels = a.sim_kernels;
  auto dev = loader::choose_device(*m, dopt, o.log);
  if (!dev || dev->kind() == devices::device_kind::cpu) {  // no hot device: llama.cpp's -ngl 99 habit runs on the CPU, said once
    if (o.n_gpu_layers >= 0) o.log(fmt::format("hotcold: warning: -ngl {}: no GPU here (--device {}); every layer runs on the CPU", a.n_gpu_layers, a.device));
    if (o.n_cpu_moe >= 0 && hp.moe()) o.log("hotcold: --cpu-moe / --n-cpu-moe: no GPU here; every expert is on the CPU already");
    o.n_gpu_layers = -1;
    if (hp.moe()) o.n_cpu_moe = -1;
  }
  loaded l;
  static_cast<loader::opened_model&>(l) = loader::open_for_running(m, std::move(dev), o);
  // auto: a spinning wait holds a core, which the cold pool needs when its threads take every one and
  // the plan leaves them FFN work beside the device's (measured in docs/gpu.md: block 1.30x spin there,
  // 0.96x where a core is left); else spin (nothing on the CPU runs while a thread waits).
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  devices::set_device_wait(a.device_wait != "auto"                                          ? devices::parse_device_wait(a.device_wait)
                           : l.ctx->pool().size() >= hw && loader::leaves_cpu_ffn_work(l) ? devices::device_wait::block
                                                                                          : devices::device_wait::spin);
  if (l.dev && l.dev->kind() != devices::device_kind::cpu)
    o.log(fmt::format("hotcold: threads wait for {} by {} (--device-wait)", l.dev->name(), devices::device_wait_name(devices::current_device_wait())));
  if (a.batch > 0 || a.ubatch > 0)  // (llama.cpp's -b and -ub: the smaller bounds a step's prompt tokens)
    l.ctx->set_batch(std::min(a.batch > 0 ? a.batch : inference_context::max_batch, a.ubatch > 0 ? a.ubatch : inference_context::max_batch));
  apply_llama_flags(a);
  l.trace_path = a.trace_out;
  l.prefix_store_bytes = prefix_store_bytes(a.cache_ram_mib);
  l.context_shift = a.context_shift, l.keep = a.keep;
  if (!a.workers.empty()) {  // the layers on other processes: the plan of stages
    auto& p = l.stages;
    p.stages = actors::split_layers(worker_addresses(a.workers, !a.workers_tls.empty()), a.split, hp.n_layer);
    p.auto_split = a.split.size() == 1 && a.split[0] == "auto";
    p.tls_dir = a.workers_tls;
    if (!p.tls_dir.empty()) actors::check_tls_dir(p.tls_dir);
    p.file_id = file_identity(path);
    fmt::print(stderr, "hotcold: this process keeps the embeddings, the head and sampling; file {}; links {}\n", p.file_id,
               p.tls_dir.empty() ? std::string("plain (loopback)") : "TLS with the certificates of " + p.tls_dir);
  }
  return l;
}

std::unique_ptr<actors::pipeline> loaded::make_pipeline(int64_t prefill_chunk, int64_t recall_every, int micro_batches) {
  actors::pipeline_options o;
  o.micro_batches = micro_batches;
  o.stages = stages;
  o.prefill_chunk = prefill_chunk;
  o.recall_every = recall_every;
  o.prefix_store_bytes = prefix_store_bytes;
  o.context_shift = context_shift, o.keep = keep;
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
