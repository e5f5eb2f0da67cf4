#pragma once
// hotcold-gpu-check: the proof that the GPU side works, in one run on a machine with a GPU
// (docs/gpu.md, "The bundle"). Two parts:
//   kernels  every GPU kernel against the CPU on random inputs (gpu_check/kernels.cpp);
//   all      the whole check, in stages with time shares: the kernels (and once more under
//            compute-sanitizer's memcheck where it exists), generated models at the 7B and ~1B
//            shapes through actors + the GPU against model/reference, tokens/s side by side, and a
//            final table on stdout and as JSON (gpu_check/run.cpp).
#include <string>

namespace hotcold::gpu_check {

// The outcome of `all`, as its exit status. A kernel found wrong outranks a wrong hybrid, which
// outranks a stage that could not finish, which outranks a kernel below its speed floor (the speed's
// verdict, apart from the accuracy's).
enum gpu_check_exit : int {
  gpu_check_ok = 0,
  gpu_check_kernel_wrong = 1,
  gpu_check_hybrid_wrong = 2,
  gpu_check_incomplete = 3,  // a stage ran over its time share, or a step failed to run
  gpu_check_slow = 4,        // every answer right and every stage done, but a kernel below its speed floor
  gpu_check_no_device = 77,  // (ctest's and automake's "skipped")
};

// Checks every kernel (with `small`, only small shapes: for compute-sanitizer) and, unless small,
// times them at the ~1B and 7B shapes against the device's bandwidth. Writes the checks and speeds
// to json_path (if given). Returns 0, 1 (a kernel is wrong) or 77 (no CUDA device).
// Each check waits for its kernels and reads the device's error; after an error the run stops and the
// JSON's `resume_from` names the check a fresh process starts at (from).
int check_gpu_kernels(bool small, const std::string& json_path, int from = 0);

struct gpu_check_options {
  double minutes = 8;         // the whole run's time; each stage gets a share (and what earlier ones left)
  std::string bin_dir;        // hotcold, hotcold-gpu-check, test_actors, test_devices
  std::string vocab;          // the tokenizer the generated models copy
  std::string work = "gpu-check-work";  // generated models (kept for a rerun), logs, the JSON
  std::string device = "cuda";  // cuda; or sim: stages 2-4 on sim's GPU-like kernels (a dry run without a GPU)
  bool small = false;         // small model shapes (a dry run's)
  int threads = 0;            // CPU threads (0: all)
  std::string json_path;      // the final JSON (default: WORK/gpu-check.json)
  // The schedule printed before the stages start is estimated for a GPU of this bandwidth (GB/s, 0: the
  // device's published figure; on sim, an H100's 3350: the lent machine's) and this many CPU cores (0:
  // this machine's; on sim, 16).
  double schedule_gpu_gbs = 0;
  int schedule_cores = 0;
};

// The device's published memory bandwidth (memory clock x bus width x 2), GB/s; 0 without a device.
double published_bandwidth_gbs();

// Runs the stages, prints the table, writes the JSON; returns a gpu_check_exit.
int run_gpu_check(const gpu_check_options& o);

}  // namespace hotcold::gpu_check
