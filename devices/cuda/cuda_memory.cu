#include "devices/cuda/cuda_memory.hpp"

#include <sched.h>

#include <stdexcept>
#include <string>

#include "devices/device.hpp"
#include "devices/work_queue.hpp"
#include "kernels/gpu/portability.hpp"

namespace hotcold::devices {

namespace {
// Names the runtime call that failed as this build calls it (cudaMalloc or hipMalloc, ...).
std::string call(const char* what) { return std::string(HOTCOLD_GPU_API) + what; }
void check(gpuError_t err, const char* what) {
  if (err != gpuSuccess) throw std::runtime_error(call(what) + ": " + gpuGetErrorString(err));
}
}  // namespace

void* cuda_allocate(int index, uint64_t bytes) {
  check(gpuSetDevice(index), "SetDevice");
  void* p = nullptr;
  gpuError_t err = gpuMalloc(&p, bytes);
  if (err != gpuSuccess) throw out_of_device_memory(call("Malloc") + ": " + gpuGetErrorString(err));
  return p;
}

void cuda_free(int index, void* p) {
  if (gpuSetDevice(index) == gpuSuccess) (void)gpuFree(p);
}

void cuda_copy_to_device(int index, void* dst, const void* src, uint64_t bytes) {
  check(gpuSetDevice(index), "SetDevice");
  check(gpuMemcpy(dst, src, bytes, gpuMemcpyHostToDevice), "Memcpy to the device");
}

void cuda_copy_to_host(int index, void* dst, const void* src, uint64_t bytes) {
  check(gpuSetDevice(index), "SetDevice");
  check(gpuMemcpy(dst, src, bytes, gpuMemcpyDeviceToHost), "Memcpy to the host");
}

void cuda_zero(int index, void* p, uint64_t bytes, void* stream) {
  check(gpuSetDevice(index), "SetDevice");
  check(gpuMemsetAsync(p, 0, bytes, static_cast<gpuStream_t>(stream)), "MemsetAsync");
  check(gpuStreamSynchronize(static_cast<gpuStream_t>(stream)), "StreamSynchronize after MemsetAsync");
}

void cuda_synchronize(int index) {
  check(gpuSetDevice(index), "SetDevice");
  check(gpuDeviceSynchronize(), "DeviceSynchronize");
}

void cuda_use(int index) { check(gpuSetDevice(index), "SetDevice"); }

void* cuda_stream_create(int index) {
  check(gpuSetDevice(index), "SetDevice");
  gpuStream_t s = nullptr;
  check(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking), "StreamCreate");
  return s;
}

void cuda_stream_destroy(int index, void* stream) {
  if (stream && gpuSetDevice(index) == gpuSuccess) (void)gpuStreamDestroy(static_cast<gpuStream_t>(stream));
}

void cuda_copy_async(void* dst, const void* src, uint64_t bytes, bool to_device, void* stream) {
  if (bytes == 0) return;
  check(gpuMemcpyAsync(dst, src, bytes, to_device ? gpuMemcpyHostToDevice : gpuMemcpyDeviceToHost, static_cast<gpuStream_t>(stream)),
        to_device ? "MemcpyAsync to the device" : "MemcpyAsync to the host");
}

void cuda_stream_wait(void* stream, void* event, int mode) {
  const auto s = static_cast<gpuStream_t>(stream);
  if (mode == static_cast<int>(device_wait::block)) {
    check(gpuEventRecord(static_cast<gpuEvent_t>(event), s), "EventRecord");
    check(gpuEventSynchronize(static_cast<gpuEvent_t>(event)), "EventSynchronize");
    return;
  }
  for (;;) {
    const gpuError_t err = gpuStreamQuery(s);
    if (err != gpuErrorNotReady) return check(err, "StreamQuery");
    if (mode == static_cast<int>(device_wait::yield)) sched_yield();
#if defined(__x86_64__)
    else __builtin_ia32_pause();
#endif
  }
}

void* cuda_blocking_event_create(int index) {
  check(gpuSetDevice(index), "SetDevice");
  gpuEvent_t e = nullptr;
  check(gpuEventCreateWithFlags(&e, gpuEventDisableTiming | gpuEventBlockingSync), "EventCreate");
  return e;
}

bool cuda_context_alive(int index, std::string& why) {
  gpuError_t err = gpuSetDevice(index);
  if (err == gpuSuccess) err = gpuDeviceSynchronize();
  if (err == gpuSuccess) return true;
  why = call("DeviceSynchronize") + ": " + gpuGetErrorString(err);
  return false;
}

void* cuda_event_create(int index) {
  check(gpuSetDevice(index), "SetDevice");
  gpuEvent_t e = nullptr;
  check(gpuEventCreateWithFlags(&e, gpuEventDisableTiming), "EventCreate");
  return e;
}

void cuda_event_destroy(void* event) {
  if (event) (void)gpuEventDestroy(static_cast<gpuEvent_t>(event));
}

void cuda_event_record(void* event, void* stream) { check(gpuEventRecord(static_cast<gpuEvent_t>(event), static_cast<gpuStream_t>(stream)), "EventRecord"); }

void cuda_event_synchronize(void* event) { check(gpuEventSynchronize(static_cast<gpuEvent_t>(event)), "EventSynchronize"); }

void* cuda_host_allocate(uint64_t bytes) {
  void* p = nullptr;
  check(gpuHostAlloc(&p, bytes, gpuHostAllocDefault), "HostAlloc");
  return p;
}

void cuda_host_free(void* p) {
  if (p) (void)gpuFreeHost(p);
}

}  // namespace hotcold::devices
