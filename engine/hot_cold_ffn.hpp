#pragma once
// The FFN split by placement. Each layer's hot neurons (gate, up and ffn_down_t rows) are copied into
// buffers of the hot device and computed on its queue (hot_rows), while the cold neurons are computed
// from host memory by CPU workers, each owning a shard of them (cold_share), at the same time; the
// two partial sums are added. This file is the one place the split is written: the actor pipeline
// runs its two halves (hot_rows::submit, cold_share) in the hot executor and the cold pool;
// hot_cold_ffn runs the same two inside the forward pass (the reference pipeline). The hot device
// computes its share by its own operation (devices::device::compute), whatever the device is.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <chrono>
#include <functional>

#include "devices/device.hpp"
#include "engine/ffn_block.hpp"
#include "engine/read_costs.hpp"
#include "engine/thread_pool.hpp"
#include "model/placement_file.hpp"

namespace hotcold {

// Chosen neurons of a layer, split by where their rows live; each list ascending by neuron id.
struct ffn_split {
  std::vector<int32_t> hot_ids, hot_slots;  // hot neurons and their rows in the device's copy
  std::vector<int32_t> cold_ids;
};

class hot_rows {
 public:
  // Needs a sparse file (ffn_down_t in every layer). Throws devices::out_of_device_memory when the
  // hot rows (and the device's scratch for a step) do not fit its budget, std::invalid_argument for a
  // placement that does not fit the model, or for rows the device does not compute (supports()).
  // disk: the disk tier of a model whose rows are left in the file (engine/ram_tier): each layer's hot
  // rows read through it for the copy, then let go (the device holds them).
  hot_rows(std::shared_ptr<const model> m, const placement_data& placement, std::shared_ptr<devices::device> hot, ram_tier* disk = nullptr);
  void split(int64_t layer, std::span<const int32_t> chosen, ffn_split& out) const;
  // ids less the neurons the device holds (the disk tier's read-ahead reads the cold ones alone).
  void keep_cold(int64_t layer, std::vector<int32_t>& ids) const;
  // Queues the hot share of a step on the device: each token computes the hot neurons it chose into
  // hidden (n x n_ff) and out (n x n_embd, zeroed first). The inputs must outlive the event. The
  // device's time on it goes to `timed` when given (called on the device's queue).
  using timing = std::function<void(int64_t layer, std::chrono::steady_clock::duration)>;
  devices::event submit(int64_t step, int64_t layer, const ffn_split& s, const batch_ffn_input& x, float* hidden, float* out,
                        trace_recorder* trace, const timing& timed = {}) const;
  uint64_t bytes() const { return bytes_; }  // rows held on the device
  devices::device& device() const { return *hot_; }
  const std::shared_ptr<devices::device>& shared_device() const { return hot_; }

 private:
  struct layer_rows {
    std::vector<int32_t> slot;  // per neuron: its row on the device, -1 when cold
    tensor_view gate, up, down_t;
  };
  void upload(const placement_data& placement, ram_tier* disk);
  std::shared_ptr<const model> model_;
  std::shared_ptr<devices::device> hot_;
  std::vector<std::shared_ptr<devices::buffer>> buffers_;
  std::vector<layer_rows> layers_;
  uint64_t bytes_ = 0;
};

// The cold share of a step on `pool`: worker t computes the cold neurons of its shard — an equal share
// of them, in id order — then helps with
// what is left of the others' (neuron_shards), into hidden (n x n_ff) and each piece's accumulator
// (acc: scratch, grown as needed); out (n x n_embd) = their sum, in piece order. at: the step and
// layer, and the recorder its cold_ffn intervals go to. cold: the cold neurons, ascending, and the
// rows that hold them (their own, or the disk tier's slots: engine/ram_tier, whose use says too when
// a piece's rows have landed).
struct cold_neurons {
  neuron_set set;
  const ram_tier::use* disk = nullptr;
};
void cold_share(thread_pool& pool, const model& m, const trace_span& at, const cold_neurons& cold, const batch_ffn_input& x, float* hidden,
                std::vector<float>& acc, float* out);
// A cold share's rows through the disk tier (null: none, all in memory): every neuron in its own row
// where the share is every neuron of the layer (its products read the tensors whole), else where the
// tier puts them, read while the share computes; and the share's neurons with them.
std::optional<ram_tier::use> cold_rows(ram_tier* tier, int64_t layer, std::span<const int32_t> cold_ids, int64_t n_ff);
cold_neurons cold_of(std::span<const int32_t> cold_ids, const std::optional<ram_tier::use>& rows);

class hot_cold_ffn final : public ffn_executor {
 public:
  // Rows already on the device; the cold share runs on `cold` (e.g. the forward pass's own workers,
  // so that two pools do not compete for the same cores), which must outlive this object.
  hot_cold_ffn(std::shared_ptr<const model> m, std::shared_ptr<const hot_rows> rows, thread_pool& cold);
  // The same with a pool of its own.
  hot_cold_ffn(std::shared_ptr<const model> m, const placement_data& placement, std::shared_ptr<devices::device> hot, int cold_threads);

  void run_batch(int64_t step, int64_t layer, const batch_ffn_input& x, std::span<const int32_t> union_of_chosen, float* hidden,
                 float* out) override;
  void keep_cold(int64_t il, std::vector<int32_t>& ids) const override;
  // Records hot_ffn (on the device's thread) and cold_ffn (on the pool's) intervals (null: none).
  void set_trace(trace_recorder* t) { trace_ = t; }
  // The disk tier the cold rows are read through (engine/ram_tier; null: all in memory).
  void set_disk_tier(ram_tier* t) { disk_ = t; }

  struct counts {
    int64_t hot = 0, cold = 0;  // chosen neurons computed on each side, all layers, all steps
    uint64_t hot_read = 0;      // bytes of FFN rows read on the device: gate and up rows of the hot chosen, down rows of those that fired
  };
  const counts& computed() const { return computed_; }
  uint64_t hot_bytes() const { return rows_->bytes(); }
  const std::shared_ptr<const hot_rows>& rows() const { return rows_; }

 private:
  std::shared_ptr<const model> model_;
  std::shared_ptr<const hot_rows> rows_;
  std::unique_ptr<thread_pool> own_cold_;
  thread_pool* cold_;
  read_costs costs_;
  counts computed_;
  trace_recorder* trace_ = nullptr;
  ram_tier* disk_ = nullptr;
  ffn_split split_;
  std::vector<float> hot_out_, cold_acc_;  // n x n_embd, the cold share's pieces' sums (scratch)
};

}  // namespace hotcold
