#pragma once
// Architectures: their GGUF keys, hyper-parameters and tensor-name tables (one table per
// architecture, as llama.cpp's llama-arch keeps them), and which FFN activation a file means.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf.hpp"

namespace hotcold {

enum class architecture { llama, falcon, bamboo };
enum class activation { silu, relu, drelu, gelu };
enum class rope_style { adjacent_pairs, neox };  // llama.cpp's NORM (x[2i], x[2i+1]) and NEOX (x[i], x[i + n_rot/2])

std::string_view architecture_name(architecture a);
std::optional<architecture> architecture_from_name(std::string_view name);
std::string_view activation_name(activation a);
std::optional<activation> activation_from_name(std::string_view name);

// The metadata key hotcold's own files use to say which activation the FFN applies.
constexpr std::string_view activation_key = "hotcold.activation";

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
  int64_t n_rot = 0;          // rotated dimensions per head
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / linear scaling factor
  float norm_eps = 1e-5f;        // RMSNorm (llama, bamboo) or LayerNorm (falcon) epsilon
  bool gated_ffn = true;         // llama/bamboo: down(act(gate) * up); falcon: down(act(up))

  int64_t head_dim() const { return n_embd / n_head; }
  int64_t n_embd_kv() const { return head_dim() * n_head_kv; }
};

// Reads and checks the hyper-parameters; the vocabulary size comes from the tokenizer or token_embd.
hparams read_hparams(const gguf::file& f);

// Tensor roles and their GGUF names ("blk.%d.attn_q.weight").
enum class tensor_role {
  token_embd, output_norm, output_norm_b, output,
  attn_norm, attn_norm_b, attn_norm_2, attn_norm_2_b,
  attn_q, attn_k, attn_v, attn_qkv, attn_output,
  ffn_norm, ffn_gate, ffn_up, ffn_down,
};

struct tensor_spec {
  tensor_role role;
  const char* name;   // printf template; per-layer names take the layer index
  bool per_layer;
  bool required;
};

// The tensors an architecture reads, in one table.
const std::vector<tensor_spec>& tensor_table(architecture a);
std::string tensor_name(const tensor_spec& spec, int layer);
// The shape a tensor must have: {ne0, ne1} (ne1 == 1 for vectors).
std::vector<int64_t> expected_shape(tensor_role role, const hparams& hp);

}  // namespace hotcold
