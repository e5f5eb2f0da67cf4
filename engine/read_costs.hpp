#pragma once
// Bytes of weights each part of a step reads, from the model's tensor sizes: what /metrics counts,
// what bench reports per token, what placement and the what-if charge per FFN neuron.
#include <cstdint>
#include <vector>

#include "model/model.hpp"

namespace hotcold {

struct read_costs {
  std::vector<uint64_t> layer_fixed;   // per layer: attention, norms, predictor and router (the four below)
  std::vector<uint64_t> attention;     // per layer: attention's tensors (attention_weights and attention_extras)
  std::vector<uint64_t> ffn_norm;      // per layer: the FFN's norm
  std::vector<uint64_t> predictor;     // per layer: the activation predictor
  std::vector<uint64_t> router;        // per layer: a mixture of experts' router and shared expert (read by every token)
  std::vector<uint64_t> neuron;        // per layer: one FFN neuron's gate, up and down rows (a mixture of experts: one expert neuron's)
  std::vector<uint64_t> down_row;      // per layer: of those, the down row's
  std::vector<uint64_t> ffn_dense;     // per layer: every FFN weight
  uint64_t output = 0;                 // final norm and head
  uint64_t embedding_row = 0;          // per token
  explicit read_costs(const model& m);
  // What a dense step reads: every layer's weights, the head and an embedding row.
  uint64_t dense_step() const;
  // Layer l's FFN rows: the gate and up rows of `neurons`, the down rows of `down_rows` of them.
  uint64_t ffn_rows(size_t l, uint64_t neurons, uint64_t down_rows) const { return (neuron[l] - down_row[l]) * neurons + down_row[l] * down_rows; }
};

// One layer's KV cache read by a decoded token that attends over `cached_rows` positions: its K and
// V rows of n_embd_kv values each, in the cache's types.
inline double kv_read_per_token(const hparams& hp, kv_types kv, double cached_rows) {
  return static_cast<double>(values_bytes(kv.k, hp.n_embd_kv()) + values_bytes(kv.v, hp.n_embd_kv())) * cached_rows;
}

}  // namespace hotcold
