// What the CPU can run (cpu()), and the one table of kernels filled once from it (cpu_kernels()), each
// kind of kernel choosing its entries in its own file.
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/kernel_table.hpp"

namespace hotcold::kernels {

const cpu_features& cpu() {
  static const cpu_features d = [] {
    cpu_features f;
    f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    const bool allowed = f.avx2 && !std::getenv("HOTCOLD_NO_AVX512");
    f.avx512 = allowed && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    f.vnni = f.avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
    f.vbmi = f.vnni && __builtin_cpu_supports("avx512vbmi");
    const bool intel = __builtin_cpu_is("intel");
    f.stream_ahead = intel ? 2048 : 0;
    f.prefetch_nta = !intel;
    if (const char* e = std::getenv("HOTCOLD_STREAM_AHEAD")) f.stream_ahead = std::max(0, std::atoi(e)) / 64 * 64;
    if (const char* e = std::getenv("HOTCOLD_PREFETCH_NTA")) f.prefetch_nta = std::atoi(e) != 0;
    return f;
  }();
  return d;
}

const char* dot_implementation() { return cpu().vnni ? "avx512vnni" : cpu().avx2 ? "avx2" : "scalar"; }

kernel_table make_kernel_table() {
  kernel_table t{};
  const cpu_features& f = cpu();
  for (auto choose : {choose_row_kernels, choose_k_quant_kernels, choose_q6_k_kernels, choose_f16x16_kernels, choose_q4_0x16_kernels, choose_q4_kx16_kernels, choose_q6_kx16_kernels, choose_gemm_kernels,
                      choose_quantize_kernels, choose_select_kernels, choose_attention_kernels,
                      choose_attend_keys_kernels})
    choose(t, f);
  return t;
}

}  // namespace hotcold::kernels
