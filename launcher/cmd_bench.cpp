// hotcold bench [-m FILE] [--mode dense|sparse] [-p 128] [-n 64] [-t N] [-r 3] [--json] [--vs-dense] [--roofline] [--no-warmup]
//               [--pipeline actors|direct] [--vs-direct] [--parallel K]:
// prompt and decode speed, llama-bench style, with the bytes of weights read per decoded token.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/bench_runs.hpp"
#include "launcher/cmd_bench.hpp"

#include "launcher/bench_output.hpp"
#include "launcher/commands.hpp"
#include "engine/read_costs.hpp"

namespace hotcold::launcher {
namespace {

struct rate {
  double mean = 0, sd = 0;
};

rate summarize(const std::vector<double>& r) {
  rate s;
  s.mean = std::accumulate(r.begin(), r.end(), 0.0) / static_cast<double>(r.size());
  double var = 0;
  for (double x : r) var += (x - s.mean) * (x - s.mean);
  s.sd = r.size() > 1 ? std::sqrt(var / static_cast<double>(r.size() - 1)) : 0.0;
  return s;
}

// hotcold's first configuration against llama-bench, round by round (each round's repetition over
// the llama-bench run after it), and the median of those ratios.
struct versus_llama {
  std::vector<double> pp, tg, pp_ratio, tg_ratio;
  std::string build;
  static double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  }
};
versus_llama versus_llama_of(const measurement& ms) {
  versus_llama v;
  const runs& mine = ms.per_config[0];
  for (size_t i = 0; i < ms.llama.size(); ++i) {
    const auto& l = ms.llama[i];
    v.build = l.build;
    if (l.prefill_tokens_per_s) {
      v.pp.push_back(*l.prefill_tokens_per_s);
      if (i < mine.pp.size() && *l.prefill_tokens_per_s > 0) v.pp_ratio.push_back(mine.pp[i] / *l.prefill_tokens_per_s);
    }
    if (l.decode_tokens_per_s) {
      v.tg.push_back(*l.decode_tokens_per_s);
      if (i < mine.tg.size() && *l.decode_tokens_per_s > 0) v.tg_ratio.push_back(mine.tg[i] / *l.decode_tokens_per_s);
    }
  }
  return v;
}

// A configuration's figures.
struct result {
  rate pp, tg;
  double bpt = 0;         // weights read per decoded token (each row of a step's union once, shared by its tokens)
  double device_bpt = 0;  // of bpt, what the hot device read (its FFN rows)
  double expert_hit_rate = 0, expert_uploads_per_token = 0;  // a mixture's: routed experts a device slot held; experts uploaded a token
  double expert_guess_share = 0;  // of the decoded tokens, those with the layer-early guess on
  double launches_pt = 0, copies_pt = 0, syncs_pt = 0;  // the hot device's round trips a decoded token (devices::device_traffic)
  double prompt_launches_pt = 0, prompt_copies_pt = 0, prompt_syncs_pt = 0;  // and a prompt token
  double disk_bpt = 0, ram_hit_rate = 0, io_wait_ms_pt = 0;  // the disk tier's a decoded token (--ram-budget)
  double read_ahead_recall = 0, disk_read_ratio = 0, input_guess_share = 0;
  std::array<double, devices::n_operations> job_ms_pt{};  // its jobs' milliseconds a decoded token, by operation
  std::vector<double> rep_bandwidth;  // the bandwidth beside each repetition
  double bandwidth = 0;               // their mean
  std::vector<double> fractions;      // of the roofline, per repetition (speed x bytes per token / bandwidth)
  double fraction = 0;                // their mean
  uint64_t probe_bytes = 0;           // what its probe read (at most the probe's memory)
};

std::vector<result> results_of(const bench_args& a, const std::vector<config>& configs, const measurement& ms, const model& m) {
  auto mean_of = [](const std::vector<double>& v) {
    double x = 0;
    for (double y : v) x += y / static_cast<double>(v.size());
    return x;
  };
  std::vector<result> out(configs.size());
  for (size_t k = 0; k < configs.size(); ++k) {
    const runs& r = ms.per_config[k];
    result& res = out[k];
    if (a.n_prompt > 0) {
      res.pp = summarize(r.pp);
      const auto per_prompt_token = [&](uint64_t x) { return static_cast<double>(x) / static_cast<double>(r.prompt_tokens); };
      res.prompt_launches_pt = per_prompt_token(r.prompt_traffic.launches), res.prompt_copies_pt = per_prompt_token(r.prompt_traffic.copies);
      res.prompt_syncs_pt = per_prompt_token(r.prompt_traffic.syncs);
    }
    if (a.n_gen > 0) {
      res.tg = summarize(r.tg);
      res.bpt = bytes_per_step(m, r.computed, r.tokens) / configs[k].sequences;
      res.device_bpt = static_cast<double>(r.device_bytes) / static_cast<double>(r.tokens * configs[k].sequences);
      res.expert_hit_rate = r.expert_lookups > 0 ? static_cast<double>(r.expert_hits) / static_cast<double>(r.expert_lookups) : 0.0;
      res.expert_uploads_per_token = static_cast<double>(r.expert_uploads) / static_cast<double>(r.tokens * configs[k].sequences);
      res.expert_guess_share = static_cast<double>(r.expert_guess_tokens) / static_cast<double>(r.tokens * configs[k].sequences);
      const auto per_token = [&](uint64_t x) { return static_cast<double>(x) / static_cast<double>(r.tokens * configs[k].sequences); };
      res.launches_pt = per_token(r.traffic.launches), res.copies_pt = per_token(r.traffic.copies), res.syncs_pt = per_token(r.traffic.syncs);
      res.disk_bpt = per_token(r.disk_bytes), res.io_wait_ms_pt = 1e3 * r.io_wait_seconds / static_cast<double>(r.tokens * configs[k].sequences);
      res.ram_hit_rate = r.ram_lookups > 0 ? static_cast<double>(r.ram_hits) / static_cast<double>(r.ram_lookups) : 1.0;
      res.read_ahead_recall = r.read_ahead + r.read_missed > 0 ? static_cast<double>(r.read_ahead) / static_cast<double>(r.read_ahead + r.read_missed) : 1.0;
      res.disk_read_ratio = r.disk_needed > 0 ? static_cast<double>(r.disk_bytes) / static_cast<double>(r.disk_needed) : 0.0;
      res.input_guess_share = r.token_steps > 0 ? static_cast<double>(r.guessed_steps) / static_cast<double>(r.token_steps) : 0.0;
      for (size_t op = 0; op < r.job_seconds.size(); ++op)
        res.job_ms_pt[op] = 1e3 * r.job_seconds[op] / static_cast<double>(r.tokens * configs[k].sequences);
    }
    for (size_t i = 0; i + 1 < r.probes.size(); ++i) res.rep_bandwidth.push_back(std::max(r.probes[i], r.probes[i + 1]));
    res.bandwidth = mean_of(res.rep_bandwidth);
    for (size_t i = 0; i < res.rep_bandwidth.size() && i < r.tg.size(); ++i) res.fractions.push_back(r.tg[i] * res.bpt / res.rep_bandwidth[i]);
    res.fraction = mean_of(res.fractions);
    if (ms.probe) res.probe_bytes = std::min<uint64_t>(static_cast<uint64_t>(r.step_bytes), ms.probe->bytes());
  }
  return out;
}

const char* pipeline_name(bool actors_pipeline) { return actors_pipeline ? "actors" : "direct"; }
double ratio(double x, double y) { return y > 0 ? x / y : 0.0; }

// What a report says, besides the configurations' figures.
struct report {
  const bench_args& a;
  const std::vector<config>& configs;
  const std::vector<result>& results;
  comparisons c;
  bool probed = false;
  int threads = 0;
  int depth = 0;  // tokens in the cache before each test (-d)
  versus_llama llama;
  // The KV cache read per decoded token on each side, per configuration (in its types, every layer,
  // positions depth .. depth + n_gen - 1 of each sequence: depth + (n_gen + 1) / 2 cached rows of K
  // and V on average), where the layer's attention runs.
  std::vector<double> kv_host, kv_device;
  bool experts_on_device = false;  // a mixture's experts in device slots
  devices::device_kind device_kind = devices::device_kind::cpu;  // the hot device's
  std::string device_name;
  kv_types kv;  // the KV cache's types
  double actors_tg() const { return c.other_pipeline < 0 ? 0 : configs[0].actors ? results[0].tg.mean : results[static_cast<size_t>(c.other_pipeline)].tg.mean; }
  double direct_tg() const { return c.other_pipeline < 0 ? 0 : configs[0].actors ? results[static_cast<size_t>(c.other_pipeline)].tg.mean : results[0].tg.mean; }
  // Aggregate decode of the comparison's configuration over the first's.
  double speedup(int k) const { return k < 0 ? 0 : ratio(results[static_cast<size_t>(k)].tg.mean, results[0].tg.mean); }
};

report report_of(const bench_args& a, const std::vector<config>& configs, const std::vector<result>& results, const comparisons& c, const loaded& l,
                 bool probed, int depth) {
  const auto& hp = l.m->hp();
  const inference_context& ctx = *l.ctx;
  report r{a, configs, results, c, probed, static_cast<int>(l.ctx->pool().size()), depth, {}, {}, {}, false, devices::device_kind::cpu, {}, ctx.cache_types()};
  int64_t on_device = 0;
  for (int64_t il = 0; il < hp.n_layer; ++il) on_device += ctx.device() && ctx.device()->attention(il);
  for (const config& k : configs) {
    const double kv_layer = kv_read_per_token(hp, ctx.cache_types(), k.depth_at(depth) + (static_cast<double>(a.n_gen) + 1) / 2);
    r.kv_host.push_back(kv_layer * static_cast<double>(hp.n_layer - on_device));
    r.kv_device.push_back(kv_layer * static_cast<double>(on_device));
  }
  r.experts_on_device = l.experts != nullptr;
  if (l.dev) r.device_kind = l.dev->kind(), r.device_name = l.dev->name();
  return r;
}

nlohmann::json json_of(const report& r, const model& m) {
  const bench_args& a = r.a;
  auto describe = [&](size_t k) {
    const result& res = r.results[k];
    nlohmann::json d{{"model", m.path()}, {"mode", ffn_mode_name(r.configs[k].mode)}, {"pipeline", pipeline_name(r.configs[k].actors)},
                     {"threads", r.threads}, {"model_bytes", m.weight_bytes()},
                     {"prefill_tokens_per_s", res.pp.mean}, {"prefill_tokens_per_s_sd", res.pp.sd}, {"n_prompt", a.n_prompt},
                     {"decode_tokens_per_s", res.tg.mean}, {"decode_tokens_per_s_sd", res.tg.sd}, {"n_gen", a.n_gen}, {"n_depth", r.configs[k].depth_at(r.depth)},
                     {"type_k", lower_type_name(r.kv.k)}, {"type_v", lower_type_name(r.kv.v)},
                     {"bytes_per_token", res.bpt}, {"repetitions", a.reps}, {"parallel", r.configs[k].sequences},
                     {"micro_batches", r.configs[k].micro},
                     // Weights and KV cache read per decoded token on each side.
                     {"host_bytes_per_token", res.bpt - res.device_bpt + r.kv_host[k]},
                     {"device_bytes_per_token", res.device_bpt + r.kv_device[k]},
                     // The hot device's kernel launches, host<->device copies and blocking waits a decoded
                     // token (0 on the CPU; sim counts a GPU's for its jobs, with --sim-kernels the kernels').
                     {"launches_per_token", res.launches_pt}, {"copies_per_token", res.copies_pt}, {"syncs_per_token", res.syncs_pt},
                     // The same a prompt token (prompts go through the device in chunks: loader/placement.hpp).
                     {"prompt_launches_per_token", res.prompt_launches_pt}, {"prompt_copies_per_token", res.prompt_copies_pt},
                     {"prompt_syncs_per_token", res.prompt_syncs_pt},
                     // The disk tier's (--ram-budget; docs/disk.md): bytes read from the file a decoded token, the
                     // share of chosen neurons whose rows were in memory, milliseconds waited on reads a token.
                     {"disk_bytes_per_token", res.disk_bpt}, {"ram_hit_rate", res.ram_hit_rate}, {"io_wait_ms_per_token", res.io_wait_ms_pt},
                     // Of the chosen neurons not in memory before, the share the layer-early read brought.
                     {"read_ahead_recall", res.read_ahead_recall},
                     // Bytes read from the disk over the bytes of the rows the steps needed from it (the
                     // chosen neurons not in memory before: 1 reads nothing in vain; 0 when none were).
                     {"disk_read_ratio", res.disk_read_ratio},
                     // Of the decoded tokens' steps, those with the second guess before attention on (--read-ahead-input).
                     {"read_ahead_input_share", res.input_guess_share}};
    // Where a decoded token's device time goes: each operation's jobs, whole (copies and waits included).
    nlohmann::json jobs = nlohmann::json::object();
    for (size_t op = 0; op < res.job_ms_pt.size(); ++op) jobs[devices::operation_name(static_cast<devices::operation>(op))] = res.job_ms_pt[op];
    d["device_job_ms_per_token"] = jobs;
    d["device_wait"] = devices::device_wait_name(devices::current_device_wait());  // how threads waited for the device
    const grammar_args& g = a.grammar;
    if (!g.grammar.empty() || !g.grammar_file.empty() || !g.json_schema.empty() || !g.json_schema_file.empty()) d["constrained"] = r.configs[k].constrained;
    if (m.hp().moe()) {  // (every expert on the CPU: a hit rate of 0)
      d["expert_hit_rate"] = res.expert_hit_rate;
      d["expert_uploads_per_token"] = res.expert_uploads_per_token;
      d["expert_guess_share"] = res.expert_guess_share;  // (--expert-guess auto: the share of tokens the trial left it on)
    }
    if (r.probed && res.bpt > 0) {
      d["read_bandwidth_bytes_per_s"] = res.bandwidth;
      d["probe_bytes"] = res.probe_bytes;
      d["roofline_tokens_per_s"] = res.bandwidth / res.bpt;
      d["roofline_fraction"] = res.fraction;
      d["roofline_fraction_per_repetition"] = res.fractions;
    }
    return d;
  };
  nlohmann::json j = describe(0);
  j["warmup"] = !a.no_warmup;
  if (r.probed) j["read_bandwidth_bytes_per_s"] = r.results[0].bandwidth;
  const comparisons& c = r.c;
  if (c.dense > 0) {
    const result& d = r.results[static_cast<size_t>(c.dense)];
    j["dense"] = describe(static_cast<size_t>(c.dense));
    if (d.tg.mean > 0) j["decode_speedup_vs_dense"] = ratio(r.results[0].tg.mean, d.tg.mean);
    if (d.pp.mean > 0) j["prefill_speedup_vs_dense"] = ratio(r.results[0].pp.mean, d.pp.mean);
  }
  if (c.other_pipeline > 0) {
    // (The direct pipeline's figures also under "reference", its older name, for scripts that read that key.)
    j[r.configs[0].actors ? "direct" : "actors"] = describe(static_cast<size_t>(c.other_pipeline));
    if (r.configs[0].actors) j["reference"] = j["direct"];
    if (a.n_gen > 0) j["actor_overhead"] = 1.0 - ratio(r.actors_tg(), r.direct_tg());
  }
  if (c.parallel > 0) {
    j["vs_parallel"] = describe(static_cast<size_t>(c.parallel));
    if (a.n_gen > 0) j["parallel_speedup"] = r.speedup(c.parallel);
  }
  if (c.micro > 0) {
    j["vs_micro_batches"] = describe(static_cast<size_t>(c.micro));
    if (a.n_gen > 0) j["micro_batch_speedup"] = r.speedup(c.micro);
  }
  if (c.depth > 0) {  // --vs-depth's figures over this depth's
    const result& d = r.results[static_cast<size_t>(c.depth)];
    j["vs_depth"] = describe(static_cast<size_t>(c.depth));
    if (a.n_gen > 0) j["depth_decode_ratio"] = r.speedup(c.depth);
    if (a.n_prompt > 0) j["depth_prefill_ratio"] = ratio(d.pp.mean, r.results[0].pp.mean);
  }
  if (c.unconstrained > 0) {  // the grammar's cost: constrained decode over unconstrained
    j["vs_unconstrained"] = describe(static_cast<size_t>(c.unconstrained));
    if (a.n_gen > 0) j["constrained_decode_ratio"] = ratio(r.results[0].tg.mean, r.results[static_cast<size_t>(c.unconstrained)].tg.mean);
  }
  if (!a.vs_llama_bench.empty()) {
    const versus_llama& v = r.llama;
    j["llama_bench"] = {{"path", a.vs_llama_bench}, {"build", v.build}, {"prefill_tokens_per_s", v.pp}, {"decode_tokens_per_s", v.tg},
                        {"prefill_ratio", versus_llama::median(v.pp_ratio)}, {"decode_ratio", versus_llama::median(v.tg_ratio)},
                        {"prefill_ratio_per_round", v.pp_ratio}, {"decode_ratio_per_round", v.tg_ratio}};
  }
  return j;
}

void print_roofline(const report& r) {
  fmt::print("\nroofline: read bandwidth measured here with {} threads, over as many bytes as a step reads, before the first repetition "
             "and after each; each repetition held against the better of the two beside it\n",
             r.threads);
  for (size_t k = 0; k < r.configs.size(); ++k) {
    const result& res = r.results[k];
    if (res.bpt <= 0) continue;
    std::vector<std::string> fs, bws;
    for (double f : res.fractions) fs.push_back(fmt::format("{:.0f}", 100.0 * f));
    for (double b : res.rep_bandwidth) bws.push_back(fmt::format("{:.1f}", b / 1e9));
    fmt::print("  {} {}{}: {:.1f} GB/s over {:.0f} MB ({} GB/s); {:.1f} MB read per token -> at most {:.1f} tok/s; reached {:.2f} tok/s = {:.0f}% of "
               "the roofline ({}%)\n",
               ffn_mode_name(r.configs[k].mode), pipeline_name(r.configs[k].actors),
               r.configs[k].sequences > 1 ? fmt::format(" x{}", r.configs[k].sequences) : "", res.bandwidth / 1e9,
               static_cast<double>(res.probe_bytes) / 1e6, fmt::join(bws, " / "), res.bpt / 1e6, res.bandwidth / res.bpt, res.tg.mean,
               100.0 * res.fraction, fmt::join(fs, " / "));
  }
}

// The table of one depth, then what its comparisons found.
void print_table(const report& r, const model& m) {
  const bench_args& a = r.a;
  const auto& hp = m.hp();
  fmt::print("| model | size | mode | pipeline | threads | test | t/s | bytes/token |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  // (As llama-bench names a test at a depth.)
  auto at = [&](size_t k) { return r.configs[k].depth_at(r.depth) > 0 ? fmt::format(" @ d{}", r.configs[k].depth_at(r.depth)) : std::string(); };
  const std::string name = fmt::format("{} {} {}L {}", architecture_name(hp.arch), activation_name(hp.act), hp.n_layer, hp.n_embd);
  const double gib = m.weight_bytes() / double(1ull << 30);
  for (size_t k = 0; k < r.configs.size(); ++k) {
    const auto& res = r.results[k];
    const auto& c = r.configs[k];
    if (a.n_prompt > 0)
      fmt::print("| {} | {:.2f} GiB | {} | {} | {} | pp{}{} | {:.2f} ± {:.2f} | |\n", name, gib, ffn_mode_name(c.mode), pipeline_name(c.actors), r.threads,
                 a.n_prompt, at(k), res.pp.mean, res.pp.sd);
    if (a.n_gen > 0)
      fmt::print("| {} | {:.2f} GiB | {} | {} | {} | tg{}{}{}{} | {:.2f} ± {:.2f} | {:.1f} MiB |\n", name, gib, ffn_mode_name(c.mode), pipeline_name(c.actors),
                 r.threads, a.n_gen, at(k), c.sequences > 1 ? fmt::format(" x{}", c.sequences) : "",
                 c.micro > 1 ? fmt::format(" in {} micro-batches", c.micro) : "", res.tg.mean, res.tg.sd, res.bpt / double(1 << 20));
  }
  if (r.probed) print_roofline(r);
  if (hp.moe() && a.n_gen > 0 && r.experts_on_device)
    for (size_t k = 0; k < r.configs.size(); ++k)
      fmt::print("\nexperts ({}): {:.1f}% of the routed experts on the hot device, {:.2f} uploaded a token; {:.1f} MiB read a token on the host, {:.1f} MiB on the "
                 "device\n",
                 pipeline_name(r.configs[k].actors), 100 * r.results[k].expert_hit_rate, r.results[k].expert_uploads_per_token,
                 (r.results[k].bpt - r.results[k].device_bpt + r.kv_host[k]) / double(1 << 20), (r.results[k].device_bpt + r.kv_device[k]) / double(1 << 20));
  if (r.device_kind != devices::device_kind::cpu && a.n_gen > 0)
    for (size_t k = 0; k < r.configs.size(); ++k) {
      const auto& res = r.results[k];
      std::vector<std::string> jobs;
      for (size_t op = 0; op < res.job_ms_pt.size(); ++op)
        if (res.job_ms_pt[op] > 0) jobs.push_back(fmt::format("{} {:.3f} ms", devices::operation_name(static_cast<devices::operation>(op)), res.job_ms_pt[op]));
      fmt::print("\n{} round trips a decoded token ({}): {:.1f} kernel launches, {:.1f} copies, {:.1f} blocking waits; its jobs, whole: {}\n", r.device_name,
                 pipeline_name(r.configs[k].actors), res.launches_pt, res.copies_pt, res.syncs_pt, jobs.empty() ? "none" : fmt::format("{}", fmt::join(jobs, ", ")));
    }
  const comparisons& cmp = r.c;
  if (cmp.dense > 0 && a.n_gen > 0 && r.results[static_cast<size_t>(cmp.dense)].tg.mean > 0) {
    const auto& d = r.results[static_cast<size_t>(cmp.dense)];
    fmt::print("\nsparse vs dense, same file, interleaved: decode {:.2f}x{}\n", r.results[0].tg.mean / d.tg.mean,
               a.n_prompt > 0 && d.pp.mean > 0 ? fmt::format(", prefill {:.2f}x", r.results[0].pp.mean / d.pp.mean) : "");
  }
  if (cmp.other_pipeline > 0 && a.n_gen > 0 && r.direct_tg() > 0)
    fmt::print("\nactors vs direct, same file and placement, interleaved: decode {:.3f}x (actor overhead {:.1f}%)\n", r.actors_tg() / r.direct_tg(),
               100.0 * (1.0 - r.actors_tg() / r.direct_tg()));
  if (cmp.parallel > 0 && a.n_gen > 0 && r.results[0].tg.mean > 0)
    fmt::print("\n{} sequences vs {}, interleaved: aggregate decode {:.2f}x\n", a.vs_parallel, a.parallel, r.speedup(cmp.parallel));
  if (cmp.micro > 0 && a.n_gen > 0 && r.results[0].tg.mean > 0)
    fmt::print("\n{} micro-batches vs {}, interleaved: aggregate decode {:.2f}x\n", a.vs_micro_batches, a.micro_batches, r.speedup(cmp.micro));
  if (cmp.depth > 0 && r.results[0].tg.mean + r.results[0].pp.mean > 0) {
    const auto& d = r.results[static_cast<size_t>(cmp.depth)];
    fmt::print("\ndepth {} vs {}, interleaved:{}{}\n", a.vs_depth, r.depth, a.n_gen > 0 ? fmt::format(" decode {:.2f}x", r.speedup(cmp.depth)) : "",
               a.n_prompt > 0 && r.results[0].pp.mean > 0 ? fmt::format("{} prefill {:.2f}x", a.n_gen > 0 ? "," : "", d.pp.mean / r.results[0].pp.mean) : "");
  }
  if (cmp.unconstrained > 0 && a.n_gen > 0 && r.results[static_cast<size_t>(cmp.unconstrained)].tg.mean > 0)
    fmt::print("\nwith the grammar vs without, interleaved: decode {:.2f}x\n", r.results[0].tg.mean / r.results[static_cast<size_t>(cmp.unconstrained)].tg.mean);
  if (!a.vs_llama_bench.empty()) {
    const versus_llama& v = r.llama;
    auto ratios = [](const std::vector<double>& x) {
      std::vector<std::string> s;
      for (double y : x) s.push_back(fmt::format("{:.2f}", y));
      return fmt::format("{}", fmt::join(s, " / "));
    };
    fmt::print("\nvs llama.cpp's llama-bench ({}{}), the same file, threads and lengths, a run after each round:", a.vs_llama_bench,
               v.build.empty() ? "" : ", build " + v.build);
    if (!v.pp_ratio.empty()) fmt::print(" prefill {:.2f}x ({}x)", versus_llama::median(v.pp_ratio), ratios(v.pp_ratio));
    if (!v.tg_ratio.empty()) fmt::print("{} decode {:.2f}x ({}x)", v.pp_ratio.empty() ? "" : ";", versus_llama::median(v.tg_ratio), ratios(v.tg_ratio));
    fmt::print("\n");
  }
}

}  // namespace

namespace {

// One thread count's tests: the model loaded once (sized for the longest), every -p and -n pair and -d
// depth measured on it; the table printed as it comes (without -o), the measurements kept.
void bench_threads(const bench_args& given, const std::string& gbnf, const bench_provenance& prov, nlohmann::json& measurements) {
  bench_args a = given;
  const int deepest = std::max(a.vs_depth, *std::max_element(a.n_depth.begin(), a.n_depth.end()));
  const int longest_prompt = *std::max_element(a.n_prompts.begin(), a.n_prompts.end()), longest_gen = *std::max_element(a.n_gens.begin(), a.n_gens.end());
  // (At a depth the actors' sequences may start a few steps apart: room for that head start too.)
  const int head_start = deepest > 0 ? std::max(0, longest_gen) + 64 : 0;
  auto l = load(a.m, std::max(1, deepest + longest_prompt + std::max(0, longest_gen) + head_start), std::max(a.parallel, a.vs_parallel));
  if (l.stages.empty()) l.ctx->forward(1, 0);  // warm-up: first touch of every weight page (with --workers: theirs, in their warm-up)
  comparisons c;
  const auto configs = configs_of(a, l.ctx->mode(), c);
  if (!gbnf.empty() && std::any_of(configs.begin(), configs.end(), [](const config& k) { return !k.actors; }))
    throw std::invalid_argument("a grammar constrains the actors' sampler: --pipeline direct samples nothing");
  bench_runner run(l, std::any_of(configs.begin(), configs.end(), [](const config& k) { return k.actors; }), gbnf);
  // One -p and one -n: one test of both. Lists: as llama-bench, each prompt length a test (pp) and each
  // generation length a test (tg).
  std::vector<std::pair<int, int>> tests;
  if (a.n_prompts.size() == 1 && a.n_gens.size() == 1) tests.emplace_back(a.n_prompts[0], a.n_gens[0]);
  else {
    for (const int p : a.n_prompts)
      if (p > 0) tests.emplace_back(p, 0);
    for (const int n : a.n_gens)
      if (n != 0) tests.emplace_back(0, n);
  }
  for (const auto& [p, n] : tests) {
    a.n_prompt = p, a.n_gen = n;
    if (a.n_gen < 0) {  // -1: each decode runs until the context is full
      a.n_gen = static_cast<int>(std::max<int64_t>(0, l.ctx->n_ctx() - a.n_prompt - deepest));
      fmt::print(stderr, "hotcold bench: -n -1: {} generated tokens (a context of {} after {} prompt tokens)\n", a.n_gen, l.ctx->n_ctx(), a.n_prompt);
    }
    for (const int depth : a.n_depth) {
      const measurement ms = measure(run, a, configs, l, depth);
      const auto results = results_of(a, configs, ms, *l.m);
      report r = report_of(a, configs, results, c, l, ms.probe != nullptr, depth);
      r.llama = versus_llama_of(ms);
      nlohmann::json j = json_of(r, *l.m);
      j["build"] = prov.build, j["cpu"] = prov.cpu, j["command"] = prov.command;
      measurements.push_back(std::move(j));
      if (!a.json && a.output.empty()) {
        if (measurements.size() > 1) fmt::print("\n");
        print_table(r, *l.m);
      }
    }
  }
  run.stop();
  l.finish();
}

}  // namespace

void run_bench(const bench_args& given) {
  bench_args a = given;
  if (a.reps < 1) throw std::invalid_argument("-r must be at least 1");
  if (a.n_depth.empty()) a.n_depth = {0};
  if (a.n_prompts.empty()) a.n_prompts = {a.n_prompt};
  if (a.n_gens.empty()) a.n_gens = {a.n_gen};
  for (int d : a.n_depth)
    if (d < 0) throw std::invalid_argument(fmt::format("-d {}: a depth is a count of tokens, 0 or more", d));
  for (int p : a.n_prompts)
    if (p < 0) throw std::invalid_argument(fmt::format("-p {}: a prompt is a count of tokens, 0 or more", p));
  if (!a.output.empty() && a.json) throw std::invalid_argument("--json and -o: give one (-o json is llama-bench's rows; --json hotcold's object)");
  if (!a.vs_llama_bench.empty()) check_llama_bench(a.vs_llama_bench);
  const std::string gbnf = grammar_of(a.grammar);  // (checked before the model loads)
  if (a.vs_unconstrained && gbnf.empty()) throw std::invalid_argument("--vs-unconstrained: give the grammar (--grammar, --grammar-file, -j, --json-schema-file)");
  const bench_provenance prov = provenance_now();
  if (!a.json && a.output.empty()) fmt::print("build: {}; CPU: {}; command: {}\n\n", prov.build, prov.cpu, prov.command);
  nlohmann::json measurements = nlohmann::json::array();
  const std::vector<int> threads = a.m.thread_list.size() > 1 ? a.m.thread_list : std::vector<int>{a.m.threads};
  for (const int t : threads) {
    bench_args at = a;
    at.m.threads = t, at.m.thread_list = {t};
    bench_threads(at, gbnf, prov, measurements);
  }
  if (a.json) {
    // One test: its object. Several: the first's object, and every one's under "depths" (each depth,
    // and each -p, -n and -t of the lists).
    nlohmann::json j = measurements[0];
    if (measurements.size() > 1) j["depths"] = measurements;
    fmt::print("{}\n", j.dump(2));
  } else if (!a.output.empty()) {
    std::vector<nlohmann::ordered_json> rows;
    for (const auto& m : measurements)
      for (auto& r : bench_rows(m, prov)) rows.push_back(std::move(r));
    print_bench_rows(rows, a.output, prov);
  }
}

}  // namespace hotcold::launcher
