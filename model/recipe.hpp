#pragma once
// What one layer of an architecture does, as data: which norm (and kind of norm) feeds attention,
// which feeds the FFN, and whether the two run in parallel on the layer's input. The engine runs
// every architecture through one path that reads this; a layout difference (Falcon-40B's second
// norm) is a different recipe, not a branch in the engine.
#include "kernels/cpu/row_kernels.hpp"
#include "model/model.hpp"

namespace hotcold {

// A norm's tensors: weight, and bias for LayerNorm (empty for RMSNorm).
struct norm_weights {
  const tensor_view* weight = nullptr;
  const tensor_view* bias = nullptr;
  bool operator==(const norm_weights&) const = default;
};

struct layer_recipe {
  norm_kind norm = norm_kind::rms;
  norm_weights attn_norm;  // feeds attention
  norm_weights ffn_norm;   // feeds the FFN (parallel layers: the layer's input; else the residual after attention)
  // Norms of attention's and the FFN's outputs before each joins the residual stream (gemma2; weight
  // null: none).
  norm_weights attn_out_norm, ffn_out_norm;
  // Attention and the FFN both read the layer's input and their outputs are added to it together
  // (Falcon); otherwise attention's output is added first and the FFN reads that sum (llama, bamboo).
  bool parallel = false;
  bool fused_qkv = false;  // one wqkv product (q, k, v interleaved per token) instead of wq, wk, wv
  // The layer's activation predictor reads the layer's input (PowerInfer's Falcon files, and files
  // that say so) instead of the FFN's residual-stream input before its norm.
  bool predictor_reads_layer_input = false;
  // The predictor reads the FFN's normalized input (thresholded files: hotcold.sparse.predictor_input = ffn_input).
  bool predictor_reads_ffn_input = false;
  // The FFN's gate/up rows are K-quants: its input is rounded to Q8_K once (as their integer kernels
  // see it), so the rows' float dot products on the sparse paths equal the matrix products' integer
  // ones whatever the number of tokens or the path.
  bool ffn_input_q8_k = false;

  // The FFN's normalized input is attention's (one norm, as Falcon-7B): computed once.
  bool ffn_shares_attn_input() const { return parallel && ffn_norm == attn_norm; }
  // Whether a GPU's attention job can take the layer's FFN after it (a whole layer, one wait): a
  // sequential layer, RMSNorms without biases, no norms of the outputs, the FFN's input as it is (the
  // job applies the FFN's norm: its weights F32, devices::attention_job::ffn_norm).
  bool one_gpu_job() const {
    return !parallel && norm == norm_kind::rms && !attn_out_norm.weight && !ffn_out_norm.weight && !(ffn_norm.bias && *ffn_norm.bias) && !ffn_input_q8_k &&
           ffn_norm.weight && ffn_norm.weight->type == tensor_type::f32;
  }
};

// Current llama.cpp's reading of each architecture (and PowerInfer's, for its sparse files), from its
// row of facts (model/arch.hpp) and what the layer's weights hold.
inline layer_recipe recipe_of(const hparams& hp, const layer_weights& l) {
  const arch_traits& a = arch_of(hp.arch);
  layer_recipe r;
  r.ffn_input_q8_k = kernels::input_format_of(l.ffn_up.type) == kernels::input_format::q8_k && hp.n_embd % 256 == 0;
  r.norm = a.norm;
  if (l.attn_post_norm) r.attn_out_norm = {&l.attn_post_norm, nullptr};
  if (l.ffn_post_norm) r.ffn_out_norm = {&l.ffn_post_norm, nullptr};
  if (a.parallel) {
    r.parallel = true;
    r.fused_qkv = true;
    r.predictor_reads_layer_input = hp.pred_input != predictor_input::ffn_input;
    // Falcon-40B: attention reads attn_norm_2(x) and the FFN attn_norm(x); Falcon-7B: attn_norm(x) feeds both.
    r.ffn_norm = {&l.attn_norm, &l.attn_norm_b};
    r.attn_norm = l.attn_norm_2 ? norm_weights{&l.attn_norm_2, &l.attn_norm_2_b} : r.ffn_norm;
  } else {
    r.attn_norm = {&l.attn_norm, nullptr};
    r.ffn_norm = {&l.ffn_norm, nullptr};
    r.predictor_reads_layer_input = hp.pred_input == predictor_input::layer_input;
  }
  r.predictor_reads_ffn_input = hp.pred_input == predictor_input::ffn_input;
  return r;
}

// The final norm before the output head.
inline norm_kind output_norm_kind(const hparams& hp) { return arch_of(hp.arch).norm; }
inline norm_weights output_norm_of(const hparams& hp, const model_weights& w) {
  return output_norm_kind(hp) == norm_kind::layer ? norm_weights{&w.output_norm, &w.output_norm_b} : norm_weights{&w.output_norm, nullptr};
}

}  // namespace hotcold
