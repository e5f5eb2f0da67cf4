#pragma once
// GPU memory for the cuda device: allocation, copies and a stream on device `index`, and pinned
// host memory. Built from cuda_memory.cu where nvcc exists; without CUDA these throw (make_device
// never gets that far).
#include <cstdint>
#include <string>

namespace hotcold::devices {

void* cuda_allocate(int index, uint64_t bytes);  // throws out_of_device_memory
void cuda_free(int index, void* p);
void cuda_copy_to_device(int index, void* dst, const void* src, uint64_t bytes);
void cuda_copy_to_host(int index, void* dst, const void* src, uint64_t bytes);
void cuda_synchronize(int index);
// Sets bytes [p, p + bytes) of device memory to zero (and waits for it).
void cuda_zero(int index, void* p, uint64_t bytes, void* stream);  // on the stream (ordered after its work), waited for
// Makes `index` the calling thread's current device (kernel launches go to it).
void cuda_use(int index);
// A stream of its own on device `index` (a cudaStream_t), and the end of it.
void* cuda_stream_create(int index);
void cuda_stream_destroy(int index, void* stream);
// A copy queued on `stream` (to the device when to_device, else to the host); host memory should be
// pinned (cuda_host_allocate) for the copy to run asynchronously.
void cuda_copy_async(void* dst, const void* src, uint64_t bytes, bool to_device, void* stream);
// Blocks until what `stream` was given has run, as `mode` says (devices::device_wait): spin polls the
// stream; yield polls it, giving the core away between polls; block records `event`
// (cuda_blocking_event_create) on the stream and sleeps until the device signals it. Throws naming
// the first error.
void cuda_stream_wait(void* stream, void* event, int mode);
void* cuda_blocking_event_create(int index);
// Whether device `index`'s context still answers (a sticky error makes every later call fail with it):
// false, with the runtime's message in `why`, when it does not.
bool cuda_context_alive(int index, std::string& why);
// An event on device `index` (a cudaEvent_t, no timing): recorded on a stream, waited on by the host.
void* cuda_event_create(int index);
void cuda_event_destroy(void* event);
void cuda_event_record(void* event, void* stream);
void cuda_event_synchronize(void* event);  // throws naming the first error of the work before it
// Page-locked host memory: the device copies from and to it at full speed, without staging.
void* cuda_host_allocate(uint64_t bytes);
void cuda_host_free(void* p);

}  // namespace hotcold::devices
