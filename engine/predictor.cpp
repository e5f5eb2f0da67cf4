#include "engine/predictor.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/select.hpp"
#include "engine/matmul.hpp"
#include "engine/rows.hpp"

namespace hotcold {

predictor_runner::predictor_runner(const model& m, thread_pool& pool) : model_(m), pool_(pool) {
  // A thresholded file's choice, |act(score)| >= the layer's threshold, as bands of scores.
  const hparams& hp = m.hp();
  if (!hp.act_threshold.empty())
    for (float t : hp.sparse_threshold) bands_.push_back(act_band_of(hp.act, t));
}

void predictor_runner::predict(int64_t layer, const float* pred_in, int64_t n, uint8_t* chosen, std::vector<int32_t>& union_ids) {
  if (device_ && device_->predictor(layer) && !device_->device().runs_host_work()) {
    // A GPU: its predictor kernel gives each token's choice; the union is listed here.
    device_read_ += device_->predictor_bytes(layer);
    const layer_weights& l = device_->layer(layer);
    const int64_t n_ff = model_.hp().n_ff;
    devices::predict_job job;
    job.type = l.pred_fc1.type;
    job.fc1 = l.pred_fc1.data, job.fc2 = l.pred_fc2.data;
    job.n = n, job.d = model_.hp().n_embd, job.rank = l.pred_fc1.ne1, job.n_ff = n_ff;
    job.x = pred_in;
    job.threshold = model_.hp().sparse_threshold[static_cast<size_t>(layer)];
    job.on_act = !model_.hp().act_threshold.empty(), job.act = model_.hp().act;
    job.chosen = chosen;
    job.scratch = device_->scratch(), job.scratch_bytes = device_->scratch_bytes();
    // Chosen already, with the layer's attention (the same input): taken; else the predictor's job.
    if (!device_->take_choice(layer, pred_in, n, chosen, n_ff)) device_->run([&] { device_->device().compute(job); });
    union_ids.clear();
    for (int64_t i = 0; i < n_ff; ++i)
      for (int64_t t = 0; t < n; ++t)
        if (chosen[t * n_ff + i]) {
          union_ids.push_back(static_cast<int32_t>(i));
          break;
        }
    return;
  }
  if (device_ && device_->predictor(layer)) {
    device_read_ += device_->predictor_bytes(layer);
    return device_->run([&] { predict(device_->layer(layer), device_->pool(), device_->xq(), layer, pred_in, n, chosen, union_ids); });
  }
  predict(model_.weights().layers[static_cast<size_t>(layer)], pool_, xq_, layer, pred_in, n, chosen, union_ids);
}

void predictor_runner::predict(const layer_weights& l, thread_pool& pool, std::vector<kernels::block_q8_0>& xq, int64_t layer, const float* pred_in,
                               int64_t n, uint8_t* chosen, std::vector<int32_t>& union_ids) {
  const hparams& hp = model_.hp();
  if (!l.pred_fc1) throw std::logic_error(fmt::format("layer {} has no predictor", layer));
  const int64_t rank = l.pred_fc1.ne1, n_ff = hp.n_ff;
  if (static_cast<int64_t>(hidden_.size()) < n * rank) hidden_.resize(static_cast<size_t>(n * rank));
  if (static_cast<int64_t>(scores_.size()) < n * n_ff) scores_.resize(static_cast<size_t>(n * n_ff));
  matmul(pool, l.pred_fc1, pred_in, n, hidden_.data(), xq);
  for (int64_t k = 0; k < n * rank; ++k) hidden_[static_cast<size_t>(k)] = std::max(hidden_[static_cast<size_t>(k)], 0.0f);
  matmul(pool, l.pred_fc2, hidden_.data(), n, scores_.data(), xq);
  float threshold = hp.sparse_threshold[static_cast<size_t>(layer)];
  if (!bands_.empty()) {  // estimated pre-activations: 1 where |act(score)| >= threshold
    mark_band(bands_[static_cast<size_t>(layer)], scores_.data(), n * n_ff);
    threshold = 0.5f;
  }
  // Branch-free: whether a neuron is chosen is close to a coin toss the branch predictor cannot
  // learn; a branch here cost a tenth of the layer (docs/performance.md).
  union_ids.resize(static_cast<size_t>(n_ff + 16));  // (room for the vector path's last store)
  int32_t* ids = union_ids.data();
  if (n == 1) {  // decode: the choice is the union
    union_ids.resize(static_cast<size_t>(kernels::select_at_least(scores_.data(), n_ff, threshold, chosen, ids)));
    return;
  }
  int64_t count = 0;
  any_.assign(static_cast<size_t>(n_ff), 0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < n_ff; ++i) {
      const uint8_t c = scores_[static_cast<size_t>(t * n_ff + i)] >= threshold;
      chosen[t * n_ff + i] = c;
      any_[static_cast<size_t>(i)] |= c;
    }
  for (int64_t i = 0; i < n_ff; ++i) {
    ids[count] = static_cast<int32_t>(i);
    count += any_[static_cast<size_t>(i)];
  }
  union_ids.resize(static_cast<size_t>(count));
}

}  // namespace hotcold
