#include "tools/gen_model_presets.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace hotcold::tools::detail {

void check_options(const gen_model_options& o) {
  auto bad = [](const std::string& what) { return std::invalid_argument(what); };
  if (o.n_embd < 8) throw bad("--embd must be at least 8");
  if (o.n_layer < 1) throw bad("--layers must be at least 1");
  if (o.n_ff < 1) throw bad("--ffn must be at least 1");
  if (o.n_head < 1 || (o.head_dim == 0 && o.n_embd % o.n_head)) throw bad(fmt::format("--heads {} must divide --embd {}", o.n_head, o.n_embd));
  const arch_traits& a = arch_of(o.arch);
  if (o.head_dim < 0 || (o.head_dim > 0 && a.parallel)) throw bad(fmt::format("--head-dim must be positive (and {}'s heads span the embedding)", a.name));
  const int64_t head = o.head_dim > 0 ? o.head_dim : o.n_embd / o.n_head;
  if (head % 2) throw bad(fmt::format("the head size {} must be even (RoPE rotates pairs)", head));
  if (o.phi3_rope_orig_ctx < 0 || o.phi3_rope_orig_ctx >= o.n_ctx) throw bad(fmt::format("--phi3-rope {} must be below --ctx {}", o.phi3_rope_orig_ctx, o.n_ctx));
  if ((o.phi3_rope_orig_ctx > 0 && o.llama3_rope_ctx > 0)) throw bad("--phi3-rope and --llama3-rope are two ways of scaling RoPE: one at a time");
  if (o.n_head_kv < 1 || o.n_head % o.n_head_kv) throw bad(fmt::format("--kv-heads {} must divide --heads {}", o.n_head_kv, o.n_head));
  if (!(o.active > 0 && o.active < 1)) throw bad(fmt::format("--active {} must be between 0 and 1", o.active));
  if (o.n_ctx < 1) throw bad("--ctx must be at least 1");
  if (o.act == activation::drelu && !a.gated_ffn) throw bad(fmt::format("--act drelu needs a gated FFN (llama or bamboo), {} has none", a.name));
  if (o.sliding_window < 0 || (o.sliding_window > 0 && !a.gemma2)) throw bad("--sliding-window: a positive window, for gemma2 files");
  if (!(o.attn_softcap > 0) || !(o.final_softcap > 0)) throw bad("the soft caps must be positive");
  if (!(o.norm_spread >= 0 && o.norm_spread < 1)) throw bad(fmt::format("--norm-spread {} must be in [0, 1)", o.norm_spread));
  if (o.out_path.empty()) throw bad("-o OUT.gguf is required");
  const bool moe_arch = a.experts == experts_rule::required;
  if (o.n_experts < 0) throw bad("--experts must not be negative");
  if (moe_arch && o.n_experts < 1) throw bad(fmt::format("--arch {} is a mixture of experts: give --experts N", architecture_name(o.arch)));
  if (o.n_experts > 0) {
    if (a.experts == experts_rule::none) throw bad(fmt::format("--experts: experts in llama, qwen2moe or qwen3moe files, not {}", a.name));
    if (o.n_experts_used < 1 || o.n_experts_used > o.n_experts)
      throw bad(fmt::format("--experts-used {} must be between 1 and --experts {}", o.n_experts_used, o.n_experts));
    if (o.act != activation::silu) throw bad("a mixture of experts computes SiLU: --act silu");
    if (!(o.expert_locality >= 0 && o.expert_locality <= 1)) throw bad(fmt::format("--expert-locality {} must be in [0, 1]", o.expert_locality));
    if (!(o.expert_skew >= 0 && o.expert_skew <= 4)) throw bad(fmt::format("--expert-skew {} must be in [0, 4]", o.expert_skew));
    if (o.n_ff_shared < 0) throw bad("--shared-ffn must not be negative");
  }
  const auto& tt = traits(o.type);
  const bool k_quant = o.type == tensor_type::q4_k || o.type == tensor_type::q5_k || o.type == tensor_type::q6_k;
  if (!(o.type == tensor_type::f32 || o.type == tensor_type::f16 || o.type == tensor_type::q8_0 || o.type == tensor_type::q4_0 || o.type == tensor_type::bf16 ||
        k_quant))
    throw bad(fmt::format("--type {} is not one gen-model writes (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m, q5_k_m)", tt.name));
  if (o.k_mix && !(o.type == tensor_type::q4_k || o.type == tensor_type::q5_k)) throw bad(fmt::format("the _M mix is over Q4_K or Q5_K, not {}", tt.name));
  if (o.n_embd % tt.block_size || o.n_ff % tt.block_size || (head * o.n_head) % tt.block_size || o.n_ff_shared % tt.block_size)
    throw bad(fmt::format("--type {} stores rows in blocks of {}: --embd {}, --ffn {} and the queries' width {} must be multiples of it", tt.name,
                          tt.block_size, o.n_embd, o.n_ff, head * o.n_head));
}

}  // namespace hotcold::tools::detail
