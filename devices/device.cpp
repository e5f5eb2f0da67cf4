#include "devices/device.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "devices/cuda/cuda_memory.hpp"
#include "devices/device_info.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/row_kernels.hpp"
#if defined(HOTCOLD_HAVE_GPU)
#include "kernels/gpu/decode.hpp"
#endif

namespace hotcold::devices {

buffer::~buffer() {
  owner_->raw_free(data_);
  owner_->used_.fetch_sub(size_, std::memory_order_relaxed);
}

void device::lose(const std::string& why) {
  std::lock_guard lock(lost_mu_);
  if (lost_flag_.load(std::memory_order_relaxed)) return;  // the first error stays
  lost_why_ = fmt::format("{} was lost: {}", name_, why);
  lost_flag_.store(true, std::memory_order_release);
}

std::string device::lost() const {
  std::lock_guard lock(lost_mu_);
  return lost_why_;
}

std::shared_ptr<buffer> device::allocate(uint64_t bytes, std::string label) {
  check_alive();
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > budget_ - used)
      throw out_of_device_memory(fmt::format("{}: {} needs {} bytes, {} of the budget of {} are left", name_, label, bytes, budget_ - used, budget_));
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  void* p = nullptr;
  try {
    p = raw_allocate(bytes);
  } catch (...) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    throw;
  }
  return std::shared_ptr<buffer>(new buffer(shared_from_this(), p, bytes, std::move(label)));
}

bool device::supports(operation op, tensor_type rows) const {
  // Host code computes what the CPU's routines do: FFN rows of the types the row kernels read, and
  // attention, predictors and products over any type the engine reads.
  if (op == operation::ffn_rows) return kernels::row_kernels_for(rows) != nullptr;
  return true;
}

void device::compute(const ffn_rows_job& job) {
  if (!supports(operation::ffn_rows, job.type))
    throw std::invalid_argument(fmt::format("{}: cannot compute FFN rows of type {}", name_, tensor_type_name(job.type)));
  job.host();
}
void device::compute(const predict_job& job) {
  if (!supports(operation::predict, job.type) || !job.host)
    throw std::invalid_argument(fmt::format("{}: cannot compute a predictor of type {}", name_, tensor_type_name(job.type)));
  job.host();
}
void device::compute(const matvec_job& job) {
  if (!supports(operation::matvec, job.type) || !job.host)
    throw std::invalid_argument(fmt::format("{}: cannot compute products with rows of type {}", name_, tensor_type_name(job.type)));
  job.host();
}

namespace {

void* host_allocate(uint64_t bytes, const std::string& device) {
  void* p = std::aligned_alloc(64, (std::max<uint64_t>(bytes, 1) + 63) / 64 * 64);
  if (!p) throw out_of_device_memory(fmt::format("{}: the host has no {} bytes to give", device, bytes));
  return p;
}

void check_range(const buffer& b, uint64_t offset, uint64_t bytes) {
  if (offset > b.size() || bytes > b.size() - offset)
    throw std::out_of_range(fmt::format("{}: bytes {}..{} are outside its {}", b.label(), offset, offset + bytes, b.size()));
}

class cpu_backend final : public device {
 public:
  explicit cpu_backend(uint64_t budget) : device("cpu", device_kind::cpu, budget) {}
  event copy_in(buffer& dst, uint64_t offset, const void* src, uint64_t bytes) override {
    check_range(dst, offset, bytes);
    std::memcpy(static_cast<char*>(dst.data()) + offset, src, bytes);
    return completed_event();
  }
  event copy_out(void* dst, const buffer& src, uint64_t offset, uint64_t bytes) override {
    check_range(src, offset, bytes);
    std::memcpy(dst, static_cast<const char*>(src.data()) + offset, bytes);
    return completed_event();
  }
  event submit(std::function<void()> work) override {
    try {
      work();
    } catch (...) {
      return completed_event(std::current_exception());
    }
    return completed_event();
  }
  void synchronize() override {}

 protected:
  void* raw_allocate(uint64_t bytes) override { return host_allocate(bytes, name()); }
  void raw_free(void* p) override { std::free(p); }
};

// A GPU's operation table computed the plain way, row by row in float (sim's kernels): what a GPU
// back end's jobs carry, read from the device's copies alone.
namespace sim_kernels {

// Row r of a matrix of `cols` values in type t, as floats.
void row(tensor_type t, const void* rows, int64_t r, int64_t cols, float* out) {
  const auto* base = static_cast<const uint8_t*>(rows);
  switch (t) {
    case tensor_type::f16: kernels::fp16_to_fp32_row(reinterpret_cast<const uint16_t*>(base) + r * cols, out, static_cast<size_t>(cols)); return;
    case tensor_type::q8_0: kernels::dequantize_row_q8_0(reinterpret_cast<const kernels::block_q8_0*>(base) + r * (cols / 32), out, cols); return;
    case tensor_type::q4_0: kernels::dequantize_row_q4_0(reinterpret_cast<const kernels::block_q4_0*>(base) + r * (cols / 32), out, cols); return;
    default: throw std::invalid_argument(fmt::format("sim kernels: rows of type {}", tensor_type_name(t)));
  }
}

float dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(s);
}

float activate(ffn_activation a, float v) {
  switch (a) {
    case ffn_activation::silu: return v / (1.0f + std::exp(-v));
    case ffn_activation::gelu: return 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
    default: return v > 0.0f ? v : 0.0f;
  }
}

void ffn_rows(const ffn_rows_job& job) {
  std::vector<float> g(static_cast<size_t>(job.d)), u(g.size()), dn(g.size());
  std::fill(job.out, job.out + job.n * job.d, 0.0f);
  for (int64_t t = 0; t < job.n; ++t) {
    const float* x = job.x + t * job.d;
    float* out = job.out + t * job.d;
    for (int64_t k = 0; k < job.count; ++k) {
      const int32_t id = job.ids[k];
      if (job.chosen && !job.chosen[t * job.n_ff + id]) continue;
      row(job.type, job.up, job.slots[k], job.d, u.data());
      const float up = dot(u.data(), x, job.d);
      float h;
      if (!job.gated) {
        h = activate(job.act, up);
      } else {
        row(job.type, job.gate, job.slots[k], job.d, g.data());
        const float gate = dot(g.data(), x, job.d);
        h = job.act == ffn_activation::drelu ? std::max(gate, 0.0f) * std::max(up, 0.0f) : activate(job.act, gate) * up;
      }
      job.hidden[t * job.n_ff + id] = h;
      if (h == 0.0f) continue;
      row(job.type, job.down_t, job.slots[k], job.d, dn.data());
      for (int64_t c = 0; c < job.d; ++c) out[c] += h * dn[static_cast<size_t>(c)];
    }
  }
}

void predict(const predict_job& job) {
  std::vector<float> r(static_cast<size_t>(std::max(job.d, job.rank))), mid(static_cast<size_t>(job.rank));
  for (int64_t t = 0; t < job.n; ++t) {
    const float* x = job.x + t * job.d;
    for (int64_t i = 0; i < job.rank; ++i) {
      row(job.type, job.fc1, i, job.d, r.data());
      mid[static_cast<size_t>(i)] = std::max(dot(r.data(), x, job.d), 0.0f);
    }
    for (int64_t i = 0; i < job.n_ff; ++i) {
      row(job.type, job.fc2, i, job.rank, r.data());
      job.chosen[t * job.n_ff + i] = dot(r.data(), mid.data(), job.rank) >= job.threshold ? 1 : 0;
    }
  }
}

void matvec(const matvec_job& job) {
  std::vector<float> r(static_cast<size_t>(job.cols));
  for (int64_t i = 0; i < job.rows; ++i) {
    row(job.type, job.w, i, job.cols, r.data());
    for (int64_t t = 0; t < job.n; ++t) job.y[t * job.rows + i] = dot(r.data(), job.x + t * job.cols, job.cols);
  }
}

}  // namespace sim_kernels

class sim_backend final : public device {
 public:
  sim_backend(uint64_t budget, transfer_cost cost, bool kernels)
      : device("sim", device_kind::sim, budget), cost_(cost), kernels_(kernels), queue_("hotcold-sim") {}
  ~sim_backend() override { queue_.drain(); }
  // With kernels, the GPU's table (kernels/gpu/decode.cu): FFN rows, predictors and products with F16,
  // Q8_0 or Q4_0 rows; no attention.
  bool runs_host_work() const override { return !kernels_; }
  bool supports(operation op, tensor_type rows) const override {
    if (!kernels_) return device::supports(op, rows);
    switch (op) {
      case operation::ffn_rows: return rows == tensor_type::f16 || rows == tensor_type::q8_0 || rows == tensor_type::q4_0;
      case operation::predict:
      case operation::matvec: return rows == tensor_type::f16 || rows == tensor_type::q8_0 || rows == tensor_type::q4_0;
      default: return false;
    }
  }
  void compute(const ffn_rows_job& job) override {
    if (!kernels_) return device::compute(job);
    if (!supports(operation::ffn_rows, job.type)) throw std::invalid_argument(fmt::format("sim: FFN rows of type {}", tensor_type_name(job.type)));
    sim_kernels::ffn_rows(job);
  }
  void compute(const predict_job& job) override {
    if (!kernels_) return device::compute(job);
    if (!supports(operation::predict, job.type)) throw std::invalid_argument(fmt::format("sim: a predictor of type {}", tensor_type_name(job.type)));
    sim_kernels::predict(job);
  }
  void compute(const matvec_job& job) override {
    if (!kernels_) return device::compute(job);
    if (!supports(operation::matvec, job.type)) throw std::invalid_argument(fmt::format("sim: products with rows of type {}", tensor_type_name(job.type)));
    sim_kernels::matvec(job);
  }

  event copy_in(buffer& dst, uint64_t offset, const void* src, uint64_t bytes) override {
    check_alive();
    check_range(dst, offset, bytes);
    char* to = static_cast<char*>(dst.data()) + offset;
    return queue_.submit([this, to, src, bytes] { transfer(to, src, bytes); });
  }
  event copy_out(void* dst, const buffer& src, uint64_t offset, uint64_t bytes) override {
    check_alive();
    check_range(src, offset, bytes);
    const char* from = static_cast<const char*>(src.data()) + offset;
    return queue_.submit([this, dst, from, bytes] { transfer(dst, from, bytes); });
  }
  event submit(std::function<void()> work) override {
    check_alive();
    return queue_.submit(std::move(work));
  }
  void synchronize() override { queue_.drain(); }

 protected:
  void* raw_allocate(uint64_t bytes) override { return host_allocate(bytes, name()); }
  void raw_free(void* p) override { std::free(p); }

 private:
  // The copy, then waiting out what the modeled link would take beyond it.
  void transfer(void* to, const void* from, uint64_t bytes) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(to, from, bytes);
    double modeled = cost_.latency_us * 1e-6 + (cost_.gb_per_s > 0 ? static_cast<double>(bytes) / (cost_.gb_per_s * 1e9) : 0.0);
    auto until = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(modeled));
    while (std::chrono::steady_clock::now() < until) std::this_thread::yield();
  }
  transfer_cost cost_;
  bool kernels_;
  work_queue queue_;
};

// The GPU back end this build has (-DHOTCOLD_GPU): CUDA or HIP, from the same sources.
#if defined(HOTCOLD_GPU_HIP)
constexpr device_kind gpu_kind = device_kind::hip;
constexpr const char* gpu_name = "hip";
#else
constexpr device_kind gpu_kind = device_kind::cuda;
constexpr const char* gpu_name = "cuda";
#endif

class cuda_backend final : public device {
 public:
  cuda_backend(std::string name, uint64_t budget, int index)
      : device(std::move(name), gpu_kind, budget), index_(index), stream_(cuda_stream_create(index)), queue_("hotcold-cuda") {}
  ~cuda_backend() override {
    queue_.drain();
    cuda_stream_destroy(index_, stream_);
  }
  event copy_in(buffer& dst, uint64_t offset, const void* src, uint64_t bytes) override {
    check_alive();
    check_range(dst, offset, bytes);
    cuda_copy_to_device(index_, static_cast<char*>(dst.data()) + offset, src, bytes);
    return completed_event();
  }
  event copy_out(void* dst, const buffer& src, uint64_t offset, uint64_t bytes) override {
    check_alive();
    check_range(src, offset, bytes);
    cuda_copy_to_host(index_, dst, static_cast<const char*>(src.data()) + offset, bytes);
    return completed_event();
  }
  // On the device's queue thread, so the caller (the CPU's cold share) works meanwhile.
  event submit(std::function<void()> work) override {
    check_alive();
    return queue_.submit(std::move(work));
  }
  void synchronize() override {
    queue_.drain();
    cuda_synchronize(index_);
  }
  bool runs_host_work() const override { return false; }
  void* stream() const override { return stream_; }
  // An error in the device's work: when the context no longer answers (a sticky error), the device is
  // lost and says why from now on; either way the work fails with the error.
  [[noreturn]] void fail(const std::string& what) {
    std::string dead;
    if (!cuda_context_alive(index_, dead)) lose(fmt::format("{} ({})", what, dead));
    throw std::runtime_error(fmt::format("{}: {}", name(), what));
  }
  void make_current() const override { cuda_use(index_); }
  // hotcold's GPU FFN kernel reads F16, Q8_0 and Q4_0 rows (a hot row stays in the file's type).
  // Predictors and products with F16, Q8_0 or Q4_0 weights (kernels/gpu/decode.cu: predictor, matvec);
  // no attention kernels yet.
  bool supports(operation op, tensor_type rows) const override {
    switch (op) {
      case operation::ffn_rows: return rows == tensor_type::f16 || rows == tensor_type::q8_0 || rows == tensor_type::q4_0;
      case operation::predict:
      case operation::matvec: return rows == tensor_type::f16 || rows == tensor_type::q8_0 || rows == tensor_type::q4_0;
      default: return false;
    }
  }
  void reserve(operation op, int64_t max_n, int64_t d, int64_t n_ff) override;
  void compute(const ffn_rows_job& job) override;
  void compute(const predict_job& job) override;
  void compute(const matvec_job& job) override;

 protected:
  void* raw_allocate(uint64_t bytes) override { return cuda_allocate(index_, bytes); }
  void raw_free(void* p) override { cuda_free(index_, p); }

 private:
  template <typename Launch>
  void per_vector(const char* what, int64_t n, const float* x, int64_t in, float* dx, const void* from, void* to, uint64_t out_bytes, Launch launch);
  void check_job(operation op, tensor_type type, const char* what, const void* scratch, uint64_t have, uint64_t need) const;
  int index_;
  void* stream_;
  work_queue queue_;
  // A step's inputs and outputs on the device and, pinned, on the host (copies run on the stream).
  int64_t max_n_ = 0;
  std::shared_ptr<buffer> x_, slots_, hidden_, out_;  // n x d floats, n x n_ff int32s and floats, n x d floats
  std::shared_ptr<buffer> partial_;                   // the down projection's chunks (one token at a time)
  std::shared_ptr<void> host_x_, host_slots_, host_hidden_, host_out_;
};

void cuda_backend::reserve(operation op, int64_t max_n, int64_t d, int64_t n_ff) {
  const auto n = static_cast<uint64_t>(max_n), ud = static_cast<uint64_t>(d), uf = static_cast<uint64_t>(n_ff);
  x_ = allocate(n * ud * sizeof(float), "FFN rows input");
  slots_ = allocate(n * uf * sizeof(int32_t), "FFN rows list");
  hidden_ = allocate(n * uf * sizeof(float), "FFN rows values");
  out_ = allocate(n * ud * sizeof(float), "FFN rows output");
#if defined(HOTCOLD_HAVE_GPU)
  partial_ = allocate(static_cast<uint64_t>(kernels::gpu::hot_ffn_scratch(d)) * sizeof(float), "FFN rows partial sums");
#endif
  auto pinned = [](uint64_t bytes) { return std::shared_ptr<void>(cuda_host_allocate(bytes), cuda_host_free); };
  host_x_ = pinned(n * ud * sizeof(float));
  host_slots_ = pinned(n * uf * sizeof(int32_t));
  host_hidden_ = pinned(n * uf * sizeof(float));
  host_out_ = pinned(n * ud * sizeof(float));
  max_n_ = max_n;
}

#if defined(HOTCOLD_HAVE_GPU)
// The GPU kernels' name for a row type the table accepts (F16, Q8_0, Q4_0).
kernels::gpu::row_type gpu_rows(tensor_type t) {
  return t == tensor_type::f16 ? kernels::gpu::row_type::f16 : t == tensor_type::q8_0 ? kernels::gpu::row_type::q8_0 : kernels::gpu::row_type::q4_0;
}
#endif

// Each token's chosen rows listed (their slots in the device's copy), the inputs and lists copied in
// through pinned memory, one hot_ffn per token on the stream, the sums and values copied back.
void cuda_backend::compute(const ffn_rows_job& job) {
#if defined(HOTCOLD_HAVE_GPU)
  if (!supports(operation::ffn_rows, job.type))
    throw std::invalid_argument(fmt::format("{}: the GPU's FFN kernel takes F16, Q8_0 or Q4_0 rows, not {}", name(), tensor_type_name(job.type)));
  const auto rows = gpu_rows(job.type);
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
  cuda_copy_async(dx, hx, static_cast<uint64_t>(n * d) * sizeof(float), true, stream_);
  for (int64_t t = 0; t < n; ++t)
    cuda_copy_async(ds + t * n_ff, hs + t * n_ff, static_cast<uint64_t>(count[static_cast<size_t>(t)]) * sizeof(int32_t), true, stream_);
  const auto act = static_cast<kernels::gpu::ffn_act>(static_cast<int>(job.act));
  for (int64_t t = 0; t < n; ++t) {
    const std::string e = kernels::gpu::hot_ffn(rows, job.gate, job.up, job.down_t, ds + t * n_ff, count[static_cast<size_t>(t)], d, dx + t * d, job.gated,
                                                act, dh + t * n_ff, dout + t * d, static_cast<float*>(partial_->data()), stream_);
    if (!e.empty()) fail(fmt::format("FFN rows kernel: {}", e));
  }
  cuda_copy_async(ho, dout, static_cast<uint64_t>(n * d) * sizeof(float), false, stream_);
  for (int64_t t = 0; t < n; ++t)
    cuda_copy_async(hh + t * n_ff, dh + t * n_ff, static_cast<uint64_t>(count[static_cast<size_t>(t)]) * sizeof(float), false, stream_);
  try {
    cuda_stream_synchronize(stream_);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  std::copy(ho, ho + n * d, job.out);
  for (int64_t t = 0; t < n; ++t) {  // each value back to its neuron
    int64_t c = 0;
    for (int64_t k = 0; k < job.count; ++k)
      if (!job.chosen || job.chosen[t * n_ff + job.ids[k]]) job.hidden[t * n_ff + job.ids[k]] = hh[t * n_ff + c++];
  }
#else
  throw std::runtime_error(fmt::format("{}: hotcold was built without a GPU back end", name()));
#endif
}

// n vectors one at a time through scratch memory: vector t's `in` values (x + t in) copied to dx,
// `launch` on the stream, `out_bytes` copied back from `from` to to + t out_bytes, the stream waited
// on (the staging is reused by the next vector). `what` names the kernel in errors.
template <typename Launch>
void cuda_backend::per_vector(const char* what, int64_t n, const float* x, int64_t in, float* dx, const void* from, void* to, uint64_t out_bytes,
                              Launch launch) {
  make_current();
  for (int64_t t = 0; t < n; ++t) {
    cuda_copy_async(dx, x + t * in, static_cast<uint64_t>(in) * sizeof(float), true, stream_);
    if (const std::string e = launch(); !e.empty()) fail(fmt::format("{} kernel: {}", what, e));
    cuda_copy_async(static_cast<uint8_t*>(to) + static_cast<uint64_t>(t) * out_bytes, from, out_bytes, false, stream_);
    try {
      cuda_stream_synchronize(stream_);
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }
}

// Checks the job's weights and scratch: what a job may ask of the GPU's kernels.
void cuda_backend::check_job(operation op, tensor_type type, const char* what, const void* scratch, uint64_t have, uint64_t need) const {
  if (!supports(op, type))
    throw std::invalid_argument(fmt::format("{}: the GPU's {} kernel takes F16, Q8_0 or Q4_0 weights, not {}", name(), what, tensor_type_name(type)));
  if (!scratch || have < need) throw std::invalid_argument(fmt::format("{}: a {} needs {} bytes of scratch, {} given", name(), what, need, have));
}

// A token at a time: its input into the scratch, the predictor kernel, its choice back.
void cuda_backend::compute(const predict_job& job) {
#if defined(HOTCOLD_HAVE_GPU)
  check_job(operation::predict, job.type, "predictor", job.scratch, job.scratch_bytes,
            static_cast<uint64_t>(job.d + job.rank + job.n_ff) * sizeof(float) + static_cast<uint64_t>(job.n_ff));
  auto* dx = static_cast<float*>(job.scratch);
  float* dmid = dx + job.d;
  float* dscores = dmid + job.rank;
  auto* dchosen = reinterpret_cast<uint8_t*>(dscores + job.n_ff);
  per_vector("predictor", job.n, job.x, job.d, dx, dchosen, job.chosen, static_cast<uint64_t>(job.n_ff), [&] {
    return kernels::gpu::predictor(gpu_rows(job.type), job.fc1, job.fc2, job.d, job.rank, job.n_ff, dx, job.threshold, dmid, dscores, dchosen, stream_);
  });
#else
  (void)job;
  throw std::runtime_error(fmt::format("{}: hotcold was built without a GPU back end", name()));
#endif
}

// A vector at a time: copied in, the product kernel, the product copied back.
void cuda_backend::compute(const matvec_job& job) {
#if defined(HOTCOLD_HAVE_GPU)
  check_job(operation::matvec, job.type, "product", job.scratch, job.scratch_bytes, static_cast<uint64_t>(job.cols + job.rows) * sizeof(float));
  auto* dx = static_cast<float*>(job.scratch);
  float* dy = dx + job.cols;
  per_vector("product", job.n, job.x, job.cols, dx, dy, job.y, static_cast<uint64_t>(job.rows) * sizeof(float),
             [&] { return kernels::gpu::matvec(gpu_rows(job.type), job.w, job.rows, job.cols, dx, dy, stream_); });
#else
  (void)job;
  throw std::runtime_error(fmt::format("{}: hotcold was built without a GPU back end", name()));
#endif
}

}  // namespace

std::shared_ptr<device> make_device(const device_options& o) {
  std::string kind = o.kind;
  if (kind == "auto") {
    auto gpus = probe_cuda();
    kind = gpus.devices.empty() ? "cpu" : gpu_name;
  }
  if (kind == "cpu") return std::make_shared<cpu_backend>(o.budget ? o.budget : cpu_device().free_memory);
  if (kind == "sim") {
    if (o.budget == 0) throw std::invalid_argument("--device sim needs a budget (--vram-budget GiB): it stands in for an accelerator's memory");
    return std::make_shared<sim_backend>(o.budget, o.sim_cost, o.sim_kernels);
  }
  if (kind == "cuda" || kind == "hip") {
    if (kind != gpu_name) {
      auto built = probe_cuda();
      throw std::runtime_error(fmt::format("--device {}: this build's GPU back end is {} (configure with -DHOTCOLD_GPU={})", kind,
                                           built.compiled ? gpu_name : "none", kind));
    }
    auto gpus = probe_cuda();
    if (gpus.devices.empty()) throw std::runtime_error(fmt::format("--device {}: {}", kind, gpus.unavailable));
    if (o.cuda_index < 0 || o.cuda_index >= static_cast<int>(gpus.devices.size()))
      throw std::invalid_argument(fmt::format("--device {}: there is no GPU {} ({} found)", kind, o.cuda_index, gpus.devices.size()));
    const auto& d = gpus.devices[static_cast<size_t>(o.cuda_index)];
    // The free memory of the GPU used (the first call that opens a context, on it alone), less the
    // margin the driver's context and lazily loaded kernels take.
    const uint64_t free_memory = gpu_free_memory(o.cuda_index);
    const uint64_t usable = free_memory > gpu_memory_margin ? free_memory - gpu_memory_margin : 0;
    if (usable == 0) throw std::runtime_error(fmt::format("--device {}: {} has {} MiB free, not more than the {} MiB kept back for the driver", kind, d.name,
                                                          free_memory >> 20, gpu_memory_margin >> 20));
    const uint64_t budget = o.budget ? std::min(o.budget, usable) : usable;
    return std::make_shared<cuda_backend>(d.name, budget, o.cuda_index);
  }
  throw std::invalid_argument(fmt::format("--device {}: not one of auto, cpu, sim, cuda, hip", o.kind));
}

}  // namespace hotcold::devices
