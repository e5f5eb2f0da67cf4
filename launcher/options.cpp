// Every command's options, in one place: what `hotcold --help` lists. Each command's callback hands
// its options to the command's body (run_bench, run_text, ...: the cmd_*.hpp headers), which a test
// can call as well. CLI11 is used here and in llama_habits.cpp (llama.cpp's flags) alone (it is
// header-only, and each file that builds a CLI::App compiles much of it again).
#include <iterator>
#include <iostream>
#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "devices/device_info.hpp"
#include "launcher/cmd_bench.hpp"
#include "launcher/cmd_client.hpp"
#include "launcher/cmd_devices.hpp"
#include "launcher/cmd_gen_model.hpp"
#include "launcher/cmd_generate.hpp"
#include "launcher/cmd_inspect.hpp"
#include "launcher/cmd_plan.hpp"
#include "launcher/llama_habits.hpp"
#include "launcher/option_checks.hpp"
#include "launcher/cmd_replay.hpp"
#include "launcher/cmd_serve.hpp"
#include "launcher/cmd_sparse.hpp"
#include "launcher/cmd_tokenize.hpp"
#include "launcher/cmd_worker.hpp"
#include "launcher/commands.hpp"
#include "model/chat_template.hpp"
#include "tools/planner.hpp"

namespace hotcold::launcher {
namespace {

int max_threads() { return std::max(8, 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))); }

CLI::Validator thread_count() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        long long v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size()) return fmt::format("'{}' is not a whole number", s);
        if (v > max_threads())
          return fmt::format("{} threads is more than this machine can use: at most {} (4 per hardware thread; 0 or less: every hardware thread)", s,
                             max_threads());
        return {};
      },
      "THREADS", "thread_count");
}

CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(s, &used);
          if (used != s.size()) return fmt::format("'{}' is not a number", s);
        } catch (const std::out_of_range&) {
          return fmt::format("'{:.40}' is out of range: from {:g} to {:g}", s, lo, hi);
        } catch (...) {
          return fmt::format("'{:.40}' is not a number", s);
        }
        if (!std::isfinite(v) || v < lo || v > hi) return fmt::format("{:.40} is not a finite number from {:g} to {:g}", s, lo, hi);
        return {};
      },
      fmt::format("FLOAT in [{:g}, {:g}]", lo, hi), "finite_in");
}

CLI::Validator whole_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        long long v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return fmt::format("'{:.40}' is not a whole number from {} to {}", s, lo, hi);
        return {};
      },
      fmt::format("INT in [{}, {}]", lo, hi), "whole_in");
}

// The KV cache's types, as llama.cpp's flags (-ctk and -ctv are rewritten to these before parsing:
// llama_spellings).
// unset: what no flag means.
void add_cache_type_options(CLI::App* cmd, std::string& k, std::string& v, const std::string& unset = "f16, llama.cpp's default") {
  const auto types = CLI::IsMember({"f16", "f32", "q8_0", "q4_0"});
  cmd->add_option("--cache-type-k", k,
                  "-ctk: the KV cache's keys: f16, f32, q8_0 (about half f16's memory and reads) or q4_0 (about a quarter); quantized keys meet the "
                  "query rounded to Q8_0, as llama.cpp's (without the flag: " + unset + ")")
      ->check(types);
  cmd->add_option("--cache-type-v", v, "-ctv: the KV cache's values: f16, f32, q8_0 or q4_0")->check(types);
  cmd->add_option_function<std::string>(
         "--kv-type", [&k, &v](const std::string& t) { k = v = t; }, "Both of the KV cache's types at once (--cache-type-k and --cache-type-v)")
      ->check(types);
}

void add_model_options(CLI::App* cmd, model_args& m, bool model_required) {
  auto* opt = cmd->add_option("-m,--model", m.model, model_required ? "GGUF model" : "GGUF model (default: the embedded default model)");
  if (model_required) opt->required();
  cmd->add_option_function<std::vector<int>>(
         "-t,--threads", [&m](const std::vector<int>& t) { m.thread_list = t, m.threads = t.empty() ? 0 : t.front(); },
         "CPU worker threads (default, or 0 or less: all hardware threads; with --device sim, one fewer; bench: a comma list, each its own tests)")
      ->delimiter(',')
      ->check(thread_count());
  cmd->add_option("-c,--ctx,--ctx-size", m.ctx, "Context length (default, or 0: the model's, at most 4096)")->check(whole_in(0, 1ll << 40));
  cmd->add_flag("--mmap", m.mmap, "Compute from the file's mmap'd pages instead of a private copy (slower here)");
  cmd->add_option("--device", m.device, "Hot device: auto, cpu, sim (a CPU-backed stand-in for a GPU), cuda, hip (-dev: llama.cpp's none, CUDA0, ROCm0 too)")
      ->transform([](std::string v) {  // (llama.cpp's device names)
        if (v == "none") return std::string("cpu");
        if (v.rfind("CUDA", 0) == 0) return std::string("cuda");
        if (v.rfind("ROCm", 0) == 0 || v.rfind("HIP", 0) == 0) return std::string("hip");
        return v;
      })
      ->check(CLI::IsMember({"auto", "cpu", "sim", "cuda", "hip"}))
      ->capture_default_str();
  cmd->add_option("--vram-budget", m.vram_budget_gib, "Hot device memory in GiB (default: its free memory; sim needs one)")
      ->check(finite_in(0, 1 << 20));
  cmd->add_option("--ram-budget", m.ram_budget_gib,
                  "A sparse file's (or a mixture's) weights held in memory, GiB: what is not an FFN row (an expert) is held whole; of the FFN rows "
                  "each layer's hottest and a window of recent ones, the rest read from the file as tokens choose them (docs/disk.md; default: all "
                  "of it in memory)")
      ->check(finite_in(1e-9, 1 << 20));
  cmd->add_option("--read-ahead-input", m.read_ahead_input,
                  "With --ram-budget: before each layer's attention, guess its neurons from the layer's input and read their rows while attention "
                  "computes: auto (kept where it makes decoding faster, tried on and off as the run goes), on, off (docs/disk.md)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--n-gpu-layers,--gpu-layers", m.n_gpu_layers,
                  "-ngl: dense files: layers the hot device holds whole, front to back (default: as many as fit its budget; without a GPU, "
                  "a warning and a run on the CPU, as llama.cpp does)")
      ->check(whole_in(0, 1 << 20));
  cmd->add_option("--n-cpu-moe", m.n_cpu_moe,
                  "A mixture of experts on a device: keep the experts of the first N layers on the CPU and every other layer's on the device, as "
                  "llama.cpp's flag does (default: a cache of experts in every layer)")
      ->check(whole_in(0, 1 << 20));
  cmd->add_flag("--cpu-moe", m.cpu_moe, "A mixture of experts on a device: every expert on the CPU (--n-cpu-moe of every layer)");
  cmd->add_option("--expert-policy", m.expert_policy, "A mixture's expert cache on a device: lfu-decay (default), lru, or fixed (no uploads)")
      ->check(CLI::IsMember({"lru", "lfu-decay", "fixed"}));
  cmd->add_option("--expert-upload-mib", m.expert_upload_mib,
                  "A mixture's expert cache: MiB of experts it may upload a token (default: one expert for every fourth layer)")
      ->check(finite_in(0, 1 << 30));
  cmd->add_option("--experts-from", m.experts_from,
                  "A mixture's expert slots on a device start with each layer's most chosen experts in this recorded run (a --trace-out FILE.activations); "
                  "with --expert-policy fixed, a static placement by popularity");
  cmd->add_flag("--no-expert-prefetch", m.no_expert_prefetch, "A mixture's expert cache: do not upload the next layer's guessed experts a layer early");
  cmd->add_option("--expert-guess", m.expert_guess,
                  "A mixture's expert cache: guess the next layer's experts a layer early and upload them: auto (kept where it raises the hit "
                  "rate, tried on and off as the run goes), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_flag("--sim-kernels", m.sim_kernels,
                "With --device sim: compute as a GPU back end does (its operation table's jobs from the device's plain copies: attention, predictors, "
                "FFN rows, dense FFNs, the head), "
                "so that what runs above a GPU's kernels runs here");
  cmd->add_option("--device-wait", m.device_wait,
                  "How threads wait for the hot device: spin (poll with a pause, then sleep), yield (poll, giving the core away), "
                  "block (sleep at once; a GPU's blocking-sync event); auto: block where the CPU's threads take every core, else spin")
      ->check(CLI::IsMember({"auto", "spin", "yield", "block"}))
      ->capture_default_str();
  add_cache_type_options(cmd, m.cache_type_k, m.cache_type_v);
  cmd->add_option("--cache-ram", m.cache_ram_mib,
                  "MiB of memory for the prefix store: blocks of prompts' cached keys and values that later requests beginning with the same "
                  "tokens reuse, least recently used evicted (default 8192, at most a quarter of the machine's memory; -1: half of it; 0: none, "
                  "each sequence slot still reusing its own)")
      ->check(whole_in(-1, 1ll << 40))
      ->capture_default_str();
  cmd->add_option("--trace-out", m.trace_out, "Write a Chrome trace-event JSON of where each step's time went (docs/traces.md)");
  cmd->add_option("--mode", m.mode, "dense: every FFN neuron; sparse: the neurons the predictors choose (default: sparse when the file has predictors)")
      ->check(CLI::IsMember({"dense", "sparse"}));
  add_llama_model_options(cmd, m);
}

// `reference` is kept as another name for `direct` (scripts of before it was named so): "reference"
// means model/reference, the oracle, everywhere else.
void add_pipeline_option(CLI::App* cmd, std::string& pipeline) {
  cmd->add_option("--pipeline", pipeline,
                  "actors: the actor runtime (scheduler, hot executor, cold pool, predictor, sampler); direct: the forward pass called directly "
                  "(reference: the same, an older name)")
      ->check(CLI::IsMember({"actors", "direct", "reference"}))
      ->transform([](std::string v) { return v == "reference" ? std::string("direct") : v; })
      ->capture_default_str();
}

// Stages of layers on other hosts (docs/distributed.md).
void add_worker_options(CLI::App* cmd, model_args& m) {
  cmd->add_option("--workers", m.workers,
                  "Run the layers on these `hotcold worker`s, in order (tcp://HOST:PORT,...; each with its own copy of the file): this process "
                  "keeps the embeddings, the head and sampling and passes the residual stream stage to stage (the actors pipeline)")
      ->delimiter(',');
  cmd->add_option("--split", m.split, "With --workers: layers per worker, N1,N2,... summing to the file's layers, or auto (an even split)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--workers-tls", m.workers_tls,
                  "With --workers: TLS links, each side showing a certificate of this folder's authority (hotcold keygen --tls DIR); needed for "
                  "workers on other hosts");
}
// --workers runs on the actors pipeline: the default there, refused with --pipeline direct.
void pipeline_for_workers(const model_args& m, std::string& pipeline, bool pipeline_given) {
  if (m.workers.empty()) return;
  if (pipeline_given && pipeline == "direct") throw std::invalid_argument("--workers runs on the actors pipeline, not --pipeline direct");
  pipeline = "actors";
}

void add_worker_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<worker_args>();
  auto* cmd = app.add_subcommand("worker", "Hold layers for a coordinator's --workers (a stage of a pipeline across processes or hosts) until SIGINT or SIGTERM");
  cmd->add_option("--listen", a->listen, "Address to listen on: tcp://HOST:PORT for the stage protocol, and PORT+1 for the activations (loopback unless --allow-remote; port 0: a free "
                  "pair the system picks, printed on stderr)")
      ->capture_default_str();
  cmd->add_option("-m,--model", a->model, "GGUF model file: the same file as the coordinator's (checked at the handshake)")->required();
  cmd->add_option("-t,--threads", a->threads, "CPU threads for the layers (default: every hardware thread)")->check(CLI::Range(1, max_threads()));
  cmd->add_flag("--mmap", a->mmap, "Map the file instead of reading it (pages of layers this worker never runs stay on disk)");
  cmd->add_option("--device", a->device,
                  "Hot device for the layers this worker is assigned: auto, cpu, sim, cuda, hip (the plan of hotcold run --device: attention with its "
                  "KV cache, predictors, then hot FFN rows or whole dense layers, for those layers alone)")
      ->check(CLI::IsMember({"auto", "cpu", "sim", "cuda", "hip"}))
      ->capture_default_str();
  cmd->add_option("--vram-budget", a->vram_budget_gib, "Hot device memory in GiB (default: its free memory; sim needs one)")->check(finite_in(0, 1 << 20));
  cmd->add_flag("--sim-kernels", a->sim_kernels, "With --device sim: compute as a GPU back end does");
  cmd->add_option("--ram-budget", a->ram_budget_gib,
                  "A sparse file's weights of the layers it is assigned held in memory, GiB: the disk tier of hotcold run --ram-budget for those "
                  "layers (docs/disk.md; default: all of them in memory)")
      ->check(finite_in(1e-9, 1 << 20));
  add_cache_type_options(cmd, a->cache_type_k, a->cache_type_v, "the coordinator's; given, a coordinator asking for other types is refused");
  cmd->add_flag("--allow-remote", a->allow_remote, "Listen on an address other machines reach (needs --tls)");
  cmd->add_option("--tls", a->tls,
                  "TLS links: this worker shows the folder's certificate and admits only coordinators with one of the same authority (hotcold "
                  "keygen --tls DIR)");
  cmd->callback([a, &exit_code] { exit_code = run_guarded("worker", [&] { run_worker(*a); }); });
}

// run, chat and serve: llama.cpp's context shift.
void add_context_shift_options(CLI::App* cmd, model_args& m) {
  cmd->add_flag("--context-shift", m.context_shift,
                "When a sequence fills the context, drop half of what follows its first --keep tokens and go on (llama.cpp's); without it "
                "generation ends there (finish 'context', the API's 'length')");
  cmd->add_option("--keep", m.keep, "With --context-shift: tokens of the prompt kept at its start, after BOS (-1: the whole prompt)")
      ->check(whole_in(-1, 1ll << 40))
      ->capture_default_str();
}

void add_sampling_options(CLI::App* cmd, sampling_args& s) {
  cmd->add_option("-n,--n-predict", s.n_predict, "Tokens to generate (-1: until the end of the text or a full context)")
      ->check(CLI::Range(-1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd->add_option("--temp", s.p.temperature, "Temperature (<= 0: greedy; at most 100)")->capture_default_str();
  cmd->add_option("--top-k", s.p.top_k, "Top-k (<= 0: off)")->capture_default_str();
  cmd->add_option("--top-p", s.p.top_p, "Top-p (>= 1: off)")->capture_default_str();
  cmd->add_option("--min-p", s.p.min_p, "Min-p, 0..1 (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", s.p.repeat_penalty, "Repetition penalty, 0..100 (1: off)")->capture_default_str();
  cmd->add_option("--repeat-last-n", s.p.penalty_last_n, "Tokens the penalties look back on (-1: the whole context)")->capture_default_str();
  cmd->add_option("--frequency-penalty", s.p.frequency_penalty, "Frequency penalty (0: off)")->capture_default_str();
  cmd->add_option("--presence-penalty", s.p.presence_penalty, "Presence penalty (0: off)")->capture_default_str();
  add_seed_option(cmd, s.p.seed, s.seed_given, "Random seed (default, or -1: random, printed on stderr)");
  cmd->add_flag("--parse-special", s.parse_special, "Text of control tokens in the prompt (\"<s>\") becomes those tokens");
}

void add_grammar_options(CLI::App* cmd, grammar_args& s, const char* what) {
  auto* g = cmd->add_option("--grammar", s.grammar,
                            fmt::format("A GBNF grammar (llama.cpp's) the generated text must follow ({}): each token drawn from those it allows", what));
  auto* gf = cmd->add_option("--grammar-file", s.grammar_file, "A file holding a GBNF grammar (as --grammar)")->excludes(g);
  auto* j = cmd->add_option("-j,--json-schema", s.json_schema, "A JSON Schema the text must be valid against (turned into a grammar: docs/openai-api.md)")->excludes(g)->excludes(gf);
  cmd->add_option("--json-schema-file", s.json_schema_file, "A file holding a JSON Schema (as --json-schema)")->excludes(g)->excludes(gf)->excludes(j);
}

void add_run_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<run_args>();
  auto* cmd = app.add_subcommand("run", "Generate text after a prompt, streaming only the generated text to stdout");
  add_model_options(cmd, a->m, false);
  add_pipeline_option(cmd, a->pipeline);
  add_worker_options(cmd, a->m);
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "Prompt text (-: read it from stdin)");
  auto* f = cmd->add_option("-f,--file", a->file, "A file whose text is the prompt")->excludes(p);
  add_sampling_options(cmd, a->s);
  add_grammar_options(cmd, a->s.grammar, "the whole text");
  add_context_shift_options(cmd, a->m);
  cmd->add_flag("-i,--interactive,--conversation", a->conversation,
                "-cnv: llama-cli's conversation mode: a chat (hotcold chat), with --system-prompt (or -p) as its system message");
  cmd->add_flag_function("--no-conversation", [](int64_t) {}, "-no-cnv: llama-cli's; run never converses");
  cmd->add_option("--system-prompt", a->system, "-sys: a system message, in conversation mode (implies it, as llama-cli's)");
  cmd->add_option("--chat-template", a->chat_template, "In conversation mode: the chat template family instead of the model's own");
  cmd->callback([a, cmd, p, f, &exit_code] {
    exit_code = run_guarded("run", [&] {
      if (a->conversation || !a->system.empty()) {  // llama-cli -cnv: a chat
        chat_args c{a->m, a->s, a->chat_template, a->system.empty() ? a->prompt : a->system};
        return run_chat(std::move(c));
      }
      if (p->count() + f->count() == 0) throw std::invalid_argument("give the prompt: -p TEXT, -p - (stdin) or -f FILE");
      if (f->count() > 0) a->prompt = read_text_file(a->file);
      else if (a->prompt == "-") a->prompt = std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
      pipeline_for_workers(a->m, a->pipeline, cmd->count("--pipeline") > 0);
      run_text(*a);
    });
  });
}

void add_eval_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<eval_args>();
  auto* cmd = app.add_subcommand("eval", "Write the logits of every prompt position as float32 [n_tokens x n_vocab]; print the prompt's ids");
  add_model_options(cmd, a->m, true);
  add_pipeline_option(cmd, a->pipeline);
  add_worker_options(cmd, a->m);
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "Prompt text");
  auto* f = cmd->add_option("-f,--file", a->file, "File whose text is the prompt");
  p->excludes(f);
  cmd->add_option("--logits-out", a->logits_out, "Output file of float32 little-endian logits (needed unless --stats-json)");
  cmd->add_flag("--parse-special", a->parse_special, "Text of control tokens becomes those tokens");
  cmd->add_option("--stats-json", a->stats_json, "Write predictor recall, precision and active fraction (overall and per layer)");
  cmd->add_flag("--vs-oracle", a->vs_oracle,
                "Also compute the prompt's logits with model/reference (double precision, single-threaded: slow on large files), given the "
                "neurons this run chose, and print how far apart they are (relative RMS, largest difference, top-1 agreement)");
  cmd->add_option("--oracle-json", a->oracle_json, "With --vs-oracle: write those figures as JSON (implies --vs-oracle)");
  cmd->callback([a, p, f, cmd, &exit_code] {
    exit_code = run_guarded("eval", [&] {
      if (p->count() + f->count() != 1) throw std::invalid_argument("give the text with exactly one of -p TEXT or -f FILE");
      pipeline_for_workers(a->m, a->pipeline, cmd->count("--pipeline") > 0);
      a->from_file = f->count() > 0;
      run_eval(*a);
    });
  });
}

void add_embed_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<embed_args>();
  auto* cmd = app.add_subcommand("embed", "Print each text's embedding (its tokens' final hidden states pooled, L2-normalized) as a JSON array, one a line");
  add_model_options(cmd, a->m, false);
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "One text");
  auto* f = cmd->add_option("-f,--file", a->file, "A file of texts, one a line (empty lines left out)");
  p->excludes(f);
  cmd->add_option("--pooling", a->pooling, "mean, last or cls (default: the file's pooling_type, else mean)")->check(CLI::IsMember({"mean", "last", "cls"}));
  cmd->callback([a, p, f, &exit_code] {
    exit_code = run_guarded("embed", [&] {
      if (p->count() + f->count() != 1) throw std::invalid_argument("give the text with exactly one of -p TEXT or -f FILE");
      a->from_file = f->count() > 0;
      run_embed(*a);
    });
  });
}

void add_perplexity_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<perplexity_args>();
  a->m.ctx = 256;
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a text, in chunks of the context length (second half of each chunk scored)");
  add_model_options(cmd, a->m, true);
  cmd->add_option("-f,--file", a->file, "Text file")->required();
  cmd->callback([a, &exit_code] { exit_code = run_guarded("perplexity", [&] { run_perplexity(*a); }); });
}

void add_chat_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<chat_args>();
  auto* cmd = app.add_subcommand("chat", "Interactive: each line you type is a user turn of the conversation, written with the model's chat template, and the model answers it");
  add_model_options(cmd, a->m, false);
  add_sampling_options(cmd, a->s);
  add_grammar_options(cmd, a->s.grammar, "each reply");
  add_context_shift_options(cmd, a->m);
  cmd->add_option("--chat-template", a->chat_template, "Chat template family instead of the model's own (" + chat_template::names() + ")");
  cmd->add_option("--system,--system-prompt", a->system, "-sys: a system message to start the conversation with");
  cmd->add_flag_function("-i,--interactive,--conversation", [](int64_t) {}, "-cnv: llama-cli's conversation mode, which chat always is");
  cmd->add_flag_function("--jinja", [](int64_t) {}, "llama.cpp's: hotcold writes each family's template as its Jinja does (docs/chat-templates.md)");
  cmd->callback([a, cmd, &exit_code] {
    exit_code = run_guarded("chat", [&] { run_chat(*a); });
  });
}

void add_generate_commands(CLI::App& app, int& exit_code) {
  add_run_command(app, exit_code);
  add_eval_command(app, exit_code);
  add_embed_command(app, exit_code);
  add_perplexity_command(app, exit_code);
  add_chat_command(app, exit_code);
}

void add_bench_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<bench_args>();
  auto* cmd = app.add_subcommand("bench", "Measure prompt processing and decode speed (tokens/s, mean ± sd over repetitions)");
  add_model_options(cmd, a->m, false);
  add_pipeline_option(cmd, a->pipeline);
  add_worker_options(cmd, a->m);
  cmd->add_option("-p,--n-prompt", a->n_prompts, "Prompt tokens (0: skip; a comma list, as llama-bench's: each its own tests)")->delimiter(',')->default_str("128");
  cmd->add_option("-n,--n-gen", a->n_gens, "Generated tokens (0: skip; -1: until the context is full; a comma list: each its own tests)")
      ->delimiter(',')
      ->check(CLI::Range(-1, std::numeric_limits<int>::max()))
      ->default_str("64");
  cmd->add_option("-o,--output", a->output, "As llama-bench's -o: md (a markdown table), csv, json (an array of rows) or jsonl (a row a line); "
                                            "each row with the build, the CPU and the command line (default: hotcold's table)")
      ->check(CLI::IsMember({"md", "csv", "json", "jsonl"}));
  cmd->add_option("-d,--n-depth", a->n_depth,
                  "Tokens already in the cache before each test, as llama-bench's -d: prompt and decode measured after them (a comma list: "
                  "each depth its own tests; the actors pipeline decodes at a depth, its prompts need --pipeline direct for now)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--vs-depth", a->vs_depth,
                  "Also measure after this many cached tokens, repetitions interleaved with each -d depth's, and print the ratio, these over "
                  "-d's (e.g. -d 0 --vs-depth 2000: decode at depth 2,000 against depth 0 in the same minutes of a busy machine)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
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
  cmd->add_flag("--vs-direct,--vs-reference", a->vs_direct,
                "Also measure the other pipeline (actors vs direct) on the same file and placement, interleaved, and print the actors' overhead "
                "(--vs-reference: the same, an older name)");
  cmd->add_option("--vs-llama-bench", a->vs_llama_bench,
                  "PATH of llama.cpp's llama-bench (built by you; no llama.cpp code is in hotcold): run it on the same file with the same "
                  "threads, prompt and generation lengths (-r 1 -o json --mmap 0 -ngl 0) after each round of repetitions, and print "
                  "hotcold's speed over its (the median of the rounds' ratios)");
  add_grammar_options(cmd, a->grammar, "every decode's tokens, sampled greedily on the actors; pick one that does not end within -n tokens");
  cmd->add_flag("--vs-unconstrained", a->vs_unconstrained,
                "With a grammar: also decode without it, interleaved, and print the ratio, constrained over unconstrained");
  cmd->add_flag("--no-warmup", a->no_warmup, "Skip the untimed warm-up (per configuration, one prompt and two generated tokens, as llama-bench does)");
  cmd->callback([a, cmd, &exit_code] {
    exit_code = run_guarded("bench", [&] {
      pipeline_for_workers(a->m, a->pipeline, cmd->count("--pipeline") > 0);
      if (!a->m.workers.empty() && a->vs_direct) throw std::invalid_argument("--workers runs on the actors pipeline: no --vs-direct");
      run_bench(*a);
    });
  });
}

void add_serve_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<serve_args>();
  auto* cmd = app.add_subcommand("serve", "Serve generate/tokenize/... requests over ZeroMQ (protocol/README.md) until SIGINT or SIGTERM");
  add_model_options(cmd, a->m, false);
  add_context_shift_options(cmd, a->m);
  add_worker_options(cmd, a->m);
  auto* zmq = cmd->add_option("--zmq", a->s.endpoint,
                              "Endpoint to bind: tcp://HOST:PORT or ipc://PATH (loopback only unless --allow-remote; default tcp://127.0.0.1:5555 where "
                              "no --http is given; with --http, ZeroMQ is opened only where --zmq says)");
  cmd->add_option("--max-queue", a->s.max_queue, "Requests that may wait for a free sequence slot before new ones get `busy`")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--max-prompt-tokens", a->s.max_prompt_tokens, "Longest prompt accepted, in tokens (default: the context)")->check(whole_in(0, 1ll << 40));
  cmd->add_option("--max-queued-per-client", a->s.max_queued_per_client,
                  "Requests of one client (ZeroMQ peer or CURVE key; HTTP key, or address without keys) that may wait for a slot before "
                  "its new ones get `busy` (default: a quarter of --max-queue); free slots go to the waiting clients in turn")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--max-tokens", a->s.max_tokens, "Largest n_predict accepted")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  add_grammar_options(cmd, a->grammar, "each request that names no grammar, schema or response_format");
  cmd->add_flag("--embeddings", a->s.embeddings, "Answer POST /v1/embeddings (with --http): a context of its own beside the generation pipeline");
  cmd->add_option("--pooling", a->s.pooling, "Embeddings' pooling: mean, last or cls (default: the file's pooling_type, else mean)")
      ->check(CLI::IsMember({"mean", "last", "cls"}))
      ->needs(cmd->get_option("--embeddings"));
  cmd->add_option("--parallel", a->parallel, "Sequences generated at once (KV slots)")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_flag("--allow-remote", a->s.allow_remote, "Allow binding an address other machines can reach (needs --curve-key and --curve-clients)");
  cmd->add_option("--http", a->s.http,
                  "HOST:PORT for the OpenAI-style API (/v1/*, docs/openai-api.md), the dashboard (GET /), /metrics (Prometheus), "
                  "/api/stats, /api/events (Server-Sent Events) and /health (loopback unless --allow-remote-http; docs/telemetry.md)");
  cmd->add_flag("--allow-remote-http", a->s.allow_remote_http,
                "Allow --http on an address other machines can reach (needs --http-token-file or --api-key; the traffic is plain HTTP, not "
                "encrypted; the dashboard and /metrics answer other machines only with --allow-remote or --http-token-file)");
  cmd->add_option("--http-token-file", a->s.http_token_file,
                  "File of bearer tokens (one per line, 16+ characters): every HTTP request must carry one (Authorization: Bearer, or "
                  "/?token= once in a browser)");
  cmd->add_option("--api-key", a->s.api_keys,
                  "A key the OpenAI-style API (/v1/*) requires as `Authorization: Bearer KEY` (16+ characters; may be repeated)");
  cmd->add_option("--api-key-file", a->s.api_key_file, "File of more such keys, one per line");
  cmd->add_option("--chat-template", a->s.chat_template, "Chat template family for /v1/chat/completions instead of the model's own (" + chat_template::names() + ")");
  cmd->add_option("-a,--alias", a->s.alias, "The model's id in /v1/models and requests (default: its file's name)");
  auto* host = cmd->add_option("--host", a->host, "llama-server's: the HTTP side's address (with --port: --http HOST:PORT; default 127.0.0.1)");
  auto* port = cmd->add_option("--port", a->port, "llama-server's: the HTTP side's port (--http 127.0.0.1:PORT, or --host's)")->check(CLI::Range(1, 65535));
  cmd->add_flag_function("--cont-batching", [](int64_t) {}, "-cb: llama-server's; hotcold always batches continuously");
  cmd->add_flag_function("--jinja", [](int64_t) {}, "llama-server's: hotcold writes each family's template as its Jinja does (docs/chat-templates.md)");
  cmd->add_option("--allowed-hosts", a->s.allowed_hosts,
                  "Host names (HOST or HOST:PORT, comma-separated) served besides localhost and loopback addresses on what no key guards: "
                  "a web page that rebinds its own name to this machine is refused (docs/openai-api.md, \"Browsers\")");
  cmd->add_option("--cors-origins", a->s.cors_origins,
                  "Origins of web pages (scheme://host[:port], comma-separated) allowed to use the server (default: pages on this machine; "
                  "'*': any, only with --api-key or --http-token-file)");
  cmd->add_option("--recall-every", a->s.recall_every,
                  "Check the predictors' recall every N steps (each sparse layer computes its first token densely; 0: never)")
      ->check(whole_in(0, 1ll << 40))
      ->capture_default_str();
  cmd->add_option("--micro-batches", a->s.micro_batches,
                  "Split each step of several sequences into this many micro-batches of whole sequences (with --workers: stage k works on one "
                  "while stage k+1 works on another; with a hot device holding every layer's attention: it works on one while the cold pool "
                  "works on another). Default: one a stage where --workers are on other hosts, else 1")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--max-client-buffer", a->s.max_client_buffer,
                  "Bytes of replies a client may leave unread before it is cut off (its requests cancelled; one larger reply still goes when "
                  "nothing else of its waits)")
      ->check(CLI::Range(int64_t{4096}, int64_t{1} << 32))
      ->capture_default_str();
  cmd->add_option("--slot-save-path", a->s.slot_save_path,
                  "Folder for slot files (llama-server's): POST /slots/{id}?action=save|restore with {\"filename\": NAME} writes or reads a sequence "
                  "slot's cache there, action=erase forgets it (default: off)")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag_function("--no-request-log", [a](int64_t) { a->s.log_requests = false; }, "No line on stderr per finished request (client, tokens, cached, time to first token, tok/s, finish)");
  cmd->add_option("--record", a->s.record, "Append one JSON line per finished generate: arrival, request, TTFT, inter-token gaps, end-to-end (for hotcold replay)");
  cmd->add_option("--curve-key", a->s.curve_key, "The server's CURVE key pair (hotcold keygen -o NAME writes NAME.key): encrypt and authenticate");
  cmd->add_option("--curve-clients", a->s.curve_clients, "File of the client public keys allowed in, one per line");
  cmd->callback([a, zmq, host, port, &exit_code] {
    if (host->count() + port->count() > 0) {  // llama-server's --host/--port: the HTTP side
      if (!a->s.http.empty()) return void(exit_code = run_guarded("serve", [] { throw std::invalid_argument("--http, or --host and --port: give one"); }));
      a->s.http = fmt::format("{}:{}", a->host.empty() ? "127.0.0.1" : a->host, port->count() > 0 ? a->port : 8080);
    }
    if (zmq->count() == 0 && !a->s.http.empty()) a->s.endpoint.clear();  // (HTTP alone: no ZeroMQ port opened unasked)
    exit_code = run_guarded("serve", [&] { run_serve(*a); });
  });
}

void add_keygen_command(CLI::App& app, int& exit_code) {
  struct keygen_args {
    std::string stem, tls, ca, name;
  };
  auto a = std::make_shared<keygen_args>();
  auto* cmd = app.add_subcommand("keygen",
                                 "Make a CURVE key pair for serve/client: NAME.key (secret, mode 0600) and NAME.pub (public); or, with --tls DIR, the "
                                 "certificates of stage links between hosts");
  auto* o = cmd->add_option("-o,--output", a->stem, "NAME: writes NAME.key and NAME.pub");
  auto* t = cmd->add_option("--tls", a->tls,
                            "DIR: a folder for `hotcold worker --tls` and `--workers-tls`: ca.pem, member.pem, member.key (and ca.key: a new authority, "
                            "unless --ca)");
  cmd->add_option("--ca", a->ca, "With --tls: sign the member with this folder's authority (its ca.pem and ca.key) instead of making one")->needs(t);
  cmd->add_option("--name", a->name, "With --tls: the member's name in its certificate (default: the folder's name)")->needs(t);
  o->excludes(t);
  cmd->callback([a, cmd, &exit_code] {
    exit_code = run_guarded("keygen", [&] {
      if (!a->tls.empty()) return run_keygen_tls(a->tls, a->ca, a->name);
      if (a->stem.empty()) throw std::invalid_argument("keygen: give -o NAME (a CURVE key pair) or --tls DIR (stage link certificates)");
      run_keygen(a->stem);
    });
  });
}

void add_client_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<client_args>();
  auto* cmd = app.add_subcommand("client", "Send a prompt to `hotcold serve` and print the generated text as `hotcold run` does");
  cmd->add_option("--endpoint", a->endpoint, "The server's endpoint")->capture_default_str();
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "Prompt text");
  auto* f = cmd->add_option("-f,--file", a->file, "File whose text is the prompt");
  p->excludes(f);
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens to generate (-1: until the end of the text, a full context or the server's --max-tokens)")
      ->check(CLI::Range(-1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd->add_option("--temp", a->p.temperature, "Temperature (<= 0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", a->p.top_k, "Top-k (<= 0: off)")->capture_default_str();
  cmd->add_option("--top-p", a->p.top_p, "Top-p (>= 1: off)")->capture_default_str();
  cmd->add_option("--min-p", a->p.min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", a->p.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--repeat-last-n", a->p.penalty_last_n, "Tokens the penalties look back on")->capture_default_str();
  cmd->add_option("--frequency-penalty", a->p.frequency_penalty, "Frequency penalty (0: off)")->capture_default_str();
  cmd->add_option("--presence-penalty", a->p.presence_penalty, "Presence penalty (0: off)")->capture_default_str();
  add_seed_option(cmd, a->p.seed, a->seed_given, "Random seed (default, or -1: the server picks one, printed on stderr)");
  cmd->add_flag("--parse-special", a->parse_special, "Text of control tokens in the prompt becomes those tokens");
  add_grammar_options(cmd, a->grammar, "the whole text; the server checks it");
  cmd->add_flag("--chat", a->chat, "Send the text as a user's message, written by the server's chat template (as /v1/chat/completions does)");
  cmd->add_option("--system", a->system, "With --chat: a system message first");
  cmd->add_option("--tools", a->tools_file, "A file holding the functions offered (a JSON array, as the HTTP API's tools; implies --chat): calls print as JSON lines after the text");
  cmd->add_option("--tool-choice", a->tool_choice, "auto (default), none, required, or a function's name");
  cmd->add_flag("--health", a->health, "Only ask the server how it is (prints the health reply)");
  cmd->add_option("--cancel-after", a->cancel_after, "Cancel the request after this many tokens")->check(whole_in(1, 1ll << 40));
  cmd->add_option("--curve-server-key", a->curve_server_key, "The server's public key (40 Z85 characters, or its .pub file): CURVE on");
  cmd->add_option("--curve-key", a->curve_key, "This client's key pair (hotcold keygen), on the server's allow list");
  cmd->add_option("--timeout", a->timeout_s, "Seconds to wait for each reply")->check(finite_in(0.001, 86400))->capture_default_str();
  cmd->add_option("--connect-timeout", a->connect_timeout_s, "Seconds to wait for the server to accept the connection")->check(finite_in(0.001, 86400))->capture_default_str();
  cmd->callback([a, p, f, &exit_code] {
    a->texts_given = static_cast<int>(p->count() + f->count());
    a->from_file = f->count() > 0;
    exit_code = run_guarded("client", [&] { run_client(*a); });
  });
}

void add_replay_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<replay_args>();
  auto* cmd = app.add_subcommand("replay",
                                 "Replay a recorded workload (serve --record) against a server and report its latencies; or, with --activations, "
                                 "estimate what other hot-device budgets would give from a run's recorded active neurons (docs/replay.md)");
  cmd->add_option("--trace", a->trace, "JSONL file written by serve --record");
  cmd->add_option("--endpoint", a->endpoint, "The server to replay against")->capture_default_str();
  cmd->add_option("--speed", a->speed, "Time scale: 2 sends twice as fast as recorded")->check(finite_in(1e-6, 1e6))->capture_default_str();
  cmd->add_option("--max-concurrency", a->max_concurrency, "Requests in flight at most (a request waits for a free one)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--timeout", a->timeout, "Seconds to wait for any one reply before a request counts as failed")
      ->check(finite_in(0.001, 86400))
      ->capture_default_str();
  cmd->add_option("--connect-timeout", a->connect_timeout, "Seconds for the server to answer a health request before the replay starts")
      ->check(finite_in(0.001, 3600))
      ->capture_default_str();
  cmd->add_option("--report", a->report, "JSON report: requests, ttft_s, itl_s, e2e_s (p50, p95, p99, mean, max); with --activations, the estimates");
  cmd->add_flag("--compare", a->compare, "Put the recorded latencies beside the replayed ones");
  // What-if.
  cmd->add_option("--activations", a->activations,
                  "What-if: a run's active neurons (TRACE.json from --trace-out, its TRACE.json.activations, or a profile folder)");
  cmd->add_option("-m,--model", a->w.model_path, "What-if: the model the activations were recorded on");
  cmd->add_option("--vram-budget", a->w.budgets_gib, "What-if: hot-device budgets in GiB to estimate (placed as `hotcold place` would)")->check(finite_in(1e-9, 1 << 20));
  cmd->add_option("--placement", a->w.placements, "What-if: placement files to estimate");
  cmd->add_option("--experts-cached", a->w.experts_cached,
                  "What-if on a mixture of experts: a device cache of this many experts a layer (one or more sizes), the recorded routings "
                  "replayed through it under each policy (docs/moe.md)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--experts-popular-from", a->w.experts_popular_from,
                  "What-if on a mixture of experts: also a fixed set of each layer's most chosen experts learned on this other record (another text's "
                  "--trace-out FILE.activations), as a static placement by popularity would be");
  cmd->add_option("--link-gbps", a->w.link_gbps, "What-if on a mixture of experts: the host-to-device rate uploads move at, GB/s")
      ->check(finite_in(1e-6, 1e6))
      ->capture_default_str();
  cmd->add_option("--stats", a->w.stats_dir, "What-if: profile folder whose firing counts place the neurons (default: the recorded run's own choices)");
  cmd->add_option("-c,--ctx", a->w.ctx, "What-if: the context the budget's KV cache must hold (as place -c)");
  cmd->add_option("--hot-gbps", a->w.hot_gbps, "What-if: the hot device's read bandwidth in GB/s (default: as the trace shows it, or the CPU's)")
      ->check(finite_in(1e-6, 1e6));
  cmd->add_option("--cpu-gbps", a->w.cpu_gbps, "What-if without a trace: the CPU's read bandwidth in GB/s (default: measured here)")->check(finite_in(1e-6, 1e6));
  cmd->callback([a, &exit_code] { exit_code = run_guarded("replay", [&] { run_replay(*a); }); });
}

void add_plan_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<plan_args>();
  std::string gpus;
  for (const auto& g : tools::known_gpus()) gpus += (gpus.empty() ? "" : ", ") + g.name;
  auto* cmd = app.add_subcommand("plan",
                                 "Predict decode speed on paper: the CPU alone, whole layers on a GPU, and the hybrid, for a GPU budget; "
                                 "the disk tier for a memory budget");
  cmd->add_option("-m,--model", a->model, "GGUF model (sparse: the hybrid; dense: whole layers)")->required();
  cmd->add_option("--vram-budget", a->budget, "GPU memory the plan may use, GiB (needed unless --ram-budget is given alone)")->check(finite_in(0, 1 << 20));
  cmd->add_option("--ram-budget", a->ram_budget,
                  "The disk tier too (as run --ram-budget): a sparse file's weights held in memory, GiB; the bytes a token reads from the file and "
                  "the tokens per second at the disk's rate")
      ->check(finite_in(1e-9, 1 << 20));
  cmd->add_option("--disk-read", a->disk_gbs,
                  "With --ram-budget: the disk's rate for the tier's reads, GB/s (default: measured here, direct reads of one neuron's rows at "
                  "random places in the file, a layer's misses at a time)")
      ->check(finite_in(1e-9, 1e6));
  cmd->add_option("-c,--ctx", a->ctx, "Context the KV cache holds (default: the model's, at most 4096); a token reads half of it")
      ->check(whole_in(0, 1ll << 40));
  add_cache_type_options(cmd, a->cache_type_k, a->cache_type_v);
  auto* gpu = cmd->add_option("--gpu", a->gpu, "A GPU by name: " + gpus);
  auto* gbw = cmd->add_option("--gpu-bandwidth", a->gpu_gbs, "The GPU's memory bandwidth, GB/s")->check(finite_in(0, 1e6));
  auto* pcie = cmd->add_option("--pcie", a->pcie_gbs, "The GPU's host link, GB/s one way")->check(finite_in(0, 1e6));
  gpu->excludes(gbw)->excludes(pcie);
  gbw->needs(pcie);
  pcie->needs(gbw);
  cmd->add_option("--cpu-bandwidth", a->cpu_gbs,
                  "The CPU's rate over weights, GB/s, for all its work (default: measured here on this file's own work, a few decoded tokens: "
                  "its products, its predictors and its FFN each at its own rate)")
      ->check(finite_in(0, 1e6));
  cmd->add_option("--cpu-ffn-bandwidth", a->ffn_gbs,
                  "The CPU's rate over the FFN as the file runs it (a sparse file's scattered rows), GB/s (default: with --cpu-bandwidth, the same; "
                  "else measured with the rest)")
      ->check(finite_in(0, 1e6));
  auto* stats = cmd->add_option("--stats", a->stats, "Profile folder (hotcold profile): how often each neuron fires (default: MODEL.work when there)");
  cmd->add_option("--active", a->active, "Without a profile: the fraction of neurons that fire per token")->check(finite_in(0, 1))->excludes(stats);
  cmd->add_option("--expert-hit-rate", a->expert_hit_rate,
                  "A mixture of experts: the share of routed experts the GPU's slots hold (e.g. replay --experts-cached's; default: slots / experts)")
      ->check(finite_in(0, 1));
  cmd->add_option("--gpu-efficiency", a->efficiency, "The fraction of the GPU's bandwidth its kernels reach")->capture_default_str()->check(finite_in(0, 1));
  cmd->add_option("--crossing-us", a->crossing_us, "A blocking wait's cost in microseconds: the host's round trip to the GPU")->capture_default_str()->check(finite_in(0, 1e6));
  cmd->add_option("--launch-us", a->launch_us, "What a kernel launch costs the host, microseconds (the runtime's launches a token counted as a GPU makes them)")
      ->capture_default_str()
      ->check(finite_in(0, 1e6));
  cmd->add_option("--copy-us", a->copy_us, "What a host<->device copy call costs beside its bytes, microseconds")->capture_default_str()->check(finite_in(0, 1e6));
  cmd->add_option("-t,--threads", a->threads, "Threads of the CPU's measurement (default: the cores)")->check(whole_in(0, 1024));
  cmd->add_flag("--json", a->json, "One JSON object on stdout");
  cmd->callback([a, &exit_code] { exit_code = run_guarded("plan", [&] { run_plan(*a); }); });
}

void add_profile_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<loader::profile_options>();
  auto* cmd = app.add_subcommand("profile", "Record per-neuron firing counts and predictor training samples over calibration text");
  cmd->add_option("-m,--model", o->model_path, "Dense GGUF model")->required();
  cmd->add_option("-f,--file", o->calibration_path, "Calibration text (default: text the model samples itself)");
  cmd->add_option("--tokens", o->tokens, "Tokens to profile")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads (0 or less: all hardware threads)")->check(thread_count());
  cmd->add_option("-o,--output", o->out_dir, "Output folder")->required();
  cmd->callback([o, &exit_code] { exit_code = run_guarded("profile", [&] { run_profile_command(*o); }); });
}

void add_train_predictor_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<train_args>();
  auto* cmd = app.add_subcommand("train-predictor", "Train each layer's activation predictor from a profile folder; writes DIR/predictors.gguf");
  cmd->add_option("dir", a->dir, "Folder written by `hotcold profile`")->required();
  cmd->add_option("--rank", a->o.rank, "Predictor rank (default: chosen per layer)");
  cmd->add_option("--epochs", a->o.epochs, "Training epochs")->capture_default_str();
  cmd->add_option("--recall", a->o.target_recall, "Recall each layer's threshold keeps on held-out samples")->capture_default_str();
  cmd->add_option("-t,--threads", a->o.threads, "Threads (0 or less: all hardware threads)")->check(thread_count());
  cmd->callback([a, &exit_code] { exit_code = run_guarded("train-predictor", [&] { run_train_predictor(*a); }); });
}

void add_place_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<place_args>();
  auto* cmd = app.add_subcommand("place", "Choose the hot FFN neurons for the fast device under a memory budget; writes MODEL.generated.gpuidx");
  cmd->add_option("-m,--model", a->model, "Sparse (or dense) GGUF model")->required();
  cmd->add_option("--stats", a->stats, "Profile folder (hotcold profile)")->required();
  cmd->add_option("--vram-budget", a->budget, "Fast-device memory, GiB")->required()->check(finite_in(0, 1 << 20));
  cmd->add_option("-c,--ctx", a->ctx, "Context the KV cache must hold (default: the model's, at most 4096)")->check(whole_in(0, 1ll << 40));
  add_cache_type_options(cmd, a->cache_type_k, a->cache_type_v);
  cmd->callback([a, &exit_code] { exit_code = run_guarded("place", [&] { run_place(*a); }); });
}

void add_prepare_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<prepare_args>();
  auto* cmd = app.add_subcommand("prepare", "Profile a dense model, train its predictors and write the sparse model");
  cmd->add_option("-m,--model", a->model, "Dense GGUF model")->required();
  cmd->add_option("-o,--output", a->out, "Sparse GGUF model to write")->required();
  cmd->add_option("-f,--file", a->calib, "Calibration text (default: text the model samples itself)");
  cmd->add_option("--tokens", a->tokens, "Tokens to profile")->capture_default_str();
  cmd->add_option("--work", a->work, "Folder for the profile and predictors (default: OUTPUT.work)");
  cmd->add_option("-t,--threads", a->threads, "Threads (0 or less: all hardware threads)")->check(thread_count());
  cmd->add_option("--recall", a->train.target_recall, "Recall each layer's threshold keeps on held-out samples")->capture_default_str();
  cmd->add_option("--rank", a->train.rank, "Predictor rank (default: chosen per layer, as train-predictor does)")->check(whole_in(1, 1 << 20));
  cmd->add_option("--epochs", a->train.epochs, "Training epochs (as train-predictor's)")->capture_default_str()->check(whole_in(0, 1000));
  cmd->add_flag("--powerinfer", a->powerinfer, "Write PowerInfer's magic (PWRI) and threshold key instead of hotcold's");
  cmd->add_flag("--reuse-profile", a->reuse_profile, "Use the profile already in the work folder instead of profiling again");
  cmd->add_flag("--plain-layout", a->plain_layout,
                "Keep the dense file's order of the neurons and their gate, up and down_t rows in tensors of their own (default: most often firing "
                "first, each neuron's rows side by side)");
  cmd->add_option("--down-layout", a->down_layout,
                  "The down matrix as rows of each neuron (rows: ffn_down_t, only the neurons that fire are read) or as ffn_down (blocks: "
                  "each token's hidden values rounded to Q8_0 a block of 32 neurons, integer products over the blocks where some neuron "
                  "fired; faster prompts, more bytes a decoded token; not for the hot/cold device split)")
      ->capture_default_str()
      ->check(CLI::IsMember({"rows", "blocks"}));
  cmd->add_option("--vram-budget", a->budget, "Also place hot neurons for a fast device of this many GiB (OUTPUT.generated.gpuidx)")
      ->check(finite_in(0, 1 << 20));
  cmd->add_option("-c,--ctx", a->ctx, "Context the placement's KV cache must hold")->check(whole_in(0, 1ll << 40));
  add_cache_type_options(cmd, a->cache_type_k, a->cache_type_v);
  cmd->add_option("--sparsity", a->sparsity,
                  "SiLU/GELU files: skip this mean fraction S of each layer's FFN neurons, those with the smallest |act(gate)| (a threshold "
                  "per layer calibrated on the calibration text, stored in the file); 0: none (ReLU-family files)")
      ->check(finite_in(0, 0.99));
  cmd->add_option("--sparsity-tokens", a->sparsity_tokens, "Tokens the thresholds are calibrated on")->capture_default_str()->check(whole_in(1, 1 << 20));
  cmd->callback([a, &exit_code] { exit_code = run_guarded("prepare", [&] { run_prepare(*a); }); });
}

void add_sparse_commands(CLI::App& app, int& exit_code) {
  add_profile_command(app, exit_code);
  add_train_predictor_command(app, exit_code);
  add_place_command(app, exit_code);
  add_prepare_command(app, exit_code);
}

void add_gen_model_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<gen_model_args>();
  auto* cmd = app.add_subcommand("gen-model", "Write a synthetic GGUF model whose ReLU FFNs are sparse with power-law neuron frequencies");
  std::string archs;
  std::vector<std::string> arch_names;
  for (const auto& t : architectures()) {
    archs += fmt::format("{}{}: {}", archs.empty() ? "" : "; ", t.name, t.about);
    arch_names.emplace_back(t.name);
  }
  cmd->add_option("--arch", a->arch, "The architecture (its row of model/arch.cpp's table): " + archs)->check(CLI::IsMember(arch_names));
  cmd->add_option("--act", a->act, "FFN activation: relu, silu, drelu (gated only) or gelu")->check(CLI::IsMember({"relu", "silu", "drelu", "gelu"}));
  cmd->add_option("--embd", a->o.n_embd, "Embedding size")->capture_default_str();
  cmd->add_option("--layers", a->o.n_layer, "Layers")->capture_default_str();
  cmd->add_option("--ffn", a->o.n_ff, "FFN neurons per layer")->capture_default_str();
  cmd->add_option("--heads", a->o.n_head, "Attention heads")->capture_default_str();
  cmd->add_option("--kv-heads", a->o.n_head_kv, "KV heads (grouped-query attention when fewer than --heads)")->capture_default_str();
  cmd->add_option("--ctx", a->o.n_ctx, "Training context length written to the file")->capture_default_str();
  cmd->add_option("--active", a->o.active, "Mean fraction of FFN neurons firing per token (ReLU family)")->capture_default_str();
  cmd->add_option("--vocab", a->o.vocab_path, "GGUF file whose tokenizer is copied")->required();
  cmd->add_option("--type", a->type,
                  "Weight type: f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, or llama.cpp's mixes q4_k_m and q5_k_m (quantized presets: a Q6_K head)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m"}));
  cmd->add_option("--seed", a->o.seed, "Random seed")->capture_default_str();
  cmd->add_option("--norm-spread", a->o.norm_spread, "Norm weights drawn from [1-S, 1+S], biases from [-S/2, S/2] (0: identity norms)")->capture_default_str();
  cmd->add_option("--rope-base", a->o.rope_freq_base, "RoPE frequency base (rope.freq_base; Llama 3: 500000)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--llama3-rope", a->o.llama3_rope_ctx,
                  "Write Llama 3.1's RoPE frequency factors (rope_freqs.weight) by its rule for this original context (Llama 3.1: 8192; small ones bend "
                  "more pairs)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--head-dim", a->o.head_dim, "Values per attention head (attention.key_length) when not --embd/--heads (Qwen3 0.6B: 128 for 1024/16)")
      ->check(CLI::Range(int64_t{2}, int64_t{1024}));
  cmd->add_flag("--tied-output", a->o.tied_output, "No output.weight: the head reads the token embeddings");
  cmd->add_flag("--output-bias", a->o.output_bias, "Add a random output.bias (qwen2, phi3 files may carry one)");
  cmd->add_option("--phi3-rope", a->o.phi3_rope_orig_ctx,
                  "Phi-3's LongRoPE: short and long factor tensors and attn_factor for this original context (below --ctx); a context above it "
                  "rotates by the long ones")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--chat-template", a->o.chat_template, "Write this family's published chat template as tokenizer.chat_template (" + chat_template::names() + ")")
      ->check([](const std::string& name) {
        try {
          chat_template::published(name);
          return std::string();
        } catch (const chat_template_error& e) {
          return std::string(e.what());
        }
      });
  cmd->add_option("--experts", a->o.n_experts, "A mixture of experts: this many experts per layer, each of --ffn neurons (llama, qwen2moe, qwen3moe; --act silu)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
  cmd->add_option("--experts-used", a->o.n_experts_used, "Experts the router picks per token")->check(CLI::Range(int64_t{1}, int64_t{1024}));
  cmd->add_option("--sliding-window", a->o.sliding_window, "gemma2: attention.sliding_window, the positions its even layers attend to (default: Gemma 2's 4096)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--shared-ffn", a->o.n_ff_shared, "qwen2moe's shared expert's neurons (default: --ffn)")->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--expert-locality", a->o.expert_locality,
                  "Share of the router reading the slowly moving context subspace rather than the token's own (consecutive tokens reuse experts)")
      ->capture_default_str();
  cmd->add_option("--expert-skew", a->o.expert_skew, "Power-law exponent of each expert's constant router bias by rank (0: no popular experts)")
      ->capture_default_str();
  cmd->add_option("-o,--output", a->o.out_path, "Output GGUF file")->required();
  cmd->callback([a, &exit_code] { exit_code = run_guarded("gen-model", [&] { run_gen_model(*a); }); });
}

void add_tokenize_commands(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<tokenize_args>();
  auto* tok = app.add_subcommand("tokenize", "Print the token ids of a text, on one line separated by spaces");
  tok->add_option("-m,--model", a->model, "GGUF file with tokenizer metadata")->required();
  auto* p = tok->add_option("-p,--prompt", a->prompt, "Text to tokenize");
  auto* f = tok->add_option("-f,--file", a->file, "File whose bytes are tokenized");
  p->excludes(f);
  tok->add_flag("--add-special", a->add_special, "Add BOS/EOS as the vocabulary asks");
  tok->add_flag("--parse-special", a->parse_special, "Text of control tokens (\"<s>\") becomes those tokens");
  tok->add_flag("--pieces", a->pieces, "Print one token per line as: id -> 'piece'");
  tok->callback([=, &exit_code] {
    exit_code = run_guarded("tokenize", [&] {
      if (p->count() + f->count() != 1) throw std::invalid_argument("give the text with exactly one of -p TEXT or -f FILE");
      a->from_file = f->count() > 0;
      run_tokenize(*a);
    });
  });

  auto d = std::make_shared<detokenize_args>();
  auto* det = app.add_subcommand("detokenize", "Print the text of token ids");
  det->add_option("-m,--model", d->model, "GGUF file with tokenizer metadata")->required();
  det->add_option("--ids", d->ids, "Token ids separated by spaces or commas, e.g. \"1 15043 3186\"")->required();
  det->add_flag("--render-special", d->render_special, "Print the text of control tokens such as <s>");
  det->callback([=, &exit_code] { exit_code = run_guarded("detokenize", [&] { run_detokenize(*d); }); });
}

void add_inspect_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("inspect", "Show a GGUF file's metadata, tensors and totals");
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("-m,--model", *path, "GGUF file (model or vocab-only)")->required();
  cmd->add_flag("--json", *json, "Print JSON instead of tables");
  cmd->callback([=, &exit_code] { exit_code = run_guarded("inspect", [&] { run_inspect(*path, *json); }); });
}

void add_devices_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("devices", "List the CPU and any GPUs hotcold can use");
  cmd->callback([&exit_code] { exit_code = run_guarded("devices", [] { run_devices(); }); });
}

}  // namespace

namespace {
std::string typed_command_line;
}  // namespace

std::string command_line() { return typed_command_line; }

int run_command_line(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    const std::string w = argv[i];
    typed_command_line += (i ? " " : "") + (w.find_first_of(" \t'\"") == std::string::npos && !w.empty() ? w : "'" + w + "'");
  }
  CLI::App app{"hotcold: ReLU-sparse LLM inference with hot/cold neuron placement"};
  app.set_version_flag("--version", "hotcold 0.1.0");
  app.require_subcommand(1);
  int exit_code = exit_ok;
  add_inspect_command(app, exit_code);
  add_tokenize_commands(app, exit_code);
  add_devices_command(app, exit_code);
  add_gen_model_command(app, exit_code);
  add_generate_commands(app, exit_code);
  add_bench_command(app, exit_code);
  add_sparse_commands(app, exit_code);
  add_serve_command(app, exit_code);
  add_client_command(app, exit_code);
  add_keygen_command(app, exit_code);
  add_replay_command(app, exit_code);
  add_plan_command(app, exit_code);
  add_worker_command(app, exit_code);
  std::vector<std::string> args = llama_spellings(argc, argv);
  std::vector<char*> arg_ptrs;
  for (auto& s : args) arg_ptrs.push_back(s.data());
  try {
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string hint = suggestion(app, args, e);
    fmt::print(stderr, "hotcold: {}\nRun with --help for usage.\n", hint.empty() ? std::string(e.what()) : hint);
    return exit_bad_input;
  }
  return exit_code;
}

}  // namespace hotcold::launcher
