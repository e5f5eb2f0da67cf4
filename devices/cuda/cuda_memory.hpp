#pragma once
// GPU memory for the cuda device: allocation and synchronous copies on device `index`. Built from
// cuda_memory.cu where nvcc exists; without CUDA these throw (make_device never gets that far).
#include <cstdint>

namespace hotcold::devices {

void* cuda_allocate(int index, uint64_t bytes);  // throws out_of_device_memory
void cuda_free(int index, void* p);
void cuda_copy_to_device(int index, void* dst, const void* src, uint64_t bytes);
void cuda_copy_to_host(int index, void* dst, const void* src, uint64_t bytes);
void cuda_synchronize(int index);

}  // namespace hotcold::devices
