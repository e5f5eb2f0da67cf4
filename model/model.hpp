#pragma once
// A loaded model: hyper-parameters, vocabulary, and views of its weights, which live either in
// anonymous memory (the default: read once, huge pages where the kernel gives them) or in the
// file's mmap'd pages (--mmap).
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <optional>
#include <string>
#include <vector>

#include "model/arch.hpp"
#include "model/gguf.hpp"
#include "model/grammar_tokens.hpp"
#include "model/page_buffer.hpp"
#include "model/placement_file.hpp"
#include "kernels/tensor_types.hpp"
#include "model/vocab.hpp"

namespace hotcold {

// A weight tensor as the compute reads it: rows of ne[0] elements, ne[1] rows.
struct tensor_view {
  std::string name;
  tensor_type type = tensor_type::f32;
  int64_t ne0 = 0;        // elements per row
  int64_t ne1 = 1;        // rows
  size_t row_bytes = 0;
  // Bytes from one row's start to the next's; 0: row_bytes (the rows packed one after another). A
  // bundled sparse file's gate, up and down_t rows are views of one tensor whose row holds all three
  // (docs/model-files.md), each stepping over the other two.
  size_t stride = 0;
  const uint8_t* data = nullptr;
  // Matrices that only dense products read are stored, in the private copy, as groups of sixteen
  // interleaved rows for the first ne1 - ne1 % 16 rows (Q4_0: kernels::block_q4_0x16; Q4_K, Q5_K:
  // kernels::block_q4_kx16, block_q5_kx16; F16: kernels::interleave_f16x16), the rest as plain rows: row(r) is
  // valid only for those. Set at load (load_options::interleave).
  bool interleaved16 = false;
  int64_t interleaved_rows() const { return interleaved16 ? ne1 - ne1 % 16 : 0; }

  explicit operator bool() const { return data != nullptr; }
  // An F32 tensor's values (norms, biases, factors); null when absent.
  const float* f32() const { return reinterpret_cast<const float*>(data); }
  uint64_t bytes() const { return data ? row_bytes * static_cast<uint64_t>(ne1) : 0; }  // 0 when absent
  size_t row_stride() const { return stride ? stride : row_bytes; }
  bool packed() const { return row_stride() == row_bytes; }
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_stride(); }
};

struct layer_weights {
  tensor_view attn_norm, attn_norm_b;      // (n_embd)
  tensor_view attn_norm_2, attn_norm_2_b;  // falcon-40B: the norm attention reads (n_embd), optional; attn_norm then feeds only the FFN
  tensor_view wq, wk, wv;                  // (n_embd) -> (n_embd_q), (n_embd_kv), (n_embd_kv); a llama-family file's fused
                                           // attn_qkv is bound as these three row ranges of it
  tensor_view bq, bk, bv;                  // their biases (qwen2; optional), F32; also row ranges of attn_qkv.bias
  tensor_view q_norm, k_norm;              // qwen3: each head's RMSNorm weights (head_dim) for q and k, before RoPE
  tensor_view wqkv;                        // falcon: (n_embd) -> (n_embd + 2 n_embd_kv)
  tensor_view wo;                          // (n_embd_q) -> (n_embd)
  tensor_view attn_post_norm;              // gemma2: RMSNorm of attention's output before it joins the residual stream (n_embd)
  tensor_view ffn_norm;                    // (n_embd)
  tensor_view ffn_post_norm;               // gemma2: RMSNorm of the FFN's output before it joins the residual stream (n_embd)
  tensor_view ffn_gate, ffn_up;            // (n_embd) -> (n_ff); phi3's fused ffn_up is bound as its two halves (gate first)
  tensor_view ffn_down;                    // (n_ff) -> (n_embd); absent in sparse files, which have:
  tensor_view ffn_down_t;                  // n_ff rows of n_embd: neuron i's contribution is h_i * row i
  tensor_view pred_fc1;                    // predictor: (n_embd) -> (r)
  tensor_view pred_fc2;                    //            (r) -> (n_ff): score_i >= threshold => neuron i fires
  // A bundled sparse file (prepare): ffn_gate, ffn_up and ffn_down_t above are views of this one tensor,
  // n_ff rows each holding neuron i's gate, up and down_t rows side by side (no gate: up and down_t).
  tensor_view ffn_bundle;
  // prepare's order of the neurons (I32, n_ff): position i holds the neuron that was number order[i]
  // in the file prepare read; absent when they are in that order.
  tensor_view ffn_order;
  // A mixture of experts (hp.moe(); ffn_gate, ffn_up, ffn_down absent): the router (n_embd) ->
  // (n_expert); every expert's gate and up rows, n_ff_exp rows of n_embd an expert (expert e's are rows
  // [e n_ff_exp, (e + 1) n_ff_exp): expert_rows), and its down rows, n_embd rows of n_ff_exp an expert;
  // qwen2moe's shared expert (n_ff_shexp neurons) and its gate vector (F32, n_embd).
  tensor_view ffn_gate_inp;
  tensor_view ffn_gate_exps, ffn_up_exps, ffn_down_exps;
  tensor_view ffn_gate_inp_shexp, ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;
};

// A layer's attention tensors, listed once: the products' weights (q, k, v or a fused qkv, and o), and
// what goes with them wherever attention runs (its norms, qwen2's q/k/v biases, qwen3's per-head norms
// of q and k, gemma2's norm of its output). What holds or counts a layer's attention reads these lists: a device's copy
// (engine/device_layers), the plan (loader/placement), the byte costs (engine/read_costs). Absent
// tensors are listed too (0 bytes). Layer: layer_weights, const or not.
template <class Layer>
auto attention_weights(Layer& l) {
  return std::array{&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo};
}
template <class Layer>
auto attention_extras(Layer& l) {
  return std::array{&l.attn_norm, &l.attn_norm_b, &l.attn_norm_2, &l.attn_norm_2_b, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm, &l.attn_post_norm};
}

// Expert e's slice of an experts' tensor whose experts hold `rows` rows each.
inline tensor_view expert_rows(const tensor_view& t, int64_t e, int64_t rows) {
  tensor_view v = t;
  v.ne1 = rows;
  v.data = t.data + static_cast<size_t>(e * rows) * t.row_stride();
  return v;
}

// Bytes of one expert of a mixture's layer: its gate, up and down rows, each (a device holds a layer's
// slots as three buffers of these), and all three.
inline std::array<uint64_t, 3> expert_part_bytes(const layer_weights& l, int64_t n_expert) {
  const auto e = static_cast<uint64_t>(n_expert);
  return {l.ffn_gate_exps.bytes() / e, l.ffn_up_exps.bytes() / e, l.ffn_down_exps.bytes() / e};
}
inline uint64_t expert_bytes(const layer_weights& l, int64_t n_expert) {
  const auto p = expert_part_bytes(l, n_expert);
  return p[0] + p[1] + p[2];
}

struct model_weights {
  tensor_view token_embd;                  // n_vocab rows of n_embd
  tensor_view output_norm, output_norm_b;  // (n_embd)
  tensor_view output;                      // n_vocab rows of n_embd (token_embd when tied)
  tensor_view output_b;                    // (n_vocab) the head's bias, optional (qwen2, phi3)
  std::vector<layer_weights> layers;
};

struct load_options {
  bool use_mmap = false;  // compute from the file's pages instead of a private copy
  // Interleave the Q4_0 matrices that only dense products read (attention, predictors, the output
  // head, a dense file's FFN), and F16 predictors, sixteen rows at a time in the private copy:
  // decode's products read them faster (docs/performance.md). Not with use_mmap (the pages are the file's).
  bool interleave = true;
  // The layers whose weights are read into the private copy: first_layer .. last_layer - 1 (-1: to
  // the last). The embeddings, the final norm and the head are always read; the other layers' views
  // point at memory of the copy that is never read or touched (no resident pages), for a process
  // that runs some layers only (a stage of docs/distributed.md, or its coordinator). With use_mmap
  // the file's pages are read as they are used anyway.
  int64_t first_layer = 0, last_layer = -1;
  // With layers chosen above: whether the embeddings, the final norm and the head are read too (a
  // stage's worker needs neither: its coordinator embeds and samples).
  bool globals = true;
  // The disk tier (engine/ram_tier): a sparse file's per-neuron FFN tensors (neuron_row_tensors), or a
  // mixture's experts (per_expert_tensor_suffix), are
  // not read at load; their memory in the private copy stays untouched — no resident pages, no huge
  // pages — until the tier reads the rows a step needs into place. The embedding table too, where the
  // head has its own (embeddings_from_disk): a step reads its tokens' rows. Not with use_mmap.
  bool ffn_rows_from_disk = false;
};

class model {
 public:
  // Throws model_error (unknown architecture, missing tensor, wrong shape or type),
  // gguf::format_error (corrupt file) or std::system_error (cannot read).
  // act_thresholds (one per layer, for a SiLU/GELU file): in place of the file's activation thresholds
  // (hotcold.sparsity.act_thresholds) — prepare --sparsity profiles the thresholded model before
  // writing it.
  static std::shared_ptr<const model> load(const std::string& path, const load_options& options = {}, std::span<const float> act_thresholds = {});

  const std::string& path() const { return path_; }
  const hparams& hp() const { return hp_; }
  const vocab& vocabulary() const { return *vocab_; }
  // The vocabulary's pieces as grammars see them (model/grammar_tokens.hpp), made on first use.
  const grammar_vocab& grammar_tokens() const;
  // The file's chat template (tokenizer.chat_template, Jinja), empty when it has none (chat_template.hpp).
  const std::string& chat_template_text() const { return chat_template_; }
  const model_weights& weights() const { return weights_; }
  bool tied_output() const { return tied_output_; }
  // Every layer has an activation predictor (the file can run --mode sparse).
  bool has_predictors() const { return has_predictors_; }
  // Whether layer il's weights were loaded (load_options::first_layer, last_layer).
  bool holds_layer(int64_t il) const { return il >= held_first_ && il < held_last_; }
  // Whether the embeddings, the final norm and the head were loaded (load_options::globals).
  bool holds_globals() const { return holds_globals_; }
  // The hot/cold split from `<model>.generated.gpuidx`, when that file is present.
  const placement_data* placement() const { return placement_ ? &*placement_ : nullptr; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Of them, the tensors this process holds (its layers, and the globals where it holds them).
  uint64_t held_weight_bytes() const { return held_weight_bytes_; }
  bool huge_pages() const { return huge_pages_; }
  // load_options::ffn_rows_from_disk: whether the per-neuron FFN tensors were left in the file, and
  // where a byte of the private copy lies in the file (its offset from the file's start).
  bool ffn_rows_from_disk() const { return ffn_rows_from_disk_; }
  // ... and the embedding table with them (its rows read by token; not where the head is the same table).
  bool embeddings_from_disk() const { return ffn_rows_from_disk_ && !tied_output_ && holds_globals_; }
  uint64_t file_offset(const void* p) const;

 private:
  model() = default;
  std::string path_;
  hparams hp_;
  std::unique_ptr<vocab> vocab_;
  mutable std::once_flag grammar_once_;
  mutable std::unique_ptr<grammar_vocab> grammar_tokens_;
  std::string chat_template_;
  model_weights weights_;
  bool tied_output_ = false;
  bool has_predictors_ = false;
  int64_t held_first_ = 0, held_last_ = 0;
  bool holds_globals_ = true;
  std::optional<placement_data> placement_;
  uint64_t weight_bytes_ = 0;
  bool huge_pages_ = false;
  bool ffn_rows_from_disk_ = false;
  uint64_t held_weight_bytes_ = 0;
  uint64_t data_offset_ = 0;          // the data section's offset in the file
  size_t shift_ = 0;                  // where the data section starts in buffer_ (ffn_rows_from_disk: in line with the file's pages)
  std::unique_ptr<gguf::file> file_;  // kept for --mmap (weights point into it)
  page_buffer buffer_;                // anonymous copy of the data section
};

// Types the compute supports for weight matrices and the embedding.
bool matrix_type_supported(tensor_type t);

// A sparse layer's FFN tensors (a layer with a bundle or ffn_down_t rows) whose row i is neuron i's
// alone, read by the sparse path a chosen neuron at a time: the bundle, or the gate, up and
// ffn_down_t rows (a thresholded layer's gate too: a step that reads every gate row — its exact
// variant — asks the tier for every row); none for a dense layer. What the disk tier leaves in the file and reads by neuron (a tensor named
// "blk.N.<suffix>" is one where per_neuron_tensor_suffix says so).
std::vector<const tensor_view*> neuron_row_tensors(const layer_weights& l);
bool per_neuron_tensor_suffix(std::string_view suffix);
// A mixture's expert tensors ("blk.N.ffn_{gate,up,down}_exps.weight"): what the disk tier leaves in the
// file and reads by expert.
bool per_expert_tensor_suffix(std::string_view suffix);
// The units the disk tier reads a layer by, as views whose row r is unit r's bytes in the file's layout:
// a sparse layer's neuron_row_tensors (a row a neuron); a mixture's (n_expert > 0) gate, up and down
// experts (a "row" an expert: its rows one after another, plain, never interleaved); none for a dense
// layer.
std::vector<tensor_view> tier_units(const layer_weights& l, int64_t n_expert);
// Expert e's rows of a mixture's expert tensor t that the load marked interleaved (its experts left
// in the file, interleaved as they are read): rewritten in place, as the load would have; nothing for
// a plain tensor.
void interleave_expert_in_place(const tensor_view& t, int64_t e, int64_t n_expert);

}  // namespace hotcold
