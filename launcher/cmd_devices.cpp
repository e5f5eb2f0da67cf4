// hotcold devices: what this machine can compute on.
#include "launcher/cmd_devices.hpp"

#include <fmt/format.h>

#include "devices/device_info.hpp"

namespace hotcold::launcher {

void run_devices() {
  auto gib = [](uint64_t b) { return b / double(1ull << 30); };
  for (auto d : devices::list_devices()) {
    if (d.kind != "cpu") d.free_memory = devices::gpu_free_memory(d.index);  // (listing them is asking)
    fmt::print("{}:{}  {}  {:.1f} GiB total, {:.1f} GiB free\n", d.kind, d.index, d.name, gib(d.total_memory), gib(d.free_memory));
  }
  auto gpus = devices::probe_cuda();
  if (gpus.devices.empty()) fmt::print("{}: {}\n", gpus.kind, gpus.unavailable);
}

}  // namespace hotcold::launcher
