#pragma once
// Architectures: one row of facts each (arch_traits: name, RoPE, activation, norms, what its attention
// and FFN carry, its tensor-name table, as llama.cpp's llama-arch keeps them), the hyper-parameters a
// file gives, and which FFN activation a file means.
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/activation.hpp"
#include "model/gguf.hpp"

namespace hotcold {

// llama also means Llama 3 / 3.1 / 3.2, Mistral and TinyLlama, and with experts Mixtral; qwen2, qwen3
// and phi3 are llama's layer with their own attention details (biases, per-head norms of q and k,
// fused products, NeoX RoPE); qwen2moe and qwen3moe are qwen2's and qwen3's layers with a mixture of
// experts for the FFN (docs/moe.md).
// gemma2: llama's layer with Gemma 2's additions (scaled embeddings, norms after attention and after
// the FFN, soft-capped attention scores and logits, a sliding window on alternate layers, GELU gates).
enum class architecture { llama, falcon, bamboo, qwen2, qwen3, phi3, qwen2moe, qwen3moe, gemma2 };
using kernels::activation;  // (kernels/activation.hpp: one enum for the model, the kernels and the devices)
enum class norm_kind { rms, layer };  // RMSNorm (weight) or LayerNorm (weight and bias)
enum class rope_style { adjacent_pairs, neox };  // llama.cpp's NORM (x[2i], x[2i+1]) and NEOX (x[i], x[i + n_rot/2])
inline constexpr int64_t max_rope_dims = 1024;  // the forward pass keeps one position's rotation angles on the stack
// What a layer's activation predictor reads: the FFN's residual-stream input before ffn_norm
// (llama, bamboo), the layer's input (falcon, whose FFN runs in parallel with attention), or the FFN's
// normalized input — what its gate and up rows read (thresholded files, whose predictors estimate the
// gate's pre-activation: a linear function of that input).
enum class predictor_input { ffn_input_before_norm, layer_input, ffn_input };
std::string_view predictor_input_name(predictor_input p);

std::string_view architecture_name(architecture a);
std::optional<architecture> architecture_from_name(std::string_view name);
// Every architecture's name, in the table's order ("llama, qwen2, ..."), for messages and help.
std::string architecture_names();
std::string_view activation_name(activation a);
std::optional<activation> activation_from_name(std::string_view name);

// Keys of hotcold's own files (docs/model-files.md).
constexpr std::string_view activation_key = "hotcold.activation";              // string: silu relu drelu gelu
constexpr std::string_view sparse_thresholds_key = "hotcold.sparse.thresholds";  // f32[n_layer]
constexpr std::string_view predictor_input_key = "hotcold.sparse.predictor_input";  // "ffn_input_before_norm" | "layer_input" | "ffn_input"
// Sparsity without retraining (SiLU/GELU files, `prepare --sparsity`): in layer l neuron k's value is
// act(gate_k . x) (up_k . x) when |act(gate_k . x)| >= t_l (no gate: act(up_k . x) when |act(..)| >= t_l),
// else 0 — the file's model, on every path.
constexpr std::string_view activation_thresholds_key = "hotcold.sparsity.act_thresholds";  // f32[n_layer]: t_l
constexpr std::string_view sparsity_target_key = "hotcold.sparsity.target";  // f32: the mean fraction skipped the t_l were calibrated for
// PowerInfer's key: one threshold for every layer.
constexpr std::string_view powerinfer_threshold_key = "powerinfer.sparse_threshold";

// A model file that cannot be run: unknown architecture, missing tensor, bad shape or type...
class model_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct hparams {
  architecture arch = architecture::llama;
  activation act = activation::silu;
  rope_style rope = rope_style::adjacent_pairs;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t n_ff = 0;
  int64_t n_head_dim = 0;     // values per attention head (attention.key_length; n_embd / n_head when absent)
  int64_t n_rot = 0;          // rotated dimensions per head (at most max_rope_dims)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / linear scaling factor
  // Llama 3.1's per-pair frequency factors (the file's rope_freqs.weight, F32, n_rot / 2 of them):
  // pair i turns at base^(-2i/n_rot) / factor[i] (llama.cpp's ggml_rope_ext freq_factors). Empty: 1.
  std::vector<float> rope_freq_factors;
  // Phi-3's LongRoPE: per-pair factors for contexts up to n_ctx_orig (short) and beyond (long), from
  // the file's rope_factors_short/long.weight; llama.cpp picks by the context's size per sequence.
  std::vector<float> rope_factors_long, rope_factors_short;
  int64_t n_ctx_orig = 0;        // rope.scaling.original_context_length (n_ctx_train when absent)
  float rope_attn_factor = 1.0f; // rope.scaling.attn_factor: scales the rotated values' cos and sin
  float norm_eps = 1e-5f;        // RMSNorm (llama, bamboo) or LayerNorm (falcon) epsilon
  bool gated_ffn = true;         // llama/bamboo: down(act(gate) * up); falcon: down(act(up))
  // Sparse files: neuron i of layer l is computed iff predictor score_i >= sparse_threshold[l] — for
  // thresholded files (act_threshold), whose score estimates the neuron's pre-activation (gate; no
  // gate: up), iff |act(score_i)| >= sparse_threshold[l] (predicted_choice).
  std::vector<float> sparse_threshold;  // (n_layer), 0 when the file says nothing
  predictor_input pred_input = predictor_input::ffn_input_before_norm;
  // SiLU/GELU files made sparse by thresholding (activation_thresholds_key): t_l per layer; empty: none.
  std::vector<float> act_threshold;
  float sparsity_target = 0.0f;
  // A mixture of experts (docs/moe.md): each layer's FFN is n_expert experts of n_ff_exp neurons
  // (SiLU-gated), of which the router picks n_expert_used per token — softmax over ffn_gate_inp . x,
  // the top n_expert_used, their weights renormalized to sum 1 where expert_weights_norm (llama's
  // Mixtral, qwen3moe; not qwen2moe) —; qwen2moe adds a shared expert of n_ff_shexp neurons scaled by
  // sigmoid(ffn_gate_inp_shexp . x). n_expert 0: a dense FFN.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  bool expert_weights_norm = false;
  bool moe() const { return n_expert > 0; }
  // Gemma 2 (as llama.cpp reads it): the embeddings scaled by sqrt(n_embd); attention scores
  // soft-capped (cap tanh(s / cap); 0: not) and the logits too; layers il with il % swa_period <
  // swa_period - 1 attend to the last n_swa positions only (0: every layer to all); queries scaled by
  // q_scale (0: 1 / sqrt(head_dim)).
  bool embd_scaled = false;
  float attn_softcap = 0, final_softcap = 0, q_scale = 0;
  int64_t pooling_type = 0;  // {arch}.pooling_type, for embeddings: 0 none given, 1 mean, 2 cls, 3 last
  int64_t n_swa = 0, swa_period = 0;
  bool sliding(int64_t layer) const { return n_swa > 0 && swa_period > 0 && layer % swa_period < swa_period - 1; }
  float attention_scale() const { return q_scale > 0 ? q_scale : 1.0f / std::sqrt(static_cast<float>(n_head_dim)); }

  // The layer's activation threshold (0: every neuron keeps its value).
  float act_threshold_of(int64_t layer) const { return act_threshold.empty() ? 0.0f : act_threshold[static_cast<size_t>(layer)]; }
  // Neurons stop firing: ReLU-family activations, or thresholded ones.
  bool sparse_activation() const { return act == activation::relu || act == activation::drelu || !act_threshold.empty(); }

  int64_t head_dim() const { return n_head_dim; }
  int64_t n_embd_q() const { return n_head_dim * n_head; }  // the queries' width (n_embd unless key_length says otherwise)
  int64_t n_embd_kv() const { return head_dim() * n_head_kv; }
  // The frequency factors a context of n_ctx positions per sequence rotates by (empty: none):
  // rope_freqs when the file has it, else Phi-3's long factors beyond n_ctx_orig, else its short ones.
  const std::vector<float>& rope_factors_for(int64_t n_ctx) const {
    if (!rope_freq_factors.empty()) return rope_freq_factors;
    return n_ctx > n_ctx_orig ? rope_factors_long : rope_factors_short;
  }
};

// Reads and checks the hyper-parameters; the vocabulary size comes from the tokenizer or token_embd.
hparams read_hparams(const gguf::file& f);
// Sets hp.act_threshold after checking them (a SiLU/GELU FFN, one per layer, finite and >= 0); a
// model_error naming `source` and activation_thresholds_key otherwise. The model's predictors then read
// the FFN's normalized input (pred_input = ffn_input).
void set_act_thresholds(hparams& hp, std::span<const double> t, std::string_view source);

// Tensor roles and their GGUF names ("blk.%d.attn_q.weight").
enum class tensor_role {
  token_embd, output_norm, output_norm_b, output,
  attn_norm, attn_norm_b, attn_norm_2, attn_norm_2_b,
  attn_q, attn_k, attn_v, attn_qkv, attn_output,
  attn_q_b, attn_k_b, attn_v_b, attn_qkv_b,  // biases of the products (qwen2; optional in the llama family)
  attn_q_norm, attn_k_norm,                  // per-head RMSNorm weights of q and k before RoPE (qwen3)
  output_b,                                  // the output head's bias (optional: qwen2, phi3)
  attn_post_norm, ffn_post_norm,             // RMSNorms of attention's and the FFN's outputs (gemma2)
  ffn_norm, ffn_gate, ffn_up, ffn_down,
  ffn_up_gate,         // phi3: gate and up in one tensor of 2 n_ff rows, gate first (llama.cpp's SWIGLU halves)
  ffn_down_t,          // sparse files: the down projection transposed, one row of n_embd per neuron
  pred_fc1, pred_fc2,  // the layer's activation predictor: score = fc2 . relu(fc1 . x)
  // A mixture of experts: the router, each expert's gate, up and down (3-D: one slice per expert), and
  // qwen2moe's shared expert with its gate vector.
  ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps,
  ffn_gate_inp_shexp, ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp,
};
// Whether a role is one of a mixture of experts' tensors.
bool expert_role(tensor_role r);

struct tensor_spec {
  tensor_role role;
  const char* name;   // printf template; per-layer names take the layer index
  bool per_layer;
  bool required;
};

// The tensors an architecture reads, in one table (its arch_traits' tensors).
const std::vector<tensor_spec>& tensor_table(architecture a);

enum class experts_rule { none, optional, required };  // a mixture of experts: never, with expert_count, always

// What an architecture is, as current llama.cpp reads its files: one row each (arch_of), read by
// read_hparams, the layer's recipe (model/recipe.hpp), the load's checks, gen-model and --arch's help.
// docs/how-to-add-an-architecture.md says how to add a row.
struct arch_traits {
  architecture arch;
  std::string_view name;        // general.architecture, and its keys' prefix
  std::string_view about;       // what files it is (gen-model --arch's help)
  rope_style rope;              // llama.cpp's rope type: NORM is adjacent_pairs, NEOX neox
  activation act;               // what a llama.cpp file of it means (hotcold.activation says otherwise; PowerInfer's files: relu)
  bool gated_ffn;               // down(act(gate) up), or down(act(up))
  norm_kind norm;
  std::string_view eps_key;     // the norms' epsilon (after the prefix), and its default
  double eps_default;
  bool parallel;                // attention and the FFN both read the layer's input (falcon); its predictors read the layer's input
  int64_t ff_per_embd;          // feed_forward_length absent: n_ff = this x n_embd (0: the experts' width)
  bool qkv_biases, qk_norms;    // q, k and v carry biases (qwen2); q and k are normalized per head before RoPE (qwen3): required
  experts_rule experts;
  bool shared_expert;           // a shared expert beside the routed ones (qwen2moe)
  bool expert_weights_norm;     // the chosen experts' weights renormalized to sum 1
  bool experts_as_wide_as_ff;   // expert_feed_forward_length absent: feed_forward_length (Mixtral), else that / expert_used_count
  bool gemma2;                  // Gemma 2's additions (hparams: embd_scaled, soft caps, sliding window, q_scale; post norms)
  const std::vector<tensor_spec>& tensors;
};
const arch_traits& arch_of(architecture a);
const std::vector<arch_traits>& architectures();  // every row, in --arch's order
std::string tensor_name(const tensor_spec& spec, int layer);
// The shape a tensor must have: {ne0, ne1} (ne1 == 1 for vectors), {ne0, ne1, ne2} for the experts'
// 3-D tensors (ne2 = n_expert); empty for the predictor, whose rank r is free (fc1 is {n_embd, r}, fc2
// is {r, n_ff}).
std::vector<int64_t> expected_shape(tensor_role role, const hparams& hp);

}  // namespace hotcold
