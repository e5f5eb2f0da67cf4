#pragma once
// What a hot device holds besides hot FFN rows, as a placement plan put it there (loader/placement.hpp):
// per layer its attention (norms, Q/K/V/O, the FFN norm, and the layer's KV cache), its predictor, a
// dense file's whole FFN, and the output head, plus the compute buffers the plan sets aside. The
// weights are copied into the device's buffers at construction (one transfer per tensor); what the
// device holds is then computed on the device's queue, reading only those copies — the forward pass
// asks here where a layer's stage runs and with which weights.
//
// A device that computes with host code (sim, cpu) runs the engine's CPU routines on its queue over
// the copies (its buffers are host memory). A GPU (cuda, hip) holds what its kernels compute
// (devices::device::supports): attention, predictors, a dense layer's FFN and the head with F16, Q8_0 or
// Q4_0 weights, their rows put back in plain order when the private copy interleaved them; the norms
// are applied on the host (the copies of the norms it holds are not read).
#include <cstdint>
#include <atomic>
#include <initializer_list>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "devices/device.hpp"
#include "engine/thread_pool.hpp"
#include "kernels/cpu/quants.hpp"
#include "model/model.hpp"

namespace hotcold {

// Which of a model's parts live on the hot device.
struct device_residency {
  std::vector<uint8_t> attention, predictor, ffn;  // per layer (ffn: a dense layer's whole FFN)
  std::vector<uint8_t> shared;                     // per layer: a mixture's shared expert (empty: none anywhere)
  bool output = false;                             // the output norm and head
  int64_t ctx = 0, n_seq = 1;                      // the KV cache's positions and sequences
  uint64_t compute_bytes = 0;                      // compute buffers set aside on the device
  bool any() const;
};

// v's rows, packed, in plain order (a private copy's groups of sixteen interleaved rows put back in
// order): v.bytes() bytes into out.
void plain_rows(const tensor_view& v, uint8_t* out);
// Whether the device computes this layer's attention (every product's weights, and what the job does:
// a GPU's has no soft-capped scores, sliding window or query scale, so Gemma 2's stays on the host),
// and its whole FFN.
bool attention_runs_on(const devices::device& dev, const hparams& hp, const layer_weights& l);
bool dense_ffn_runs_on(const devices::device& dev, const layer_weights& l);
// Whether the device's dense-FFN job reads weights of these types (a host device: any; absent tensors
// pass): a dense layer's FFN, a mixture's experts and shared expert.
bool dense_ffn_reads(const devices::device& dev, std::initializer_list<const tensor_view*> ws);

class device_layers {
 public:
  // Throws devices::out_of_device_memory when the plan does not fit the device's budget,
  // std::invalid_argument when it does not fit the model or the device cannot run host work.
  device_layers(std::shared_ptr<const model> m, const device_residency& r, std::shared_ptr<devices::device> dev, kv_types kv);

  bool attention(int64_t layer) const { return r_.attention[static_cast<size_t>(layer)] != 0; }
  bool predictor(int64_t layer) const { return r_.predictor[static_cast<size_t>(layer)] != 0; }
  bool ffn(int64_t layer) const { return r_.ffn[static_cast<size_t>(layer)] != 0; }
  bool shared_expert(int64_t layer) const { return !r_.shared.empty() && r_.shared[static_cast<size_t>(layer)] != 0; }
  bool output() const { return r_.output; }
  // The layer's weights: what the device holds points at its copies, the rest at the model's.
  const layer_weights& layer(int64_t l) const { return layers_[static_cast<size_t>(l)]; }
  // The output norm and head, the device's copies when it holds them.
  const tensor_view& output_weights() const { return output_; }
  const tensor_view& output_norm() const { return output_norm_; }
  const tensor_view& output_norm_b() const { return output_norm_b_; }
  // The layer's KV cache on the device (attention(layer)): (n_seq, ctx, n_embd_kv) values of kv_types().
  uint8_t* k_cache(int64_t l) const;
  uint8_t* v_cache(int64_t l) const;
  // Bytes of layer l's cache (its keys, or its values) from byte `offset` copied to host memory, or
  // from it; each waits for its copy.
  void cache_out(int64_t l, bool values, uint64_t offset, void* dst, uint64_t bytes) const;
  void cache_in(int64_t l, bool values, uint64_t offset, const void* src, uint64_t bytes) const;
  const device_residency& residency() const { return r_; }
  kv_types cache_types() const { return kv_types_; }

  // The plan's compute buffers on the device: scratch for the activations of the device's stages (a
  // GPU's predictor and head take their inputs there).
  void* scratch() const { return compute_ ? compute_->data() : nullptr; }
  uint64_t scratch_bytes() const { return compute_ ? compute_->size() : 0; }
  // The compute buffers' last n_embd floats (from a 16-byte boundary): where a mixture's hot experts
  // leave one token's sum for the next layer's attention job; the jobs between them take the scratch
  // before it (scratch_beside_pending bytes). read_pending copies the sum back and waits.
  float* pending_sums() const;
  uint64_t scratch_beside_pending() const;
  void read_pending(float* dst) const;

  // Runs `work` on the device's queue and waits for it (rethrows what it threw); inline when called
  // from work the queue is running (a chain of stages given to submit()).
  void run(const std::function<void()>& work) const;
  // Queues `work` (a chain of the device's stages, each calling run()) without waiting.
  devices::event submit(std::function<void()> work) const;
  // The device's own workers for the work run() gives it: its queue's thread alone (a pool of one, so
  // the CPU's workers stay free for the cold share), and their scratch. Only from that work.
  thread_pool& pool() const { return *pool_; }
  std::vector<kernels::block_q8_0>& xq() const { return xq_; }

  // Bytes of weights the device holds for layer l's attention (with its norms and the FFN norm), its
  // predictor and its whole FFN, and for the head: what a step reads there instead of on the host.
  uint64_t attention_bytes(int64_t l) const { return attention_bytes_[static_cast<size_t>(l)]; }
  uint64_t predictor_bytes(int64_t l) const { return predictor_bytes_[static_cast<size_t>(l)]; }
  uint64_t ffn_bytes(int64_t l) const { return ffn_bytes_[static_cast<size_t>(l)]; }
  uint64_t output_bytes() const { return output_bytes_; }
  uint64_t bytes() const { return bytes_; }  // everything allocated here, compute buffers and KV included
  // A layer's predictor choice made with its attention (one crossing for both, on a GPU): kept for the
  // predictor's call that follows on the same input (pred_in, n), which takes it instead of running
  // the predictor again. Each layer's attention replaces its layer's (chosen null: drops it); taken once.
  void keep_choice(int64_t layer, const float* pred_in, int64_t n, const uint8_t* chosen, int64_t n_ff) const;
  bool take_choice(int64_t layer, const float* pred_in, int64_t n, uint8_t* chosen, int64_t n_ff) const;
  int64_t choices_taken() const { return choices_taken_.load(std::memory_order_relaxed); }  // (tests, traces)
  devices::device& device() const { return *dev_; }
  const std::shared_ptr<devices::device>& shared_device() const { return dev_; }

 private:
  // Copies a tensor into a buffer of its own and points `v` at the copy.
  void hold(tensor_view& v, const std::string& what);
  std::shared_ptr<const model> model_;
  device_residency r_;
  std::shared_ptr<devices::device> dev_;
  kv_types kv_types_;
  std::vector<layer_weights> layers_;
  tensor_view output_, output_norm_, output_norm_b_;
  std::vector<std::shared_ptr<devices::buffer>> buffers_;
  std::shared_ptr<devices::buffer> compute_;
  std::vector<std::shared_ptr<devices::buffer>> k_, v_;  // per layer (null where the host holds the cache)
  std::vector<uint64_t> attention_bytes_, predictor_bytes_, ffn_bytes_;
  std::unique_ptr<thread_pool> pool_;
  mutable std::vector<kernels::block_q8_0> xq_;
  uint64_t output_bytes_ = 0;
  uint64_t bytes_ = 0;
  struct kept_choice {
    const float* pred_in = nullptr;
    int64_t n = 0;
    std::vector<uint8_t> chosen;
  };
  mutable std::mutex kept_mu_;
  mutable std::vector<kept_choice> kept_;  // per layer
  mutable std::atomic<int64_t> choices_taken_{0};
};

}  // namespace hotcold
