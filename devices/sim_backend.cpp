// The `sim` device: a stand-in for an accelerator (devices/host_backends.hpp) — an exact budget, a queue
// on a thread of its own, simulated transfer costs, and with sim_kernels a GPU's jobs computed as a GPU
// computes them (devices/gpu_jobs.hpp) instead of the CPU's routines.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "devices/gpu_jobs.hpp"
#include "devices/host_backends.hpp"
#include "devices/work_queue.hpp"
#include "kernels/cpu/row_kernels.hpp"

namespace hotcold::devices {
namespace {

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
    // The scratch as the GPU lays a chunk out (its first and its last), held to what its kernels assume.
    const int64_t chunk = attention_chunk(name(), job);
    for (int64_t m : {std::min(chunk, job.n), job.n % chunk})
      if (m > 0) check_scratch_layout(name(), job.scratch, job.scratch_bytes, attention_scratch_of(job, m));
    count(gpu_traffic(job));
    sim_kernels::attention(job);
  }
  void compute(const dense_ffn_job& job) override {
    const job_scope scope(*this, operation::dense_ffn, queue_.worker_id());  // (as a GPU's: on the queue)
    if (!kernels_) return device::compute(job);
    check_dense_ffn_job(name(), job);
    const int64_t chunk = dense_ffn_chunk(name(), job);
    for (int64_t m : {std::min(chunk, job.n), job.n % chunk})
      if (m > 0) check_scratch_layout(name(), job.scratch, job.scratch_bytes, dense_ffn_scratch_of(job.d, job.n_ff, m, job.combine_into != nullptr));
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

std::shared_ptr<device> make_sim_device(const device_options& o) { return std::make_shared<sim_backend>(o.budget, o.sim_cost, o.sim_kernels, o.job_deadline_s); }

}  // namespace hotcold::devices
