#pragma once
// gen-model's options checked, and the tensor types of llama.cpp's quantize presets (gen_model.cpp
// writes the file).
#include <algorithm>
#include <cstdint>

#include "tools/gen_model.hpp"

namespace hotcold::tools::detail {

// Throws std::invalid_argument naming the flag for options that cannot make a file.
void check_options(const gen_model_options& o);

// llama_ftype: the preset the file was made with (a pure K type as that type's _S preset).
inline uint32_t file_type_of(const gen_model_options& o) {
  switch (o.type) {
    case tensor_type::f32: return 0;
    case tensor_type::f16: return 1;
    case tensor_type::q4_0: return 2;
    case tensor_type::q8_0: return 7;
    case tensor_type::q4_k: return o.k_mix ? 15 : 14;
    case tensor_type::q5_k: return o.k_mix ? 17 : 16;
    case tensor_type::q6_k: return 18;
    default: return 32;  // BF16
  }
}

// Types as llama.cpp's quantize presets give them (llama_tensor_get_type): the head of a quantized
// file Q6_K (Q8_0 for falcon or rows not a multiple of 256), the token embeddings as the head when
// they are tied to it; with the _M mix, attn_v and ffn_down up to Q6_K on use_more_bits' layers
// (falcon's Q4_K_M ffn_down: Q6_K on the first 1/16, Q5_K on those layers), a fused attn_qkv up one.
struct preset_types {
  const gen_model_options& o;
  bool falcon() const { return o.arch == architecture::falcon; }  // (its quantize rules are llama.cpp's for falcon)
  tensor_type output() const {
    const bool quantized_preset = o.type == tensor_type::q4_0 || o.k_mix;
    return !quantized_preset ? o.type : (falcon() || o.n_embd % 256 != 0) ? tensor_type::q8_0 : tensor_type::q6_k;
  }
  // Tied: the head is the embeddings (--tied-output, or an architecture whose table has no output.weight).
  bool tied() const {
    const auto& t = arch_of(o.arch).tensors;
    return o.tied_output || std::none_of(t.begin(), t.end(), [](const tensor_spec& s) { return s.role == tensor_role::output; });
  }
  tensor_type token_embd() const { return tied() ? output() : o.type; }
  bool more_bits(int64_t il) const { return il < o.n_layer / 8 || il >= 7 * o.n_layer / 8 || (il - o.n_layer / 8) % 3 == 2; }
  tensor_type attn_v(int64_t il) const { return o.k_mix && more_bits(il) ? tensor_type::q6_k : o.type; }
  tensor_type qkv() const { return !o.k_mix ? o.type : o.type == tensor_type::q4_k ? tensor_type::q5_k : tensor_type::q6_k; }
  tensor_type ffn_down(int64_t il) const {
    if (!o.k_mix) return o.type;
    if (falcon() && o.type == tensor_type::q4_k) return il < o.n_layer / 16 ? tensor_type::q6_k : more_bits(il) ? tensor_type::q5_k : tensor_type::q4_k;
    return more_bits(il) ? tensor_type::q6_k : o.type;
  }
};


}  // namespace hotcold::tools::detail
