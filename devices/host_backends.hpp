#pragma once
// The back ends that compute with host code (device.cpp's make_device makes them): `cpu`, the CPU as a
// device (copies are memcpy, work runs at once), and `sim` (sim_backend.cpp), a stand-in for an
// accelerator with an exact budget and a queue of its own thread.
#include <cstdint>
#include <memory>
#include <string>

#include "devices/device.hpp"

namespace hotcold::devices {

std::shared_ptr<device> make_cpu_device(uint64_t budget);
std::shared_ptr<device> make_sim_device(const device_options& o);
// Host memory aligned to 64 bytes for a host device's buffer; out_of_device_memory naming `device`.
void* host_allocate(uint64_t bytes, const std::string& device);

}  // namespace hotcold::devices
