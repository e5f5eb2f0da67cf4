#pragma once
// The reference forward pass: what a GGUF file means, computed as plainly as it can be written
// (llama2.c's spirit). Single-threaded, double precision, weights dequantized straight from the
// file's bytes row by row, no KV cache: every position is recomputed from the start. Slow by design;
// it is the oracle every faster path (the engine, the actors, every device) is tested against.
//
// Covers what hotcold runs: llama and bamboo (RMSNorm, RoPE on adjacent pairs, gated FFN with SiLU,
// ReLU or dReLU), qwen2, qwen3 and phi3 (llama's layer with NeoX RoPE; q, k, v from three tensors or a
// fused one, with biases where the file has them, per-head RMSNorm of q and k where it has those, gate
// and up fused in one tensor, Llama 3.1's and Phi-3's frequency factors, an output bias), falcon (LayerNorm with bias, fused QKV, NeoX RoPE, parallel attention and FFN,
// non-gated FFN; in the Falcon-40B layout attention reads attn_norm_2 and the FFN attn_norm), mixtures
// of experts (llama's Mixtral, qwen2moe with its shared expert, qwen3moe), gemma2 (embeddings scaled
// by sqrt(n_embd), norms of attention's and the FFN's outputs, soft-capped scores and logits, a
// sliding window on layers 0, 2, 4, ..., GELU-gated FFN), linear
// RoPE scaling, grouped-query attention, tied output embeddings, dense files and sparse ones (the
// down projection stored by neuron as ffn_down_t). The file's metadata is read by read_hparams, as
// the engine reads it; the arithmetic here shares nothing with the engine's.
#include <span>
#include <vector>

#include "model/arch.hpp"
#include "model/gguf.hpp"
#include "model/vocab.hpp"

namespace hotcold {

class reference_model {
 public:
  // The file must outlive this object. kv: the cache types whose rounding the keys (after RoPE) and
  // values take, as a KV cache of them stores them (so a path with such a cache is compared with like):
  // f16 the nearest half; q8_0 and q4_0 by blocks of 32 as GGML defines them, and then the queries
  // rounded to Q8_0 blocks as well where the keys are quantized (llama.cpp's attention meets such keys
  // with a Q8_0 query); f32: kept as computed.
  // n_ctx: the context per sequence the compared path runs with, which picks Phi-3's long or short RoPE
  // factors as llama.cpp does (0: the model's original context, the short ones).
  explicit reference_model(const gguf::file& f, kv_types kv = tensor_type::f32, int64_t n_ctx = 0);

  // Which FFN neurons contribute, [token][layer][neuron]: what a sparse path chose (the others count
  // as zero). Absent: every neuron, as the model means. A mixture of experts' layer: [token][layer][expert],
  // the experts a path's router chose (weighted by this reference's probabilities of them), so that a
  // path whose rounding tipped a near tie the other way is held to the same experts.
  using neuron_mask = std::vector<std::vector<std::vector<bool>>>;

  // The logits (n_vocab each) of every position of `tokens`, positions 0, 1, ...
  std::vector<std::vector<double>> logits(std::span<const token_id> tokens, const neuron_mask* mask = nullptr) const;

  const hparams& hp() const { return hp_; }

 private:
  using vec = std::vector<double>;
  using mat = std::vector<vec>;  // [row][column]
  mat matrix(const std::string& name) const;  // every row of a tensor, dequantized
  vec vector(const std::string& name) const;  // a one-row tensor
  vec rms_norm(const vec& x, const vec& w) const;
  vec layer_norm(const vec& x, const vec& w, const vec& b) const;
  void rope(vec& x, int64_t heads, int64_t pos) const;
  double activate(double x) const;
  // A layer's attention for every position (the residual stream x), in three steps: the queries,
  // keys and values (q, k, v per position; Falcon's FFN input, its attn_norm of x, kept aside), the
  // causal softmax attention (dq per position), and the FFN with both residual additions.
  struct layer_qkv {
    std::vector<vec> q, k, v, ffn_in_falcon;
  };
  layer_qkv queries_keys_values(int64_t l, const std::vector<vec>& x) const;
  std::vector<vec> attention(int64_t l, const layer_qkv& qkv) const;
  void ffn(int64_t l, const std::vector<vec>& attn, const layer_qkv& qkv, const neuron_mask* mask, std::vector<vec>& x) const;
  // A mixture of experts' layer (hp.moe()): the router's choice of experts, their weighted outputs.
  void experts(int64_t l, const std::vector<vec>& attn, const neuron_mask* mask, std::vector<vec>& x) const;
  // A position's FFN hidden vector (n_ff), its neurons outside the mask zero.
  vec hidden_of(int64_t l, size_t t, const vec& u, const vec& gv, const neuron_mask* mask) const;

  const gguf::file& f_;
  hparams hp_;
  kv_types kv_;
  std::vector<float> rope_factors_;
};

}  // namespace hotcold
