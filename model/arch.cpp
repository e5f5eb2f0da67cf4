#include "model/arch.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

namespace hotcold {

std::string_view architecture_name(architecture a) { return arch_of(a).name; }

std::optional<architecture> architecture_from_name(std::string_view name) {
  for (const auto& t : architectures())
    if (t.name == name) return t.arch;
  return std::nullopt;
}

std::string architecture_names() {
  std::string out;
  for (const auto& t : architectures()) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

std::string_view activation_name(activation a) {
  switch (a) {
    case activation::silu: return "silu";
    case activation::relu: return "relu";
    case activation::drelu: return "drelu";
    case activation::gelu: return "gelu";
  }
  return "?";
}

std::optional<activation> activation_from_name(std::string_view name) {
  for (auto a : {activation::silu, activation::relu, activation::drelu, activation::gelu})
    if (activation_name(a) == name) return a;
  return std::nullopt;
}

namespace {

std::string key(const hparams& hp, std::string_view suffix) { return fmt::format("{}.{}", architecture_name(hp.arch), suffix); }

int64_t required_int(const gguf::file& f, const std::string& k) {
  auto v = f.get_int(k);
  if (!v) throw model_error(fmt::format("{}: metadata key {} is missing", f.source(), k));
  if (*v <= 0) throw model_error(fmt::format("{}: metadata key {} = {} must be positive", f.source(), k, *v));
  return *v;
}

// A mixture of experts' keys (llama.cpp's): expert_count and expert_used_count; the experts' width
// (expert_feed_forward_length; llama's Mixtral: feed_forward_length; else llama.cpp's fallback
// feed_forward_length / expert_used_count); qwen2moe's shared expert's (expert_shared_feed_forward_length,
// else feed_forward_length).
void read_experts(const gguf::file& f, hparams& hp, std::optional<int64_t> ff) {
  const arch_traits& a = arch_of(hp.arch);
  const bool moe_arch = a.experts == experts_rule::required;
  const auto count = f.get_int(key(hp, "expert_count"));
  if (moe_arch && (!count || *count <= 0))
    throw model_error(fmt::format("{}: metadata key {} is {} ({} is a mixture of experts: it needs one or more)", f.source(), key(hp, "expert_count"),
                                  count ? std::to_string(*count) : "missing", architecture_name(hp.arch)));
  if (!count || *count == 0) return;  // llama.cpp reads a llama file with 0 experts as dense
  if (*count < 0) throw model_error(fmt::format("{}: metadata key {} = {} must not be negative", f.source(), key(hp, "expert_count"), *count));
  if (a.experts == experts_rule::none)
    throw model_error(fmt::format("{}: {} says {} experts, but {} files have none (hotcold runs experts in llama, qwen2moe and qwen3moe files)", f.source(),
                                  key(hp, "expert_count"), *count, a.name));
  const auto used = f.get_int(key(hp, "expert_used_count"));
  if (!used || *used <= 0 || *used > *count)
    throw model_error(fmt::format("{}: metadata key {} is {}; it must be between 1 and expert_count = {}", f.source(), key(hp, "expert_used_count"),
                                  used ? std::to_string(*used) : "missing", *count));
  hp.n_expert = *count, hp.n_expert_used = *used;
  const auto exp_ff = f.get_int(key(hp, "expert_feed_forward_length"));
  hp.n_ff_exp = exp_ff && *exp_ff > 0 ? *exp_ff : a.experts_as_wide_as_ff ? ff.value_or(0) : ff.value_or(0) / hp.n_expert_used;
  if (hp.n_ff_exp <= 0)
    throw model_error(fmt::format("{}: metadata key {} is missing (and {} does not give it)", f.source(), key(hp, "expert_feed_forward_length"),
                                  key(hp, "feed_forward_length")));
  if (a.shared_expert) {
    const auto sh = f.get_int(key(hp, "expert_shared_feed_forward_length"));
    hp.n_ff_shexp = sh && *sh > 0 ? *sh : ff.value_or(hp.n_ff_exp);
  }
  hp.expert_weights_norm = a.expert_weights_norm;
}

}  // namespace

bool expert_role(tensor_role r) {
  using t = tensor_role;
  return r == t::ffn_gate_inp || r == t::ffn_gate_exps || r == t::ffn_up_exps || r == t::ffn_down_exps || r == t::ffn_gate_inp_shexp ||
         r == t::ffn_gate_shexp || r == t::ffn_up_shexp || r == t::ffn_down_shexp;
}

void set_act_thresholds(hparams& hp, std::span<const double> t, std::string_view source) {
  if (hp.act != activation::silu && hp.act != activation::gelu)
    throw model_error(fmt::format("{}: {} thresholds SiLU or GELU activations, not {}", source, activation_thresholds_key, activation_name(hp.act)));
  if (t.size() != static_cast<size_t>(hp.n_layer))
    throw model_error(fmt::format("{}: {} has {} entries for {} layers", source, activation_thresholds_key, t.size(), hp.n_layer));
  for (size_t l = 0; l < t.size(); ++l)
    if (!(t[l] >= 0 && std::isfinite(t[l])))
      throw model_error(fmt::format("{}: {}[{}] = {} is not a threshold (finite, >= 0)", source, activation_thresholds_key, l, t[l]));
  hp.act_threshold.assign(t.begin(), t.end());
  hp.pred_input = predictor_input::ffn_input;
}

std::string_view predictor_input_name(predictor_input p) {
  switch (p) {
    case predictor_input::layer_input: return "layer_input";
    case predictor_input::ffn_input: return "ffn_input";
    default: return "ffn_input_before_norm";
  }
}

namespace {

// The sizes: embedding, layers, heads and their width, the FFN's (or the experts').
void read_shape(const gguf::file& f, hparams& hp) {
  const arch_traits& a = arch_of(hp.arch);
  hp.n_embd = required_int(f, key(hp, "embedding_length"));
  hp.n_layer = required_int(f, key(hp, "block_count"));
  // Refused before anything is sized by it: more blocks than the file's tensors hold (blk.0 .. blk.N-1).
  int64_t blocks = 0;
  for (const auto& t : f.tensors()) {
    if (!t.name.starts_with("blk.")) continue;
    int64_t n = 0;
    size_t i = 4;
    for (; i < t.name.size() && i < 14 && t.name[i] >= '0' && t.name[i] <= '9'; ++i) n = n * 10 + (t.name[i] - '0');
    if (i > 4 && i < t.name.size() && t.name[i] == '.') blocks = std::max(blocks, n + 1);
  }
  if (f.tensors().empty()) throw model_error(fmt::format("{}: the file holds no tensors (a vocabulary alone?)", f.source()));
  if (hp.n_layer <= 0 || hp.n_layer > blocks)
    throw model_error(fmt::format("{}: {} is {}, but the file's tensors hold {} blocks{}", f.source(), key(hp, "block_count"), hp.n_layer, blocks,
                                  blocks > 0 ? fmt::format(" (blk.0 .. blk.{})", blocks - 1) : std::string()));
  hp.n_head = required_int(f, key(hp, "attention.head_count"));
  hp.n_head_kv = f.get_int(key(hp, "attention.head_count_kv")).value_or(hp.n_head);
  hp.n_ctx_train = f.get_int(key(hp, "context_length")).value_or(2048);
  auto ff = f.get_int(key(hp, "feed_forward_length"));
  read_experts(f, hp, ff);
  hp.n_ff = ff ? *ff : a.ff_per_embd > 0 ? a.ff_per_embd * hp.n_embd : hp.n_ff_exp;
  if (hp.n_ff <= 0) throw model_error(fmt::format("{}: metadata key {} is missing", f.source(), key(hp, "feed_forward_length")));
  const auto key_length = f.get_int(key(hp, "attention.key_length"));
  if (!key_length && hp.n_embd % hp.n_head != 0)
    throw model_error(fmt::format("{}: embedding_length {} is not a multiple of head_count {}", f.source(), hp.n_embd, hp.n_head));
  if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0)
    throw model_error(fmt::format("{}: head_count {} is not a multiple of head_count_kv {}", f.source(), hp.n_head, hp.n_head_kv));
  // A head's width: key_length where the file says (Qwen3's small models: 128 with n_embd / n_head
  // = 64), else n_embd / n_head; values are as wide as keys.
  hp.n_head_dim = key_length.value_or(hp.n_embd / hp.n_head);
  if (auto vl = f.get_int(key(hp, "attention.value_length")); vl && *vl != hp.n_head_dim)
    throw model_error(fmt::format("{}: attention.value_length {} differs from key_length {} (hotcold's heads have one width)", f.source(), *vl, hp.n_head_dim));
  if (hp.n_head_dim <= 0) throw model_error(fmt::format("{}: attention.key_length {} must be positive", f.source(), hp.n_head_dim));
  if (a.parallel && hp.n_embd_q() != hp.n_embd)
    throw model_error(fmt::format("{}: {}'s heads must span the embedding ({} x {} != {})", f.source(), a.name, hp.n_head, hp.n_head_dim, hp.n_embd));
}

// RoPE: the rotated dimensions, base and scaling, per-pair factors; the architecture's style.
void read_rope(const gguf::file& f, hparams& hp) {
  hp.rope = arch_of(hp.arch).rope;
  hp.n_rot = f.get_int(key(hp, "rope.dimension_count")).value_or(hp.head_dim());
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim() || hp.n_rot % 2)
    throw model_error(fmt::format("{}: rope.dimension_count {} must be even and at most the head size {}", f.source(), hp.n_rot, hp.head_dim()));
  if (hp.n_rot > max_rope_dims)
    throw model_error(fmt::format("{}: rope.dimension_count {} is more than the {} supported", f.source(), hp.n_rot, max_rope_dims));
  hp.rope_freq_base = static_cast<float>(f.get_float(key(hp, "rope.freq_base")).value_or(10000.0));
  if (!std::isfinite(hp.rope_freq_base) || hp.rope_freq_base <= 0)
    throw model_error(fmt::format("{}: {} = {} is not a RoPE base (finite, positive)", f.source(), key(hp, "rope.freq_base"), hp.rope_freq_base));
  auto scaling = f.get_string(key(hp, "rope.scaling.type"));
  auto factor = f.get_float(key(hp, "rope.scaling.factor"));
  if (!factor) factor = f.get_float(key(hp, "rope.scale_linear"));  // older files
  if (scaling && *scaling != "linear" && *scaling != "none" && *scaling != "longrope")
    throw model_error(fmt::format("{}: rope scaling '{}' is not supported (linear, longrope or none)", f.source(), *scaling));
  if (factor && !(std::isfinite(*factor) && *factor >= 0))  // (0: none, as llama.cpp reads it)
    throw model_error(fmt::format("{}: rope.scaling.factor = {} is not a scaling factor (finite, positive)", f.source(), *factor));
  if (factor && *factor > 0 && (!scaling || *scaling == "linear")) hp.rope_freq_scale = static_cast<float>(1.0 / *factor);
  // Per-pair frequency factors: n_rot / 2 positive F32 values.
  auto factors = [&](const char* name, std::vector<float>& out) {
    const auto* t = f.find_tensor(name);
    if (!t) return;
    if (t->type != tensor_type::f32 || t->n_elements != static_cast<uint64_t>(hp.n_rot / 2))
      throw model_error(fmt::format("{}: {} must hold {} F32 values (rope.dimension_count / 2), not {} {}", f.source(), name, hp.n_rot / 2, t->n_elements,
                                    tensor_type_name(t->type)));
    out.resize(static_cast<size_t>(hp.n_rot / 2));
    std::memcpy(out.data(), t->data, out.size() * sizeof(float));
    for (float v : out)
      if (!std::isfinite(v) || v <= 0) throw model_error(fmt::format("{}: {} holds {}, not a positive factor", f.source(), name, v));
  };
  factors("rope_freqs.weight", hp.rope_freq_factors);
  factors("rope_factors_long.weight", hp.rope_factors_long);
  factors("rope_factors_short.weight", hp.rope_factors_short);
  hp.n_ctx_orig = f.get_int(key(hp, "rope.scaling.original_context_length")).value_or(hp.n_ctx_train);
  hp.rope_attn_factor = static_cast<float>(f.get_float(key(hp, "rope.scaling.attn_factor")).value_or(1.0));
  if (!std::isfinite(hp.rope_attn_factor) || hp.rope_attn_factor <= 0)
    throw model_error(fmt::format("{}: rope.scaling.attn_factor {} must be positive", f.source(), hp.rope_attn_factor));
}

// Gemma 2's keys, as llama.cpp reads them: the sliding window (default 4096) on layers 0, 2, 4, ...;
// the attention and final soft caps (defaults 50 and 30); the queries scaled by 1 / sqrt(n_embd /
// n_head) in a file of 46 layers (Gemma 2 27B, llama.cpp's rule by its size), else 1 / sqrt(head_dim).
void read_gemma2(const gguf::file& f, hparams& hp) {
  hp.embd_scaled = true;
  hp.n_swa = f.get_int(key(hp, "attention.sliding_window")).value_or(4096);
  hp.swa_period = 2;
  hp.attn_softcap = static_cast<float>(f.get_float(key(hp, "attn_logit_softcapping")).value_or(50.0));
  hp.final_softcap = static_cast<float>(f.get_float(key(hp, "final_logit_softcapping")).value_or(30.0));
  if (hp.n_swa < 0 || !(hp.attn_softcap >= 0) || !(hp.final_softcap >= 0) || !std::isfinite(hp.attn_softcap) || !std::isfinite(hp.final_softcap))
    throw model_error(fmt::format("{}: attention.sliding_window {}, attn_logit_softcapping {} and final_logit_softcapping {} must not be negative", f.source(),
                                  hp.n_swa, hp.attn_softcap, hp.final_softcap));
  hp.q_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_layer == 46 ? hp.n_embd / hp.n_head : hp.n_head_dim));
}

// Which activation the file means — hotcold's explicit key; PowerInfer files mean ReLU (dReLU for
// bamboo); llama.cpp files mean the architecture's — and what makes it sparse: the predictors'
// thresholds and input, a SiLU/GELU file's activation thresholds.
void read_activation(const gguf::file& f, hparams& hp) {
  const arch_traits& a = arch_of(hp.arch);
  if (auto name = f.get_string(activation_key)) {
    auto act = activation_from_name(*name);
    if (!act) throw model_error(fmt::format("{}: {} = '{}' is not one of silu, relu, drelu, gelu", f.source(), activation_key, *name));
    hp.act = *act;
  } else if (f.kind() == gguf::file_kind::powerinfer && a.act != activation::drelu) {
    hp.act = activation::relu;
  } else {
    hp.act = a.act;
  }
  hp.sparse_threshold.assign(static_cast<size_t>(hp.n_layer), 0.0f);
  if (const gguf::value* t = f.get_array(sparse_thresholds_key)) {
    if (t->size() != static_cast<uint64_t>(hp.n_layer))
      throw model_error(fmt::format("{}: {} has {} entries for {} layers", f.source(), sparse_thresholds_key, t->size(), hp.n_layer));
    for (int64_t l = 0; l < hp.n_layer; ++l) hp.sparse_threshold[l] = static_cast<float>(t->number_at(l));
  } else if (auto t1 = f.get_float(powerinfer_threshold_key)) {
    hp.sparse_threshold.assign(static_cast<size_t>(hp.n_layer), static_cast<float>(*t1));
  }
  hp.pred_input = a.parallel ? predictor_input::layer_input : predictor_input::ffn_input_before_norm;
  if (const gguf::value* t = f.get_array(activation_thresholds_key)) {
    std::vector<double> v(t->size());
    for (uint64_t l = 0; l < t->size(); ++l) v[l] = t->number_at(l);
    set_act_thresholds(hp, v, f.source());
    if (auto s = f.get_float(sparsity_target_key)) hp.sparsity_target = static_cast<float>(*s);
  }
  if (auto in = f.get_string(predictor_input_key)) {
    std::optional<predictor_input> p;
    for (auto c : {predictor_input::ffn_input_before_norm, predictor_input::layer_input, predictor_input::ffn_input})
      if (*in == predictor_input_name(c)) p = c;
    if (!p) throw model_error(fmt::format("{}: {} = '{}' is not ffn_input_before_norm, layer_input or ffn_input", f.source(), predictor_input_key, *in));
    // A thresholded file's predictors estimate pre-activations: linear in the FFN's normalized input only.
    if (!hp.act_threshold.empty() && *p != predictor_input::ffn_input)
      throw model_error(fmt::format("{}: {} = '{}': the predictors of a thresholded file ({}) read ffn_input", f.source(), predictor_input_key, *in,
                                    activation_thresholds_key));
    hp.pred_input = *p;
  }
}

}  // namespace

hparams read_hparams(const gguf::file& f) {
  hparams hp;
  try {
    auto arch_name = f.get_string("general.architecture");
    if (!arch_name) throw model_error(fmt::format("{}: metadata key general.architecture is missing", f.source()));
    auto arch = architecture_from_name(*arch_name);
    if (!arch) throw model_error(fmt::format("{}: unknown architecture '{}' (hotcold runs {})", f.source(), *arch_name, architecture_names()));
    hp.arch = *arch;
    const arch_traits& a = arch_of(hp.arch);
    read_shape(f, hp);
    read_rope(f, hp);
    hp.norm_eps = static_cast<float>(f.get_float(key(hp, a.eps_key)).value_or(a.eps_default));
    if (!std::isfinite(hp.norm_eps) || hp.norm_eps < 0)
      throw model_error(fmt::format("{}: {} = {} is not a norm's epsilon (finite, not negative)", f.source(), key(hp, a.eps_key), hp.norm_eps));
    hp.gated_ffn = a.gated_ffn;
    if (a.gemma2) read_gemma2(f, hp);
    read_activation(f, hp);
    hp.pooling_type = f.get_int(key(hp, "pooling_type")).value_or(0);
    if (hp.moe() && hp.act != activation::silu)
      throw model_error(fmt::format("{}: {} = '{}': the experts of a mixture compute SiLU (hotcold does not sparsify experts' neurons)", f.source(),
                                    activation_key, activation_name(hp.act)));
    if (hp.moe() && !hp.act_threshold.empty())
      throw model_error(fmt::format("{}: {} on a mixture of experts (its experts are what a token skips)", f.source(), activation_thresholds_key));
    if (hp.act == activation::drelu && !hp.gated_ffn)
      throw model_error(fmt::format("{}: dReLU needs a gated FFN, which {} does not have", f.source(), architecture_name(hp.arch)));
  } catch (const gguf::metadata_error& e) {
    throw model_error(e.what());
  }
  return hp;
}

namespace {

using r = tensor_role;

// The llama family (llama, bamboo, qwen2, qwen3, phi3), as current llama.cpp loads it: Q, K, V as
// three products or one fused attn_qkv (either may carry biases), optional per-head norms of q and
// k, gate and up as two tensors or (phi3) one of 2 n_ff rows, an optional bias on the head.
// What an architecture requires of these is checked after loading (model::load).
const std::vector<tensor_spec> llama_tensors = {
    {r::token_embd, "token_embd.weight", false, true},
    {r::output_norm, "output_norm.weight", false, true},
    {r::output, "output.weight", false, false},  // absent: tied to token_embd
    {r::output_b, "output.bias", false, false},
    {r::attn_norm, "blk.%d.attn_norm.weight", true, true},
    {r::attn_q, "blk.%d.attn_q.weight", true, false},  // or attn_qkv
    {r::attn_k, "blk.%d.attn_k.weight", true, false},
    {r::attn_v, "blk.%d.attn_v.weight", true, false},
    {r::attn_qkv, "blk.%d.attn_qkv.weight", true, false},
    {r::attn_q_b, "blk.%d.attn_q.bias", true, false},
    {r::attn_k_b, "blk.%d.attn_k.bias", true, false},
    {r::attn_v_b, "blk.%d.attn_v.bias", true, false},
    {r::attn_qkv_b, "blk.%d.attn_qkv.bias", true, false},
    {r::attn_q_norm, "blk.%d.attn_q_norm.weight", true, false},
    {r::attn_k_norm, "blk.%d.attn_k_norm.weight", true, false},
    {r::attn_output, "blk.%d.attn_output.weight", true, true},
    {r::ffn_norm, "blk.%d.ffn_norm.weight", true, true},
    {r::ffn_gate, "blk.%d.ffn_gate.weight", true, false},  // a dense layer's (checked after loading), or the experts
    {r::ffn_up, "blk.%d.ffn_up.weight", true, false},
    {r::ffn_down, "blk.%d.ffn_down.weight", true, false},  // or ffn_down_t
    {r::ffn_down_t, "blk.%d.ffn_down_t.weight", true, false},
    {r::pred_fc1, "blk.%d.fc1.weight", true, false},
    {r::pred_fc2, "blk.%d.fc2.weight", true, false},
    {r::ffn_gate_inp, "blk.%d.ffn_gate_inp.weight", true, false},
    {r::ffn_gate_exps, "blk.%d.ffn_gate_exps.weight", true, false},
    {r::ffn_up_exps, "blk.%d.ffn_up_exps.weight", true, false},
    {r::ffn_down_exps, "blk.%d.ffn_down_exps.weight", true, false},
    {r::ffn_gate_inp_shexp, "blk.%d.ffn_gate_inp_shexp.weight", true, false},
    {r::ffn_gate_shexp, "blk.%d.ffn_gate_shexp.weight", true, false},
    {r::ffn_up_shexp, "blk.%d.ffn_up_shexp.weight", true, false},
    {r::ffn_down_shexp, "blk.%d.ffn_down_shexp.weight", true, false},
};
// phi3: its ffn_up holds gate and up (no ffn_gate); no experts.
const std::vector<tensor_spec> phi3_tensors = [] {
  std::vector<tensor_spec> t;
  for (const auto& s : llama_tensors) {
    if (s.role == r::ffn_gate || expert_role(s.role)) continue;
    t.push_back(s.role == r::ffn_up ? tensor_spec{r::ffn_up_gate, s.name, true, true} : s);
  }
  return t;
}();
const std::vector<tensor_spec> falcon_tensors = {
    {r::token_embd, "token_embd.weight", false, true},
    {r::output_norm, "output_norm.weight", false, true},
    {r::output_norm_b, "output_norm.bias", false, true},
    {r::output, "output.weight", false, false},
    {r::attn_norm, "blk.%d.attn_norm.weight", true, true},
    {r::attn_norm_b, "blk.%d.attn_norm.bias", true, true},
    {r::attn_norm_2, "blk.%d.attn_norm_2.weight", true, false},  // Falcon-40B: the attention's own norm (attn_norm then feeds only the FFN)
    {r::attn_norm_2_b, "blk.%d.attn_norm_2.bias", true, false},
    {r::attn_qkv, "blk.%d.attn_qkv.weight", true, true},
    {r::attn_output, "blk.%d.attn_output.weight", true, true},
    {r::ffn_up, "blk.%d.ffn_up.weight", true, true},
    {r::ffn_down, "blk.%d.ffn_down.weight", true, false},  // or ffn_down_t
    {r::ffn_down_t, "blk.%d.ffn_down_t.weight", true, false},
    {r::pred_fc1, "blk.%d.fc1.weight", true, false},
    {r::pred_fc2, "blk.%d.fc2.weight", true, false},
};
// gemma2: llama's attention and gated FFN with a norm after each; the head is the embeddings (llama.cpp
// reads no output.weight).
const std::vector<tensor_spec> gemma2_tensors = {
    {r::token_embd, "token_embd.weight", false, true},
    {r::output_norm, "output_norm.weight", false, true},
    {r::attn_norm, "blk.%d.attn_norm.weight", true, true},
    {r::attn_q, "blk.%d.attn_q.weight", true, true},
    {r::attn_k, "blk.%d.attn_k.weight", true, true},
    {r::attn_v, "blk.%d.attn_v.weight", true, true},
    {r::attn_output, "blk.%d.attn_output.weight", true, true},
    {r::attn_post_norm, "blk.%d.post_attention_norm.weight", true, true},
    {r::ffn_norm, "blk.%d.ffn_norm.weight", true, true},
    {r::ffn_gate, "blk.%d.ffn_gate.weight", true, true},
    {r::ffn_up, "blk.%d.ffn_up.weight", true, true},
    {r::ffn_down, "blk.%d.ffn_down.weight", true, false},  // or ffn_down_t
    {r::ffn_down_t, "blk.%d.ffn_down_t.weight", true, false},
    {r::ffn_post_norm, "blk.%d.post_ffw_norm.weight", true, true},
    {r::pred_fc1, "blk.%d.fc1.weight", true, false},
    {r::pred_fc2, "blk.%d.fc2.weight", true, false},
};

constexpr auto rms = norm_kind::rms;
constexpr const char* rms_eps = "attention.layer_norm_rms_epsilon";
using e = experts_rule;

// One row per architecture, in --arch's order. The columns: arch, name, about; rope, activation,
// gated, norm, epsilon's key and default; parallel, n_ff per n_embd; q/k/v biases, q/k norms; experts,
// shared expert, experts' weights renormalized, experts as wide as the FFN; gemma2; tensors.
const std::vector<arch_traits> table = {
    {architecture::llama, "llama", "Llama 2/3/3.1/3.2, Mistral, TinyLlama; with experts Mixtral", rope_style::adjacent_pairs, activation::silu, true, rms,
     rms_eps, 1e-6, false, 0, false, false, e::optional, false, true, true, false, llama_tensors},
    {architecture::qwen2, "qwen2", "Qwen 2 / 2.5 (biases on q, k, v)", rope_style::neox, activation::silu, true, rms, rms_eps, 1e-6, false, 0, true,
     false, e::none, false, true, false, false, llama_tensors},
    {architecture::qwen3, "qwen3", "Qwen 3 (per-head norms of q and k)", rope_style::neox, activation::silu, true, rms, rms_eps, 1e-6, false, 0, false,
     true, e::none, false, true, false, false, llama_tensors},
    {architecture::phi3, "phi3", "Phi-3 (fused q/k/v and gate+up, LongRoPE)", rope_style::neox, activation::silu, true, rms, rms_eps, 1e-6, false, 0,
     false, false, e::none, false, true, false, false, phi3_tensors},
    {architecture::gemma2, "gemma2", "Gemma 2 (scaled embeddings, post-norms, soft caps, sliding window)", rope_style::neox, activation::gelu, true,
     rms, rms_eps, 1e-6, false, 0, false, false, e::none, false, true, false, true, gemma2_tensors},
    {architecture::falcon, "falcon", "Falcon 7B and 40B (parallel attention and FFN, LayerNorm)", rope_style::neox, activation::gelu, false,
     norm_kind::layer, "attention.layer_norm_epsilon", 1e-5, true, 4, false, false, e::none, false, true, false, false, falcon_tensors},
    {architecture::bamboo, "bamboo", "Bamboo (PowerInfer's dReLU llama)", rope_style::adjacent_pairs, activation::drelu, true, rms, rms_eps, 1e-6,
     false, 0, false, false, e::none, false, true, false, false, llama_tensors},
    {architecture::qwen2moe, "qwen2moe", "Qwen 2 MoE (experts and a shared expert)", rope_style::neox, activation::silu, true, rms, rms_eps, 1e-6,
     false, 0, true, false, e::required, true, false, false, false, llama_tensors},
    {architecture::qwen3moe, "qwen3moe", "Qwen 3 MoE", rope_style::neox, activation::silu, true, rms, rms_eps, 1e-6, false, 0, false, true,
     e::required, false, true, false, false, llama_tensors},
};

}  // namespace

const std::vector<arch_traits>& architectures() { return table; }

const arch_traits& arch_of(architecture a) {
  for (const auto& t : table)
    if (t.arch == a) return t;
  throw std::logic_error("an architecture without its row in the table");
}

const std::vector<tensor_spec>& tensor_table(architecture a) { return arch_of(a).tensors; }

std::string tensor_name(const tensor_spec& spec, int layer) {
  if (!spec.per_layer) return spec.name;
  std::string s = spec.name;
  auto at = s.find("%d");
  return s.substr(0, at) + std::to_string(layer) + s.substr(at + 2);
}

std::vector<int64_t> expected_shape(tensor_role role, const hparams& hp) {
  using r = tensor_role;
  switch (role) {
    case r::token_embd: case r::output: return {hp.n_embd, hp.n_vocab};
    case r::output_b: return {hp.n_vocab, 1};
    case r::output_norm: case r::output_norm_b: case r::attn_norm: case r::attn_norm_b:
    case r::attn_norm_2: case r::attn_norm_2_b: case r::ffn_norm: case r::attn_post_norm: case r::ffn_post_norm: return {hp.n_embd, 1};
    case r::attn_q: return {hp.n_embd, hp.n_embd_q()};
    case r::attn_output: return {hp.n_embd_q(), hp.n_embd};
    case r::attn_k: case r::attn_v: return {hp.n_embd, hp.n_embd_kv()};
    case r::attn_qkv: return {hp.n_embd, hp.n_embd_q() + 2 * hp.n_embd_kv()};
    case r::attn_q_b: return {hp.n_embd_q(), 1};
    case r::attn_k_b: case r::attn_v_b: return {hp.n_embd_kv(), 1};
    case r::attn_qkv_b: return {hp.n_embd_q() + 2 * hp.n_embd_kv(), 1};
    case r::attn_q_norm: case r::attn_k_norm: return {hp.head_dim(), 1};
    case r::ffn_gate: case r::ffn_up: return {hp.n_embd, hp.n_ff};
    case r::ffn_up_gate: return {hp.n_embd, 2 * hp.n_ff};
    case r::ffn_down: return {hp.n_ff, hp.n_embd};
    case r::ffn_down_t: return {hp.n_embd, hp.n_ff};
    case r::pred_fc1: case r::pred_fc2: return {};
    case r::ffn_gate_inp: return {hp.n_embd, hp.n_expert};
    case r::ffn_gate_exps: case r::ffn_up_exps: return {hp.n_embd, hp.n_ff_exp, hp.n_expert};
    case r::ffn_down_exps: return {hp.n_ff_exp, hp.n_embd, hp.n_expert};
    case r::ffn_gate_inp_shexp: return {hp.n_embd, 1};
    case r::ffn_gate_shexp: case r::ffn_up_shexp: return {hp.n_embd, hp.n_ff_shexp};
    case r::ffn_down_shexp: return {hp.n_ff_shexp, hp.n_embd};
  }
  return {};
}

}  // namespace hotcold
