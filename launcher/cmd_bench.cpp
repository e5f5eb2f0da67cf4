// hotcold bench [-m FILE] [--mode dense|sparse] [-p 128] [-n 64] [-t N] [-r 3] [--json] [--vs-dense] [--roofline] [--no-warmup]
//               [--pipeline actors|reference] [--vs-reference] [--parallel K]:
// prompt and decode speed, llama-bench style, with the bytes of weights read per decoded token.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/commands.hpp"
#include "launcher/model_options.hpp"
#include "engine/bandwidth.hpp"
#include "engine/read_costs.hpp"

namespace hotcold::launcher {
namespace {

// Bytes of weights a decode step reads (read_costs, what /metrics counts too): every layer's
// attention, norms and predictor, the FFN rows it read (each row of a step's union once; a down row
// only where it was read: with transposed down rows, where its neuron fired), the head and an
// embedding row.
struct rows_read {
  std::vector<int64_t> neurons, down;  // per layer, over some steps
  explicit rows_read(size_t layers) : neurons(layers, 0), down(layers, 0) {}
  explicit rows_read(const inference_context& ctx) : neurons(ctx.read_neurons()), down(ctx.read_down_rows()) {}
  rows_read& operator-=(const rows_read& before) {
    for (size_t l = 0; l < neurons.size(); ++l) neurons[l] -= before.neurons[l], down[l] -= before.down[l];
    return *this;
  }
  rows_read& operator+=(const rows_read& more) {
    for (size_t l = 0; l < neurons.size(); ++l) neurons[l] += more.neurons[l], down[l] += more.down[l];
    return *this;
  }
};

double bytes_per_step(const model& m, const rows_read& r, int64_t steps) {
  const read_costs c(m);
  double bytes = static_cast<double>(c.output + c.embedding_row);
  for (size_t l = 0; l < c.layer_fixed.size(); ++l)
    bytes += static_cast<double>(c.layer_fixed[l]) +
             static_cast<double>(c.ffn_rows(l, static_cast<uint64_t>(r.neurons[l]), static_cast<uint64_t>(r.down[l]))) / static_cast<double>(steps);
  return bytes;
}

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

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  struct args {
    model_args m;
    int n_prompt = 128, n_gen = 64, reps = 3, parallel = 1, vs_parallel = 0, micro_batches = 1, vs_micro_batches = 0;
    bool json = false, vs_dense = false, vs_reference = false, roofline = false, no_warmup = false;
    std::string pipeline = "actors";
  };
  auto a = std::make_shared<args>();
  auto* cmd = app.add_subcommand("bench", "Measure prompt processing and decode speed (tokens/s, mean ± sd over repetitions)");
  add_model_options(cmd, a->m, false);
  add_pipeline_option(cmd, a->pipeline);
  cmd->add_option("-p,--n-prompt", a->n_prompt, "Prompt tokens (0: skip)")->capture_default_str();
  cmd->add_option("-n,--n-gen", a->n_gen, "Generated tokens (0: skip)")->capture_default_str();
  cmd->add_option("-r,--repetitions", a->reps, "Repetitions")->capture_default_str();
  cmd->add_option("--parallel", a->parallel, "Sequences decoded at once, one step for all (decode_tokens_per_s is their sum)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--vs-parallel", a->vs_parallel, "Also decode this many sequences at once, interleaved, and print the aggregate ratio, these over --parallel's (e.g. --vs-parallel 4: four at once against one)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--micro-batches", a->micro_batches,
                  "Split each step of several sequences into this many micro-batches, so that a hot device holding every layer's attention "
                  "and predictor works on one while the cold pool works on another (actors)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--vs-micro-batches", a->vs_micro_batches,
                  "Also decode with this many micro-batches, interleaved, and print the aggregate ratio, these over --micro-batches'")
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--json", a->json, "Print one JSON object instead of the table");
  cmd->add_flag("--roofline", a->roofline,
                "Measure this machine's memory read bandwidth with the same threads, over as many bytes as a step reads, and report, per "
                "mode, the decode speed it allows (bandwidth / bytes per token) and the fraction reached");
  cmd->add_flag("--vs-dense", a->vs_dense, "Also measure dense mode on the same file, repetitions interleaved, and print the ratio");
  cmd->add_flag("--vs-reference", a->vs_reference,
                "Also measure the other pipeline (actors vs reference) on the same file and placement, interleaved, and print the actors' overhead");
  cmd->add_flag("--no-warmup", a->no_warmup, "Skip the untimed warm-up (per configuration, one prompt and two generated tokens, as llama-bench does)");
  cmd->callback([a, &exit_code] {
    exit_code = run_guarded("bench", [&] {
      if (a->reps < 1) throw std::invalid_argument("-r must be at least 1");
      auto l = load(a->m, std::max(1, a->n_prompt + a->n_gen), std::max(a->parallel, a->vs_parallel));
      const int K = a->parallel;
      inference_context& ctx = *l.ctx;
      const model& m = *l.m;
      const auto& hp = m.hp();
      auto token_at = [&](int i) { return static_cast<token_id>((i * 7919 + 13) % hp.n_vocab); };
      std::unique_ptr<actors::pipeline> pipe;  // made when a configuration runs on the actors

      // Decode: K sequences (slots 0..K-1) one token a step; prefill: the prompt as batches.
      // The reference calls the forward pass directly (forward for one sequence, forward_step for
      // several); the actors get K requests of one prompt token and n - 1 to generate (greedy, past
      // end-of-generation tokens), so both run n steps of K tokens.
      std::vector<int64_t> slots, positions;
      std::vector<token_id> step_tokens;
      auto drain = [&](actors::pipeline& p, int requests) {
        for (int done = 0; done < requests;) {
          auto ev = p.next();
          if (!ev) throw std::runtime_error("the pipeline stopped answering");
          if (auto* d = std::get_if<actors::done_event>(&*ev)) {
            if (d->finish == "error") throw std::runtime_error(d->error);
            ++done;
          }
        }
      };
      auto timed = [&](bool actors_pipeline, int sequences, int n) {
        const int K = sequences;
        slots.resize(static_cast<size_t>(K)), positions.resize(static_cast<size_t>(K)), step_tokens.resize(static_cast<size_t>(K));
        for (int s = 0; s < K; ++s) slots[static_cast<size_t>(s)] = s;
        auto t0 = std::chrono::steady_clock::now();
        if (actors_pipeline) {
          for (int s = 0; s < K; ++s) {
            actors::generation_request r;
            // n steps, as the forward pass's n calls: the prompt's token, then n - 1 generated ones (the
            // n-th is sampled, never run).
            r.prompt = {token_at(101 * s)};
            r.n_predict = n;
            r.ignore_eos = true;
            r.sampling.temperature = 0;
            pipe->submit(std::move(r));
          }
          drain(*pipe, K);
        } else {
          for (int i = 0; i < n; ++i) {
            if (K == 1) {
              ctx.forward(token_at(i), i);
              continue;
            }
            for (int s = 0; s < K; ++s) step_tokens[static_cast<size_t>(s)] = token_at(i + 101 * s), positions[static_cast<size_t>(s)] = i;
            ctx.forward_step(step_tokens, slots, positions);
          }
        }
        return static_cast<double>(n) * K / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      auto timed_prompt = [&](bool actors_pipeline, int n) {
        std::vector<token_id> prompt(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) prompt[static_cast<size_t>(i)] = token_at(i);
        auto t0 = std::chrono::steady_clock::now();
        if (actors_pipeline) {
          actors::generation_request r;
          r.prompt = prompt;
          pipe->submit(std::move(r));
          drain(*pipe, 1);
        } else {
          ctx.forward_batch(prompt, 0);
        }
        return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      ctx.forward(1, 0);  // warm-up: first touch of every weight page
      // The configurations measured: the chosen one, and with --vs-dense dense mode, with
      // --vs-reference the other pipeline, on the same loaded model, repetitions interleaved so all
      // see the same machine.
      struct config {
        ffn_mode mode;
        bool actors;
        int sequences;
        int micro = 1;  // micro-batches (actors)
      };
      const bool actors_first = a->pipeline == "actors";
      const int micro = a->micro_batches;
      std::vector<config> configs{{ctx.mode(), actors_first, K, micro}};
      if (a->vs_dense && ctx.mode() != ffn_mode::dense) configs.push_back({ffn_mode::dense, actors_first, K, micro});
      if (a->vs_reference) configs.push_back({ctx.mode(), !actors_first, K, micro});
      if (a->vs_parallel > 0) configs.push_back({ctx.mode(), actors_first, a->vs_parallel, micro});
      if (a->vs_micro_batches > 0) {
        if (!actors_first) throw std::invalid_argument("--vs-micro-batches: micro-batches are the actors' (--pipeline actors)");
        configs.push_back({ctx.mode(), true, K, a->vs_micro_batches});
      }
      for (const auto& c : configs)
        if (c.actors && !pipe) pipe = l.make_pipeline();
      struct result {
        rate pp, tg;
        double bpt = 0;
        double device_bpt = 0;  // of bpt, what the hot device read (its FFN rows)
      };
      std::vector<result> results(configs.size());
      std::vector<std::vector<double>> pp_runs(configs.size()), tg_runs(configs.size());
      std::vector<int64_t> tokens_run(configs.size(), 0);
      std::vector<rows_read> computed(configs.size(), rows_read(static_cast<size_t>(hp.n_layer)));  // per configuration, over its repetitions
      // Bytes of weights the hot device has read so far, on either pipeline (the actors' stats, the
      // reference's split), and per configuration over its repetitions.
      // (The actors count the device's reads of attention, predictors and the head with its rows; the
      // forward pass called directly counts them in the context.)
      auto device_read = [&](bool actors_pipeline) {
        if (actors_pipeline) return pipe ? pipe->stats()->read().device_bytes : uint64_t{0};
        return (l.split ? l.split->computed().hot_read : 0) + ctx.device_read();
      };
      std::vector<uint64_t> device_bytes(configs.size(), 0);
      // The bytes a step of each configuration reads (the warm-up's two steps; without a warm-up,
      // every row, as a dense step reads): what its roofline's probe reads.
      const double dense_step_bytes = static_cast<double>(read_costs(m).dense_step());
      std::vector<double> step_bytes(configs.size(), dense_step_bytes);
      // Untimed, as llama-bench does before its repetitions: a prompt of the measured length and a
      // short generation per configuration, so that the first repetition does not pay for first
      // touches (the prompt's KV cache pages, the batch products' buffers, the actors' start).
      if (!a->no_warmup)
        for (size_t k = 0; k < configs.size(); ++k) {
          const auto& c = configs[k];
          ctx.set_mode(c.mode);
          if (pipe) pipe->set_micro_batches(c.micro);
          if (a->n_prompt > 0) timed_prompt(c.actors, a->n_prompt);
          if (a->n_gen > 0) {
            const rows_read before(ctx);
            timed(c.actors, c.sequences, 2);
            step_bytes[k] = bytes_per_step(m, rows_read(ctx) -= before, 2);
          }
        }
      // The roofline: each configuration's read bandwidth, over as many bytes as its step reads
      // (read_probe: this machine serves a few hundred MB read again and again partly from its
      // caches; the warm-up's count first, then the repetitions' so far), measured before the first
      // repetition and after each, so each repetition is held against the bandwidth of its own
      // minute (the better of the measurements on either side of it): this machine's bandwidth
      // drifts with its neighbours.
      std::unique_ptr<read_probe> probe;
      std::vector<std::vector<double>> probes(configs.size());
      // (At most the probe's memory limit.)
      auto probe_bytes = [&](size_t k) { return std::min<uint64_t>(static_cast<uint64_t>(step_bytes[k]), probe->bytes()); };
      auto probe_all = [&] {
        for (size_t k = 0; k < configs.size(); ++k) probes[k].push_back(probe->measure(static_cast<uint64_t>(step_bytes[k])));
      };
      if (a->roofline && a->n_gen > 0) {
        // (It grows when the repetitions count more bytes a step than the warm-up's two steps did.)
        probe = std::make_unique<read_probe>(ctx.pool(), static_cast<uint64_t>(*std::max_element(step_bytes.begin(), step_bytes.end())));
        probe_all();
      }
      for (int i = 0; i < a->reps; ++i) {
        for (size_t k = 0; k < configs.size(); ++k) {
          ctx.set_mode(configs[k].mode);
          if (pipe) pipe->set_micro_batches(configs[k].micro);
          if (a->n_prompt > 0) pp_runs[k].push_back(timed_prompt(configs[k].actors, a->n_prompt));
          if (a->n_gen > 0) {
            const rows_read before(ctx);
            const uint64_t device_before = device_read(configs[k].actors);
            tg_runs[k].push_back(timed(configs[k].actors, configs[k].sequences, a->n_gen));
            computed[k] += rows_read(ctx) -= before;
            device_bytes[k] += device_read(configs[k].actors) - device_before;
            tokens_run[k] += a->n_gen;
          }
        }
        if (probe) {
          for (size_t k = 0; k < configs.size(); ++k)
            if (tokens_run[k] > 0) step_bytes[k] = bytes_per_step(m, computed[k], tokens_run[k]);
          probe_all();
        }
      }
      // Per configuration and repetition, the bandwidth beside it; the roofline's figures are their
      // means.
      std::vector<std::vector<double>> rep_bandwidth(configs.size());
      std::vector<double> bandwidth(configs.size(), 0.0);
      for (size_t k = 0; k < configs.size(); ++k) {
        for (size_t i = 0; i + 1 < probes[k].size(); ++i) rep_bandwidth[k].push_back(std::max(probes[k][i], probes[k][i + 1]));
        for (double b : rep_bandwidth[k]) bandwidth[k] += b / static_cast<double>(rep_bandwidth[k].size());
      }
      // Config k's fraction of the roofline in each repetition (its speed x bytes per token / the
      // bandwidth beside it) and their mean.
      auto fractions = [&](size_t k) {
        std::vector<double> f;
        for (size_t i = 0; i < rep_bandwidth[k].size() && i < tg_runs[k].size(); ++i) f.push_back(tg_runs[k][i] * results[k].bpt / rep_bandwidth[k][i]);
        return f;
      };
      auto mean_of = [](const std::vector<double>& v) {
        double m = 0;
        for (double x : v) m += x / static_cast<double>(v.size());
        return m;
      };
      for (size_t k = 0; k < configs.size(); ++k) {
        if (a->n_prompt > 0) results[k].pp = summarize(pp_runs[k]);
        if (a->n_gen > 0) {
          results[k].tg = summarize(tg_runs[k]);
          // Weights read per step (each row of a step's union once), shared by its K tokens.
          results[k].bpt = bytes_per_step(m, computed[k], tokens_run[k]) / configs[k].sequences;
          results[k].device_bpt = static_cast<double>(device_bytes[k]) / static_cast<double>(tokens_run[k] * configs[k].sequences);
        }
      }
      auto mode_name = [](ffn_mode md) { return md == ffn_mode::sparse ? "sparse" : "dense"; };
      auto pipeline_name = [](bool actors_pipeline) { return actors_pipeline ? "actors" : "reference"; };
      // Which configuration is the dense / other-pipeline comparison.
      // (From the configurations: the repetitions left the context in the last one's mode.)
      const int dense_k = a->vs_dense && configs[0].mode != ffn_mode::dense ? 1 : -1;
      const int other_k = a->vs_reference ? (dense_k > 0 ? 2 : 1) : -1;
      const int micro_k = a->vs_micro_batches > 0 ? static_cast<int>(configs.size()) - 1 : -1;
      const int parallel_k = a->vs_parallel > 0 ? static_cast<int>(configs.size()) - 1 - (micro_k > 0 ? 1 : 0) : -1;
      auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
      const double actors_tg = other_k < 0 ? 0 : actors_first ? results[0].tg.mean : results[static_cast<size_t>(other_k)].tg.mean;
      const double reference_tg = other_k < 0 ? 0 : actors_first ? results[static_cast<size_t>(other_k)].tg.mean : results[0].tg.mean;
      // --vs-parallel K2: aggregate decode of K2 sequences over that of --parallel's (other / base).
      const double parallel_speedup = parallel_k < 0 ? 0 : ratio(results[static_cast<size_t>(parallel_k)].tg.mean, results[0].tg.mean);
      // --vs-micro-batches M2: aggregate decode with M2 micro-batches over --micro-batches'.
      const double micro_speedup = micro_k < 0 ? 0 : ratio(results[static_cast<size_t>(micro_k)].tg.mean, results[0].tg.mean);
      // The KV cache read a decoded token, per layer: on the device for the layers whose attention it runs.
      const double kv_layer_per_token = kv_read_per_token(hp, ctx.kv_type() == tensor_type::f32 ? 4 : 2, (static_cast<double>(a->n_gen) + 1) / 2);
      int64_t kv_device_layers = 0;
      for (int64_t il = 0; il < hp.n_layer; ++il) kv_device_layers += ctx.device() && ctx.device()->attention(il);
      const double kv_bytes_per_token = kv_layer_per_token * static_cast<double>(hp.n_layer - kv_device_layers);
      const double kv_device_per_token = kv_layer_per_token * static_cast<double>(kv_device_layers);
      if (a->json) {
        auto describe = [&](size_t k) {
          nlohmann::json d{{"model", m.path()}, {"mode", mode_name(configs[k].mode)}, {"pipeline", pipeline_name(configs[k].actors)},
                                {"threads", ctx.pool().size()}, {"model_bytes", m.weight_bytes()},
                                {"prefill_tokens_per_s", results[k].pp.mean}, {"prefill_tokens_per_s_sd", results[k].pp.sd}, {"n_prompt", a->n_prompt},
                                {"decode_tokens_per_s", results[k].tg.mean}, {"decode_tokens_per_s_sd", results[k].tg.sd}, {"n_gen", a->n_gen},
                                {"bytes_per_token", results[k].bpt}, {"repetitions", a->reps}, {"parallel", configs[k].sequences},
                                {"micro_batches", configs[k].micro},
                                // Weights and KV cache read per decoded token on each side: the KV cache (F16 or F32, every layer,
                                // positions 0..n_gen-1 of each sequence: (n_gen + 1) / 2 cached rows of K and V on average)
                                // is read where the layer's attention runs.
                                {"host_bytes_per_token", results[k].bpt - results[k].device_bpt + kv_bytes_per_token},
                                {"device_bytes_per_token", results[k].device_bpt + kv_device_per_token}};
          if (probe && results[k].bpt > 0) {
            d["read_bandwidth_bytes_per_s"] = bandwidth[k];
            d["probe_bytes"] = probe_bytes(k);
            d["roofline_tokens_per_s"] = bandwidth[k] / results[k].bpt;
            d["roofline_fraction"] = mean_of(fractions(k));
            d["roofline_fraction_per_repetition"] = fractions(k);
          }
          return d;
        };
        nlohmann::json j = describe(0);
        j["warmup"] = !a->no_warmup;
        if (probe) j["read_bandwidth_bytes_per_s"] = bandwidth[0];
        if (dense_k > 0) {
          j["dense"] = describe(static_cast<size_t>(dense_k));
          if (results[static_cast<size_t>(dense_k)].tg.mean > 0) j["decode_speedup_vs_dense"] = ratio(results[0].tg.mean, results[static_cast<size_t>(dense_k)].tg.mean);
          if (results[static_cast<size_t>(dense_k)].pp.mean > 0) j["prefill_speedup_vs_dense"] = ratio(results[0].pp.mean, results[static_cast<size_t>(dense_k)].pp.mean);
        }
        if (other_k > 0) {
          j[actors_first ? "reference" : "actors"] = describe(static_cast<size_t>(other_k));
          if (a->n_gen > 0) j["actor_overhead"] = 1.0 - ratio(actors_tg, reference_tg);
        }
        if (parallel_k > 0) {
          j["vs_parallel"] = describe(static_cast<size_t>(parallel_k));
          if (a->n_gen > 0) j["parallel_speedup"] = parallel_speedup;
        }
        if (micro_k > 0) {
          j["vs_micro_batches"] = describe(static_cast<size_t>(micro_k));
          if (a->n_gen > 0) j["micro_batch_speedup"] = micro_speedup;
        }
        fmt::print("{}\n", j.dump(2));
        pipe.reset();
        l.finish();
        return;
      }
      fmt::print("| model | size | mode | pipeline | threads | test | t/s | bytes/token |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
      std::string name = fmt::format("{} {} {}L {}", architecture_name(hp.arch), activation_name(hp.act), hp.n_layer, hp.n_embd);
      double gib = m.weight_bytes() / double(1ull << 30);
      for (size_t k = 0; k < configs.size(); ++k) {
        const auto& r = results[k];
        const char* md = mode_name(configs[k].mode);
        const char* pl = pipeline_name(configs[k].actors);
        if (a->n_prompt > 0)
          fmt::print("| {} | {:.2f} GiB | {} | {} | {} | pp{} | {:.2f} ± {:.2f} | |\n", name, gib, md, pl, ctx.pool().size(), a->n_prompt, r.pp.mean, r.pp.sd);
        if (a->n_gen > 0)
          fmt::print("| {} | {:.2f} GiB | {} | {} | {} | tg{}{}{} | {:.2f} ± {:.2f} | {:.1f} MiB |\n", name, gib, md, pl, ctx.pool().size(), a->n_gen,
                     configs[k].sequences > 1 ? fmt::format(" x{}", configs[k].sequences) : "",
                     configs[k].micro > 1 ? fmt::format(" in {} micro-batches", configs[k].micro) : "", r.tg.mean, r.tg.sd, r.bpt / double(1 << 20));
      }
      if (probe) {
        fmt::print("\nroofline: read bandwidth measured here with {} threads, over as many bytes as a step reads, before the first repetition "
                   "and after each; each repetition held against the better of the two beside it\n",
                   ctx.pool().size());
        for (size_t k = 0; k < configs.size(); ++k)
          if (results[k].bpt > 0) {
            std::vector<std::string> fs, bws;
            for (double f : fractions(k)) fs.push_back(fmt::format("{:.0f}", 100.0 * f));
            for (double b : rep_bandwidth[k]) bws.push_back(fmt::format("{:.1f}", b / 1e9));
            fmt::print("  {} {}{}: {:.1f} GB/s over {:.0f} MB ({} GB/s); {:.1f} MB read per token -> at most {:.1f} tok/s; reached {:.2f} tok/s = {:.0f}% of "
                       "the roofline ({}%)\n",
                       mode_name(configs[k].mode), pipeline_name(configs[k].actors),
                       configs[k].sequences > 1 ? fmt::format(" x{}", configs[k].sequences) : "", bandwidth[k] / 1e9,
                       static_cast<double>(probe_bytes(k)) / 1e6, fmt::join(bws, " / "), results[k].bpt / 1e6,
                       bandwidth[k] / results[k].bpt, results[k].tg.mean, 100.0 * mean_of(fractions(k)), fmt::join(fs, " / "));
          }
      }
      if (dense_k > 0 && a->n_gen > 0 && results[static_cast<size_t>(dense_k)].tg.mean > 0) {
        const auto& d = results[static_cast<size_t>(dense_k)];
        fmt::print("\nsparse vs dense, same file, interleaved: decode {:.2f}x{}\n", results[0].tg.mean / d.tg.mean,
                   a->n_prompt > 0 && d.pp.mean > 0 ? fmt::format(", prefill {:.2f}x", results[0].pp.mean / d.pp.mean) : "");
      }
      if (other_k > 0 && a->n_gen > 0 && reference_tg > 0)
        fmt::print("\nactors vs reference, same file and placement, interleaved: decode {:.3f}x (actor overhead {:.1f}%)\n", actors_tg / reference_tg,
                   100.0 * (1.0 - actors_tg / reference_tg));
      if (parallel_k > 0 && a->n_gen > 0 && results[0].tg.mean > 0)
        fmt::print("\n{} sequences vs {}, interleaved: aggregate decode {:.2f}x\n", a->vs_parallel, K, parallel_speedup);
      if (micro_k > 0 && a->n_gen > 0 && results[0].tg.mean > 0)
        fmt::print("\n{} micro-batches vs {}, interleaved: aggregate decode {:.2f}x\n", a->vs_micro_batches, micro, micro_speedup);
      pipe.reset();
      l.finish();
    });
  });
}

}  // namespace hotcold::launcher
