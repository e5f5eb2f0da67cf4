#include "devices/device.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "devices/cuda/cuda_backend.hpp"
#include "devices/device_info.hpp"
#include "devices/gpu_jobs.hpp"
#include "kernels/cpu/row_kernels.hpp"

namespace hotcold::devices {

buffer::~buffer() {
  owner_->raw_free(data_);
  owner_->used_.fetch_sub(charged_, std::memory_order_relaxed);
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
  const uint64_t charged = allocation().charge(bytes);
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (charged > budget_ - used)
      throw out_of_device_memory(fmt::format("{}: {} needs {} bytes{}, {} of the budget of {} are left", name_, label, bytes,
                                             charged != bytes ? fmt::format(" ({} in the allocator's granules)", charged) : "", budget_ - used, budget_));
  } while (!used_.compare_exchange_weak(used, used + charged, std::memory_order_relaxed));
  void* p = nullptr;
  try {
    p = raw_allocate(bytes);
  } catch (...) {
    used_.fetch_sub(charged, std::memory_order_relaxed);
    throw;
  }
  return std::shared_ptr<buffer>(new buffer(shared_from_this(), p, bytes, charged, std::move(label)));
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

void device::compute(const attention_job&) {
  throw std::invalid_argument(fmt::format("{}: attention jobs are for devices that compute as a GPU does (host devices run the CPU's routine)", name_));
}

void device::compute(const dense_ffn_job&) {
  throw std::invalid_argument(fmt::format("{}: dense FFN jobs are for devices that compute as a GPU does (host devices run the CPU's routine)", name_));
}

const char* operation_name(operation op) {
  switch (op) {
    case operation::ffn_rows: return "ffn_rows";
    case operation::attention: return "attention";
    case operation::predict: return "predict";
    case operation::matvec: return "matvec";
    default: return "dense_ffn";
  }
}

uint64_t dense_ffn_scratch_per_token(int64_t d, int64_t n_ff) {
  return 4 * static_cast<uint64_t>(d + 2 * n_ff + d);  // the input, gate and up values (then the hidden values), the output
}

uint64_t attention_scratch_per_token(int64_t d, int64_t dq, int64_t kv, int64_t n_rot, int64_t n_ff) {
  // Floats: the input, RoPE's angles, the sequence and position (two int32), q/k/v, the heads'
  // outputs, the output product; with a predictor, the layer's input, the predictor's input and
  // scores, and the choice (bytes, rounded up to floats).
  const int64_t pred = n_ff > 0 ? d + d + n_ff + (n_ff + 3) / 4 : 0;
  return 4 * static_cast<uint64_t>(d + n_rot + 2 + (dq + 2 * kv) + dq + d + pred);
}

device::job_scope::job_scope(device& d, operation o, std::thread::id queue) : dev(d), op(o), t0(std::chrono::steady_clock::now()) {
  if (std::this_thread::get_id() != queue)
    throw std::logic_error(fmt::format("{}: a {} job computed outside the device's queue (give it to submit(), after the copies it reads)", d.name(),
                                       operation_name(o)));
}
device::job_scope::~job_scope() {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  dev.job_ns_[static_cast<size_t>(op)].fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

uint64_t gpu_pinned_bytes(uint64_t compute_bytes, uint64_t step_bytes) { return 2 * gpu_upload_chunk + step_bytes + 2 * compute_bytes; }

stall_watch stall_watch_for(device& d, double deadline_s) {
  stall_watch w;
  w.name = d.name();
  if (deadline_s > 0) w.deadline = std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(deadline_s));
  // (The device outlives its queue's work: its destructor drains the queue.)
  w.on_stall = [&d](const std::string& why) { d.lose(why); };
  return w;
}

void check_range(const buffer& b, uint64_t offset, uint64_t bytes) {
  if (offset > b.size() || bytes > b.size() - offset)
    throw std::out_of_range(fmt::format("{}: bytes {}..{} are outside its {}", b.label(), offset, offset + bytes, b.size()));
}

namespace {

void* host_allocate(uint64_t bytes, const std::string& device) {
  void* p = std::aligned_alloc(64, (std::max<uint64_t>(bytes, 1) + 63) / 64 * 64);
  if (!p) throw out_of_device_memory(fmt::format("{}: the host has no {} bytes to give", device, bytes));
  return p;
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
  void zero(buffer& b) override { std::memset(b.data(), 0, b.size()); }

 protected:
  void* raw_allocate(uint64_t bytes) override { return host_allocate(bytes, name()); }
  void raw_free(void* p) override { std::free(p); }
};


class sim_backend final : public device {
 public:
  sim_backend(uint64_t budget, transfer_cost cost, bool kernels, double deadline_s)
      : device("sim", device_kind::sim, budget), cost_(cost), kernels_(kernels), queue_("hotcold-sim") {
    queue_.set_stall_watch(stall_watch_for(*this, deadline_s));
  }
  ~sim_backend() override { queue_.drain(); }
  // With kernels, the GPU's table (kernels/gpu/decode.cu, gpu_reads) computed by sim_kernels (devices/gpu_jobs).
  bool runs_host_work() const override { return !kernels_; }
  allocation_rule allocation() const override { return kernels_ ? gpu_allocation : allocation_rule{}; }
  uint64_t pinned_bytes(uint64_t compute_bytes, uint64_t step_bytes) const override { return kernels_ ? gpu_pinned_bytes(compute_bytes, step_bytes) : 0; }
  bool supports(operation op, tensor_type rows) const override {
    if (!kernels_) return device::supports(op, rows);
    return gpu_reads(op, rows);
  }
  void compute(const attention_job& job) override {
    const job_scope scope(*this, operation::attention, queue_.worker_id());  // (as a GPU's: on the queue)
    if (!kernels_) return device::compute(job);
    check_attention_job(name(), job);
    count(gpu_traffic(job));
    sim_kernels::attention(job);
  }
  void compute(const dense_ffn_job& job) override {
    const job_scope scope(*this, operation::dense_ffn, queue_.worker_id());  // (as a GPU's: on the queue)
    if (!kernels_) return device::compute(job);
    check_dense_ffn_job(name(), job);
    count(gpu_traffic(job));
    sim_kernels::dense_ffn(job);
  }
  void compute(const ffn_rows_job& job) override {
    const job_scope scope(*this, operation::ffn_rows, queue_.worker_id());  // (as a GPU's: on the queue)
    if (!kernels_) return device::compute(job);
    if (!supports(operation::ffn_rows, job.type)) throw std::invalid_argument(fmt::format("sim: FFN rows of type {}", tensor_type_name(job.type)));
    count(gpu_traffic(job));
    sim_kernels::ffn_rows(job);
  }
  void compute(const predict_job& job) override {
    const job_scope scope(*this, operation::predict, queue_.worker_id());  // (as a GPU's: on the queue)
    if (!kernels_) return device::compute(job);
    if (!supports(operation::predict, job.type)) throw std::invalid_argument(fmt::format("sim: a predictor of type {}", tensor_type_name(job.type)));
    check_scratch(name(), job);
    count(gpu_traffic(job));
    sim_kernels::predict(job);
  }
  void compute(const matvec_job& job) override {
    const job_scope scope(*this, operation::matvec, queue_.worker_id());  // (as a GPU's: on the queue)
    if (!kernels_) return device::compute(job);
    if (!supports(operation::matvec, job.type)) throw std::invalid_argument(fmt::format("sim: products with rows of type {}", tensor_type_name(job.type)));
    check_scratch(name(), job);
    count(gpu_traffic(job));
    sim_kernels::matvec(job);
  }

  event copy_in(buffer& dst, uint64_t offset, const void* src, uint64_t bytes) override {
    check_alive();
    check_range(dst, offset, bytes);
    char* to = static_cast<char*>(dst.data()) + offset;
    count(gpu_copy_traffic(bytes, true));
    return queue_.submit([this, to, src, bytes] { transfer(to, src, bytes); });
  }
  event copy_out(void* dst, const buffer& src, uint64_t offset, uint64_t bytes) override {
    check_alive();
    check_range(src, offset, bytes);
    const char* from = static_cast<const char*>(src.data()) + offset;
    count(gpu_copy_traffic(bytes, false));
    return queue_.submit([this, dst, from, bytes] { transfer(dst, from, bytes); });
  }
  event submit(std::function<void()> work) override {
    check_alive();
    return queue_.submit(std::move(work));
  }
  // A GPU's copies and waits are counted as its back end makes them (gpu_copy_traffic); so are its
  // jobs' launches, copies and waits with kernels (gpu_traffic).
  void synchronize() override {
    queue_.drain();
    count({0, 0, 1});
  }
  void zero(buffer& b) override {
    check_alive();
    count({0, 0, 1});
    queue_.submit([&b] { std::memset(b.data(), 0, b.size()); })->wait();
  }

 protected:
  // New memory holds 0xff bytes (NaN as F16 and F32), not zeros: a GPU's cudaMalloc gives whatever was
  // there, so what reads memory nobody wrote goes wrong here too.
  void* raw_allocate(uint64_t bytes) override {
    void* p = host_allocate(bytes, name());
    std::memset(p, 0xff, bytes);
    return p;
  }
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
    return std::make_shared<sim_backend>(o.budget, o.sim_cost, o.sim_kernels, o.job_deadline_s);
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
    return make_gpu_device(d.name, budget, o.cuda_index, o.job_deadline_s);
  }
  throw std::invalid_argument(fmt::format("--device {}: not one of auto, cpu, sim, cuda, hip", o.kind));
}

}  // namespace hotcold::devices
