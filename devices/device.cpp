#include "devices/device.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "devices/host_backends.hpp"
#include "devices/cuda/cuda_backend.hpp"
#include "devices/gpu_jobs.hpp"
#include "devices/device_info.hpp"
#include "kernels/cpu/row_kernels.hpp"

namespace hotcold::devices {

buffer::~buffer() {
  dev_->raw_free(data_);
  dev_->used_.fetch_sub(charged_, std::memory_order_relaxed);
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

std::shared_ptr<buffer> device::allocate(uint64_t bytes, std::string label) { return allocate_buffer(bytes, std::move(label), false); }
std::shared_ptr<buffer> device::allocate_own(uint64_t bytes, std::string label) { return allocate_buffer(bytes, std::move(label), true); }

std::shared_ptr<buffer> device::allocate_buffer(uint64_t bytes, std::string label, bool own) {
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
  return std::shared_ptr<buffer>(new buffer(own ? nullptr : shared_from_this(), this, p, bytes, charged, std::move(label)));
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

uint64_t attention_scratch_per_token(int64_t d, int64_t dq, int64_t kv, int64_t n_rot, int64_t n_ff, int64_t rank) {
  // Floats: the input, RoPE's angles, the sequence and position (two int32), q/k/v, the heads'
  // outputs, the output product; with a predictor, the layer's input, the predictor's input, hidden
  // values and scores, and the choice (bytes, rounded up to floats).
  const int64_t pred = n_ff > 0 ? d + d + rank + n_ff + (n_ff + 3) / 4 : 0;
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

std::shared_ptr<device> make_device(const device_options& o) {
  std::string kind = o.kind;
  if (kind == "auto") {
    auto gpus = probe_cuda();
    kind = gpus.devices.empty() ? "cpu" : gpu_name;
  }
  if (kind == "cpu") return make_cpu_device(o.budget ? o.budget : cpu_device().free_memory);
  if (kind == "sim") {
    if (o.budget == 0) throw std::invalid_argument("--device sim needs a budget (--vram-budget GiB): it stands in for an accelerator's memory");
    return make_sim_device(o);
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
