// The `cpu` device: the CPU's memory as a device's, its work run at once (devices/host_backends.hpp).
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "devices/host_backends.hpp"

namespace hotcold::devices {

void* host_allocate(uint64_t bytes, const std::string& device) {
  void* p = std::aligned_alloc(64, (std::max<uint64_t>(bytes, 1) + 63) / 64 * 64);
  if (!p) throw out_of_device_memory(fmt::format("{}: the host has no {} bytes to give", device, bytes));
  return p;
}

namespace {

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


}  // namespace

std::shared_ptr<device> make_cpu_device(uint64_t budget) { return std::make_shared<cpu_backend>(budget); }

}  // namespace hotcold::devices
