#pragma once
// hotcold plan: what a GPU would give a file, on paper (tools/planner.hpp).
#include <cstdint>
#include <string>

namespace hotcold::launcher {

struct plan_args {
  std::string model, gpu, stats;
  double expert_hit_rate = -1;  // a mixture: the share of routed experts the GPU's slots hold (-1: slots / experts)
  double budget = -1;           // --vram-budget GiB (-1: not given: the disk tier's plan alone, with --ram-budget)
  double ram_budget = 0;        // --ram-budget GiB: the disk tier's plan too (0: none)
  double disk_gbs = 0;          // --disk-read GB/s: the disk's rate for the tier's reads (0: measured here)
  double gpu_gbs = 0, pcie_gbs = 0, cpu_gbs = 0, ffn_gbs = 0, active = -1, efficiency = 0.75, crossing_us = 10, launch_us = 3, copy_us = 3;
  int64_t ctx = 0;
  std::string cache_type_k, cache_type_v;  // the KV cache's types (empty: f16)
  int threads = 0;
  bool json = false;
};

void run_plan(const plan_args& a);

}  // namespace hotcold::launcher
