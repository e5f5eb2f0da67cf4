// hotcold-gpu-check kernels, the timed part: each kernel's decode work at the ~1B and 7B shapes, its
// GB/s of the bytes it must read against the device's copy bandwidth and a floor (gpu_check/kernels.cpp
// runs it after the checks; docs/gpu.md, stage 1).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "gpu_check/kernel_inputs.hpp"

namespace hotcold::gpu_check::inputs {

namespace {

// Seconds per call, by the device's own clock (events around the calls): one call to warm up, then
// `reps` calls, call i given i (to take the i-th of a set of rotated buffers).
template <typename F>
double seconds_per_call(F f, int reps) {
  f(0);
  checked(gpuDeviceSynchronize(), "a timed kernel's warm-up");
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  checked(cudaEventCreate(&e0), "cudaEventCreate");
  checked(cudaEventCreate(&e1), "cudaEventCreate");
  checked(cudaEventRecord(e0, nullptr), "cudaEventRecord");
  for (int i = 0; i < reps; ++i) f(i);
  checked(cudaEventRecord(e1, nullptr), "cudaEventRecord");
  checked(cudaEventSynchronize(e1), "a timed kernel");
  float ms = 0;
  checked(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
  return static_cast<double>(ms) * 1e-3 / reps;
}

// A kernel's decode work judged: its GB/s of the bytes it must read as a fraction of the copy's, held
// to a floor (what a bandwidth-shaped kernel of its kind reaches; below it, the first run says where a
// token's time goes). Below its floor sets the check's speed verdict (exit status 4), apart from its
// accuracy.
void speed(nlohmann::json& speeds, const std::string& name, double seconds, double bytes, double peak, double floor) {
  const double gbps = bytes / seconds / 1e9, fraction = gbps / peak;
  const bool below = fraction < floor;
  std::printf("SPEED %-52s %9.1f us %7.0f GB/s (%4.1f%% of %.0f; floor %.0f%%)%s\n", name.c_str(), seconds * 1e6, gbps, 100 * fraction, peak, 100 * floor,
              below ? " BELOW ITS FLOOR" : "");
  std::fflush(stdout);
  speeds.push_back({{"kernel", name}, {"us", seconds * 1e6}, {"gb_per_s", gbps}, {"fraction_of_peak", fraction}, {"floor", floor}, {"below_floor", below}});
}

}  // namespace

double published() {
  int clock_khz = 0, bus_bits = 0;
  (void)cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0);
  (void)cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  return 2.0 * clock_khz * 1e3 * bus_bits / 8 / 1e9;
}
std::pair<double, double> peak_bandwidth() {
  const double spec = published();
  const size_t n = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  double copy = 0;
  if (gpuMalloc(&a, n) == gpuSuccess && gpuMalloc(&b, n) == gpuSuccess) {
    const double s = seconds_per_call([&](int) { (void)cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, nullptr); }, 10);
    copy = 2.0 * static_cast<double>(n) / s / 1e9;
  }
  (void)gpuFree(a);
  (void)gpuFree(b);
  return {spec, copy};
}

namespace {

// Copies of a buffer enough that the copies together pass four times the GPU's L2 cache, so a timed
// loop that takes them in turn reads device memory, not the cache (an H100's 50 MB, an H200's 60 MB
// would hold most single working sets here): the first from the host, the rest copied on the device.
struct rotated {
  std::vector<uint8_t*> p;
  static int64_t l2_bytes() {
    int l2 = 0;
    (void)cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
    return l2 > 0 ? l2 : 64 << 20;
  }
  template <typename T>
  explicit rotated(const std::vector<T>& h) {
    const size_t bytes = std::max<size_t>(1, h.size() * sizeof(T));
    const auto copies = static_cast<size_t>(std::max<int64_t>(2, (4 * l2_bytes() + static_cast<int64_t>(bytes) - 1) / static_cast<int64_t>(bytes)));
    p.resize(copies);
    for (size_t k = 0; k < copies; ++k) {
      checked(gpuMalloc(reinterpret_cast<void**>(&p[k]), bytes), "gpuMalloc (rotated buffers)");
      if (k == 0) checked(gpuMemcpy(p[0], h.data(), bytes, gpuMemcpyHostToDevice), "gpuMemcpy to the device");
      else checked(cudaMemcpy(p[k], p[0], bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy on the device");
    }
  }
  rotated(const rotated&) = delete;
  ~rotated() {
    for (uint8_t* b : p) (void)gpuFree(b);
  }
  template <typename T = uint8_t>
  T* at(int i) const {
    return reinterpret_cast<T*>(p[static_cast<size_t>(i) % p.size()]);
  }
};

// Each kernel's decode work at the ~1B (2048/5632) and 7B (4096/11008) shapes, as GB/s of the bytes
// it must read, against the copy's bandwidth: the head-like and attention products, the hot FFN
// (a quarter of the neurons hot, a tenth of those chosen; gate, up and down rows of their own), the
// predictor and attention over 2048 cached positions. Every weight (and cache) in rotated copies past
// the L2 cache, timed by the device's events.
}  // namespace

nlohmann::json time_kernels(std::mt19937& rng, double peak) {
  nlohmann::json speeds = nlohmann::json::array();
  const int reps = 100;
  for (const int64_t d : {2048, 4096}) {
    const int64_t n_ff = d == 2048 ? 5632 : 11008, hot = n_ff / 4, chosen = hot / 10 * 4;
    const std::string shape = d == 2048 ? " (1B)" : " (7B)";
    auto x = random_f32(static_cast<size_t>(4 * n_ff), rng);
    dev<float> dx(x), dy(static_cast<size_t>(4 * n_ff));
    for (auto t : {gpu::row_type::f16, gpu::row_type::q8_0, gpu::row_type::q4_0}) {
      const char* tn = type_name(t);
      const double product_floor = t == gpu::row_type::f16 ? 0.5 : 0.35;  // (quantized rows: more work a byte)
      const rotated w(random_rows(t, n_ff, d, rng));
      const double bytes = static_cast<double>(n_ff * gpu::row_bytes(t, d));
      speed(speeds, std::string("matvec ") + tn + " " + std::to_string(n_ff) + "x" + std::to_string(d) + shape,
            seconds_per_call([&](int i) { gpu::matvec(t, w.at(i), n_ff, d, dx.p, dy.p); }, reps), bytes, peak, product_floor);
      speed(speeds, std::string("matmul ") + tn + " " + std::to_string(n_ff) + "x" + std::to_string(d) + " n 4" + shape,
            seconds_per_call([&](int i) { gpu::matmul(t, w.at(i), n_ff, d, dx.p, 4, dy.p, n_ff); }, reps), bytes, peak, product_floor);
      const rotated gate(random_rows(t, hot, d, rng)), up(random_rows(t, hot, d, rng)), down(random_rows(t, hot, d, rng));
      std::vector<int32_t> slots(static_cast<size_t>(chosen));
      for (auto& sl : slots) sl = static_cast<int32_t>(rng() % hot);
      dev<int32_t> ds(slots);
      dev<float> dh(static_cast<size_t>(chosen)), scratch(static_cast<size_t>(gpu::hot_ffn_scratch(d)));
      speed(speeds, std::string("hot_ffn ") + tn + " " + std::to_string(chosen) + " of " + std::to_string(hot) + " rows" + shape,
            seconds_per_call([&](int i) {
              gpu::hot_ffn(t, gate.at(i), up.at(i), down.at(i), ds.p, chosen, d, dx.p, true, hotcold::kernels::activation::relu, 0.0f, dh.p, dy.p, scratch.p);
            }, reps),
            static_cast<double>(chosen) * 3.0 * static_cast<double>(gpu::row_bytes(t, d)), peak, 0.25);
    }
    const int64_t rank = d == 2048 ? 256 : 1024;
    const rotated fc1(random_f16(static_cast<size_t>(rank * d), rng, 0.05f)), fc2(random_f16(static_cast<size_t>(n_ff * rank), rng, 0.1f));
    dev<float> mid(static_cast<size_t>(rank)), scores(static_cast<size_t>(n_ff));
    dev<uint8_t> chosen_bytes(static_cast<size_t>(n_ff));
    speed(speeds, "predictor f16 rank " + std::to_string(rank) + shape,
          seconds_per_call([&](int i) { gpu::predictor(gpu::row_type::f16, fc1.at(i), fc2.at(i), d, rank, n_ff, dx.p, 1, 0.1f, mid.p, scores.p, chosen_bytes.p); }, reps),
          2.0 * static_cast<double>(rank * (d + n_ff)), peak, 0.2);
    // One token's attention at the last position of a 2048 context, F16 cache (1B: 32 heads of 64,
    // 8 KV heads; 7B: 32 heads of 128, 32 KV heads).
    const int64_t ctx = 2048, n_head = 32, n_head_kv = d == 2048 ? 8 : 32, hd = d / n_head, kv = n_head_kv * hd;
    const gpu::attention_shape sh{d, n_head, n_head_kv, hd, hd, false, ctx};
    const rotated kc(random_f16(static_cast<size_t>(ctx * kv), rng, 1.0f)), vc(random_f16(static_cast<size_t>(ctx * kv), rng, 1.0f));
    dev<float> qkv(random_f32(static_cast<size_t>(d + 2 * kv), rng)), out(static_cast<size_t>(d));
    dev<int32_t> sp(std::vector<int32_t>{0, static_cast<int32_t>(ctx - 1)});
    speed(speeds, "attend f16 cache, 2048 positions, one block a head" + shape,
          seconds_per_call([&](int i) { gpu::attend(sh, qkv.p, 1, sp.p, kc.at(i), vc.at(i), true, out.p); }, reps),
          static_cast<double>(ctx) * 2.0 * static_cast<double>(kv) * 2, peak, 0.0);
    dev<float> partial(static_cast<size_t>(1) << 20);
    speed(speeds, "attend f16 cache, 2048 positions" + shape,
          seconds_per_call([&](int i) { gpu::attend(sh, qkv.p, 1, sp.p, kc.at(i), vc.at(i), true, out.p, nullptr, partial.p, int64_t{1} << 20, ctx - 1); }, reps),
          static_cast<double>(ctx) * 2.0 * static_cast<double>(kv) * 2, peak, 0.3);
  }
  return speeds;
}

}  // namespace hotcold::gpu_check::inputs
