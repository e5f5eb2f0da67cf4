#pragma once
// hotcold gen-model: writes real GGUF models (llama.cpp's conventions, tokenizer copied from a
// vocabulary file) whose ReLU-family FFNs are sparse the way ReLU LLMs are: on average a chosen
// fraction of neurons fires per token, and per-neuron firing frequencies follow a power law that
// varies by layer. How the weights achieve that is described in docs/synthetic-models.md.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/arch.hpp"
#include "kernels/tensor_types.hpp"

namespace hotcold::tools {

struct gen_model_options {
  architecture arch = architecture::llama;
  activation act = activation::relu;
  int64_t n_embd = 256;
  int64_t n_layer = 4;
  int64_t n_ff = 1024;
  int64_t n_head = 8;
  int64_t n_head_kv = 8;
  int64_t n_ctx = 2048;
  double active = 0.1;           // mean fraction of FFN neurons firing per token (ReLU family)
  std::string vocab_path;        // GGUF whose tokenizer.* metadata is copied
  std::string chat_template;     // a family's published template for tokenizer.chat_template (chat_template::published); empty: the vocabulary file's, if any
  tensor_type type = tensor_type::f16;
  // llama.cpp's _M preset over a K-quant type (Q4_K_M, Q5_K_M): attn_v and ffn_down one step up to
  // Q6_K on the layers its use_more_bits picks, a fused attn_qkv one step up, the head Q6_K (Q8_0 for
  // falcon). Quantized types other than these get the presets' head rule alone.
  bool k_mix = false;
  uint64_t seed = 1;
  // Norm weights drawn uniformly from [1 - s, 1 + s] per channel and biases from [-s/2, s/2] (0:
  // identity norms, weight 1 and bias 0). With s > 0 every norm of a layer differs from the others,
  // so a path that feeds a branch through the wrong norm computes another model.
  double norm_spread = 0.0;
  float rope_freq_base = 10000.0f;
  // Llama 3.1's RoPE frequency factors (rope_freqs.weight), made by its rule (factor 8, low and high
  // frequency factors 1 and 4) for this original context; 0: none. A small one (64) bends most pairs.
  int64_t llama3_rope_ctx = 0;
  // Values per attention head (attention.key_length); 0: n_embd / n_head. Qwen3's small models: 128
  // with n_embd / n_head = 64 (q is then wider than the embedding).
  int64_t head_dim = 0;
  bool tied_output = false;  // no output.weight: the head is the token embeddings (Qwen2.5-0.5B, Llama 3.2 1B)
  bool output_bias = false;  // output.bias, drawn at random (qwen2 and phi3 may have one)
  // Phi-3's LongRoPE for this original context (rope.scaling.original_context_length): random short
  // and long factor tensors and rope.scaling.attn_factor = sqrt(1 + ln(ctx / orig) / ln(orig)); 0: none.
  int64_t phi3_rope_orig_ctx = 0;
  // A mixture of experts (llama as Mixtral, qwen2moe, qwen3moe; SiLU): n_experts experts of n_ff
  // neurons per layer, n_experts_used per token (docs/moe.md). The router's rows read the hidden state
  // two ways: the token subspace (changes every token) and the context subspace (written by every
  // layer's attention, which averages the tokens before: it moves slowly along a sequence), in the
  // share expert_locality of the latter — consecutive tokens then tend to pick the same experts —, and
  // a per-expert constant (through the constant channels) falling off as a power law of the expert's
  // rank with exponent expert_skew — a few experts popular everywhere. qwen2moe's shared expert has
  // n_ff_shared neurons (0: n_ff).
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t n_ff_shared = 0;
  double expert_locality = 0.5;
  double expert_skew = 1.0;
  // gemma2: attention.sliding_window (the even layers attend to this many last positions; 0: Gemma 2's
  // 4096), and the soft caps of the attention scores and the logits (Gemma 2's: 50 and 30; the suite
  // makes them small, so that a path ignoring one computes another model).
  int64_t sliding_window = 0;
  float attn_softcap = 50.0f, final_softcap = 30.0f;
  std::string out_path;
};

struct gen_layer_design {
  double alpha;        // power-law exponent of firing probability vs. neuron rank
  double mean;         // designed mean firing probability
  double top20_share;  // designed share of firings taken by the most frequent 20% of neurons
};

struct gen_model_report {
  int64_t n_vocab = 0;
  uint64_t file_bytes = 0;
  std::vector<gen_layer_design> layers;  // empty for dense activations (silu, gelu)
};

// Throws std::invalid_argument for impossible options (naming the flag), model_error or
// gguf::format_error for a bad vocabulary file.
gen_model_report generate_model(const gen_model_options& options,
                                const std::function<void(int64_t done, int64_t total)>& progress = {});

// Firing probabilities by rank (descending): p_r = min(cap, c (r+1)^-alpha) with c giving the mean
// and alpha the share of the top 20% (clamped to what the cap allows). Exposed for tests.
std::vector<double> power_law_probabilities(int64_t n, double mean, double top20_share, double* alpha_out = nullptr);

}  // namespace hotcold::tools
