#include "engine/read_costs.hpp"

namespace hotcold {

read_costs::read_costs(const model& m) {
  const auto& w = m.weights();
  const hparams& hp = m.hp();
  // A mixture of experts: the engine counts the chosen experts' neurons (n_ff_exp each) as the rows read.
  const int64_t n_ff = hp.moe() ? hp.n_expert * hp.n_ff_exp : hp.n_ff;
  for (const auto& L : w.layers) {
    const uint64_t ffn = L.ffn_gate.bytes() + L.ffn_up.bytes() + L.ffn_down.bytes() + L.ffn_down_t.bytes() + L.ffn_gate_exps.bytes() + L.ffn_up_exps.bytes() +
                         L.ffn_down_exps.bytes();
    uint64_t attn = 0;
    for (const tensor_view* t : attention_weights(L)) attn += t->bytes();
    for (const tensor_view* t : attention_extras(L)) attn += t->bytes();
    attention.push_back(attn);
    ffn_norm.push_back(L.ffn_norm.bytes());
    predictor.push_back(L.pred_fc1.bytes() + L.pred_fc2.bytes());
    router.push_back(L.ffn_gate_inp.bytes() + L.ffn_gate_inp_shexp.bytes() + L.ffn_gate_shexp.bytes() + L.ffn_up_shexp.bytes() + L.ffn_down_shexp.bytes());
    layer_fixed.push_back(attention.back() + ffn_norm.back() + predictor.back() + router.back());
    ffn_dense.push_back(ffn);
    neuron.push_back(n_ff > 0 ? ffn / static_cast<uint64_t>(n_ff) : 0);
    down_row.push_back(n_ff > 0 ? (L.ffn_down.bytes() + L.ffn_down_t.bytes() + L.ffn_down_exps.bytes()) / static_cast<uint64_t>(n_ff) : 0);
  }
  output = w.output_norm.bytes() + w.output_norm_b.bytes() + w.output.bytes();
  embedding_row = w.token_embd.row_bytes;
}

uint64_t read_costs::dense_step() const {
  uint64_t bytes = output + embedding_row;
  for (size_t l = 0; l < layer_fixed.size(); ++l) bytes += layer_fixed[l] + ffn_dense[l];
  return bytes;
}

}  // namespace hotcold
