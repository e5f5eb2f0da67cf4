#pragma once
// What the CPU can run, decided once per process: the kernels pick their implementation from it.
// HOTCOLD_NO_AVX512=1 in the environment keeps the AVX2 paths on an AVX-512 machine (ctest runs the
// kernel tests both ways).
namespace hotcold::kernels {

struct cpu_features {
  bool avx2 = false;    // with FMA and F16C
  bool avx512 = false;  // F, VL
  bool vnni = false;    // F, BW, DQ, VL and VNNI
  bool vbmi = false;    // and VBMI (byte permutes)
};
const cpu_features& cpu();

}  // namespace hotcold::kernels
