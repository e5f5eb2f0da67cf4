// What a GPU's jobs assume of their scratch (every value from a 16-byte boundary, a chunk within the
// scratch), held here where there is no GPU: the layouts themselves, and sim with kernels refusing a
// job whose scratch breaks them; and a whole layer's job (attention with the FFN after it) against its
// two parts with the host's norm between them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "devices/device.hpp"
#include "devices/gpu_jobs.hpp"
#include "kernels/cpu/fp16.hpp"

namespace hotcold::devices {
namespace {

std::vector<uint64_t> offsets(const attention_scratch& s, const attention_job& job) {
  std::vector<uint64_t> v = {s.x, s.angles, s.seqpos};  // (in the scratch's order)
  if (job.fc1 || job.ffn) v.push_back(s.layer_in);
  v.insert(v.end(), {s.qkv, s.attn, s.out});
  if (job.fc1) v.insert(v.end(), {s.pred_in, s.scores, s.chosen, s.mid});
  if (job.ffn) v.insert(v.end(), {s.resid, s.ffn_x, s.gate, s.up, s.ffn_out});
  return v;
}

// Every value of every chunk size, for real shapes (a 7B's decode step among them: its two int32 a
// token put what follows 8 bytes off a 16-byte boundary when laid out back to back), starts on a
// 16-byte boundary, after the one before it ends; the chunk a scratch takes is the largest that fits.
TEST(GpuJobs, EveryScratchValueStartsOnASixteenByteBoundary) {
  struct shape {
    int64_t d, n_head, n_head_kv, head_dim, n_rot, n_ff, rank;
  };
  dense_ffn_job ffn;
  for (const shape& sh : {shape{4096, 32, 32, 128, 128, 11008, 1024}, shape{2048, 32, 8, 64, 64, 5632, 256}, shape{1024, 16, 8, 128, 128, 3072, 128},
                          shape{3072, 32, 32, 96, 96, 8192, 512}, shape{100, 5, 1, 20, 6, 300, 10}})
    for (int variant = 0; variant < 3; ++variant)  // attention alone, with its predictor, with the FFN after it
      for (int64_t m = 1; m <= 9; ++m) {
        attention_job job;
        job.d = sh.d, job.n_head = sh.n_head, job.n_head_kv = sh.n_head_kv, job.head_dim = sh.head_dim, job.n_rot = sh.n_rot;
        if (variant == 1) job.fc1 = &job, job.n_ff = sh.n_ff, job.rank = sh.rank;
        ffn.n_ff = sh.n_ff;
        if (variant == 2) job.ffn = &ffn;
        SCOPED_TRACE(::testing::Message() << "d " << sh.d << " n_rot " << sh.n_rot << " variant " << variant << " m " << m);
        const attention_scratch s = attention_scratch_of(job, m);
        uint64_t before = 0;
        for (uint64_t at : offsets(s, job)) {
          EXPECT_EQ(at % 16, 0u) << at;
          EXPECT_GE(at, before);
          before = at;
        }
        EXPECT_EQ(s.end % 16, 0u);
        EXPECT_GT(s.end, before);
        // The inputs cross as one copy: x first, the positions and the layer's input inside it.
        EXPECT_EQ(s.x, 0u);
        EXPECT_LE(s.seqpos + 8 * static_cast<uint64_t>(m), s.in_end);
        EXPECT_LE(s.in_end, s.qkv);
        // The largest chunk a scratch of this layout's end (and a little less) takes.
        job.scratch = &job, job.scratch_bytes = s.end;
        EXPECT_EQ(attention_chunk("t", job), m);
        job.scratch_bytes = s.end - 1;
        if (m > 1) EXPECT_EQ(attention_chunk("t", job), m - 1);
        else EXPECT_THROW(attention_chunk("t", job), std::invalid_argument);
        // The split attention's partial sums start where the chunk ends, on a boundary too.
        job.scratch_bytes = s.end + 4096;
        const scratch_tail tail = attention_scratch_tail(job, m);
        EXPECT_EQ(static_cast<uint64_t>(tail.offset) * 4, s.end);
        EXPECT_EQ(tail.floats, 1024);
        const dense_ffn_scratch f = dense_ffn_scratch_of(sh.d, sh.n_ff, m);
        for (uint64_t at : {f.x, f.gate, f.up, f.out, f.end}) EXPECT_EQ(at % 16, 0u) << at;
        EXPECT_LT(f.x, f.gate);
        EXPECT_LT(f.up, f.out);
      }
}

std::shared_ptr<device> sim_kernels(uint64_t budget) {
  device_options o;
  o.kind = "sim";
  o.budget = budget;
  o.sim_kernels = true;
  return make_device(o);
}

// Random F16 rows on the device.
std::shared_ptr<buffer> f16_rows(device& dev, int64_t rows, int64_t cols, std::mt19937& rng, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<uint16_t> h(static_cast<size_t>(rows * cols));
  for (auto& v : h) v = kernels::fp32_to_fp16(nd(rng));
  auto b = dev.allocate(h.size() * 2, "rows");
  dev.copy_in(*b, 0, h.data(), h.size() * 2)->wait();
  return b;
}

struct small_layer {
  static constexpr int64_t d = 64, heads = 4, hd = 16, n_ff = 96, ctx = 8;
  std::shared_ptr<device> dev = sim_kernels(64 << 20);
  std::mt19937 rng{7};
  std::shared_ptr<buffer> wq = f16_rows(*dev, d, d, rng, 0.2f), wk = f16_rows(*dev, d, d, rng, 0.2f), wv = f16_rows(*dev, d, d, rng, 0.2f),
                          wo = f16_rows(*dev, d, d, rng, 0.2f), gate = f16_rows(*dev, n_ff, d, rng, 0.2f), up = f16_rows(*dev, n_ff, d, rng, 0.2f),
                          down = f16_rows(*dev, d, n_ff, rng, 0.2f);
  std::shared_ptr<buffer> k = dev->allocate(ctx * d * 2, "K"), v = dev->allocate(ctx * d * 2, "V"), norm = dev->allocate(d * 4, "norm"),
                          scratch = dev->allocate(1 << 20, "scratch");
  std::vector<float> x, xn, angles, norm_w;
  std::vector<int32_t> seqs{0}, positions{0};
  small_layer() {
    dev->zero(*k), dev->zero(*v);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t i = 0; i < d; ++i) x.push_back(nd(rng)), xn.push_back(nd(rng)), norm_w.push_back(1.0f + 0.3f * nd(rng));
    for (int64_t i = 0; i < hd; ++i) angles.push_back(i < hd / 2 ? std::cos(0.1f * static_cast<float>(i)) : std::sin(0.1f * static_cast<float>(i - hd / 2)));
    dev->copy_in(*norm, 0, norm_w.data(), d * 4)->wait();
  }
  attention_job attention(float* out) {
    attention_job j;
    j.wq = wq->data(), j.wk = wk->data(), j.wv = wv->data(), j.wo = wo->data();
    j.n = 1, j.d = d, j.n_head = heads, j.n_head_kv = heads, j.head_dim = hd, j.n_rot = hd;
    j.x = xn.data(), j.angles = angles.data(), j.seqs = seqs.data(), j.positions = positions.data();
    j.k_cache = k->data(), j.v_cache = v->data(), j.ctx = ctx, j.n_seq = 1;
    j.out = out;
    j.scratch = scratch->data(), j.scratch_bytes = scratch->size();
    return j;
  }
  dense_ffn_job ffn() const {
    dense_ffn_job f;
    f.gate = gate->data(), f.up = up->data(), f.down = down->data();
    f.act = kernels::activation::silu, f.d = d, f.n_ff = n_ff;
    return f;
  }
  void run(const std::function<void()>& job) { dev->submit(job)->wait(); }
};

// A job whose scratch is 8 bytes off a 16-byte boundary is refused by name (a GPU's products would
// read their inputs 4 bytes at a time there): sim holds every job to the layout its kernels assume.
TEST(GpuJobs, AScratchOffItsBoundaryIsRefused) {
  small_layer L;
  std::vector<float> out(small_layer::d);
  attention_job job = L.attention(out.data());
  L.run([&] { L.dev->compute(job); });  // aligned: computed
  job.scratch = static_cast<uint8_t*>(L.scratch->data()) + 8, job.scratch_bytes -= 8;
  try {
    L.run([&] { L.dev->compute(job); });
    ADD_FAILURE() << "a misaligned scratch was computed on";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("16-byte boundary"), std::string::npos) << e.what();
  }
  dense_ffn_job f = L.ffn();
  f.n = 1, f.x = L.x.data(), f.out = out.data();
  f.scratch = static_cast<uint8_t*>(L.scratch->data()) + 8, f.scratch_bytes = 4096;
  EXPECT_THROW(L.run([&] { L.dev->compute(f); }), std::logic_error);
  EXPECT_THROW(check_scratch_layout("t", L.scratch->data(), 1 << 20, attention_scratch{0, 32, 40, 48, 56, 64, 80, 96}), std::logic_error);
}

// Attention with the FFN after it (one job, one wait) gives what its parts give with the host between
// them: h = x + attention's output, RMSNorm(h) w into the FFN, h + the FFN's output.
TEST(GpuJobs, AWholeLayersJobIsItsPartsWithTheNormBetween) {
  small_layer L;
  const int64_t d = small_layer::d;
  std::vector<float> proj(d), ffn_out(d), whole(d), hidden(small_layer::n_ff, -1.0f);
  attention_job a = L.attention(proj.data());
  L.run([&] { L.dev->compute(a); });
  std::vector<float> h(d), hn(d);
  double ss = 0;
  for (int64_t i = 0; i < d; ++i) h[i] = L.x[i] + proj[i], ss += static_cast<double>(h[i]) * h[i];
  for (int64_t i = 0; i < d; ++i) hn[i] = static_cast<float>(h[i] / std::sqrt(ss / d + 1e-6) * L.norm_w[i]);
  dense_ffn_job f = L.ffn();
  f.n = 1, f.x = hn.data(), f.out = ffn_out.data(), f.scratch = L.scratch->data(), f.scratch_bytes = L.scratch->size();
  L.run([&] { L.dev->compute(f); });
  const device_traffic before = L.dev->traffic();
  dense_ffn_job part = L.ffn();
  part.hidden = hidden.data();
  attention_job w = L.attention(whole.data());  // (the same position again: its cache row rewritten alike)
  w.ffn = &part, w.residual = L.x.data(), w.ffn_norm = static_cast<const float*>(L.norm->data());
  L.run([&] { L.dev->compute(w); });
  EXPECT_EQ((L.dev->traffic() - before).syncs, 1u);
  double err = 0, ref = 0;
  for (int64_t i = 0; i < d; ++i) {
    const double want = static_cast<double>(h[i]) + ffn_out[i];
    err += (whole[i] - want) * (whole[i] - want), ref += want * want;
  }
  EXPECT_LT(std::sqrt(err / ref), 1e-5);
  EXPECT_GT(std::sqrt(ref / d), 0.1);  // (a real output, not zeros)
  int set = 0;
  for (float v : hidden) set += v != -1.0f;
  EXPECT_EQ(set, small_layer::n_ff);  // every neuron's value came back
  // Not with a predictor; not without its norm.
  w.fc1 = L.wq->data();
  EXPECT_THROW(L.run([&] { L.dev->compute(w); }), std::invalid_argument);
  w.fc1 = nullptr, w.ffn_norm = nullptr;
  EXPECT_THROW(L.run([&] { L.dev->compute(w); }), std::invalid_argument);
}

}  // namespace
}  // namespace hotcold::devices
