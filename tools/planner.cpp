#include "tools/planner.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <map>
#include <thread>
#include <stdexcept>

#include <fmt/format.h>

#include "devices/gpu_jobs.hpp"
#include "model/recipe.hpp"
#include "engine/forward.hpp"
#include "engine/ram_tier.hpp"
#include "engine/read_costs.hpp"
#include "engine/trace.hpp"

namespace hotcold::tools {

const std::vector<gpu_spec>& known_gpus() {
  // Published memory bandwidth and the PCIe link's one-way rate (x16: PCIe 3.0 16 GB/s, 4.0 32, 5.0 64).
  static const std::vector<gpu_spec> gpus{
      {"RTX 2080 Ti", 616, 16}, {"RTX 3090", 936, 32}, {"RTX 4090", 1008, 32}, {"A100", 2039, 32}, {"H100", 3350, 64}, {"H200", 4800, 64},
  };
  return gpus;
}

const gpu_spec* find_gpu(const std::string& name) {
  auto key = [](const std::string& s) {
    std::string k;
    for (char c : s)
      if (c != ' ' && c != '-' && c != '_') k += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return k;
  };
  for (const auto& g : known_gpus())
    if (key(g.name) == key(name)) return &g;
  return nullptr;
}

namespace {

// The probability that neuron i of layer l fires on a token, and that the predictor chooses it.
struct firing {
  const planner_options& o;
  int64_t n_ff;
  std::vector<double> scale;  // per layer: chosen / fired (1 without a measured choice)
  double p(int64_t l, int64_t i) const {
    if (o.firing_counts.empty()) return o.active;
    return static_cast<double>(o.firing_counts[static_cast<size_t>(l * n_ff + i)]) / static_cast<double>(o.tokens);
  }
  double chosen(int64_t l, int64_t i) const { return std::min(1.0, p(l, i) * scale[static_cast<size_t>(l)]); }
  // Its expected FFN bytes a token: its gate and up rows when chosen, its down row when it fires.
  double bytes(const read_costs& c, int64_t l, int64_t i) const {
    const size_t li = static_cast<size_t>(l);
    return chosen(l, i) * static_cast<double>(c.neuron[li] - c.down_row[li]) + p(l, i) * static_cast<double>(c.down_row[li]);
  }
};

}  // namespace

namespace {

void check_firing_options(const planner_options& o, const hparams& hp) {
  if (!o.firing_counts.empty() && (o.firing_counts.size() != static_cast<size_t>(hp.n_layer * hp.n_ff) || o.tokens == 0))
    throw std::invalid_argument(fmt::format("plan: firing counts of {} neurons over {} tokens for a model of {} x {}", o.firing_counts.size(), o.tokens,
                                            hp.n_layer, hp.n_ff));
  if (o.firing_counts.empty() && (o.active < 0 || o.active > 1)) throw std::invalid_argument("plan: --active is a fraction in [0, 1]");
}

void check_planner_options(const planner_options& o, const hparams& hp) {
  if (o.cpu_gbs <= 0 || o.gpu_gbs <= 0 || o.pcie_gbs <= 0) throw std::invalid_argument("plan: the CPU's, the GPU's and the link's bandwidths must be positive");
  if (o.gpu_efficiency <= 0 || o.gpu_efficiency > 1) throw std::invalid_argument("plan: the GPU's efficiency is a fraction in (0, 1]");
  check_firing_options(o, hp);
}

// How often each neuron fires and, for a sparse file whose choices were measured, how many more its
// predictors choose (each layer's scale).
firing firing_of(const planner_options& o, const hparams& hp, bool sparse) {
  firing f{o, hp.n_ff, std::vector<double>(static_cast<size_t>(hp.n_layer), 1.0)};
  if (o.chosen_per_token.empty() || !sparse) return f;
  if (o.chosen_per_token.size() != static_cast<size_t>(hp.n_layer))
    throw std::invalid_argument(fmt::format("plan: chosen neurons of {} layers for a model of {}", o.chosen_per_token.size(), hp.n_layer));
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    double fired = 0;
    for (int64_t i = 0; i < hp.n_ff; ++i) fired += f.p(l, i);
    if (fired > 0) f.scale[static_cast<size_t>(l)] = std::max(1.0, o.chosen_per_token[static_cast<size_t>(l)] / fired);
  }
  return f;
}

}  // namespace

namespace {

// A decoded token on the CPU alone: each layer's expected FFN bytes (every row of a dense file; a
// sparse file's neurons' gate and up rows when chosen, down row when it fires; a mixture's k experts),
// the KV cache a layer reads at the plan's position, and the bytes and seconds of the whole token: the
// FFN as the file runs it (a sparse file's gathered rows, a mixture's experts) at its own rate, the
// rest at the products' (cpu_gbs).
struct cpu_alone {
  std::vector<double> ffn;
  int64_t ctx = 0;
  double rows = 0;  // cached positions a decoded token attends over
  double kv = 0, bytes = 0, seconds = 0;
};
cpu_alone cpu_alone_of(const model& m, const read_costs& c, const planner_options& o, const firing& f) {
  const hparams& hp = m.hp();
  cpu_alone a;
  a.ctx = o.ctx > 0 ? o.ctx : std::min<int64_t>(hp.n_ctx_train, 4096);
  a.rows = o.position >= 0 ? o.position : static_cast<double>(a.ctx) / 2;
  a.kv = kv_read_per_token(hp, o.kv, a.rows);
  a.ffn.assign(static_cast<size_t>(hp.n_layer), 0.0);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const size_t li = static_cast<size_t>(l);
    if (hp.moe()) {
      a.ffn[li] = static_cast<double>(hp.n_expert_used) * static_cast<double>(c.neuron[li] * static_cast<uint64_t>(hp.n_ff_exp));
      continue;
    }
    if (!m.has_predictors()) {
      a.ffn[li] = static_cast<double>(c.ffn_dense[li]);
      continue;
    }
    for (int64_t i = 0; i < hp.n_ff; ++i) a.ffn[li] += f.bytes(c, l, i);
  }
  const double rows_rate = o.ffn_gbs() * 1e9;
  a.bytes = static_cast<double>(c.embedding_row + c.output);
  double ffn_all = 0;
  for (int64_t l = 0; l < hp.n_layer; ++l) a.bytes += static_cast<double>(c.layer_fixed[static_cast<size_t>(l)]) + a.kv, ffn_all += a.ffn[static_cast<size_t>(l)];
  a.seconds = a.bytes / (o.cpu_gbs * 1e9) + ffn_all / rows_rate;
  a.bytes += ffn_all;
  return a;
}

}  // namespace

namespace {

// A mixture of experts (docs/moe.md): attention, its KV cache, shared experts and the head on the GPU
// as the runtime's plan puts them, the router on the CPU; each layer's routed experts split by the
// plan's slots, the GPU's share beside the CPU's (the longer one and the GPU's crossing a layer).
plan_prediction predict_moe_plan(const model& m, const planner_options& o) {
  const hparams& hp = m.hp();
  const read_costs c(m);
  const int64_t ctx = o.ctx > 0 ? o.ctx : std::min<int64_t>(hp.n_ctx_train, 4096);
  const double rows = o.position >= 0 ? o.position : static_cast<double>(ctx) / 2;
  const double kv = kv_read_per_token(hp, o.kv, rows);
  const double cpu = o.cpu_gbs * 1e9, gpu = o.gpu_gbs * 1e9 * o.gpu_efficiency, link = o.pcie_gbs * 1e9;
  const double experts_rate = o.ffn_gbs() * 1e9;
  const double crossing = o.crossing_us * 1e-6, x_bytes = 4.0 * static_cast<double>(hp.n_embd), k = static_cast<double>(hp.n_expert_used);
  if (o.expert_hit_rate > 1) throw std::invalid_argument("plan: --expert-hit-rate is a fraction in [0, 1]");
  const auto& w = m.weights();
  std::vector<double> expert(static_cast<size_t>(hp.n_layer)), shared(static_cast<size_t>(hp.n_layer)), router(static_cast<size_t>(hp.n_layer));
  for (size_t l = 0; l < expert.size(); ++l) {
    const auto& L = w.layers[l];
    expert[l] = static_cast<double>(c.neuron[l] * static_cast<uint64_t>(hp.n_ff_exp));
    shared[l] = static_cast<double>(L.ffn_gate_shexp.bytes() + L.ffn_up_shexp.bytes() + L.ffn_down_shexp.bytes());
    router[l] = static_cast<double>(c.router[l]) - shared[l];
  }
  plan_prediction r;
  const cpu_alone alone = cpu_alone_of(m, c, o, firing_of(o, hp, false));
  r.cpu_only_bytes = alone.bytes, r.cpu_only_tokens_per_s = 1.0 / alone.seconds;

  loader::plan_options po;
  po.ctx = ctx;
  po.kv = o.kv;
  po.alloc = devices::gpu_allocation;  // (a GPU's allocator: each buffer in its granules)
  po.output_norm = false;              // (a GPU is given the head's normalized rows)
  r.plan = loader::plan_device(m, o.budget, po);
  double host = static_cast<double>(c.embedding_row), device = 0, cpu_s = host / cpu, gpu_s = 0, link_s = 0, routed = 0, hit = 0;
  auto cross = [&](double bytes) {
    r.crossings += 1, r.crossing_bytes += bytes;
    link_s += crossing + bytes / link;
    return crossing + bytes / link;
  };
  auto charge = [&](bool on_gpu, double bytes, double rate) {
    (on_gpu ? device : host) += bytes;
    const double s = bytes / (on_gpu ? gpu : rate);
    (on_gpu ? gpu_s : cpu_s) += s;
    return s;
  };
  double t = cpu_s;
  for (size_t l = 0; l < expert.size(); ++l) {
    const auto& p = r.plan.layers[l];
    double layer_t = charge(p.attention, static_cast<double>(c.attention[l] + c.ffn_norm[l]) + kv, cpu);
    if (p.attention) layer_t += cross(3 * x_bytes);
    layer_t += charge(false, router[l], cpu);
    const double h = o.expert_hit_rate >= 0 && p.expert_slots > 0 ? o.expert_hit_rate : static_cast<double>(p.expert_slots) / static_cast<double>(hp.n_expert);
    routed += k, hit += h * k;
    // The GPU's share (its shared expert, its experts) and the CPU's (the rest) at the same time.
    double gpu_t = p.shared ? charge(true, shared[l], cpu) : 0;
    double cpu_t = p.shared ? 0 : charge(false, shared[l], experts_rate);
    gpu_t += charge(true, h * k * expert[l], experts_rate);
    cpu_t += charge(false, (1 - h) * k * expert[l], experts_rate);
    if (gpu_t > 0) gpu_t += cross(2 * x_bytes);
    t += layer_t + std::max(gpu_t, cpu_t);
  }
  t += charge(r.plan.output, static_cast<double>(c.output), cpu);
  if (r.plan.output) t += cross(x_bytes + 4.0 * static_cast<double>(hp.n_vocab));
  r.host_bytes = host, r.device_bytes = device, r.cpu_seconds = cpu_s, r.gpu_seconds = gpu_s, r.link_seconds = link_s;
  r.hybrid_tokens_per_s = 1.0 / t;
  r.expert_hit_rate = routed > 0 ? hit / routed : 0;
  r.limited_by = cpu_s >= gpu_s && cpu_s >= link_s ? "cpu" : gpu_s >= link_s ? "gpu" : "pcie";

  // llama.cpp: -ngl 99 --n-cpu-moe N, the smallest N that fits; a layer's CPU experts after its GPU work.
  for (int64_t n = 0; n <= hp.n_layer && r.n_cpu_moe < 0; ++n) {
    loader::plan_options pn = po;
    pn.n_cpu_moe = n;
    try {
      const auto plan = loader::plan_device(m, o.budget, pn);
      if (std::all_of(plan.layers.begin(), plan.layers.end(), [](const loader::layer_placement& x) { return x.attention && (x.shared || x.shared_bytes == 0); }) &&
          plan.output)
        r.n_cpu_moe = n;
    } catch (const std::invalid_argument&) {
    }
  }
  r.offload_layers = r.n_cpu_moe >= 0 ? hp.n_layer - r.n_cpu_moe : 0;
  r.offload_head = r.n_cpu_moe >= 0;
  if (r.n_cpu_moe >= 0) {
    double lt = static_cast<double>(c.embedding_row) / cpu + static_cast<double>(c.output) / gpu + 2 * (crossing + x_bytes / link);
    for (size_t l = 0; l < expert.size(); ++l) {
      lt += (static_cast<double>(c.attention[l] + c.ffn_norm[l]) + kv + shared[l] + router[l]) / gpu;
      const bool on_cpu = static_cast<int64_t>(l) < r.n_cpu_moe;
      lt += on_cpu ? k * expert[l] / experts_rate + 2 * (crossing + x_bytes / link) : k * expert[l] / gpu;
    }
    r.layer_offload_tokens_per_s = 1.0 / lt;
  }
  return r;
}

}  // namespace

// The round trips of the runtime's one-token jobs on a GPU, as its back end makes them
// (devices::gpu_traffic, what sim counts): the jobs need only their shapes and which weights they hold.
namespace trips {
char held = 0;  // (a job's weights and scratch: non-null where the layer has them)
const void* has(const tensor_view& t) { return t ? &held : nullptr; }
constexpr uint64_t room = uint64_t{1} << 40;  // (scratch for a token)
}  // namespace trips
devices::device_traffic attention_trips(const hparams& hp, const layer_weights& l, bool with_predictor, int32_t position, bool with_ffn = false) {
  devices::attention_job j;
  devices::dense_ffn_job f;  // (the FFN after it: a whole layer as one job)
  f.n_ff = hp.n_ff, f.gated = static_cast<bool>(l.ffn_gate), f.up = f.down = f.gate = &trips::held;
  if (with_ffn) j.ffn = &f, j.residual = j.ffn_norm = reinterpret_cast<const float*>(&trips::held);
  const int32_t seq = 0;  // (the token's sequence and position: a long past splits attention's kernel)
  j.seqs = &seq, j.positions = &position, j.ctx = static_cast<int64_t>(position) + 1;
  j.n = 1, j.d = hp.n_embd, j.n_head = hp.n_head, j.n_head_kv = hp.n_head_kv, j.head_dim = hp.head_dim(), j.n_rot = hp.n_rot;
  j.wqkv = trips::has(l.wqkv), j.wq = trips::has(l.wq), j.wk = trips::has(l.wk), j.wv = trips::has(l.wv), j.wo = trips::has(l.wo);
  if (with_predictor) j.fc1 = j.fc2 = &trips::held, j.rank = l.pred_fc1.ne1, j.n_ff = hp.n_ff;
  j.scratch = &trips::held, j.scratch_bytes = trips::room;
  return devices::gpu_traffic(j);
}
devices::device_traffic predict_trips(const hparams& hp, const layer_weights& l) {
  devices::predict_job j;
  j.n = 1, j.d = hp.n_embd, j.rank = l.pred_fc1.ne1, j.n_ff = hp.n_ff;
  return devices::gpu_traffic(j);
}
devices::device_traffic dense_ffn_trips(const hparams& hp, const layer_weights& l) {
  devices::dense_ffn_job j;
  j.n = 1, j.d = hp.n_embd, j.n_ff = hp.n_ff, j.gated = static_cast<bool>(l.ffn_gate);
  j.scratch = &trips::held, j.scratch_bytes = trips::room;
  return devices::gpu_traffic(j);
}
devices::device_traffic hot_rows_trips(const hparams& hp) {
  devices::ffn_rows_job j;  // (one token, some rows chosen)
  j.n = 1, j.d = hp.n_embd, j.n_ff = hp.n_ff, j.count = 1;
  return devices::gpu_traffic(j);
}
devices::device_traffic head_trips(const hparams& hp) {
  devices::matvec_job j;
  j.n = 1, j.rows = hp.n_vocab, j.cols = hp.n_embd;
  return devices::gpu_traffic(j);
}

// Whole layers at the same budget, every neuron computed (llama.cpp's -ngl): front to back, each
// layer's attention, FFN norm, whole FFN and KV cache, then the head if it still fits. kv: the cache's
// bytes a token reads a layer.
void predict_layer_offload(const read_costs& c, const hparams& hp, const planner_options& o, double kv, bool sparse, plan_prediction& r) {
  const double cpu = o.cpu_gbs * 1e9, gpu = o.gpu_gbs * 1e9 * o.gpu_efficiency, link = o.pcie_gbs * 1e9;
  const double rows_rate = o.ffn_gbs() * 1e9;
  const double x_bytes = 4.0 * static_cast<double>(hp.n_embd), out = static_cast<double>(c.output);
  uint64_t left = o.budget > r.plan.fixed.compute ? o.budget - r.plan.fixed.compute : 0;
  const uint64_t kv_alloc = r.plan.kv_layer_bytes;
  double offload_t = static_cast<double>(c.embedding_row) / cpu;
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const size_t li = static_cast<size_t>(l);
    const uint64_t whole = c.attention[li] + c.ffn_norm[li] + c.ffn_dense[li] + kv_alloc;
    const double read = static_cast<double>(c.attention[li] + c.ffn_norm[li] + c.ffn_dense[li]) + kv;
    if (l == r.offload_layers && whole <= left) {
      left -= whole;
      ++r.offload_layers;
      offload_t += read / gpu;
    } else {  // (a dense file's FFN at its measured FFN rate; a sparse file's computed densely, as products)
      offload_t += (read - static_cast<double>(c.ffn_dense[li])) / cpu + static_cast<double>(c.ffn_dense[li]) / (sparse ? cpu : rows_rate);
    }
  }
  r.offload_head = r.offload_layers == hp.n_layer && c.output <= left;
  offload_t += r.offload_head ? out / gpu : out / cpu;
  if (r.offload_layers > 0) offload_t += 2 * (o.crossing_us * 1e-6 + x_bytes / link);  // the stream goes down and back up
  r.layer_offload_tokens_per_s = 1.0 / offload_t;
}

plan_prediction predict_plan(const model& m, const planner_options& o) {
  const hparams& hp = m.hp();
  check_planner_options(o, hp);
  if (hp.moe()) return predict_moe_plan(m, o);
  const read_costs c(m);
  const bool sparse = m.has_predictors();
  const firing f = firing_of(o, hp, sparse);
  const cpu_alone alone = cpu_alone_of(m, c, o, f);
  const std::vector<double>& ffn = alone.ffn;
  const int64_t ctx = alone.ctx;
  const double kv = alone.kv, rows = alone.rows;
  const double cpu = o.cpu_gbs * 1e9, gpu = o.gpu_gbs * 1e9 * o.gpu_efficiency, link = o.pcie_gbs * 1e9;
  const double rows_rate = o.ffn_gbs() * 1e9;
  const double crossing = o.crossing_us * 1e-6;
  plan_prediction r;
  r.cpu_only_bytes = alone.bytes;  // (the CPU alone)
  r.cpu_only_tokens_per_s = 1.0 / alone.seconds;

  // The hybrid: the runtime's plan for this budget (hot neurons by firing counts).
  loader::plan_options po;
  po.ctx = ctx;
  po.kv = o.kv;
  po.alloc = devices::gpu_allocation;  // (a GPU's allocator: each buffer in its granules)
  po.output_norm = false;              // (a GPU is given the head's normalized rows)
  if (sparse) {
    std::vector<uint64_t> counts = o.firing_counts;
    if (counts.empty()) counts.assign(static_cast<size_t>(hp.n_layer * hp.n_ff), 1);
    r.plan = loader::plan_placement(m, counts, o.budget, po);
  } else {
    r.plan = loader::plan_device(m, o.budget, po);
  }
  const double x_bytes = 4.0 * static_cast<double>(hp.n_embd);  // one activation vector
  double host = static_cast<double>(c.embedding_row), device = 0, cpu_s = host / cpu, gpu_s = 0, link_s = 0, crossings = 0, crossing_bytes = 0;
  // One job's round trip carrying `bytes`: its launches, copies and waits as the GPU back end makes
  // them, and the bytes over the link; its time.
  auto cross = [&](double bytes, const devices::device_traffic& trips) {
    crossings += 1, crossing_bytes += bytes;
    r.launches += static_cast<double>(trips.launches), r.copies += static_cast<double>(trips.copies), r.syncs += static_cast<double>(trips.syncs);
    const double fixed = static_cast<double>(trips.syncs) * crossing + static_cast<double>(trips.launches) * o.launch_us * 1e-6 +
                         static_cast<double>(trips.copies) * o.copy_us * 1e-6;
    r.round_trip_seconds += fixed;
    link_s += fixed + bytes / link;
    return fixed + bytes / link;
  };
  // Bytes read on one side: counted there, and the time they take on it.
  // rate: the CPU's for this kind of work (the GPU's is one).
  auto charge = [&](bool on_gpu, double bytes, double rate) {
    const double seconds = bytes / (on_gpu ? gpu : rate);
    (on_gpu ? device : host) += bytes;
    (on_gpu ? gpu_s : cpu_s) += seconds;
    return seconds;
  };
  double t = cpu_s;
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const auto& p = r.plan.layers[static_cast<size_t>(l)];
    const size_t li = static_cast<size_t>(l);
    const double attention = static_cast<double>(c.attention[li] + c.ffn_norm[li]) + kv, predictor = static_cast<double>(c.predictor[li]);
    // Attention (with its KV cache) and the predictor where the plan puts them; attention and a
    // predictor on the GPU cross together (the layer's input down, its output and choices up).
    double layer_t = charge(p.attention, attention, cpu);
    if (sparse) layer_t += charge(p.predictor, predictor, cpu);
    const auto& lw = m.weights().layers[li];
    // A whole layer on the GPU: attention's job takes the FFN after it where the recipe allows (one
    // crossing: the normalized input and the residual down, the layer's output up).
    const bool one_job = p.attention && p.ffn && recipe_of(hp, lw).one_gpu_job();
    if (one_job) {
      layer_t += charge(true, ffn[li], rows_rate) + cross(3 * x_bytes, attention_trips(hp, lw, false, static_cast<int32_t>(rows), true));
    } else if (p.attention || p.predictor) {
      layer_t += cross(3 * x_bytes + (p.predictor ? static_cast<double>(hp.n_ff) : 0.0),
                       p.attention ? attention_trips(hp, lw, sparse && p.predictor, static_cast<int32_t>(rows)) : predict_trips(hp, lw));
    }
    if (p.ffn) {  // a dense file's whole layer: its FFN in attention's job, else one more job (the FFN input down, the output up)
      if (!one_job) layer_t += charge(true, ffn[li], rows_rate) + cross(2 * x_bytes, dense_ffn_trips(hp, lw));
    } else if (sparse) {
      // The hot share on the GPU and the cold share on the CPU at the same time; the join waits for
      // the longer, the hot side's crossing included.
      double hot = 0;
      for (int32_t i : r.plan.solution.hot[li]) hot += f.bytes(c, l, i);
      const double hot_t = charge(true, hot, rows_rate) + (r.plan.solution.hot[li].empty() ? 0.0 : cross(3 * x_bytes, hot_rows_trips(hp)));
      layer_t += std::max(hot_t, charge(false, ffn[li] - hot, rows_rate));
    } else {
      layer_t += charge(false, ffn[li], rows_rate);
    }
    t += layer_t;
  }
  const double out = static_cast<double>(c.output);
  t += charge(r.plan.output, out, cpu);
  if (r.plan.output) t += cross(x_bytes + 4.0 * static_cast<double>(hp.n_vocab), head_trips(hp));
  r.host_bytes = host, r.device_bytes = device, r.crossings = crossings, r.crossing_bytes = crossing_bytes;
  r.cpu_seconds = cpu_s, r.gpu_seconds = gpu_s, r.link_seconds = link_s;
  r.hybrid_tokens_per_s = 1.0 / t;
  r.limited_by = cpu_s >= gpu_s && cpu_s >= link_s ? "cpu" : gpu_s >= link_s ? "gpu" : "pcie";

  predict_layer_offload(c, hp, o, kv, sparse, r);
  return r;
}

disk_tier_prediction predict_disk_tier(const model& m, const planner_options& o, uint64_t ram_budget, double disk_gbs, const plan_prediction* beside) {
  const hparams& hp = m.hp();
  if (!m.has_predictors() && !hp.moe())
    throw std::invalid_argument(fmt::format("plan --ram-budget: {} has no FFN rows read by neuron (a sparse file's: `hotcold prepare`)", m.path()));
  if (o.cpu_gbs <= 0 || !(disk_gbs > 0)) throw std::invalid_argument("plan: the CPU's and the disk's rates must be positive");
  check_firing_options(o, hp);
  const read_costs c(m);
  const firing f = firing_of(o, hp, !hp.moe());
  const cpu_alone alone = cpu_alone_of(m, c, o, f);
  // (beside a GPU's plan: each sparse layer's first hot_neurons are the device's, the pinned ones after them)
  std::vector<int64_t> device(static_cast<size_t>(hp.n_layer), 0);
  for (size_t l = 0; beside && l < device.size() && l < beside->plan.layers.size(); ++l) device[l] = beside->plan.layers[l].hot_neurons;
  const ram_tier_plan tier = plan_ram_tier(m, ram_budget, device);
  disk_tier_prediction r;
  r.budget = ram_budget, r.disk_gbs = disk_gbs;
  const auto device_of = [&](int64_t l) { return tier.device_rows.empty() ? int64_t{0} : tier.device_rows[static_cast<size_t>(l)]; };
  r.pinned_rows = tier.pinned_rows.empty() ? 0 : tier.pinned_rows[0], r.device_rows = device_of(0), r.window_rows = tier.window_rows;
  r.neuron_bytes = tier.neuron_bytes, r.experts = tier.experts;
  const auto finish = [&] {
    if (m.embeddings_from_disk() && tier.token_rows < m.weights().token_embd.ne1) r.disk_bytes_per_token += static_cast<double>(c.embedding_row);
    r.beside_gpu = beside && beside->hybrid_tokens_per_s > 0;
    r.compute_seconds = r.beside_gpu ? 1.0 / beside->hybrid_tokens_per_s : alone.seconds;
    r.disk_seconds = r.disk_bytes_per_token / (disk_gbs * 1e9);
    r.in_memory_tokens_per_s = 1.0 / r.compute_seconds;
    r.tokens_per_s = 1.0 / (r.compute_seconds + r.disk_seconds);
    r.overlapped_tokens_per_s = 1.0 / std::max(r.compute_seconds, r.disk_seconds);
    return r;
  };
  if (hp.moe()) {
    // A mixture: each layer's k experts of n a token, routed evenly; every expert held (pinned) or none
    // and a cache of window_rows for all the layers, which holds the last window_rows / (k x layers)
    // tokens' choices: an expert is there when one of them chose it too.
    const double k = static_cast<double>(hp.n_expert_used), p = k / static_cast<double>(hp.n_expert);
    const double hit = r.pinned_rows >= hp.n_expert ? 1.0 : 1.0 - std::pow(1.0 - p, static_cast<double>(tier.window_rows) / (k * static_cast<double>(hp.n_layer)));
    r.ram_hit_rate = hit;
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      r.neurons_read_per_token += k * (1.0 - hit);
      r.disk_bytes_per_token += k * (1.0 - hit) * static_cast<double>(tier.neuron_bytes[static_cast<size_t>(l)]);
    }
    return finish();
  }
  double chosen = 0, past_pinned = 0;  // neurons the CPU computes a token; of those, past their layer's pinned ones
  const auto first_read = [&](int64_t l) { return device_of(l) + tier.pinned_rows[static_cast<size_t>(l)]; };
  for (int64_t l = 0; l < hp.n_layer; ++l)
    for (int64_t i = device_of(l); i < hp.n_ff; ++i) {
      const double ci = f.chosen(l, i);
      chosen += ci;
      if (i >= first_read(l)) past_pinned += ci;
    }
  // (the tokens' worth of such neurons the window holds: one chosen in any of them is still there)
  const double held_tokens = past_pinned > 0 ? static_cast<double>(tier.window_rows) / past_pinned : 0.0;
  double missed = 0;
  for (int64_t l = 0; l < hp.n_layer; ++l)
    for (int64_t i = first_read(l); i < hp.n_ff; ++i) {
      const double ci = f.chosen(l, i), miss = ci * std::pow(1.0 - ci, held_tokens);
      missed += miss;
      r.disk_bytes_per_token += miss * static_cast<double>(tier.neuron_bytes[static_cast<size_t>(l)]);
    }
  r.neurons_read_per_token = missed;
  r.ram_hit_rate = chosen > 0 ? 1.0 - missed / chosen : 1.0;
  return finish();
}

std::string prediction_table(const model& m, const planner_options& o, const plan_prediction& p) {
  const hparams& hp = m.hp();
  const auto mib = [](double b) { return b / double(1 << 20); };
  std::string t;
  t += fmt::format("{}: {} layers, embd {}, ffn {}; GPU budget {:.2f} GiB, context {}, {} cached rows a token\n", m.path(), hp.n_layer, hp.n_embd, hp.n_ff,
                   o.budget / double(1ull << 30), p.plan.ctx, o.position >= 0 ? o.position : p.plan.ctx / 2.0);
  t += fmt::format("bandwidth: CPU {:.1f} GB/s products, {:.1f} GB/s {}; GPU {:.0f} GB/s x {:.2f} reached; link {:.0f} GB/s, {:.0f} us a blocking wait\n",
                   o.cpu_gbs, o.ffn_gbs(), m.has_predictors() ? "sparse FFN rows" : "FFN", o.gpu_gbs, o.gpu_efficiency, o.pcie_gbs,
                   o.crossing_us);
  t += "| configuration | host MiB/token | GPU MiB/token | crossings/token | tokens/s |\n| --- | --- | --- | --- | --- |\n";
  t += fmt::format("| CPU only | {:.1f} | 0 | 0 | {:.1f} |\n", mib(p.cpu_only_bytes), p.cpu_only_tokens_per_s);
  if (hp.moe()) {
    if (p.n_cpu_moe >= 0)
      t += fmt::format("| llama.cpp -ngl 99 --n-cpu-moe {} (experts of layers 0..{} on the CPU, after the GPU's work) | - | - | {} | {:.1f} |\n", p.n_cpu_moe,
                       p.n_cpu_moe - 1, 2 * (hp.n_layer + 1) + 2 * p.n_cpu_moe, p.layer_offload_tokens_per_s);
    else
      t += "| llama.cpp -ngl 99 --n-cpu-moe N | the layers' attention, KV cache and head do not fit | | | |\n";
    int64_t held = 0;
    for (const auto& l : p.plan.layers) held += l.expert_slots;
    t += fmt::format("| hybrid: {} of {} experts in GPU slots, {:.1f}% of the routed ones computed there, beside the CPU's | {:.1f} | {:.1f} | {:.0f} | {:.1f} |\n", held,
                     hp.n_layer * hp.n_expert, 100 * p.expert_hit_rate, mib(p.host_bytes), mib(p.device_bytes), p.crossings, p.hybrid_tokens_per_s);
  } else {
    t += fmt::format("| whole layers ({} of {}{}) | - | - | {} | {:.1f} |\n", p.offload_layers, hp.n_layer, p.offload_head ? ", head" : "", p.offload_layers > 0 ? 2 : 0,
                     p.layer_offload_tokens_per_s);
    t += fmt::format("| hybrid | {:.1f} | {:.1f} | {:.0f} | {:.1f} |\n", mib(p.host_bytes), mib(p.device_bytes), p.crossings, p.hybrid_tokens_per_s);
  }
  t += fmt::format("hybrid per token: CPU {:.2f} ms, GPU {:.2f} ms, link {:.2f} ms ({:.1f} KiB): limited by the {}\n", p.cpu_seconds * 1e3, p.gpu_seconds * 1e3,
                   p.link_seconds * 1e3, p.crossing_bytes / 1024, p.limited_by == "pcie" ? "PCIe link" : p.limited_by == "gpu" ? "GPU" : "CPU");
  if (p.launches + p.copies + p.syncs > 0)
    t += fmt::format("hybrid round trips per token: {:.0f} kernel launches, {:.0f} copies, {:.0f} blocking waits = {:.2f} ms of the link's time (at {:g} us a "
                     "launch, {:g} a copy, {:g} a wait)\n",
                     p.launches, p.copies, p.syncs, p.round_trip_seconds * 1e3, o.launch_us, o.copy_us, o.crossing_us);
  return t;
}

cpu_rates measure_cpu_rates(std::shared_ptr<const model> m, int threads) {
  const auto& hp = m->hp();
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // A warm-up pass (first touches of the weights' pages and the caches, not counted), then passes of
  // 16 decoded tokens, at least 5 and until 2 s have passed (at most 15): each kind's rate is its
  // median over the passes, so a burst of another program's work on the machine moves one pass, not
  // the answer; the passes' spread says when the machine was too busy for any answer.
  constexpr int64_t prompt_tokens = 8, per_pass = 16, min_passes = 5, max_passes = 15;
  inference_context ctx(m, prompt_tokens + per_pass * (max_passes + 1), threads, 1);
  const bool sparse = m->has_predictors(), moe = hp.moe();
  ctx.set_mode(sparse ? ffn_mode::sparse : ffn_mode::dense);
  std::vector<token_id> prompt;
  for (int64_t i = 0; i < prompt_tokens; ++i) prompt.push_back(static_cast<token_id>((7 + 131 * i) % hp.n_vocab));
  auto logits = ctx.forward_batch(prompt, 0);
  int64_t pos = prompt_tokens;
  for (; pos < prompt_tokens + per_pass; ++pos) {  // the warm-up
    const auto next = static_cast<token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    logits = ctx.forward_batch(std::span<const token_id>(&next, 1), pos);
  }
  const read_costs c(*m);
  const auto gbs = [](double bytes, double s) { return s > 0 && bytes > 0 ? bytes / s / 1e9 : 0.0; };
  std::vector<double> products_r, ffn_r, ffn_bytes;
  std::vector<double> chosen(c.attention.size(), 0.0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t pass = 0; pass < max_passes; ++pass) {
    if (pass >= min_passes && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > 2.0) break;
    const std::vector<int64_t> neurons0 = ctx.totals().rows, down0 = ctx.totals().down_rows;
    trace_recorder rec;
    ctx.set_trace(&rec);
    const int64_t first = pos;
    for (; pos < first + per_pass; ++pos) {
      const auto next = static_cast<token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      logits = ctx.forward_batch(std::span<const token_id>(&next, 1), pos);
    }
    ctx.set_trace(nullptr);
    std::map<std::string, double> seconds;
    for (const auto& e : rec.entries()) seconds[e.span.name] += std::chrono::duration<double>(e.span.end - e.span.begin).count();
    double products = static_cast<double>(per_pass) * static_cast<double>(c.output), ffn = 0;
    for (size_t l = 0; l < c.attention.size(); ++l) {
      products += static_cast<double>(per_pass) * static_cast<double>(c.attention[l] + c.ffn_norm[l] + (sparse ? c.predictor[l] : 0));
      for (int64_t p = first; p < pos; ++p) products += kv_read_per_token(hp, ctx.cache_types(), static_cast<double>(p + 1));
      chosen[l] += static_cast<double>(ctx.totals().rows[l] - neurons0[l]);
      // (a mixture: the experts it read, each once a step, and its router and shared expert, which its FFN stage runs)
      if (moe) ffn += static_cast<double>(per_pass) * static_cast<double>(c.router[l]);
      ffn += sparse || moe ? static_cast<double>(c.ffn_rows(l, static_cast<uint64_t>(ctx.totals().rows[l] - neurons0[l]),
                                                     static_cast<uint64_t>(ctx.totals().down_rows[l] - down0[l])))
                    : static_cast<double>(per_pass) * static_cast<double>(c.ffn_dense[l]);
    }
    // (the predictors' own intervals do not hold all their work: where attention's tail forms their
    // input, part of it is in attention's, so they count with the products)
    products_r.push_back(gbs(products, seconds[std::string(step_part_name(step_part::attention))] + seconds[std::string(step_part_name(step_part::predict))] +
                                           seconds[std::string(step_part_name(step_part::output))]));
    ffn_r.push_back(gbs(ffn, seconds[std::string(step_part_name(step_part::ffn))]));
    ffn_bytes.push_back(ffn / static_cast<double>(per_pass));
  }
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  cpu_rates r;
  r.threads = threads;
  r.passes = static_cast<int>(products_r.size());
  r.tokens = r.passes * per_pass;
  r.products_gbs = median(products_r);
  r.ffn_gbs = median(ffn_r);
  if (sparse)
    for (double n : chosen) r.chosen_per_token.push_back(n / static_cast<double>(r.tokens));
  r.ffn_bytes_per_token = median(ffn_bytes);
  // The spread: (largest - smallest) / median of each kind's passes, the larger of the two.
  const auto spread = [&](const std::vector<double>& v) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    const double mid = median(v);
    return mid > 0 ? (*hi - *lo) / mid : 0.0;
  };
  r.spread = std::max(spread(products_r), ffn_r.empty() ? 0.0 : spread(ffn_r));
  r.noisy = r.spread > cpu_rates::noisy_spread;
  if (r.products_gbs <= 0) throw std::runtime_error("plan: the CPU's measurement recorded no attention or head time");
  return r;
}

}  // namespace hotcold::tools
