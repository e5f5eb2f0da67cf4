// The GPU back end: a device whose jobs are kernels/gpu's kernels on its own stream (see
// cuda_backend.hpp). The only source that knows whether the build has a GPU (HOTCOLD_HAVE_GPU).
#include "devices/cuda/cuda_backend.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "devices/cuda/cuda_memory.hpp"
#include "devices/gpu_jobs.hpp"
#include "devices/work_queue.hpp"
#if defined(HOTCOLD_HAVE_GPU)
#include "kernels/gpu/decode.hpp"
#endif

namespace hotcold::devices {

namespace {

class cuda_backend final : public device {
 public:
  cuda_backend(std::string name, uint64_t budget, int index, double deadline_s)
      : device(std::move(name), gpu_kind, budget), index_(index), stream_(cuda_stream_create(index)), queue_("hotcold-cuda") {
    queue_.set_stall_watch(stall_watch_for(*this, deadline_s));
  }
  ~cuda_backend() override {
    queue_.drain();
    x_.reset(), slots_.reset(), hidden_.reset(), out_.reset(), partial_.reset();  // (freed while the back end is whole)
    cuda_stream_destroy(index_, stream_);
  }
  // Copies are jobs of the device's queue, as sim's are: after the work submitted before them (which
  // may still read what an upload overwrites), on the jobs' stream (a copy on the legacy stream is not
  // ordered with a non-blocking stream's kernels), done when their event completes.
  event copy_in(buffer& dst, uint64_t offset, const void* src, uint64_t bytes) override {
    check_alive();
    check_range(dst, offset, bytes);
    char* to = static_cast<char*>(dst.data()) + offset;
    return queue_.submit([this, to, src, bytes, label = dst.label()] { upload(to, src, bytes, label); });
  }
  event copy_out(void* dst, const buffer& src, uint64_t offset, uint64_t bytes) override {
    check_alive();
    check_range(src, offset, bytes);
    const char* from = static_cast<const char*>(src.data()) + offset;
    return queue_.submit([this, dst, from, bytes, label = src.label()] {
      make_current();
      try {
        copy_async(dst, from, bytes, false);
        sync_stream();
      } catch (const std::exception& e) {
        fail(fmt::format("reading {} bytes of {}: {}", bytes, label, e.what()));
      }
    });
  }
  // On the device's queue thread, so the caller (the CPU's cold share) works meanwhile.
  event submit(std::function<void()> work) override {
    check_alive();
    return queue_.submit(std::move(work));
  }
  void synchronize() override {
    queue_.drain();
    count({0, 0, 1});
    cuda_synchronize(index_);
  }
  // On the jobs' stream, queued after the work before it (which may still use the buffer), waited for.
  void zero(buffer& b) override {
    check_alive();
    queue_.submit([this, &b] {
          make_current();
          count({0, 0, 1});
          try {
            cuda_zero(index_, b.data(), b.size(), stream_);
          } catch (const std::exception& e) {
            fail(fmt::format("zeroing {}: {}", b.label(), e.what()));
          }
        })
        ->wait();
  }
  bool runs_host_work() const override { return false; }
  allocation_rule allocation() const override { return gpu_allocation; }
  uint64_t pinned_bytes(uint64_t compute_bytes, uint64_t step_bytes) const override { return gpu_pinned_bytes(compute_bytes, step_bytes); }
  void* stream() const override { return stream_; }
  // An error in the device's work: when the context no longer answers (a sticky error), the device is
  // lost and says why from now on; either way the work fails with the error.
  // On the queue's thread: small copies straight from the caller's memory; large ones (the weights at
  // load) in chunks through two pinned buffers, chunk k + 1 copied into one while the device fetches
  // chunk k from the other, each fetch an async copy on the stream with an event waited on before
  // its buffer is refilled.
  void upload(char* to, const void* src, uint64_t bytes, const std::string& label) {
    make_current();
    try {
      if (bytes <= upload_chunk / 16) {
        copy_async(to, src, bytes, true);
        sync_stream();
        return;
      }
      if (!upload_[0]) {
        for (int k = 0; k < 2; ++k) {
          upload_[k] = std::shared_ptr<void>(cuda_host_allocate(upload_chunk), cuda_host_free);
          upload_done_[k] = std::shared_ptr<void>(cuda_event_create(index_), cuda_event_destroy);
        }
      }
      bool pending[2] = {false, false};
      int k = 0;
      for (uint64_t at = 0; at < bytes; at += upload_chunk, k ^= 1) {
        const uint64_t n = std::min(upload_chunk, bytes - at);
        if (pending[k]) sync_event(upload_done_[k].get());
        std::memcpy(upload_[k].get(), static_cast<const char*>(src) + at, n);
        copy_async(to + at, upload_[k].get(), n, true);
        cuda_event_record(upload_done_[k].get(), stream_);
        pending[k] = true;
      }
      for (int j = 0; j < 2; ++j)
        if (pending[j]) sync_event(upload_done_[j].get());
    } catch (const std::exception& e) {
      fail(fmt::format("uploading {} bytes to {}: {}", bytes, label, e.what()));
    }
  }
  [[noreturn]] void fail(const std::string& what) {
    std::string dead;
    if (!cuda_context_alive(index_, dead)) lose(fmt::format("{} ({})", what, dead));
    throw std::runtime_error(fmt::format("{}: {}", name(), what));
  }
  void make_current() const override { cuda_use(index_); }
  // The back end's copies and waits, counted (device_traffic; gpu_traffic models the same calls).
  void copy_async(void* dst, const void* src, uint64_t bytes, bool to_device) {
    count({0, 1, 0});
    cuda_copy_async(dst, src, bytes, to_device, stream_);
  }
  // A job's wait for its stream, as the process's device_wait says (a spinning wait holds a core the
  // cold pool may need; a blocking one sleeps until the device's interrupt).
  void sync_stream() {
    count({0, 0, 1});
    if (!blocking_done_) blocking_done_ = std::shared_ptr<void>(cuda_blocking_event_create(index_), cuda_event_destroy);
    cuda_stream_wait(stream_, blocking_done_.get(), static_cast<int>(current_device_wait()));
  }
  void sync_event(void* e) {
    count({0, 0, 1});
    cuda_event_synchronize(e);
  }
  // Counts the kernels the calling thread launched while it lives (a job's compute).
  struct launches_counted {
    cuda_backend& dev;
    uint64_t before;
    explicit launches_counted(cuda_backend& d);
    ~launches_counted();
  };
  // Waits for the stream; an error there fails the work (and loses the device when it is sticky).
  void wait_stream() {
    try {
      sync_stream();
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }
  [[noreturn]] void no_gpu_built() const { throw std::runtime_error(fmt::format("{}: hotcold was built without a GPU back end", name())); }
  // hotcold's GPU kernels (kernels/gpu/decode.cu) read F16, Q8_0 and Q4_0 rows for every operation:
  // hot FFN rows (a hot row stays in the file's type), attention, predictors and products.
  bool supports(operation op, tensor_type rows) const override { return gpu_reads(op, rows); }
  void reserve(operation op, int64_t max_n, int64_t d, int64_t n_ff) override;
  uint64_t reserve_bytes(operation op, int64_t max_n, int64_t d, int64_t n_ff) const override;
  void compute(const ffn_rows_job& job) override;
  void compute(const predict_job& job) override;
  void compute(const matvec_job& job) override;
  void compute(const attention_job& job) override;
  void compute(const dense_ffn_job& job) override;

 protected:
  void* raw_allocate(uint64_t bytes) override { return cuda_allocate(index_, bytes); }
  void raw_free(void* p) override { cuda_free(index_, p); }

 private:
  // n vectors of `in` floats at x, one at a time into dx on the device; each result, out_bytes at
  // `from` on the device, back to to + t out_bytes.
  struct vectors {
    int64_t n;
    const float* x;
    int64_t in;
    float* dx;
    const void* from;
    void* to;
    uint64_t out_bytes;
  };
  template <typename Launch>
  void per_vector(const char* what, const vectors& v, Launch launch);
  void check_job(operation op, tensor_type type, const char* what) const;
  int index_;
  void* stream_;
  work_queue queue_;
  // A step's inputs and outputs on the device and, pinned, on the host (copies run on the stream).
  int64_t max_n_ = 0;
  std::shared_ptr<buffer> x_, slots_, hidden_, out_;  // n x d floats, n x n_ff int32s and floats, n x d floats
  std::shared_ptr<buffer> partial_;                   // the down projection's chunks (one token at a time)
  std::shared_ptr<void> host_x_, host_slots_, host_hidden_, host_out_;
  // Uploads (on the queue's thread): two pinned chunks and the events that say when the device has
  // fetched each.
  static constexpr uint64_t upload_chunk = gpu_upload_chunk;
  std::shared_ptr<void> upload_[2], upload_done_[2];
  std::shared_ptr<void> blocking_done_;  // (recorded on the stream for a blocking wait)
  // Attention's staging in pinned memory (grown to the largest chunk met): the chunk's inputs, angles,
  // sequences and positions in the order of the scratch (one copy in), and its outputs.
  std::shared_ptr<void> host_attn_in_, host_attn_out_, host_defer_in_;
  uint64_t host_attn_in_bytes_ = 0, host_attn_out_bytes_ = 0, host_defer_in_bytes_ = 0;
  // A pinned staging buffer of at least `bytes` (grown, kept).
  void* staging(std::shared_ptr<void>& b, uint64_t& have, uint64_t bytes) {
    if (have < bytes) b = std::shared_ptr<void>(cuda_host_allocate(bytes), cuda_host_free), have = bytes;
    return b.get();
  }
};

uint64_t cuda_backend::reserve_bytes(operation op, int64_t max_n, int64_t d, int64_t n_ff) const {
  if (op != operation::ffn_rows) return 0;
  const auto n = static_cast<uint64_t>(max_n), ud = static_cast<uint64_t>(d), uf = static_cast<uint64_t>(n_ff);
  // The buffers reserve() makes, each as the allocator charges it.
  const allocation_rule a = allocation();
  uint64_t bytes = 2 * a.charge(n * ud * sizeof(float)) + a.charge(n * uf * sizeof(int32_t)) + a.charge(n * uf * sizeof(float));
#if defined(HOTCOLD_HAVE_GPU)
  bytes += a.charge(static_cast<uint64_t>(kernels::gpu::hot_ffn_scratch(d)) * sizeof(float));
#endif
  return bytes;
}

// The FFN-rows job's inputs, lists, values and outputs for max_n tokens (and the partial sums of its
// down projection), on the device and pinned on the host: reserve_bytes() of the budget.
void cuda_backend::reserve(operation op, int64_t max_n, int64_t d, int64_t n_ff) {
  if (op != operation::ffn_rows) return;
  const auto n = static_cast<uint64_t>(max_n), ud = static_cast<uint64_t>(d), uf = static_cast<uint64_t>(n_ff);
  // (The device's own: buffers holding the device that holds them would keep it alive for ever.)
  x_ = allocate_own(n * ud * sizeof(float), "FFN rows input");
  slots_ = allocate_own(n * uf * sizeof(int32_t), "FFN rows list");
  hidden_ = allocate_own(n * uf * sizeof(float), "FFN rows values");
  out_ = allocate_own(n * ud * sizeof(float), "FFN rows output");
#if defined(HOTCOLD_HAVE_GPU)
  partial_ = allocate_own(static_cast<uint64_t>(kernels::gpu::hot_ffn_scratch(d)) * sizeof(float), "FFN rows partial sums");
#endif
  auto pinned = [](uint64_t bytes) { return std::shared_ptr<void>(cuda_host_allocate(bytes), cuda_host_free); };
  host_x_ = pinned(n * ud * sizeof(float));
  host_slots_ = pinned(n * uf * sizeof(int32_t));
  host_hidden_ = pinned(n * uf * sizeof(float));
  host_out_ = pinned(n * ud * sizeof(float));
  max_n_ = max_n;
}

#if defined(HOTCOLD_HAVE_GPU)
cuda_backend::launches_counted::launches_counted(cuda_backend& d) : dev(d), before(kernels::gpu::launches_by_this_thread()) {}
cuda_backend::launches_counted::~launches_counted() { dev.count({kernels::gpu::launches_by_this_thread() - before, 0, 0}); }

#endif

// Each token's chosen rows listed (their slots in the device's copy), the inputs and lists copied in
// through pinned memory, one hot_ffn per token on the stream, the sums and values copied back.
void cuda_backend::compute(const ffn_rows_job& job) {
#if defined(HOTCOLD_HAVE_GPU)
  const job_scope scope(*this, operation::ffn_rows, queue_.worker_id());
  const launches_counted counted(*this);
  if (!supports(operation::ffn_rows, job.type))
    throw std::invalid_argument(fmt::format("{}: the GPU's FFN kernel takes F16, Q8_0 or Q4_0 rows, not {}", name(), tensor_type_name(job.type)));
  const auto rows = gpu_row_type(job.type);
  const int64_t n = job.n, d = job.d, n_ff = job.n_ff;
  if (n > max_n_) throw std::invalid_argument(fmt::format("{}: a step of {} tokens is more than the {} reserved", name(), n, max_n_));
  auto* hx = static_cast<float*>(host_x_.get());
  auto* hs = static_cast<int32_t*>(host_slots_.get());
  auto* hh = static_cast<float*>(host_hidden_.get());
  auto* ho = static_cast<float*>(host_out_.get());
  std::vector<int64_t> count(static_cast<size_t>(n), 0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < job.count; ++k)
      if (!job.chosen || job.chosen[t * n_ff + job.ids[k]]) hs[t * n_ff + count[static_cast<size_t>(t)]++] = job.slots[k];
  std::copy(job.x, job.x + n * d, hx);
  make_current();
  auto* dx = static_cast<float*>(x_->data());
  auto* ds = static_cast<int32_t*>(slots_->data());
  auto* dh = static_cast<float*>(hidden_->data());
  auto* dout = static_cast<float*>(out_->data());
  copy_async(dx, hx, static_cast<uint64_t>(n * d) * sizeof(float), true);
  for (int64_t t = 0; t < n; ++t)
    copy_async(ds + t * n_ff, hs + t * n_ff, static_cast<uint64_t>(count[static_cast<size_t>(t)]) * sizeof(int32_t), true);
  const auto act = job.act;
  for (int64_t t = 0; t < n; ++t) {
    const std::string e = kernels::gpu::hot_ffn(rows, job.gate, job.up, job.down_t, ds + t * n_ff, count[static_cast<size_t>(t)], d, dx + t * d, job.gated,
                                                act, job.act_threshold, dh + t * n_ff, dout + t * d, static_cast<float*>(partial_->data()), stream_);
    if (!e.empty()) fail(fmt::format("FFN rows kernel: {}", e));
  }
  copy_async(ho, dout, static_cast<uint64_t>(n * d) * sizeof(float), false);
  for (int64_t t = 0; t < n; ++t)
    copy_async(hh + t * n_ff, dh + t * n_ff, static_cast<uint64_t>(count[static_cast<size_t>(t)]) * sizeof(float), false);
  wait_stream();
  std::copy(ho, ho + n * d, job.out);
  for (int64_t t = 0; t < n; ++t) {  // each value back to its neuron
    int64_t c = 0;
    for (int64_t k = 0; k < job.count; ++k)
      if (!job.chosen || job.chosen[t * n_ff + job.ids[k]]) job.hidden[t * n_ff + job.ids[k]] = hh[t * n_ff + c++];
  }
#else
  (void)job;
  no_gpu_built();
#endif
}

// n vectors one at a time through scratch memory: vector t's `in` values (x + t in) copied to dx,
// `launch` on the stream, `out_bytes` copied back from `from` to to + t out_bytes, the stream waited
// on (the staging is reused by the next vector). `what` names the kernel in errors.
template <typename Launch>
void cuda_backend::per_vector(const char* what, const vectors& v, Launch launch) {
  make_current();
  // Through pinned staging (a copy from pageable memory is staged by the driver, and synchronous).
  const uint64_t in_bytes = static_cast<uint64_t>(v.in) * sizeof(float);
  auto* hin = static_cast<float*>(staging(host_attn_in_, host_attn_in_bytes_, in_bytes));
  auto* hout = static_cast<uint8_t*>(staging(host_attn_out_, host_attn_out_bytes_, v.out_bytes));
  for (int64_t t = 0; t < v.n; ++t) {
    std::copy(v.x + t * v.in, v.x + (t + 1) * v.in, hin);
    copy_async(v.dx, hin, in_bytes, true);
    if (const std::string e = launch(); !e.empty()) fail(fmt::format("{} kernel: {}", what, e));
    copy_async(hout, v.from, v.out_bytes, false);
    wait_stream();
    std::memcpy(static_cast<uint8_t*>(v.to) + static_cast<uint64_t>(t) * v.out_bytes, hout, v.out_bytes);
  }
}

// Checks a job's weights and scratch: what a job may ask of the GPU's kernels.
void cuda_backend::check_job(operation op, tensor_type type, const char* what) const {
  if (!supports(op, type))
    throw std::invalid_argument(fmt::format("{}: the GPU's {} kernel does not take {} weights", name(), what, tensor_type_name(type)));
}

// A token at a time: its input into the scratch, the predictor kernel, its choice back.
void cuda_backend::compute(const predict_job& job) {
#if defined(HOTCOLD_HAVE_GPU)
  const job_scope scope(*this, operation::predict, queue_.worker_id());
  const launches_counted counted(*this);
  check_job(operation::predict, job.type, "predictor");
  const int64_t chunk = predict_chunk(name(), job);
  const int64_t m_max = std::min(chunk, job.n), d = job.d, n_ff = job.n_ff;
  // Through pinned staging (a copy from pageable memory is staged by the driver, and synchronous).
  auto* hin = static_cast<float*>(staging(host_attn_in_, host_attn_in_bytes_, static_cast<uint64_t>(m_max * d) * 4));
  auto* hout = static_cast<uint8_t*>(staging(host_attn_out_, host_attn_out_bytes_, static_cast<uint64_t>(m_max * n_ff)));
  auto* base = static_cast<uint8_t*>(job.scratch);
  const auto on_act = job.on_act ? job.act : kernels::activation::relu;
  make_current();
  for (int64_t t0 = 0; t0 < job.n; t0 += chunk) {  // a chunk of tokens: in, the four kernels, the choices out, a wait
    const int64_t m = std::min(chunk, job.n - t0);
    const predict_scratch at = predict_scratch_of(d, job.rank, n_ff, m);
    auto* dx = reinterpret_cast<float*>(base + at.x);
    std::copy(job.x + t0 * d, job.x + (t0 + m) * d, hin);
    copy_async(dx, hin, static_cast<uint64_t>(m * d) * 4, true);
    const std::string e = kernels::gpu::predictor(gpu_row_type(job.type), job.fc1, job.fc2, d, job.rank, n_ff, dx, m, job.threshold,
                                                  reinterpret_cast<float*>(base + at.mid), reinterpret_cast<float*>(base + at.scores), base + at.chosen,
                                                  stream_, job.on_act, on_act);
    if (!e.empty()) fail(fmt::format("predictor kernel: {}", e));
    copy_async(hout, base + at.chosen, static_cast<uint64_t>(m * n_ff), false);
    wait_stream();
    std::memcpy(job.chosen + t0 * n_ff, hout, static_cast<size_t>(m * n_ff));
  }
#else
  (void)job;
  no_gpu_built();
#endif
}

// A vector at a time: copied in, the product kernel, the product copied back.
void cuda_backend::compute(const matvec_job& job) {
#if defined(HOTCOLD_HAVE_GPU)
  const job_scope scope(*this, operation::matvec, queue_.worker_id());
  const launches_counted counted(*this);
  check_job(operation::matvec, job.type, "product");
  check_scratch(name(), job);
  auto* dx = static_cast<float*>(job.scratch);
  float* dy = dx + job.cols;
  per_vector("product", {job.n, job.x, job.cols, dx, dy, job.y, static_cast<uint64_t>(job.rows) * sizeof(float)},
             [&] { return kernels::gpu::matvec(gpu_row_type(job.type), job.w, job.rows, job.cols, dx, dy, stream_); });
#else
  (void)job;
  no_gpu_built();
#endif
}

// Chunks of tokens that fit the scratch: the inputs, angles, sequences and positions copied in at
// once, the products, RoPE with the store into the cache, the attention and the output product
// launched on the stream (with the FFN after it: the residual, its norm and the FFN too), the output
// copied back; the stream waited on once per chunk. The scratch as attention_scratch_of lays it out,
// every value on a 16-byte boundary (checked: the products' wide loads need it).
void cuda_backend::compute(const attention_job& job) {
#if defined(HOTCOLD_HAVE_GPU)
  const job_scope scope(*this, operation::attention, queue_.worker_id());
  const launches_counted counted(*this);
  check_attention_job(name(), job);
  const int64_t d = job.d, dq = job.dq(), kv = job.n_head_kv * job.head_dim, row_len = dq + 2 * kv, n_rot = job.n_rot;
  const int64_t n_ff = job.fc1 ? job.n_ff : 0, ffn_ff = job.ffn ? job.ffn->n_ff : 0;
  const bool hidden = job.ffn && job.ffn->hidden;
  const int64_t chunk = attention_chunk(name(), job);
  const int64_t m_max = std::min(chunk, job.n);
  // In: the layout's inputs, as they lie in the scratch; out: the product (and the choices, or the FFN's values).
  const uint64_t in_bytes = attention_scratch_of(job, m_max).in_end;
  const uint64_t out_bytes = static_cast<uint64_t>(m_max * d) * 4 + static_cast<uint64_t>(m_max * n_ff) + (hidden ? static_cast<uint64_t>(m_max * ffn_ff) * 4 : 0);
  staging(host_attn_in_, host_attn_in_bytes_, in_bytes);
  staging(host_attn_out_, host_attn_out_bytes_, out_bytes);
  namespace gpu = kernels::gpu;
  const gpu::attention_shape shape{dq, job.n_head, job.n_head_kv, job.head_dim, n_rot, job.adjacent_pairs, job.ctx};
  const gpu::qkv_adjust adjust{job.bq, job.bk, job.bv, job.q_norm, job.k_norm, job.norm_eps};
  make_current();
  for (int64_t t0 = 0; t0 < job.n; t0 += chunk) {
    const int64_t m = std::min(chunk, job.n - t0);
    const attention_scratch at = attention_scratch_of(job, m);
    check_scratch_layout(name(), job.scratch, job.scratch_bytes, at);
    auto* hin = static_cast<uint8_t*>(host_attn_in_.get());
    auto host_f = [&](uint64_t off) { return reinterpret_cast<float*>(hin + off); };
    std::copy(job.x + t0 * d, job.x + (t0 + m) * d, host_f(at.x));
    std::copy(job.angles + t0 * n_rot, job.angles + (t0 + m) * n_rot, host_f(at.angles));
    auto* hsp = reinterpret_cast<int32_t*>(hin + at.seqpos);
    std::copy(job.seqs + t0, job.seqs + t0 + m, hsp);
    std::copy(job.positions + t0, job.positions + t0 + m, hsp + m);
    if (job.fc1) std::copy(job.layer_in + t0 * d, job.layer_in + (t0 + m) * d, host_f(at.layer_in));
    if (job.ffn || job.attn_norm) std::copy(job.residual + t0 * d, job.residual + (t0 + m) * d, host_f(at.layer_in));
    auto* base = static_cast<uint8_t*>(job.scratch);
    auto dev_f = [&](uint64_t off) { return reinterpret_cast<float*>(base + off); };
    float *dx = dev_f(at.x), *dangles = dev_f(at.angles), *dlayer_in = dev_f(at.layer_in), *dqkv = dev_f(at.qkv), *dattn = dev_f(at.attn), *dout = dev_f(at.out);
    auto* dsp = reinterpret_cast<int32_t*>(base + at.seqpos);
    copy_async(dx, hin, at.in_end, true);
    std::string e;
    if (job.attn_norm) {  // the layer's input: the residual stream plus the pending sum; its norm into x
      if (job.pending) e = gpu::add(dlayer_in, job.pending + t0 * d, m * d, dlayer_in, stream_);
      if (e.empty()) e = gpu::rms_norm(dlayer_in, job.attn_norm, m, d, job.norm_eps, dx, stream_);
    }
    if (e.empty() && job.wqkv) {
      e = gpu::matmul(gpu_row_type(job.t_qkv), job.wqkv, row_len, d, dx, m, dqkv, row_len, stream_);
    } else if (e.empty()) {
      e = gpu::matmul(gpu_row_type(job.t_q), job.wq, dq, d, dx, m, dqkv, row_len, stream_);
      if (e.empty()) e = gpu::matmul(gpu_row_type(job.t_k), job.wk, kv, d, dx, m, dqkv + dq, row_len, stream_);
      if (e.empty()) e = gpu::matmul(gpu_row_type(job.t_v), job.wv, kv, d, dx, m, dqkv + dq + kv, row_len, stream_);
    }
    if (e.empty()) e = gpu::rope_store(shape, dqkv, m, dangles, dsp, job.k_cache, job.v_cache, job.kv_type == tensor_type::f16, stream_, adjust);
    if (e.empty()) {  // (a long past split across blocks, their partial sums in the scratch's tail)
      const scratch_tail tail = attention_scratch_tail(job, m);
      e = gpu::attend(shape, dqkv, m, dsp, job.k_cache, job.v_cache, job.kv_type == tensor_type::f16, dattn, stream_, dev_f(0) + tail.offset, tail.floats,
                      attention_latest_position(job, t0, m));
    }
    if (e.empty()) e = gpu::matmul(gpu_row_type(job.t_o), job.wo, d, dq, dattn, m, dout, d, stream_);
    auto* dchosen = base + at.chosen;
    if (e.empty() && job.fc1) {  // the predictor on the layer's input (plus the product), the chunk at once
      float* dpred_in = dev_f(at.pred_in);
      e = gpu::add(dlayer_in, job.pred_adds_out ? dout : nullptr, m * d, dpred_in, stream_);
      if (e.empty()) e = gpu::predictor(gpu_row_type(job.t_pred), job.fc1, job.fc2, d, job.rank, n_ff, dpred_in, m, job.threshold, dev_f(at.mid), dev_f(at.scores), dchosen, stream_);
    }
    float* dresult = dout;
    if (e.empty() && job.attn_norm && !job.ffn) e = gpu::add(dlayer_in, dout, m * d, dout, stream_);  // the residual stream after attention
    if (e.empty() && job.ffn) {  // the FFN after it: h = residual + product, its norm, the FFN, h + its output
      const dense_ffn_job& f = *job.ffn;
      float *dh = dev_f(at.resid), *dfx = dev_f(at.ffn_x), *dg = dev_f(at.gate), *du = dev_f(at.up), *dfo = dev_f(at.ffn_out);
      e = gpu::add(dlayer_in, dout, m * d, dh, stream_);
      if (e.empty()) e = gpu::rms_norm(dh, job.ffn_norm, m, d, job.norm_eps, dfx, stream_);
      if (e.empty() && f.gated) e = gpu::matmul(gpu_row_type(f.t_gate), f.gate, ffn_ff, d, dfx, m, dg, ffn_ff, stream_);
      if (e.empty()) e = gpu::matmul(gpu_row_type(f.t_up), f.up, ffn_ff, d, dfx, m, du, ffn_ff, stream_);
      if (e.empty()) e = gpu::activate(dg, du, m * ffn_ff, f.gated, f.act, f.act_threshold, stream_);
      if (e.empty()) e = gpu::matmul(gpu_row_type(f.t_down), f.down, d, ffn_ff, du, m, dfo, d, stream_);
      if (e.empty()) e = gpu::add(dh, dfo, m * d, dfo, stream_);
      dresult = dfo;
    }
    if (!e.empty()) fail(fmt::format("attention kernels: {}", e));
    auto* hout = static_cast<float*>(host_attn_out_.get());
    auto* hchosen = reinterpret_cast<uint8_t*>(hout + m * d);
    float* hhidden = hout + m * d;
    copy_async(hout, dresult, static_cast<uint64_t>(m * d) * 4, false);
    if (job.fc1) copy_async(hchosen, dchosen, static_cast<uint64_t>(m * n_ff), false);
    if (hidden) copy_async(hhidden, dev_f(at.up), static_cast<uint64_t>(m * ffn_ff) * 4, false);
    wait_stream();
    std::copy(hout, hout + m * d, job.out + t0 * d);
    if (job.fc1) std::copy(hchosen, hchosen + m * n_ff, job.chosen + t0 * n_ff);
    if (hidden) std::copy(hhidden, hhidden + m * ffn_ff, job.ffn->hidden + t0 * ffn_ff);
  }
#else
  (void)job;
  no_gpu_built();
#endif
}

// Chunks of tokens that fit the scratch: the inputs copied in, gate and up products (each part's: a
// mixture's experts of a layer in one job), the activation, the down products, the outputs (and the
// hidden values when asked) copied back; one wait per chunk.
void cuda_backend::compute(const dense_ffn_job& job) {
#if defined(HOTCOLD_HAVE_GPU)
  const job_scope scope(*this, operation::dense_ffn, queue_.worker_id());
  const launches_counted counted(*this);
  check_dense_ffn_job(name(), job);
  const int64_t d = job.d, n_ff = job.n_ff;
  const int64_t chunk = dense_ffn_chunk(name(), job);
  const int64_t m_max = std::min(chunk, job.n);
  const std::vector<ffn_part> parts = ffn_parts(job);
  // A job summed on the device is not waited for: its inputs get staging of their own (the next job's
  // wait, on the same stream, has them read before they are written again).
  const bool combine = job.combine_into != nullptr;
  const uint64_t in_bytes = dense_ffn_scratch_of(d, n_ff, m_max, combine).in_end;
  auto* hin = static_cast<uint8_t*>(combine ? staging(host_defer_in_, host_defer_in_bytes_, in_bytes) : staging(host_attn_in_, host_attn_in_bytes_, in_bytes));
  auto* hout = static_cast<float*>(staging(host_attn_out_, host_attn_out_bytes_, static_cast<uint64_t>(m_max * (d + n_ff)) * 4));
  namespace gpu = kernels::gpu;
  make_current();
  for (int64_t t0 = 0; t0 < job.n; t0 += chunk) {
    const int64_t m = std::min(chunk, job.n - t0);
    const dense_ffn_scratch at = dense_ffn_scratch_of(d, n_ff, m, combine);
    check_scratch_layout(name(), job.scratch, job.scratch_bytes, at);
    auto* base = static_cast<uint8_t*>(job.scratch);
    auto* dx = reinterpret_cast<float*>(base + at.x);
    auto* dg = reinterpret_cast<float*>(base + at.gate);
    auto* du = reinterpret_cast<float*>(base + at.up);
    auto* dout = reinterpret_cast<float*>(base + at.out);
    std::copy(job.x + t0 * d, job.x + (t0 + m) * d, reinterpret_cast<float*>(hin + at.x));
    if (combine) std::copy(job.weights + t0, job.weights + t0 + m, reinterpret_cast<float*>(hin + at.weights));
    copy_async(dx, hin, at.in_end, true);
    // Each part's rows in the chunk (one part: the job's own weights on all of them): its gate and up
    // values from its first row's place, packed by its own neurons; one activation over the chunk.
    std::string e;
    auto in_chunk = [&](const ffn_part& p, int64_t& a, int64_t& b) {
      a = std::max(p.first, t0), b = std::min(p.first + p.n, t0 + m);
      return a < b;
    };
    for (const ffn_part& p : parts) {
      int64_t a, b;
      if (!in_chunk(p, a, b) || !e.empty()) continue;
      const int64_t r = a - t0, k = b - a;
      if (job.gated) e = gpu::matmul(gpu_row_type(p.t_gate), p.gate, p.n_ff, d, dx + r * d, k, dg + r * n_ff, p.n_ff, stream_);
      if (e.empty()) e = gpu::matmul(gpu_row_type(p.t_up), p.up, p.n_ff, d, dx + r * d, k, du + r * n_ff, p.n_ff, stream_);
    }
    if (e.empty()) e = gpu::activate(dg, du, m * n_ff, job.gated, job.act, job.act_threshold, stream_);
    for (const ffn_part& p : parts) {
      int64_t a, b;
      if (!in_chunk(p, a, b) || !e.empty()) continue;
      const int64_t r = a - t0;
      e = gpu::matmul(gpu_row_type(p.t_down), p.down, d, p.n_ff, du + r * n_ff, b - a, dout + r * d, d, stream_);
    }
    if (e.empty() && combine)  // the rows' weighted sum, left on the device (added to over the chunks)
      e = gpu::weighted_sum(dout, reinterpret_cast<const float*>(base + at.weights), m, d, t0 > 0, job.combine_into, stream_);
    if (!e.empty()) fail(fmt::format("dense FFN kernels: {}", e));
    if (combine) continue;
    copy_async(hout, dout, static_cast<uint64_t>(m * d) * 4, false);
    if (job.hidden) copy_async(hout + m * d, du, static_cast<uint64_t>(m * n_ff) * 4, false);
    wait_stream();
    std::copy(hout, hout + m * d, job.out + t0 * d);
    if (job.hidden) std::copy(hout + m * d, hout + m * (d + n_ff), job.hidden + t0 * n_ff);
  }
#else
  (void)job;
  no_gpu_built();
#endif
}

}  // namespace

std::shared_ptr<device> make_gpu_device(std::string name, uint64_t budget, int index, double deadline_s) {
  return std::make_shared<cuda_backend>(std::move(name), budget, index, deadline_s);
}

}  // namespace hotcold::devices
