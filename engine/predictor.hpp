#pragma once
// A layer's activation predictor run on a batch of inputs: score = fc2 · relu(fc1 · x) per neuron,
// and a token chooses neuron i when its score reaches the layer's threshold (PowerInfer's rule).
// The forward pass runs it inline; the predictor actor runs it as its own stage.
#include <cstdint>
#include <vector>

#include "kernels/cpu/quants.hpp"
#include <memory>

#include "engine/device_layers.hpp"
#include "engine/neuron_rules.hpp"
#include "engine/rows.hpp"
#include "model/model.hpp"
#include "engine/thread_pool.hpp"

namespace hotcold {

class predictor_runner {
 public:
  predictor_runner(const model& m, thread_pool& pool);
  // pred_in: n x n_embd. chosen (n x n_ff) gets 1 where token t chose neuron i, else 0; union_ids
  // the neurons any token chose, ascending. The layer must have a predictor.
  // On the hot device's queue, over its copies, for the layers whose predictor it holds.
  void predict(int64_t layer, const float* pred_in, int64_t n, uint8_t* chosen, std::vector<int32_t>& union_ids);
  void set_device_layers(std::shared_ptr<const device_layers> d) { device_ = std::move(d); }
  uint64_t device_read() const { return device_read_; }  // bytes of predictor weights read on the device

 private:
  void predict(const layer_weights& l, thread_pool& pool, std::vector<kernels::block_q8_0>& xq, int64_t layer, const float* pred_in, int64_t n,
               uint8_t* chosen, std::vector<int32_t>& union_ids);
  const model& model_;
  std::shared_ptr<const device_layers> device_;
  uint64_t device_read_ = 0;
  thread_pool& pool_;
  std::vector<float> hidden_;  // n x rank
  std::vector<float> scores_;  // n x n_ff
  std::vector<uint8_t> any_;   // n_ff
  std::vector<kernels::block_q8_0> xq_;
  std::vector<act_band> bands_;  // per layer, for thresholded files
};

}  // namespace hotcold
