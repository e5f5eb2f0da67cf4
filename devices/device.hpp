#pragma once
// Where math is done. A device has a name, a memory budget that its buffers count against exactly,
// and a queue of work with completion events (in the spirit of ggml-backend). Placement is data —
// which rows live in which device's buffers — never #ifdefs in model code.
//
//   cpu   runs work inline on the caller's thread; its buffers are host memory.
//   sim   a CPU-backed stand-in for an accelerator: its own worker thread and queue, an exact
//         memory budget, and an optional cost model for host<->device transfers. Used on machines
//         without a GPU and by tests.
//   cuda  built whenever nvcc exists; buffers in GPU memory, a stream of its own, and a queue thread
//         that runs submitted work (which launches hotcold's kernels on that stream and waits for
//         them) beside the caller.
//   hip   the same back end built by hipcc from the same sources (-DHOTCOLD_GPU=hip,
//         kernels/gpu/portability.hpp); --device hip selects it.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include "kernels/activation.hpp"
#include "devices/work_queue.hpp"
#include "kernels/tensor_types.hpp"

namespace hotcold::devices {

enum class device_kind { cpu, sim, cuda, hip };

// Thrown when an allocation would pass the budget: names the device, the request and what is left.
struct out_of_device_memory : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Thrown by every operation of a device that was lost (a sticky error: a GPU context that faulted
// answers every later call with the same error): names the device and the first error.
struct device_lost : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class device;

// What a buffer of n bytes takes of a device's memory: a GPU's allocator hands out whole granules
// (cudaMalloc: small allocations in 512-byte steps, large ones in 2 MiB pages), so a plan that summed
// the tensors' own bytes would overrun the budget by up to a granule a buffer. The budget counts
// charge(n); plans count it per buffer the runtime makes (loader/placement).
struct allocation_rule {
  uint64_t small_align = 1;  // allocations below large_from round up to a multiple of this
  uint64_t large_from = 0;   // 0: no large rule
  uint64_t large_align = 1;  // ... from it on, to a multiple of this
  uint64_t charge(uint64_t n) const {
    if (n == 0) return 0;
    const uint64_t a = large_from > 0 && n >= large_from ? large_align : small_align;
    return (n + a - 1) / a * a;
  }
};
// CUDA's (and HIP's) allocator, as the GPU back end and sim with kernels charge it.
inline constexpr allocation_rule gpu_allocation{512, 1ull << 20, 2ull << 20};
// The pinned host memory of devices::device::pinned_bytes for a GPU.
uint64_t gpu_pinned_bytes(uint64_t compute_bytes, uint64_t step_bytes);

class buffer;
// For back ends: throws std::out_of_range unless bytes [offset, offset + bytes) lie inside b.
void check_range(const buffer& b, uint64_t offset, uint64_t bytes);

// Memory owned by a device; returns its bytes to the budget when destroyed.
class buffer {
 public:
  ~buffer();
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  // Host-addressable for cpu and sim; a device pointer for cuda.
  void* data() { return data_; }
  const void* data() const { return data_; }
  uint64_t size() const { return size_; }
  // What it takes of the device's budget (its device's allocation_rule: size() rounded up).
  uint64_t charged() const { return charged_; }
  const std::string& label() const { return label_; }

 private:
  friend class device;
  buffer(std::shared_ptr<device> owner, device* dev, void* data, uint64_t size, uint64_t charged, std::string label)
      : owner_(std::move(owner)), dev_(dev), data_(data), size_(size), charged_(charged), label_(std::move(label)) {}
  std::shared_ptr<device> owner_;  // keeps the device alive (null for the device's own buffers: it outlives them)
  device* dev_;
  void* data_;
  uint64_t size_, charged_;
  std::string label_;
};

// What a device computes on rows it holds, in the spirit of ggml-backend's supports_op: cpu, sim and
// cuda answer the same table (supports) and own how they run what they accept (compute).
enum class operation {
  ffn_rows,   // chosen FFN neurons: gate and up rows dotted with the input, the activation, down rows added
  attention,  // a layer's attention with its KV cache (norms, Q/K/V/O, RoPE, the cache, softmax)
  predict,    // a layer's activation predictor: scores = fc2 relu(fc1 x), chosen = scores >= threshold (or |act(scores)|)
  matvec,     // rows of a matrix times vectors (the output head)
  dense_ffn,  // a dense layer's whole FFN: down act(gate x, up x)
};
inline constexpr int n_operations = 5;
const char* operation_name(operation op);  // "ffn_rows", "attention", "predict", "matvec", "dense_ffn"

// The chosen neurons of one step's FFN on rows a device holds.
struct ffn_rows_job {
  tensor_type type = tensor_type::f16;            // of the gate, up and down rows
  const void *gate = nullptr, *up = nullptr, *down_t = nullptr;  // the device's copies (gate: null without a gate)
  bool gated = true;
  kernels::activation act = kernels::activation::relu;
  float act_threshold = 0;                         // a neuron's value is 0 where |act(..)| < this (hparams::act_threshold_of)
  int64_t n = 0, d = 0, n_ff = 0;                  // tokens, embedding, neurons per layer
  const float* x = nullptr;                        // host: n x d inputs
  const uint8_t* chosen = nullptr;                 // host: n x n_ff, which neurons each token chose (null: one token, every id)
  const int32_t* ids = nullptr;                    // the neurons (ascending) ...
  const int32_t* slots = nullptr;                  // ... and their rows in the device's copies
  int64_t count = 0;
  float* hidden = nullptr;                         // host: n x n_ff, each chosen neuron's value
  float* out = nullptr;                            // host: n x d, the sum of value x down row (written whole)
  // The CPU's routine for the same job, for devices that compute with host code (cpu, sim).
  std::function<void()> host;
};

// A layer's predictor on weights a device holds, for n tokens (one at a time on a GPU).
struct predict_job {
  tensor_type type = tensor_type::f16;           // of fc1 and fc2
  const void *fc1 = nullptr, *fc2 = nullptr;     // the device's copies: rank x d, n_ff x rank
  int64_t n = 0, d = 0, rank = 0, n_ff = 0;
  const float* x = nullptr;                      // host: n x d
  float threshold = 0;
  // Thresholded files: the scores estimate pre-activations, and chosen = |act(score)| >= threshold.
  bool on_act = false;
  kernels::activation act = kernels::activation::silu;
  uint8_t* chosen = nullptr;                     // host: n x n_ff, 1 where token t chose neuron i
  void* scratch = nullptr;                       // device memory for a token's activations (the plan's compute buffers)
  uint64_t scratch_bytes = 0;
  std::function<void()> host;                    // the CPU's routine, for devices that compute with host code
};

// y = W x for n vectors, W a matrix a device holds (the output head).
struct matvec_job {
  tensor_type type = tensor_type::f16;
  const void* w = nullptr;                       // the device's copy: rows x cols
  int64_t n = 0, rows = 0, cols = 0;
  const float* x = nullptr;                      // host: n x cols
  float* y = nullptr;                            // host: n x rows
  void* scratch = nullptr;                       // device memory (the plan's compute buffers)
  uint64_t scratch_bytes = 0;
  std::function<void()> host;
};

// One step's attention for a layer whose weights and KV cache a device holds, from the normalized
// inputs to the output product: q, k, v = products of the input (one fused matrix or three), RoPE
// by the given angles, k and v stored in the layer's cache at each token's (sequence, position),
// softmax(q.K / sqrt(head_dim)) V over the sequence's positions up to the token's own (causal,
// grouped-query heads), then the output product. The norms before and after stay on the host.
struct dense_ffn_job;
struct attention_job {
  // The device's copies: wqkv ((dq + 2 kv) x d) or wq (dq x d), wk, wv (kv x d); wo (d x dq), where dq
  // = n_head x head_dim, the queries' width (d unless the model's heads are wider, as Qwen3's small ones).
  const void *wqkv = nullptr, *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
  tensor_type t_qkv = tensor_type::f16, t_q = tensor_type::f16, t_k = tensor_type::f16, t_v = tensor_type::f16, t_o = tensor_type::f16;
  int64_t n = 0, d = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  int64_t dq() const { return n_head * head_dim; }
  // Before RoPE, where non-null (the device's F32 copies): biases added to q, k, v (qwen2), then each
  // head of q and k through RMSNorm with q_norm / k_norm (head_dim each) and norm_eps (qwen3).
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  float norm_eps = 1e-6f;
  bool adjacent_pairs = false;   // RoPE rotates (2i, 2i + 1), else (i, i + n_rot / 2) (neox)
  const float* x = nullptr;      // host: n x d, the normalized inputs
  const float* angles = nullptr; // host: n x n_rot, token t's n_rot / 2 cosines then n_rot / 2 sines
  const int32_t* seqs = nullptr; // host: each token's sequence slot ...
  const int32_t* positions = nullptr;  // ... and position
  void *k_cache = nullptr, *v_cache = nullptr;  // the device's: (n_seq, ctx, n_head_kv x head_dim) values of kv_type
  tensor_type kv_type = tensor_type::f16;
  int64_t ctx = 0, n_seq = 0;
  float* out = nullptr;          // host: n x d, the output product
  // The layer's predictor too, when the device holds it (fc1 non-null): its input is the layer's input
  // x, plus the output product when pred_adds_out (the residual stream after attention); each token's
  // choice comes back with the output, so attention and predictor cross to the device once.
  const void *fc1 = nullptr, *fc2 = nullptr;  // the device's copies: rank x d, n_ff x rank
  tensor_type t_pred = tensor_type::f16;
  int64_t rank = 0, n_ff = 0;
  float threshold = 0;
  bool pred_adds_out = false;
  const float* layer_in = nullptr;  // host: n x d
  uint8_t* chosen = nullptr;        // host: n x n_ff
  // The FFN after it too, where `ffn` is non-null (a whole layer on the device: one wait a chunk, not
  // two with the host between): h = residual + the output product (residual: host, n x d, the layer's
  // input) through RMSNorm with ffn_norm (the device's F32 copy, d values) and norm_eps is the input of
  // ffn's FFN (its weights, types, activation and hidden; its n, d, x, out and scratch unused), and
  // `out` receives h + the FFN's output: the next layer's input. Not with a predictor.
  const float* residual = nullptr;
  const float* ffn_norm = nullptr;
  const dense_ffn_job* ffn = nullptr;
  // The layer's norm on the device too, where attn_norm (the device's F32 copy, d values) is non-null:
  // the layer's input is residual (host, n x d) plus pending (device memory, n x d, where non-null: a
  // mixture's hot experts' sum the job before left there, dense_ffn_job::combine_into), x is unused,
  // attention reads its RMSNorm (norm_eps), and `out` receives that input plus the output product (the
  // residual stream after attention; with the FFN after it, as above). Not with a predictor.
  const float* pending = nullptr;
  const float* attn_norm = nullptr;
  void* scratch = nullptr;       // device memory (the plan's compute buffers)
  uint64_t scratch_bytes = 0;
};
// A dense layer's whole FFN on weights a device holds: out = down h, h = act(gate x) * (up x) (act(up x)
// without a gate; relu(gate x) relu(up x) for dReLU).
// Part of a dense-FFN job with weights of its own: rows [first, first + n) of the job's x and out through
// these n_ff neurons (a mixture's expert and the tokens that chose it).
struct ffn_part {
  const void *gate = nullptr, *up = nullptr, *down = nullptr;
  tensor_type t_gate = tensor_type::f16, t_up = tensor_type::f16, t_down = tensor_type::f16;
  int64_t first = 0, n = 0, n_ff = 0;
};
struct dense_ffn_job {
  const void *gate = nullptr, *up = nullptr, *down = nullptr;  // the device's copies: n_ff x d, n_ff x d, d x n_ff
  tensor_type t_gate = tensor_type::f16, t_up = tensor_type::f16, t_down = tensor_type::f16;
  // Where non-empty, the job is these parts instead (its own weights unused; n_ff: the largest part's;
  // no hidden values): a layer's hot experts and its shared expert as one job, one wait.
  const ffn_part* parts = nullptr;
  int64_t n_parts = 0;
  bool gated = true;
  kernels::activation act = kernels::activation::relu;
  float act_threshold = 0;       // as ffn_rows_job's
  int64_t n = 0, d = 0, n_ff = 0;
  const float* x = nullptr;      // host: n x d
  float* out = nullptr;          // host: n x d
  float* hidden = nullptr;       // host: n x n_ff, each neuron's value (null: not wanted)
  // The outputs summed on the device and left there, where combine_into (device memory, d floats) is
  // non-null: combine_into = sum over rows r of weights[r] (host, n) x output row r — one token's
  // experts, router-weighted, for the next attention job to add (attention_job::pending). Then `out`
  // is unused and the job neither copies back nor waits: it is queued, and what follows on the queue
  // reads its sum.
  float* combine_into = nullptr;
  const float* weights = nullptr;
  void* scratch = nullptr;       // device memory (the plan's compute buffers)
  uint64_t scratch_bytes = 0;
};
uint64_t dense_ffn_scratch_per_token(int64_t d, int64_t n_ff);

// Bytes of scratch an attention job needs per token of a chunk (tokens go through in chunks that fit),
// with a predictor of n_ff neurons and the given rank where it has one.
uint64_t attention_scratch_per_token(int64_t d, int64_t dq, int64_t kv, int64_t n_rot, int64_t n_ff = 0, int64_t rank = 0);

// What a device's work costs the host in round trips, counted from the device's start: kernels
// launched, host<->device copies queued, and the times a thread blocked until the device had run what
// it was given (a stream or event synchronization; the host waiting on a queue's event is not one).
// A GPU counts its calls; sim with kernels counts the calls a GPU makes for the same jobs
// (gpu_traffic, devices/gpu_jobs.hpp); host work launches nothing.
struct device_traffic {
  uint64_t launches = 0, copies = 0, syncs = 0;
  device_traffic& operator+=(const device_traffic& o) {
    launches += o.launches, copies += o.copies, syncs += o.syncs;
    return *this;
  }
  friend device_traffic operator-(device_traffic a, const device_traffic& b) {
    a.launches -= b.launches, a.copies -= b.copies, a.syncs -= b.syncs;
    return a;
  }
  bool operator==(const device_traffic& o) const { return launches == o.launches && copies == o.copies && syncs == o.syncs; }
};

struct transfer_cost {
  double gb_per_s = 0;  // 0: transfers cost only the copy itself
  double latency_us = 0;
};

class device : public std::enable_shared_from_this<device> {
 public:
  virtual ~device() = default;
  const std::string& name() const { return name_; }
  device_kind kind() const { return kind_; }
  uint64_t budget() const { return budget_; }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t available() const { return budget_ - used(); }

  // A sticky failure: from now on every operation throws device_lost with `why` (the first one given
  // stays). The GPU back end calls it when its context no longer answers; runtimes check lost()
  // to stop retrying work on the device.
  void lose(const std::string& why);
  // Empty while the device works; else why it was lost.
  std::string lost() const;

  // Throws out_of_device_memory when `bytes` (as allocation() charges them) do not fit in what is left
  // of the budget.
  std::shared_ptr<buffer> allocate(uint64_t bytes, std::string label);
  // How the budget counts a buffer: exact for cpu and sim, a GPU's granules for cuda and for sim with
  // kernels (a GPU's stand-in).
  virtual allocation_rule allocation() const { return {}; }
  // Pinned host memory the device keeps for its copies, given the plan's compute buffers and step
  // buffers (host RAM, outside the budget): a GPU's two 16 MiB upload chunks, the FFN-rows jobs'
  // host staging and the attention and dense-FFN jobs' (a chunk's inputs and outputs, at most the
  // compute buffers' size each). sim with kernels reports a GPU's; 0 elsewhere.
  virtual uint64_t pinned_bytes(uint64_t compute_bytes, uint64_t step_bytes) const { return 0; }

  // Host -> device and device -> host, queued after earlier work (inline for cpu). The host memory
  // must stay valid until the event completes.
  virtual event copy_in(buffer& dst, uint64_t offset, const void* src, uint64_t bytes) = 0;
  virtual event copy_out(void* dst, const buffer& src, uint64_t offset, uint64_t bytes) = 0;
  // Sets a buffer's bytes to zero, after what was submitted before, and waits for it. A device's new
  // memory holds whatever was there (sim fills it with 0xff bytes, as a GPU's might hold: NaNs as
  // floats), so what must start at zero (a KV cache) is zeroed.
  virtual void zero(buffer& b) = 0;
  // Runs `work` on the device's queue, after what was submitted before.
  virtual event submit(std::function<void()> work) = 0;
  // Blocks until everything submitted so far has run.
  virtual void synchronize() = 0;
  // Whether work given to submit() may read and write the device's buffers from the host (cpu, sim).
  // False for cuda: there the work launches hotcold's GPU kernels on stream(), after make_current().
  virtual bool runs_host_work() const { return true; }
  // The device's own stream (a cudaStream_t) and making it the calling thread's current device, for
  // work that launches kernels; null and nothing elsewhere.
  virtual void* stream() const { return nullptr; }
  virtual void make_current() const {}

  // The round trips counted so far (device_traffic).
  device_traffic traffic() const {
    return {launches_.load(std::memory_order_relaxed), copies_.load(std::memory_order_relaxed), syncs_.load(std::memory_order_relaxed)};
  }
  // Seconds the jobs of each operation (by its number) have taken so far on the device's queue, each
  // whole: from the start of its compute to its end, its copies in and out and its waits included —
  // where a token's device time goes (sim and the GPU back end time them; 0 elsewhere).
  std::array<double, n_operations> job_seconds() const {
    std::array<double, n_operations> s{};
    for (int k = 0; k < n_operations; ++k) s[static_cast<size_t>(k)] = static_cast<double>(job_ns_[static_cast<size_t>(k)].load(std::memory_order_relaxed)) * 1e-9;
    return s;
  }

  // Whether the device computes `op` on rows (weights) of type `rows`. Host devices compute every
  // operation with the CPU's routines; a GPU what its kernels read.
  virtual bool supports(operation op, tensor_type rows) const;
  // Sets aside what compute() needs for steps of up to max_n tokens (device scratch, counted in the
  // budget; throws out_of_device_memory). Nothing for host devices.
  virtual void reserve(operation op, int64_t max_n, int64_t d, int64_t n_ff) {}
  // The bytes of the budget reserve() takes for those arguments (what a plan counts before it).
  virtual uint64_t reserve_bytes(operation op, int64_t max_n, int64_t d, int64_t n_ff) const { return 0; }
  // Runs a job the device supports and waits for it; called from work given to submit(), on the
  // device's queue. Host devices run job.host; cuda launches hotcold's kernels on its stream.
  virtual void compute(const ffn_rows_job& job);
  virtual void compute(const predict_job& job);
  virtual void compute(const matvec_job& job);
  virtual void compute(const attention_job& job);
  virtual void compute(const dense_ffn_job& job);

 protected:
  device(std::string name, device_kind kind, uint64_t budget) : name_(std::move(name)), kind_(kind), budget_(budget) {}
  // A buffer the device keeps for itself (a back end's step buffers): counted in the budget as
  // allocate()'s, but not keeping the device alive — a device that held buffers holding it would
  // never be freed (its stream, queue thread, pinned and device memory).
  std::shared_ptr<buffer> allocate_own(uint64_t bytes, std::string label);
  virtual void* raw_allocate(uint64_t bytes) = 0;
  virtual void raw_free(void* p) = 0;
  // Throws device_lost once the device is lost (each operation calls it first).
  void check_alive() const {
    if (lost_flag_.load(std::memory_order_acquire)) throw device_lost(lost());
  }
  // A job's compute while it lives: refused (std::logic_error) unless on the device's queue thread
  // `queue` — a job's kernels follow the copies queued before it only in the queue's order, so a job
  // computed from another thread could read rows whose upload has not run —, then timed (job_seconds).
  struct job_scope {
    job_scope(device& d, operation o, std::thread::id queue);
    ~job_scope();
    device& dev;
    operation op;
    std::chrono::steady_clock::time_point t0;
  };
  void count(const device_traffic& t) {
    launches_.fetch_add(t.launches, std::memory_order_relaxed);
    copies_.fetch_add(t.copies, std::memory_order_relaxed);
    syncs_.fetch_add(t.syncs, std::memory_order_relaxed);
  }

 private:
  friend class buffer;
  std::shared_ptr<buffer> allocate_buffer(uint64_t bytes, std::string label, bool own);
  std::string name_;
  device_kind kind_;
  uint64_t budget_;
  std::atomic<uint64_t> used_{0};
  std::atomic<bool> lost_flag_{false};
  std::atomic<uint64_t> launches_{0}, copies_{0}, syncs_{0};
  std::array<std::atomic<uint64_t>, n_operations> job_ns_{};
  mutable std::mutex lost_mu_;
  std::string lost_why_;
};

struct device_options {
  std::string kind = "auto";   // auto | cpu | sim | cuda | hip
  uint64_t budget = 0;         // bytes; 0: the device's free memory (cpu: available RAM)
  transfer_cost sim_cost;      // sim only
  // sim only: compute as a GPU does — the jobs of the operation table (FFN rows, attention, predictors,
  // dense FFNs, products) from the device's plain rows by sim's own routines, no host work — so that
  // everything above a GPU's kernels runs and is tested here.
  bool sim_kernels = false;
  int cuda_index = 0;
  // How long one job on the device's queue may run before the device is lost (its waiter gets
  // job_overdue, every later call device_lost): a GPU job that never returns must not hang its
  // waiter for ever. 0: no limit.
  double job_deadline_s = 120;
};

// The stall watch a device's queue keeps (devices/work_queue.hpp): past `deadline_s`, the device is lost.
stall_watch stall_watch_for(device& d, double deadline_s);

// "auto" picks the first CUDA device when one is usable, else the CPU. Throws std::invalid_argument
// for an unknown kind, std::runtime_error naming why a GPU kind cannot be had here.
std::shared_ptr<device> make_device(const device_options& options);

}  // namespace hotcold::devices
