#include "devices/device.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "devices/cuda/cuda_memory.hpp"
#include "devices/device_info.hpp"

namespace hotcold::devices {

std::string_view device_kind_name(device_kind k) {
  switch (k) {
    case device_kind::cpu: return "cpu";
    case device_kind::sim: return "sim";
    case device_kind::cuda: return "cuda";
    case device_kind::hip: return "hip";
  }
  return "?";
}

buffer::~buffer() {
  owner_->raw_free(data_);
  owner_->used_.fetch_sub(size_, std::memory_order_relaxed);
}

std::shared_ptr<buffer> device::allocate(uint64_t bytes, std::string label) {
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

class sim_backend final : public device {
 public:
  sim_backend(uint64_t budget, transfer_cost cost) : device("sim", device_kind::sim, budget), cost_(cost), queue_("hotcold-sim") {}
  ~sim_backend() override { queue_.drain(); }
  event copy_in(buffer& dst, uint64_t offset, const void* src, uint64_t bytes) override {
    check_range(dst, offset, bytes);
    char* to = static_cast<char*>(dst.data()) + offset;
    return queue_.submit([this, to, src, bytes] { transfer(to, src, bytes); });
  }
  event copy_out(void* dst, const buffer& src, uint64_t offset, uint64_t bytes) override {
    check_range(src, offset, bytes);
    const char* from = static_cast<const char*>(src.data()) + offset;
    return queue_.submit([this, dst, from, bytes] { transfer(dst, from, bytes); });
  }
  event submit(std::function<void()> work) override { return queue_.submit(std::move(work)); }
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
  work_queue queue_;
};

class cuda_backend final : public device {
 public:
  cuda_backend(std::string name, uint64_t budget, int index)
      : device(std::move(name), device_kind::cuda, budget), index_(index), stream_(cuda_stream_create(index)), queue_("hotcold-cuda") {}
  ~cuda_backend() override {
    queue_.drain();
    cuda_stream_destroy(index_, stream_);
  }
  event copy_in(buffer& dst, uint64_t offset, const void* src, uint64_t bytes) override {
    check_range(dst, offset, bytes);
    cuda_copy_to_device(index_, static_cast<char*>(dst.data()) + offset, src, bytes);
    return completed_event();
  }
  event copy_out(void* dst, const buffer& src, uint64_t offset, uint64_t bytes) override {
    check_range(src, offset, bytes);
    cuda_copy_to_host(index_, dst, static_cast<const char*>(src.data()) + offset, bytes);
    return completed_event();
  }
  // On the device's queue thread, so the caller (the CPU's cold share) works meanwhile.
  event submit(std::function<void()> work) override { return queue_.submit(std::move(work)); }
  void synchronize() override {
    queue_.drain();
    cuda_synchronize(index_);
  }
  bool runs_host_work() const override { return false; }
  void* stream() const override { return stream_; }
  void make_current() const override { cuda_use(index_); }

 protected:
  void* raw_allocate(uint64_t bytes) override { return cuda_allocate(index_, bytes); }
  void raw_free(void* p) override { cuda_free(index_, p); }

 private:
  int index_;
  void* stream_;
  work_queue queue_;
};

}  // namespace

std::shared_ptr<device> make_device(const device_options& o) {
  std::string kind = o.kind;
  if (kind == "auto") {
    auto cuda = probe_cuda();
    kind = cuda.devices.empty() ? "cpu" : "cuda";
  }
  if (kind == "cpu") return std::make_shared<cpu_backend>(o.budget ? o.budget : cpu_device().free_memory);
  if (kind == "sim") {
    if (o.budget == 0) throw std::invalid_argument("--device sim needs a budget (--vram-budget GiB): it stands in for an accelerator's memory");
    return std::make_shared<sim_backend>(o.budget, o.sim_cost);
  }
  if (kind == "cuda") {
    auto cuda = probe_cuda();
    if (cuda.devices.empty()) throw std::runtime_error(fmt::format("--device cuda: {}", cuda.unavailable));
    if (o.cuda_index < 0 || o.cuda_index >= static_cast<int>(cuda.devices.size()))
      throw std::invalid_argument(fmt::format("--device cuda: there is no CUDA device {} ({} found)", o.cuda_index, cuda.devices.size()));
    const auto& d = cuda.devices[static_cast<size_t>(o.cuda_index)];
    uint64_t budget = o.budget ? std::min(o.budget, d.free_memory) : d.free_memory;
    return std::make_shared<cuda_backend>(d.name, budget, o.cuda_index);
  }
  if (kind == "hip") throw std::runtime_error("--device hip: the HIP backend is compile-checked only; it has no runtime yet");
  throw std::invalid_argument(fmt::format("--device {}: not one of auto, cpu, sim, cuda, hip", o.kind));
}

}  // namespace hotcold::devices
