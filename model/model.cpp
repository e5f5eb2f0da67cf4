#include "model/model.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <system_error>

#include <fmt/format.h>

#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/quants.hpp"

namespace hotcold {

bool matrix_type_supported(tensor_type t) {
  switch (t) {
    case tensor_type::f32: case tensor_type::f16: case tensor_type::bf16:
    case tensor_type::q8_0: case tensor_type::q4_0: case tensor_type::q4_k: case tensor_type::q5_k:
    case tensor_type::q6_k: return true;
    default: return false;
  }
}

namespace {

// The layer of a tensor named blk.N.*, or -1 (the embeddings, the final norm, the head).
int64_t tensor_layer(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int64_t il = 0;
  size_t i = 4;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) il = il * 10 + (name[i] - '0');
  return i > 4 && i < name.size() && name[i] == '.' ? il : -1;
}

// Copies the file's data section into anonymous memory with pread, so the mmap'd file pages are
// never touched (and never counted twice): all of it, or (held) only the ranges of the tensors
// held() says to read, in a private copy of the whole size whose other pages are never touched.
page_buffer read_data_section(const std::string& path, const gguf::file& f, size_t bytes, const std::function<bool(const gguf::tensor_info&)>& held,
                              size_t shift = 0) {
  page_buffer buf(bytes + shift, path + ": weights");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), path);
  auto read_range = [&](uint64_t from, uint64_t to) {
    for (uint64_t done = from; done < to;) {
      ssize_t n = pread(fd, static_cast<char*>(buf.data()) + shift + done, std::min<uint64_t>(to - done, uint64_t{1} << 30), static_cast<off_t>(f.data_offset() + done));
      if (n <= 0) {
        int e = n < 0 ? errno : EIO;
        ::close(fd);
        throw std::system_error(e, std::generic_category(), path + ": reading weights");
      }
      done += static_cast<uint64_t>(n);
    }
  };
  if (!held) read_range(0, bytes);
  else
    for (const auto& t : f.tensors())
      if (held(t)) read_range(t.offset, std::min<uint64_t>(bytes, t.offset + t.n_bytes));
  ::close(fd);
  return buf;
}

// Gives back the whole pages of [from, to) of a private copy and keeps them out of huge pages: the
// range reads as zeros, with no resident memory, until written.
void release_pages(const page_buffer& buf, uint64_t from, uint64_t to) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t lo = (from + page - 1) / page * page, hi = to / page * page;
  if (hi <= lo) return;
  auto* p = static_cast<uint8_t*>(buf.data()) + lo;
  madvise(p, hi - lo, MADV_NOHUGEPAGE);
  madvise(p, hi - lo, MADV_DONTNEED);
}

// Rewrites a Q4_0, Q4_K, Q5_K, Q6_K or F16 matrix in place as groups of sixteen interleaved rows (the tail of
// fewer than sixteen rows stays as it is).
bool interleavable(const tensor_view& t) {
  const bool k_quant = (t.type == tensor_type::q4_k || t.type == tensor_type::q5_k || t.type == tensor_type::q6_k) && t.ne0 % kernels::qk_k == 0;
  return (t.type == tensor_type::q4_0 || t.type == tensor_type::f16 || k_quant) && t.ne1 >= 16 && !t.interleaved16 && t.packed();
}

void interleave_in_place(tensor_view& t) {
  const bool k_quant = (t.type == tensor_type::q4_k || t.type == tensor_type::q5_k || t.type == tensor_type::q6_k) && t.ne0 % kernels::qk_k == 0;
  if (!interleavable(t)) return;
  if (k_quant) {
    const int64_t nb = t.ne0 / kernels::qk_k;
    std::vector<uint8_t> group(16 * t.row_bytes);
    for (int64_t g = 0; g < t.ne1 / 16; ++g) {
      uint8_t* p = const_cast<uint8_t*>(t.data) + static_cast<size_t>(g) * 16 * t.row_bytes;
      std::memcpy(group.data(), p, 16 * t.row_bytes);
      if (t.type == tensor_type::q4_k)
        kernels::interleave_q4_kx16(reinterpret_cast<const kernels::block_q4_k*>(group.data()), nb, reinterpret_cast<kernels::block_q4_kx16*>(p));
      else if (t.type == tensor_type::q5_k)
        kernels::interleave_q5_kx16(reinterpret_cast<const kernels::block_q5_k*>(group.data()), nb, reinterpret_cast<kernels::block_q5_kx16*>(p));
      else
        kernels::interleave_q6_kx16(reinterpret_cast<const kernels::block_q6_k*>(group.data()), nb, reinterpret_cast<kernels::block_q6_kx16*>(p));
    }
    t.interleaved16 = true;
    return;
  }
  uint8_t* data = const_cast<uint8_t*>(t.data);  // the private copy, writable
  if (t.type == tensor_type::f16) {
    std::vector<uint16_t> group(static_cast<size_t>(16 * t.ne0));
    for (int64_t g = 0; g < t.ne1 / 16; ++g) {
      uint8_t* p = data + static_cast<size_t>(g) * 16 * t.row_bytes;
      std::memcpy(group.data(), p, 16 * t.row_bytes);
      kernels::interleave_f16x16(group.data(), t.ne0, reinterpret_cast<uint16_t*>(p));
    }
    t.interleaved16 = true;
    return;
  }
  const int64_t nb = t.ne0 / kernels::qk4_0;
  std::vector<kernels::block_q4_0> group(static_cast<size_t>(16 * nb));
  for (int64_t g = 0; g < t.ne1 / 16; ++g) {
    uint8_t* p = data + static_cast<size_t>(g) * 16 * t.row_bytes;
    std::memcpy(group.data(), p, 16 * t.row_bytes);
    kernels::interleave_q4_0x16(group.data(), nb, reinterpret_cast<kernels::block_q4_0x16*>(p));
  }
  t.interleaved16 = true;
}

// Rows [first, first + count) of a matrix, as a tensor of its own (a fused tensor's parts).
tensor_view rows_of(const tensor_view& t, int64_t first, int64_t count, const char* part) {
  tensor_view v = t;
  v.name = t.name + part;
  v.ne1 = count;
  v.data = t.data + static_cast<size_t>(first) * t.row_bytes;
  return v;
}

// Elements [first, first + count) of an F32 vector.
tensor_view elements_of(const tensor_view& t, int64_t first, int64_t count, const char* part) {
  tensor_view v = t;
  v.name = t.name + part;
  v.ne0 = count;
  v.row_bytes = static_cast<size_t>(count) * sizeof(float);
  v.data = t.data + static_cast<size_t>(first) * sizeof(float);
  return v;
}

}  // namespace

namespace {

// One tensor of the table, bound to the weights at `base` (absent and not required: an empty view),
// its shape and type checked; its bytes added to weight_bytes.
tensor_view bind_tensor(const gguf::file& f, const hparams& hp, const tensor_spec& spec, int layer, const uint8_t* base, uint64_t& weight_bytes) {
  const std::string& path = f.source();
  std::string name = tensor_name(spec, layer);
  const gguf::tensor_info* t = f.find_tensor(name);
  if (!t) {
    if (spec.required) throw model_error(fmt::format("{}: tensor {} is missing", path, name));
    return {};
  }
  if (expert_role(spec.role) && !hp.moe())
    throw model_error(fmt::format("{}: tensor {} belongs to a mixture of experts, but {}.expert_count is missing or 0", path, name, architecture_name(hp.arch)));
  auto want = expected_shape(spec.role, hp);
  if (want.empty()) {  // the predictor: its rank is free, the other sides are fixed
    const bool is_fc1 = spec.role == tensor_role::pred_fc1;
    const auto* fc1 = is_fc1 ? nullptr : f.find_tensor(fmt::format("blk.{}.fc1.weight", layer));
    int64_t rank = fc1 ? fc1->ne[1] : t->ne[is_fc1 ? 1 : 0];
    want = is_fc1 ? std::vector<int64_t>{hp.n_embd, rank} : std::vector<int64_t>{rank, hp.n_ff};
  }
  bool vector = want[1] == 1;
  const int64_t want2 = want.size() > 2 ? want[2] : 1;  // the experts' 3-D tensors: one slice per expert
  bool shape_ok = t->ne[0] == want[0] && t->ne[1] == want[1] && t->ne[2] == want2 && t->ne[3] == 1 && (!vector || t->n_dims == 1);
  if (!shape_ok) {
    std::string got;
    for (uint32_t d = 0; d < t->n_dims; ++d) got += (d ? ", " : "") + std::to_string(t->ne[d]);
    std::string expected = vector ? std::to_string(want[0]) : fmt::format("{}, {}", want[0], want[1]);
    if (want.size() > 2) expected += fmt::format(", {}", want2);
    throw model_error(fmt::format("{}: tensor {} has shape [{}], expected [{}]", path, name, got, expected));
  }
  if (vector ? (t->type != tensor_type::f32) : !matrix_type_supported(t->type))
    throw model_error(fmt::format("{}: tensor {} has type {}, which hotcold does not compute with ({})", path, name,
                                  tensor_type_name(t->type), vector ? "norms and vectors must be F32" : "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"));
  tensor_view v;
  v.name = name;
  v.type = t->type;
  v.ne0 = t->ne[0];
  v.ne1 = t->ne[1] * t->ne[2];  // an experts' tensor: every expert's rows, expert after expert
  v.row_bytes = static_cast<size_t>(t->n_bytes / static_cast<uint64_t>(v.ne1));
  v.data = base + t->offset;
  weight_bytes += t->n_bytes;
  return v;
}

// A bound tensor into the slot its role names (a fused QKV bias kept aside in qkv_bias, for
// finish_layer; phi3's fused gate and up bound as their two row ranges).
void place_tensor(model_weights& w, int il, tensor_role role, const tensor_view& v, const hparams& hp, tensor_view& qkv_bias) {
  using r = tensor_role;
  switch (role) {
    case r::token_embd: w.token_embd = v; return;
    case r::output_norm: w.output_norm = v; return;
    case r::output_norm_b: w.output_norm_b = v; return;
    case r::output: w.output = v; return;
    case r::output_b: w.output_b = v; return;
    default: break;
  }
  layer_weights& l = w.layers[static_cast<size_t>(il)];
  switch (role) {
    case r::attn_norm: l.attn_norm = v; break;
    case r::attn_norm_b: l.attn_norm_b = v; break;
    case r::attn_norm_2: l.attn_norm_2 = v; break;
    case r::attn_norm_2_b: l.attn_norm_2_b = v; break;
    case r::attn_q: l.wq = v; break;
    case r::attn_k: l.wk = v; break;
    case r::attn_v: l.wv = v; break;
    case r::attn_qkv: l.wqkv = v; break;
    case r::attn_q_b: l.bq = v; break;
    case r::attn_k_b: l.bk = v; break;
    case r::attn_v_b: l.bv = v; break;
    case r::attn_qkv_b: qkv_bias = v; break;
    case r::attn_q_norm: l.q_norm = v; break;
    case r::attn_k_norm: l.k_norm = v; break;
    case r::ffn_up_gate: l.ffn_gate = rows_of(v, 0, hp.n_ff, ".gate"), l.ffn_up = rows_of(v, hp.n_ff, hp.n_ff, ".up"); break;
    case r::attn_output: l.wo = v; break;
    case r::ffn_norm: l.ffn_norm = v; break;
    case r::attn_post_norm: l.attn_post_norm = v; break;
    case r::ffn_post_norm: l.ffn_post_norm = v; break;
    case r::ffn_gate: l.ffn_gate = v; break;
    case r::ffn_up: l.ffn_up = v; break;
    case r::ffn_down: l.ffn_down = v; break;
    case r::ffn_down_t: l.ffn_down_t = v; break;
    case r::pred_fc1: l.pred_fc1 = v; break;
    case r::pred_fc2: l.pred_fc2 = v; break;
    case r::ffn_gate_inp: l.ffn_gate_inp = v; break;
    case r::ffn_gate_exps: l.ffn_gate_exps = v; break;
    case r::ffn_up_exps: l.ffn_up_exps = v; break;
    case r::ffn_down_exps: l.ffn_down_exps = v; break;
    case r::ffn_gate_inp_shexp: l.ffn_gate_inp_shexp = v; break;
    case r::ffn_gate_shexp: l.ffn_gate_shexp = v; break;
    case r::ffn_up_shexp: l.ffn_up_shexp = v; break;
    case r::ffn_down_shexp: l.ffn_down_shexp = v; break;
    default: break;
  }
}

// Names of a bundled sparse file's per-layer tensors (tools/sparse_file.hpp writes them).
constexpr const char* bundle_name = "blk.{}.ffn_bundle.weight";
constexpr const char* order_name = "blk.{}.ffn_order";

// The roles a layer's bundle stands for: bound from it, not from tensors of their own.
bool bundled_role(tensor_role r) {
  return r == tensor_role::ffn_gate || r == tensor_role::ffn_up || r == tensor_role::ffn_up_gate || r == tensor_role::ffn_down ||
         r == tensor_role::ffn_down_t;
}

// Layer il's bundle: n_ff rows of (gate, up, down_t) rows of n_embd values each (no gate: up, down_t),
// bound as three views stepping over the whole bundle row; and its neuron order, when recorded.
void bind_bundle(const gguf::file& f, const hparams& hp, int il, const uint8_t* base, uint64_t& weight_bytes, layer_weights& l) {
  const std::string& path = f.source();
  const std::string name = fmt::format(bundle_name, il);
  const gguf::tensor_info* t = f.find_tensor(name);
  // Gate, up and down_t; or up and down_t, the gate (of a gated FFN) in its own ffn_gate.weight.
  const int64_t parts = hp.gated_ffn && t->ne[0] == 3 * hp.n_embd ? 3 : 2;
  if (t->n_dims != 2 || t->ne[0] != parts * hp.n_embd || t->ne[1] != hp.n_ff)
    throw model_error(fmt::format("{}: tensor {} has shape [{}, {}] ({} dimensions), expected [{}, {}]{}: rows of n_embd for each of n_ff neurons", path,
                                  name, t->ne[0], t->ne[1], t->n_dims, parts * hp.n_embd, hp.n_ff,
                                  hp.gated_ffn ? fmt::format(" (gate, up and down_t) or [{}, {}] (up and down_t)", 2 * hp.n_embd, hp.n_ff) : " (up and down_t)"));
  const bool gate_apart = hp.gated_ffn && parts == 2;
  for (const char* other : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "ffn_down_t.weight"}) {
    const bool is_gate = std::string_view(other) == "ffn_gate.weight";
    const bool present = f.find_tensor(fmt::format("blk.{}.{}", il, other)) != nullptr;
    if (present && !(is_gate && gate_apart)) throw model_error(fmt::format("{}: blk.{} has both ffn_bundle.weight and {}", path, il, other));
    if (!present && is_gate && gate_apart)
      throw model_error(fmt::format("{}: tensor blk.{}.ffn_gate.weight is missing (the layer's bundle holds up and down_t only)", path, il));
  }
  if (!matrix_type_supported(t->type) || hp.n_embd % traits(t->type).block_size != 0)
    throw model_error(fmt::format("{}: tensor {} has type {}, which hotcold does not bundle (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K with n_embd a "
                                  "multiple of the block)", path, name, tensor_type_name(t->type)));
  tensor_view b;
  b.name = name, b.type = t->type, b.ne0 = t->ne[0], b.ne1 = t->ne[1];
  b.row_bytes = static_cast<size_t>(t->n_bytes / static_cast<uint64_t>(t->ne[1]));
  b.data = base + t->offset;
  weight_bytes += t->n_bytes;
  l.ffn_bundle = b;
  const size_t part = b.row_bytes / static_cast<size_t>(parts);
  auto view = [&](int64_t k, const char* what) {
    tensor_view v = b;
    v.name = name + what;
    v.ne0 = hp.n_embd;
    v.row_bytes = part;
    v.stride = b.row_bytes;
    v.data = b.data + static_cast<size_t>(k) * part;
    return v;
  };
  int64_t k = 0;
  if (gate_apart) l.ffn_gate = bind_tensor(f, hp, {tensor_role::ffn_gate, "blk.%d.ffn_gate.weight", true, true}, il, base, weight_bytes);
  else if (hp.gated_ffn) l.ffn_gate = view(k++, ".gate");
  l.ffn_up = view(k++, ".up");
  l.ffn_down_t = view(k, ".down_t");
}

// Layer il's neuron order (when the file records one): I32, n_ff values, a permutation.
// held: its values were read (load_options' layers), and are checked.
void bind_order(const gguf::file& f, const hparams& hp, int il, const uint8_t* base, layer_weights& l, bool held) {
  const std::string name = fmt::format(order_name, il);
  const gguf::tensor_info* t = f.find_tensor(name);
  if (!t) return;
  if (t->type != tensor_type::i32 || t->n_dims != 1 || t->ne[0] != hp.n_ff)
    throw model_error(fmt::format("{}: tensor {} must be I32 of n_ff = {} values (got {}, {} values)", f.source(), name, hp.n_ff, tensor_type_name(t->type),
                                  t->n_elements));
  const auto* v = reinterpret_cast<const int32_t*>(base + t->offset);
  std::vector<bool> seen(static_cast<size_t>(hp.n_ff));
  for (int64_t i = 0; held && i < hp.n_ff; ++i) {
    if (v[i] < 0 || v[i] >= hp.n_ff || seen[static_cast<size_t>(v[i])])
      throw model_error(fmt::format("{}: tensor {} is not an order of the {} neurons (value {} at {})", f.source(), name, hp.n_ff, v[i], i));
    seen[static_cast<size_t>(v[i])] = true;
  }
  l.ffn_order.name = name, l.ffn_order.type = tensor_type::i32, l.ffn_order.ne0 = hp.n_ff, l.ffn_order.ne1 = 1;
  l.ffn_order.row_bytes = static_cast<size_t>(hp.n_ff) * 4, l.ffn_order.data = base + t->offset;
}

// The llama family computes q, k and v as three products: a fused attn_qkv (and its bias) is bound as
// its three row ranges, q's rows first, then k's, then v's (llama.cpp's views of it).
void split_fused_qkv(const std::string& path, const hparams& hp, int il, layer_weights& l, const tensor_view& qkv_bias) {
  const int64_t q = hp.n_embd_q(), kv = hp.n_embd_kv();
  const bool separate = l.wq || l.wk || l.wv;
  if (l.wqkv && separate) throw model_error(fmt::format("{}: blk.{} has both attn_qkv and separate attn_q/k/v", path, il));
  if (!l.wqkv && !(l.wq && l.wk && l.wv))
    throw model_error(fmt::format("{}: tensor blk.{}.attn_q.weight, attn_k.weight and attn_v.weight (or attn_qkv.weight) are missing", path, il));
  if (l.wqkv) {
    l.wq = rows_of(l.wqkv, 0, q, ".q"), l.wk = rows_of(l.wqkv, q, kv, ".k"), l.wv = rows_of(l.wqkv, q + kv, kv, ".v");
    l.wqkv = {};
  }
  if (qkv_bias) {
    if (l.bq || l.bk || l.bv) throw model_error(fmt::format("{}: blk.{} has both attn_qkv.bias and separate biases", path, il));
    l.bq = elements_of(qkv_bias, 0, q, ".q"), l.bk = elements_of(qkv_bias, q, kv, ".k"), l.bv = elements_of(qkv_bias, q + kv, kv, ".v");
  }
}

// A mixture of experts' layer: the router and every expert's gate, up and down, and no dense FFN or
// predictor beside them; qwen2moe's shared expert whole (llama's and qwen3moe's files have none).
void finish_experts(const std::string& path, const hparams& hp, int il, layer_weights& l) {
  const std::pair<const tensor_view*, const char*> needed[] = {
      {&l.ffn_gate_inp, "ffn_gate_inp"}, {&l.ffn_gate_exps, "ffn_gate_exps"}, {&l.ffn_up_exps, "ffn_up_exps"}, {&l.ffn_down_exps, "ffn_down_exps"}};
  for (const auto& [t, name] : needed)
    if (!*t)
      throw model_error(fmt::format("{}: tensor blk.{}.{}.weight is missing (a mixture-of-experts layer needs the router and every expert's gate, up and down)",
                                    path, il, name));
  if (l.ffn_gate || l.ffn_up || l.ffn_down || l.ffn_down_t || l.ffn_bundle)
    throw model_error(fmt::format("{}: blk.{} has both experts and a dense FFN (ffn_gate, ffn_up, ffn_down), which hotcold does not run together", path, il));
  if (l.pred_fc1 || l.pred_fc2) throw model_error(fmt::format("{}: blk.{} has a neuron predictor (fc1, fc2) beside its experts", path, il));
  const bool shared = l.ffn_gate_inp_shexp || l.ffn_gate_shexp || l.ffn_up_shexp || l.ffn_down_shexp;
  const bool shared_arch = arch_of(hp.arch).shared_expert;
  if (!shared_arch && shared)
    throw model_error(fmt::format("{}: blk.{} has a shared expert (ffn_*_shexp), which {} files do not", path, il, architecture_name(hp.arch)));
  if (shared_arch) {
    const std::pair<const tensor_view*, const char*> shexp[] = {{&l.ffn_gate_inp_shexp, "ffn_gate_inp_shexp"},
                                                                {&l.ffn_gate_shexp, "ffn_gate_shexp"},
                                                                {&l.ffn_up_shexp, "ffn_up_shexp"},
                                                                {&l.ffn_down_shexp, "ffn_down_shexp"}};
    for (const auto& [t, name] : shexp)
      if (!*t) throw model_error(fmt::format("{}: tensor blk.{}.{}.weight is missing (qwen2moe's shared expert)", path, il, name));
  }
}

// A layer's tensors that go together, checked (and a llama-family layer's q, k, v bound).
void finish_layer(const std::string& path, const hparams& hp, int il, layer_weights& l, const tensor_view& qkv_bias) {
  const arch_traits& a = arch_of(hp.arch);
  if (!a.parallel) {
    split_fused_qkv(path, hp, il, l, qkv_bias);
    if (static_cast<bool>(l.bq) != static_cast<bool>(l.bk) || static_cast<bool>(l.bq) != static_cast<bool>(l.bv))
      throw model_error(fmt::format("{}: blk.{} has biases on some of q, k, v but not all", path, il));
    if (a.qkv_biases && !l.bq)
      throw model_error(fmt::format("{}: tensor blk.{}.attn_q.bias is missing ({}'s q, k and v have biases)", path, il, architecture_name(hp.arch)));
    if (static_cast<bool>(l.q_norm) != static_cast<bool>(l.k_norm))
      throw model_error(fmt::format("{}: blk.{} needs both attn_q_norm and attn_k_norm, or neither", path, il));
    if (a.qk_norms && !l.q_norm)
      throw model_error(fmt::format("{}: tensor blk.{}.attn_q_norm.weight is missing ({} normalizes q and k per head)", path, il, architecture_name(hp.arch)));
  }
  if (static_cast<bool>(l.attn_norm_2) != static_cast<bool>(l.attn_norm_2_b))
    throw model_error(fmt::format("{}: blk.{}.attn_norm_2 needs both its weight and its bias", path, il));
  if (hp.moe()) {
    finish_experts(path, hp, il, l);
  } else {
    if (hp.gated_ffn && !l.ffn_gate) throw model_error(fmt::format("{}: tensor blk.{}.ffn_gate.weight is missing", path, il));
    if (!l.ffn_up) throw model_error(fmt::format("{}: tensor blk.{}.ffn_up.weight is missing", path, il));
    if (!l.ffn_down && !l.ffn_down_t)
      throw model_error(fmt::format("{}: tensor blk.{}.ffn_down.weight is missing (and there is no ffn_down_t either)", path, il));
  }
  if (static_cast<bool>(l.pred_fc1) != static_cast<bool>(l.pred_fc2))
    throw model_error(fmt::format("{}: blk.{}'s predictor needs both fc1 and fc2", path, il));
}

// The types whose dense products read sixteen interleaved rows (Q6_K stays plain: see below).
bool q4_kind(const tensor_view& t) { return t.type == tensor_type::q4_0 || t.type == tensor_type::q4_k || t.type == tensor_type::q5_k; }

// Only what the dense products read, rows interleaved in place: FFN rows of sparse files (and of any
// layer with a predictor) are read one neuron at a time, and a tied head is also the embedding.
void interleave_for_products(model_weights& w, bool tied_output, int64_t n_expert, int64_t first_layer, int64_t last_layer, bool experts_from_disk) {
  for (int64_t il = first_layer; il < last_layer; ++il) {
    auto& l = w.layers[static_cast<size_t>(il)];
    // F16: the predictors' short rows only (fc2's 512 bytes at rank 256); long F16
    // rows already stream two a thread, and a layer's fc1 read interleaved was slower.
    for (tensor_view* t : {&l.pred_fc1, &l.pred_fc2})
      if (t->type == tensor_type::f16 && t->row_bytes < 2048) interleave_in_place(*t);
    // Q4_0: attention, the predictors (fc2's 144-byte rows one at a time spent more on each call
    // than on its arithmetic), the down matrix of dense files. Q4_K and Q5_K (a
    // Q4_K_M / Q5_K_M file's attention and FFN) the same (docs/kernels.md); Q6_K stays plain
    // (engine/row_groups.cpp, k_quant_row_groups: its prompts interleave a group at a time).
    auto q4 = [](tensor_view& t) { if (q4_kind(t)) interleave_in_place(t); };
    for (tensor_view* t : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.ffn_down, &l.pred_fc1, &l.pred_fc2, &l.ffn_gate_inp, &l.ffn_gate_shexp, &l.ffn_up_shexp,
                           &l.ffn_down_shexp})
      q4(*t);
    // The experts, where each one's rows make whole groups of sixteen (a group never spans two experts);
    // those the disk tier reads are marked so, and it interleaves each expert as its read lands
    // (interleave_expert_in_place).
    for (tensor_view* t : {&l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps})
      if (*t && n_expert > 0 && (t->ne1 / n_expert) % 16 == 0 && q4_kind(*t)) {
        if (!experts_from_disk) interleave_in_place(*t);
        else if (interleavable(*t)) t->interleaved16 = true;
      }
    if (!l.ffn_down_t && !l.pred_fc1) {
      q4(l.ffn_gate);
      q4(l.ffn_up);
    }
  }
  if (!tied_output && q4_kind(w.output)) interleave_in_place(w.output);
}

}  // namespace

std::shared_ptr<const model> model::load(const std::string& path, const load_options& options, std::span<const float> act_thresholds) {
  std::shared_ptr<model> m(new model());
  m->path_ = path;
  m->file_ = std::make_unique<gguf::file>(gguf::file::open(path));
  const gguf::file& f = *m->file_;
  m->hp_ = read_hparams(f);
  if (!act_thresholds.empty()) set_act_thresholds(m->hp_, std::vector<double>(act_thresholds.begin(), act_thresholds.end()), path);
  try {
    m->vocab_ = std::make_unique<vocab>(vocab::from_gguf(f));
  } catch (const vocab_error& e) {
    throw model_error(e.what());
  }
  if (auto t = f.get_string("tokenizer.chat_template")) m->chat_template_ = std::string(*t);
  hparams& hp = m->hp_;

  const gguf::tensor_info* embd = f.find_tensor("token_embd.weight");
  if (!embd) throw model_error(fmt::format("{}: tensor token_embd.weight is missing", path));
  hp.n_vocab = embd->ne[1];
  if (static_cast<size_t>(hp.n_vocab) != m->vocab_->size())
    throw model_error(fmt::format("{}: token_embd.weight has {} rows but the tokenizer has {} tokens", path, hp.n_vocab, m->vocab_->size()));

  // What this process holds (load_options' layers and globals; a mapping holds all, read as used).
  m->held_first_ = std::clamp<int64_t>(options.first_layer, 0, hp.n_layer);
  m->held_last_ = options.last_layer < 0 ? hp.n_layer : std::clamp<int64_t>(options.last_layer, m->held_first_, hp.n_layer);
  m->holds_globals_ = options.globals;
  if (options.use_mmap) m->held_first_ = 0, m->held_last_ = hp.n_layer, m->holds_globals_ = true;
  if (options.ffn_rows_from_disk && options.use_mmap) throw std::invalid_argument("the disk tier reads a private copy's rows: not with --mmap");
  m->ffn_rows_from_disk_ = options.ffn_rows_from_disk;
  m->data_offset_ = f.data_offset();
  // A per-neuron FFN tensor the disk tier reads by neuron (load_options::ffn_rows_from_disk).
  auto on_disk = [&](const gguf::tensor_info& t) {
    const int64_t il = tensor_layer(t.name);
    if (options.ffn_rows_from_disk && t.name == "token_embd.weight") return f.find_tensor("output.weight") != nullptr;  // (not a tied head)
    if (!options.ffn_rows_from_disk || il < 0) return false;
    const size_t dot = t.name.find('.', 4);
    // (a sparse layer's layouts only: a bundle, or down_t rows; a dense layer's products read every row;
    // a mixture's experts, read by expert)
    const std::string_view suffix = std::string_view(t.name).substr(dot + 1);
    if (hp.moe()) return per_expert_tensor_suffix(suffix);
    const bool sparse_layer = f.find_tensor(fmt::format(bundle_name, il)) || f.find_tensor(fmt::format("blk.{}.ffn_down_t.weight", il));
    return sparse_layer && per_neuron_tensor_suffix(suffix);
  };
  // A tensor of what this process holds: its layers, and the globals where it holds them.
  auto holds = [&m](const gguf::tensor_info& t) {
    const int64_t il = tensor_layer(t.name);
    return il < 0 ? m->holds_globals() : m->holds_layer(il);
  };
  for (const auto& t : f.tensors())
    if (holds(t)) m->held_weight_bytes_ += t.n_bytes;
  const uint8_t* base = nullptr;
  if (options.use_mmap) {
    base = f.bytes().data() + f.data_offset();
  } else {
    size_t bytes = static_cast<size_t>(f.size() - f.data_offset());
    if (bytes > 0) {
      std::function<bool(const gguf::tensor_info&)> held;  // (empty: all of it)
      if (m->held_first_ > 0 || m->held_last_ < hp.n_layer || !m->holds_globals_ || options.ffn_rows_from_disk)
        held = [&holds, &on_disk](const gguf::tensor_info& t) { return holds(t) && !on_disk(t); };
      // With the disk tier, the copy starts where the file's data section does within a page, so each
      // page of memory is one block of the file: the tier's direct reads land in place (no bounce).
      const size_t shift = options.ffn_rows_from_disk ? static_cast<size_t>(f.data_offset() % static_cast<uint64_t>(sysconf(_SC_PAGESIZE))) : 0;
      m->buffer_ = read_data_section(path, f, bytes, held, shift);
      m->huge_pages_ = m->buffer_.huge_pages();
      m->shift_ = shift;
      base = static_cast<const uint8_t*>(m->buffer_.data()) + shift;
      // The rows left in the file in small pages: the tier reads and releases them a few at a time (a
      // 2 MB page would fault in around the first row read).
      if (options.ffn_rows_from_disk)
        for (const auto& t : f.tensors())
          if (on_disk(t)) release_pages(m->buffer_, shift + t.offset, shift + std::min<uint64_t>(bytes, t.offset + t.n_bytes));
    }
  }

  model_weights& w = m->weights_;
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  std::vector<tensor_view> qkv_bias(static_cast<size_t>(hp.n_layer));
  std::vector<bool> bundled(static_cast<size_t>(hp.n_layer));
  for (int il = 0; il < hp.n_layer; ++il) bundled[static_cast<size_t>(il)] = f.find_tensor(fmt::format(bundle_name, il)) != nullptr;
  for (const auto& spec : tensor_table(hp.arch))
    for (int il = 0; il < (spec.per_layer ? hp.n_layer : 1); ++il) {
      if (spec.per_layer && bundled[static_cast<size_t>(il)] && bundled_role(spec.role)) continue;  // bind_bundle
      place_tensor(w, il, spec.role, bind_tensor(f, hp, spec, il, base, m->weight_bytes_), hp, qkv_bias[static_cast<size_t>(il)]);
    }
  for (int il = 0; il < hp.n_layer; ++il) {
    auto& l = w.layers[static_cast<size_t>(il)];
    if (bundled[static_cast<size_t>(il)]) bind_bundle(f, hp, il, base, m->weight_bytes_, l);
    bind_order(f, hp, il, base, l, m->holds_layer(il));
  }
  m->has_predictors_ = hp.n_layer > 0;
  for (int il = 0; il < hp.n_layer; ++il) {
    auto& l = w.layers[static_cast<size_t>(il)];
    finish_layer(path, hp, il, l, qkv_bias[static_cast<size_t>(il)]);
    m->has_predictors_ = m->has_predictors_ && l.pred_fc1;
  }
  if (!w.output) {
    w.output = w.token_embd;
    m->tied_output_ = true;
  }
  if (options.interleave && !options.use_mmap) interleave_for_products(w, m->tied_output_ || !m->holds_globals_, hp.n_expert, m->held_first_, m->held_last_, options.ffn_rows_from_disk);
  if (std::string gpuidx = placement_path(path); std::filesystem::exists(gpuidx)) {
    try {
      m->placement_ = read_placement_file(gpuidx, hp.n_layer, hp.n_ff);
    } catch (const std::exception& e) {
      throw model_error(fmt::format("placement file {}: {}", gpuidx, e.what()));
    }
  }
  if (!options.use_mmap) {
    // The weights are private now; keep only what the vocabulary and hyper-parameters needed.
    m->file_.reset();
  }
  return m;
}

uint64_t model::file_offset(const void* p) const {
  const auto* at = static_cast<const uint8_t*>(p);
  const auto* base = static_cast<const uint8_t*>(buffer_.data()) + shift_;
  if (!buffer_.data() || at < base || at >= static_cast<const uint8_t*>(buffer_.data()) + buffer_.size())
    throw std::logic_error(fmt::format("{}: an address outside the weights' private copy", path_));
  return data_offset_ + static_cast<uint64_t>(at - base);
}

bool per_neuron_tensor_suffix(std::string_view suffix) {
  return suffix == "ffn_bundle.weight" || suffix == "ffn_up.weight" || suffix == "ffn_down_t.weight" || suffix == "ffn_gate.weight";
}

void interleave_expert_in_place(const tensor_view& t, int64_t e, int64_t n_expert) {
  if (!t.interleaved16) return;
  tensor_view v = expert_rows(t, e, t.ne1 / n_expert);
  v.interleaved16 = false;
  interleave_in_place(v);
}

bool per_expert_tensor_suffix(std::string_view suffix) {
  return suffix == "ffn_gate_exps.weight" || suffix == "ffn_up_exps.weight" || suffix == "ffn_down_exps.weight";
}

std::vector<tensor_view> tier_units(const layer_weights& l, int64_t n_expert) {
  std::vector<tensor_view> out;
  if (n_expert > 0) {
    for (const tensor_view* t : {&l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps}) {
      if (!*t) continue;
      tensor_view v = *t;  // (an expert's rows one after another: one unit)
      v.row_bytes = t->row_bytes * static_cast<size_t>(t->ne1 / n_expert);
      v.ne1 = n_expert, v.stride = 0, v.interleaved16 = false;
      out.push_back(v);
    }
    return out;
  }
  for (const tensor_view* t : neuron_row_tensors(l)) out.push_back(*t);
  return out;
}

std::vector<const tensor_view*> neuron_row_tensors(const layer_weights& l) {
  // (With a bundle, the gate, up and down_t views step through it; a gate outside it is its own tensor.)
  const bool in_bundle_gate = l.ffn_bundle && l.ffn_gate.data >= l.ffn_bundle.data && l.ffn_gate.data < l.ffn_bundle.data + l.ffn_bundle.bytes();
  std::vector<const tensor_view*> out;
  if (!l.ffn_bundle && !l.ffn_down_t) return out;  // (a dense layer)
  if (l.ffn_bundle) out.push_back(&l.ffn_bundle);
  if (l.ffn_gate && !in_bundle_gate) out.push_back(&l.ffn_gate);
  if (!l.ffn_bundle) {
    if (l.ffn_up) out.push_back(&l.ffn_up);
    if (l.ffn_down_t) out.push_back(&l.ffn_down_t);
  }
  return out;
}

const grammar_vocab& model::grammar_tokens() const {
  std::call_once(grammar_once_, [this] { grammar_tokens_ = std::make_unique<grammar_vocab>(*vocab_); });
  return *grammar_tokens_;
}

}  // namespace hotcold
