#pragma once
// What the CPU can run, decided once per process: the kernels pick their implementation from it.
// HOTCOLD_NO_AVX512=1 in the environment keeps the AVX2 paths on an AVX-512 machine (ctest runs the
// kernel tests both ways).
#include <type_traits>

namespace hotcold::kernels {

struct cpu_features {
  bool avx2 = false;    // with FMA and F16C
  bool avx512 = false;  // F, VL
  bool vnni = false;    // F, BW, DQ, VL and VNNI
  bool vbmi = false;    // and VBMI (byte permutes)
  // Bytes ahead of a sequential stream of weights (a dense product's rows) that the kernels ask for
  // into L1 as they read, and how they ask for a sparse FFN's scattered rows. Intel cores here read
  // dense F16 products ~20% faster asking 2 KiB ahead, and lose up to half their read speed to
  // non-temporal prefetches; AMD's (Zen 5) own prefetchers keep its streams fed, and its scattered rows
  // were measured fastest with non-temporal hints. HOTCOLD_STREAM_AHEAD=N (bytes, 0 for none) overrides
  // the distance, HOTCOLD_PREFETCH_NTA=0/1 the hint, for measuring.
  int stream_ahead = 0;
  bool prefetch_nta = true;
};
const cpu_features& cpu();

// f(std::integral_constant<int, K>{}) for K = nx clamped to 1..4: the kernels that take up to four
// vectors are unrolled for each count.
template <typename F>
inline void for_vector_count(int nx, F&& f) {
  switch (nx) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, 4>{});
  }
}

}  // namespace hotcold::kernels

// The instruction sets of the kernels' variants, one function attribute each (cpu() picks the variant).
#define HOTCOLD_AVX2 __attribute__((target("avx2,fma,f16c")))
#define HOTCOLD_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma,f16c")))
#define HOTCOLD_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")))
#define HOTCOLD_VBMI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")))

// Around AVX-512 code: GCC 12's _mm512_inserti64x4, _mm512_reduce_add_ps and other intrinsics pass an
// undefined vector to their masked builtins, then warn about it.
#define HOTCOLD_AVX512_BEGIN \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define HOTCOLD_AVX512_END _Pragma("GCC diagnostic pop")
