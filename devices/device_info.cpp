#include "devices/device_info.hpp"

#include <unistd.h>

#include <fstream>
#include <string>

namespace hotcold::devices {

device_info cpu_device() {
  device_info d;
  d.kind = "cpu";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) d.name = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  if (d.name.empty()) d.name = "cpu";
  long page = sysconf(_SC_PAGESIZE);
  long pages = sysconf(_SC_PHYS_PAGES);
  long avail = sysconf(_SC_AVPHYS_PAGES);
  if (page > 0 && pages > 0) d.total_memory = static_cast<uint64_t>(page) * static_cast<uint64_t>(pages);
  if (page > 0 && avail > 0) d.free_memory = static_cast<uint64_t>(page) * static_cast<uint64_t>(avail);
  // MemAvailable counts reclaimable page cache, which is what a loader can really use.
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    uint64_t kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") {
      d.free_memory = kib * 1024;
      break;
    }
    meminfo.ignore(256, '\n');
  }
  return d;
}

std::vector<device_info> list_devices() {
  std::vector<device_info> all{cpu_device()};
  auto cuda = probe_cuda();
  all.insert(all.end(), cuda.devices.begin(), cuda.devices.end());
  return all;
}

}  // namespace hotcold::devices
