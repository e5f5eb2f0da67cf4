#pragma once
// A layer's attention for a step's tokens, as the layer's recipe says (model/recipe.hpp): the norm,
// Q/K/V (fused or not, qwen2's biases, qwen3's per-head norms), RoPE, the cache's append and read
// (grouped-query; a prompt chunk's queries read each cached row once), the output projection, and
// then what the FFN reads. On the context's CPU workers; on a hot device that runs host work, the same
// routine over its copies on its queue; on a GPU, one job (with the layer's predictor where the
// device holds it: one crossing for both).
#include <cstdint>
#include <vector>

#include "engine/kv_cache.hpp"
#include "engine/step_state.hpp"
#include "model/recipe.hpp"

namespace hotcold {

class attention_block {
 public:
  attention_block(block_env& env, kv_cache& kv, const std::vector<float>& rope_factors) : env_(env), kv_(kv), rope_factors_(rope_factors) {}
  // Layer `layer`'s attention for B's tokens (their slots' earlier positions cached); leaves B.proj
  // (attention's output), the residual stream with it where the recipe adds it before the FFN, and
  // B.ffn_in / B.pred_in: the FFN's normalized input and what its predictor reads.
  void run(step_state& B, int64_t layer);
  // Whether a GPU can take the layer's dense FFN in its attention's job (a whole layer, one wait): the
  // device holds its attention, the layer is sequential (attention's output added before the FFN) with
  // RMSNorms and no norms of the outputs (llama, qwen2/3, phi3), the FFN's norm F32.
  bool takes_ffn(int64_t layer) const;
  // Attention and the FFN `ffn` after it as one job: leaves B.x the layer's output (the next layer's input).
  void run_with_ffn(step_state& B, int64_t layer, const devices::dense_ffn_job& ffn);
  // Whether the layer's attention job can take the layer's input as the host's residual stream plus a
  // sum left on the GPU (B.pending: a mixture's hot experts of the layer before) and apply its norm
  // there: a GPU holds the attention, the layer is sequential with an RMSNorm (F32, no bias), without
  // a predictor, and nothing observes the stream.
  bool takes_pending(int64_t layer) const;

 private:
  // Over the weights l, by these workers; with `gpu`, the products, RoPE, cache and softmax go to the
  // hot device as one job over its copies, the norms stay here (l: the host's weights).
  void run(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const layer_weights* gpu = nullptr);
  void gpu_job(step_state& B, int64_t layer, const layer_weights& gpu, const layer_recipe& r, const devices::dense_ffn_job* ffn = nullptr);
  void pending_job(step_state& B, int64_t layer, const layer_weights& gpu, const layer_recipe& r);  // takes B.pending: B.x the stream after attention
  void products(step_state& B, int64_t layer, const layer_weights& l, const layer_recipe& r, const workers& on);  // xn -> proj
  void attend(step_state& B, int64_t layer, const workers& on, const float* qkv, bool fused);                    // B.attn from the cache
  template <class QOf>
  void attend_decoded(step_state& B, int64_t layer, const workers& on, const std::vector<int64_t>& tokens, QOf q_of);  // tokens alone in their sequence
  void tail(step_state& B, const layer_recipe& r, bool added = false);  // proj added (unless it was), the FFN's input normalized

  block_env& env_;
  kv_cache& kv_;
  const std::vector<float>& rope_factors_;  // the frequency factors this context's size rotates by (hparams::rope_factors_for)
};

// What a layer's predictor reads: the layer's input (kept in layer_in), the residual stream, or the
// FFN's normalized input.
const float* predictor_input(const step_state& B, const layer_recipe& r);

}  // namespace hotcold
