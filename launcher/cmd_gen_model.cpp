// hotcold gen-model --arch llama|qwen2|qwen3|phi3|falcon|bamboo --act relu|silu|drelu --embd N --layers N --ffn N
//   --heads N --kv-heads N --active F --vocab VOCAB.gguf --type f32|f16|bf16|q8_0|q4_0|q4_k|q5_k|q6_k|q4_k_m|q5_k_m --seed S [--norm-spread S] [--rope-base B] [--llama3-rope CTX]
//   [--head-dim N] [--tied-output] [--output-bias] [--phi3-rope ORIG_CTX] -o OUT.gguf
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "launcher/commands.hpp"
#include "model/chat_template.hpp"
#include "launcher/progress.hpp"
#include "tools/gen_model.hpp"

namespace hotcold::launcher {

void add_gen_model_command(CLI::App& app, int& exit_code) {
  struct args {
    std::string arch = "llama", act = "relu", type = "f16";
    tools::gen_model_options o;
  };
  auto a = std::make_shared<args>();
  auto* cmd = app.add_subcommand("gen-model", "Write a synthetic GGUF model whose ReLU FFNs are sparse with power-law neuron frequencies");
  cmd->add_option("--arch", a->arch, "llama, qwen2, qwen3, phi3, falcon or bamboo")
      ->check(CLI::IsMember({"llama", "qwen2", "qwen3", "phi3", "falcon", "bamboo"}));
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
  cmd->add_option("-o,--output", a->o.out_path, "Output GGUF file")->required();
  cmd->callback([a, &exit_code] {
    exit_code = run_guarded("gen-model", [&] {
      auto o = a->o;
      o.arch = *architecture_from_name(a->arch);
      o.act = *activation_from_name(a->act);
      o.k_mix = a->type.ends_with("_m");
      o.type = *tensor_type_from_name(o.k_mix ? a->type.substr(0, a->type.size() - 2) : a->type);
      auto t0 = std::chrono::steady_clock::now();
      progress_bar bar("gen-model");
      auto report = tools::generate_model(o, [&](int64_t done, int64_t total) { bar.update(done, total); });
      bar.finish();
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print(stderr, "hotcold gen-model: wrote {} ({:.1f} MiB, vocab {}) in {:.1f} s\n", o.out_path,
                 report.file_bytes / double(1 << 20), report.n_vocab, secs);
      for (size_t l = 0; l < report.layers.size(); ++l)
        fmt::print(stderr, "  layer {:2}: designed active {:.3f}, power-law alpha {:.2f}, top-20% neurons take {:.0f}% of firings\n", l,
                   report.layers[l].mean, report.layers[l].alpha, 100 * report.layers[l].top20_share);
    });
  });
}

}  // namespace hotcold::launcher
