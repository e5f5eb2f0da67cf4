// The kernels' launch bookkeeping, and the row sizes of decode.hpp.
#include "kernels/gpu/rows.cuh"

namespace hotcold::kernels::gpu {

namespace {
thread_local uint64_t launches_here = 0;
}  // namespace

std::string detail::launched() {
  ++launches_here;
  const gpuError_t err = gpuGetLastError();
  return err == gpuSuccess ? std::string() : gpuGetErrorString(err);
}

uint64_t launches_by_this_thread() { return launches_here; }

int64_t row_bytes(row_type t, int64_t d) {
  switch (t) {
    case row_type::f16: return d * 2;
    case row_type::q8_0: return d / 32 * 34;
    case row_type::q6_k: return d / 256 * 210;
    default: return d / 32 * 18;
  }
}

}  // namespace hotcold::kernels::gpu
