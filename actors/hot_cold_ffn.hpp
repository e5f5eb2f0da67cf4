#pragma once
// The FFN split by placement: each layer's hot neurons (gate, up and ffn_down_t rows) are copied into
// buffers of the hot device and computed on its queue, while the cold pool computes the cold ones
// from host memory on its own threads, at the same time; the two partial sums are added. This is
// the compute the hot executor and cold pool actors run; used directly (synchronously, one token
// at a time) it is the reference the actor pipeline is checked against.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "devices/device.hpp"
#include "kernels/cpu/quants.hpp"
#include "model/forward.hpp"
#include "model/placement_file.hpp"
#include "model/thread_pool.hpp"

namespace hotcold::actors {

class hot_cold_ffn final : public ffn_executor {
 public:
  // Needs a sparse file (ffn_down_t in every layer). Throws devices::out_of_device_memory when the
  // hot rows do not fit the device's budget, std::invalid_argument for a placement that does not
  // fit the model.
  hot_cold_ffn(std::shared_ptr<const model> m, const placement_data& placement, std::shared_ptr<devices::device> hot, int cold_threads);
  // The same, with the cold share computed on `cold` (e.g. the forward pass's own workers, so that two
  // pools do not compete for the same cores); `cold` must outlive this object.
  hot_cold_ffn(std::shared_ptr<const model> m, const placement_data& placement, std::shared_ptr<devices::device> hot, thread_pool& cold);

  void run(int64_t step, int64_t layer, const float* in, std::span<const int32_t> chosen, float* hidden, float* out) override;
  void run_batch(int64_t step, int64_t layer, const batch_ffn_input& x, std::span<const int32_t> union_of_chosen, float* hidden,
                 float* out) override;
  // Records hot_ffn (on the device's thread) and cold_ffn (on the pool's) intervals (null: none).
  void set_trace(trace_recorder* t) { trace_ = t; }

  struct counts {
    int64_t hot = 0, cold = 0;  // chosen neurons computed on each side, all layers, all steps
  };
  const counts& computed() const { return computed_; }
  uint64_t hot_bytes() const { return hot_bytes_; }  // rows held on the hot device

 private:
  void init(const placement_data& placement);
  void upload_layers(const placement_data& placement);
  struct hot_layer {
    std::vector<int32_t> slot;  // per neuron: its row on the device, -1 when cold
    tensor_view gate, up, down_t;
  };
  std::shared_ptr<const model> model_;
  std::shared_ptr<devices::device> hot_;
  std::vector<std::shared_ptr<devices::buffer>> buffers_;
  std::vector<hot_layer> layers_;
  std::unique_ptr<thread_pool> own_cold_;
  thread_pool* cold_;
  counts computed_;
  uint64_t hot_bytes_ = 0;
  trace_recorder* trace_ = nullptr;
  // Per step: the split, the quantized input both sides read, the partial sums.
  std::vector<int32_t> hot_ids_, hot_slots_, cold_ids_;
  std::vector<kernels::block_q8_0> xq_;
  std::vector<float> hot_out_, cold_acc_;
  std::vector<float> batch_hot_out_, batch_cold_acc_;  // n x n_embd, threads x n x n_embd
};

}  // namespace hotcold::actors
