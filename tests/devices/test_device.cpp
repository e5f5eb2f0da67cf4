// The device layer: exact budgets, queues that run in order off the caller's thread, events that
// carry errors, and the refusals a user meets with the wrong --device.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

#include "devices/device.hpp"
#include "devices/device_info.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"

namespace hotcold::devices {
namespace {

std::shared_ptr<device> sim(uint64_t budget, transfer_cost cost = {}) {
  device_options o;
  o.kind = "sim";
  o.budget = budget;
  o.sim_cost = cost;
  return make_device(o);
}

TEST(Device, BudgetIsExact) {
  auto d = sim(1000);
  EXPECT_EQ(d->kind(), device_kind::sim);
  auto a = d->allocate(600, "hot rows");
  EXPECT_EQ(d->used(), 600u);
  EXPECT_EQ(d->available(), 400u);
  auto b = d->allocate(400, "kv cache");  // exactly what is left
  EXPECT_EQ(d->available(), 0u);
  try {
    d->allocate(1, "one byte more");
    ADD_FAILURE() << "allocated past the budget";
  } catch (const out_of_device_memory& e) {
    EXPECT_NE(std::string(e.what()).find("one byte more"), std::string::npos) << e.what();
  }
  a.reset();  // freeing returns its bytes
  EXPECT_EQ(d->used(), 400u);
  auto c = d->allocate(600, "again");
  EXPECT_EQ(d->available(), 0u);
}

TEST(Device, SimRunsWorkInOrderOnItsOwnThread) {
  auto d = sim(1 << 20);
  std::vector<int> order;
  std::atomic<int> off_thread{0};
  const auto caller = std::this_thread::get_id();
  std::vector<event> events;
  for (int i = 0; i < 3000; ++i)  // more than the ring holds: the producer waits for room
    events.push_back(d->submit([&, i] {
      order.push_back(i);
      off_thread += std::this_thread::get_id() != caller;
    }));
  d->synchronize();
  ASSERT_EQ(order.size(), 3000u);
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_EQ(off_thread.load(), 3000);
  for (auto& e : events) EXPECT_TRUE(e->ready());
}

TEST(Device, EventsCarryErrorsAndTheQueueGoesOn) {
  auto d = sim(1 << 20);
  auto bad = d->submit([] { throw std::runtime_error("kernel failed"); });
  int after = 0;
  auto good = d->submit([&] { after = 7; });
  EXPECT_THROW(bad->wait(), std::runtime_error);
  good->wait();
  EXPECT_EQ(after, 7);
}

// A job that runs past the queue's deadline (a GPU kernel that hangs) loses the device: its waiter gets
// job_overdue naming the deadline, every later call device_lost; the deadline counts from when the job
// began (the one queued behind a slow one is not overdue for the wait), and a job within it is not.
TEST(Device, AJobPastItsDeadlineLosesTheDevice) {
  device_options o;
  o.kind = "sim", o.budget = 1 << 20, o.job_deadline_s = 0.4;
  auto d = make_device(o);
  d->submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(250)); })->wait();  // within it
  auto fine = d->submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
  auto behind = d->submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
  behind->wait();  // 0.6 s after it was queued, 0.3 s after it began
  EXPECT_TRUE(fine->ready());
  EXPECT_TRUE(d->lost().empty()) << d->lost();
  std::atomic<bool> release{false};
  auto stuck = d->submit([&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    stuck->wait();
    ADD_FAILURE() << "the wait outlived the deadline";
  } catch (const job_overdue& e) {
    EXPECT_NE(std::string(e.what()).find("past the 0.4 s deadline"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_NE(d->lost().find("past the 0.4 s deadline"), std::string::npos) << d->lost();
  EXPECT_THROW(d->submit([] {}), device_lost);
  release = true;  // (the queue's thread ends with the device)
}

TEST(Device, CopiesRoundTripAndCheckTheirRange) {
  for (const char* kind : {"cpu", "sim"}) {
    device_options o;
    o.kind = kind;
    o.budget = 1 << 20;
    auto d = make_device(o);
    auto b = d->allocate(256, "rows");
    std::vector<uint8_t> in(256), out(256, 0);
    for (int i = 0; i < 256; ++i) in[static_cast<size_t>(i)] = static_cast<uint8_t>(i * 7);
    d->copy_in(*b, 0, in.data(), 256)->wait();
    d->copy_out(out.data(), *b, 0, 256)->wait();
    EXPECT_EQ(in, out) << kind;
    EXPECT_THROW(d->copy_in(*b, 200, in.data(), 100), std::out_of_range) << kind;
  }
}

// sim counts a GPU's copies and waits (device_traffic): a small upload or any read is one copy and
// one wait, a large upload one of each per pinned 16 MiB chunk; zero and synchronize wait once.
TEST(Device, SimCountsTheCopiesAndWaitsAGpuMakes) {
  auto d = sim(64ull << 20);
  auto b = d->allocate((40ull << 20) + 7, "rows");
  std::vector<uint8_t> bytes(b->size(), 1);
  const auto t0 = d->traffic();
  d->copy_in(*b, 0, bytes.data(), 4096)->wait();
  EXPECT_EQ(d->traffic() - t0, (device_traffic{0, 1, 1}));
  const auto t1 = d->traffic();
  d->copy_in(*b, 0, bytes.data(), b->size())->wait();
  EXPECT_EQ(d->traffic() - t1, (device_traffic{0, 3, 3}));  // 16 + 16 + 8 MiB and 7 bytes
  const auto t2 = d->traffic();
  d->copy_out(bytes.data(), *b, 0, b->size())->wait();
  d->zero(*b);
  d->synchronize();
  EXPECT_EQ(d->traffic() - t2, (device_traffic{0, 1, 3}));
  device_options o;
  o.kind = "cpu";
  auto cpu = make_device(o);
  auto c = cpu->allocate(64, "rows");
  cpu->copy_in(*c, 0, bytes.data(), 64)->wait();
  EXPECT_EQ(cpu->traffic(), device_traffic{}) << "the CPU crosses nothing";
}

// A job's reads are ordered after the copies queued before it only on the device's queue (a GPU's
// stream takes them in the queue's order): sim, with or without kernels, refuses a job computed from
// another thread, and runs it given to submit() after the upload of its rows.
TEST(Device, JobsRunOnTheQueueAfterTheCopiesTheyRead) {
  for (bool kernels : {false, true}) {
    device_options o;
    o.kind = "sim", o.budget = 1 << 20, o.sim_kernels = kernels;
    auto d = make_device(o);
    std::vector<uint16_t> w(4 * 8, 0x3c00);  // F16 ones: 4 rows of 8
    std::vector<float> x(8, 0.5f), y(4, -1.0f);
    auto rows = d->allocate(w.size() * 2, "rows");
    auto scratch = d->allocate(4 * (8 + 4), "scratch");
    matvec_job job;
    job.w = rows->data(), job.n = 1, job.rows = 4, job.cols = 8, job.x = x.data(), job.y = y.data();
    job.scratch = scratch->data(), job.scratch_bytes = scratch->size();
    job.host = [&] {  // (the CPU's routine reads the device's copy, as sim's host work does)
      const auto* held = static_cast<const uint16_t*>(rows->data());
      for (int r = 0; r < 4; ++r) {
        float s = 0;
        for (int c = 0; c < 8; ++c) s += kernels::fp16_to_fp32(held[r * 8 + c]) * x[static_cast<size_t>(c)];
        y[static_cast<size_t>(r)] = s;
      }
    };
    d->copy_in(*rows, 0, w.data(), w.size() * 2);
    EXPECT_THROW(d->compute(job), std::logic_error) << kernels;
    d->submit([&] { d->compute(job); })->wait();
    for (float v : y) EXPECT_EQ(v, 4.0f) << kernels;  // (sim's new memory is NaN: rows read before their upload show)
  }
}

// A GPU's products with Q8_0 and Q4_0 rows read x rounded to 8 bits (the CPU's Q8_0 of it, integer
// sums: kernels/gpu/decode.hpp), and sim with kernels computes as it does: its products equal the
// CPU's Q4_0 / Q8_0 dot against the Q8_0 of x, which misses the product with x itself.
TEST(Device, SimKernelsReadXInEightBitsForQuantizedRows) {
  device_options o;
  o.kind = "sim", o.budget = 1 << 20, o.sim_kernels = true;
  auto d = make_device(o);
  constexpr int rows = 16, cols = 128, nb = cols / 32;
  std::vector<float> wf(rows * cols), x(cols);
  for (int i = 0; i < rows * cols; ++i) wf[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 0.05f;
  for (int i = 0; i < cols; ++i) x[static_cast<size_t>(i)] = std::cos(0.11f * static_cast<float>(i * i)) * (1.0f + static_cast<float>(i % 7));
  std::vector<kernels::block_q8_0> xq(nb);
  kernels::quantize_row_q8_0(x.data(), xq.data(), cols);
  for (tensor_type t : {tensor_type::q4_0, tensor_type::q8_0}) {
    SCOPED_TRACE(tensor_type_name(t));
    std::vector<kernels::block_q4_0> w4(rows * nb);
    std::vector<kernels::block_q8_0> w8(rows * nb);
    std::vector<float> deq(cols);
    double off = 0;
    std::vector<float> want(rows);
    for (int r = 0; r < rows; ++r) {
      if (t == tensor_type::q4_0) {
        kernels::quantize_row_q4_0(wf.data() + r * cols, w4.data() + r * nb, cols);
        kernels::dequantize_row_q4_0(w4.data() + r * nb, deq.data(), cols);
        want[static_cast<size_t>(r)] = kernels::dot_q4_0(w4.data() + r * nb, xq.data(), cols);
      } else {
        kernels::quantize_row_q8_0(wf.data() + r * cols, w8.data() + r * nb, cols);
        kernels::dequantize_row_q8_0(w8.data() + r * nb, deq.data(), cols);
        want[static_cast<size_t>(r)] = kernels::dot_q8_0(w8.data() + r * nb, xq.data(), cols);
      }
      double plain = 0;  // the same rows against x itself
      for (int c = 0; c < cols; ++c) plain += static_cast<double>(deq[static_cast<size_t>(c)]) * x[static_cast<size_t>(c)];
      off = std::max(off, std::fabs(plain - want[static_cast<size_t>(r)]));
    }
    const void* bytes = t == tensor_type::q4_0 ? static_cast<const void*>(w4.data()) : static_cast<const void*>(w8.data());
    const uint64_t size = t == tensor_type::q4_0 ? w4.size() * sizeof(w4[0]) : w8.size() * sizeof(w8[0]);
    auto held = d->allocate(size, "rows");
    auto scratch = d->allocate(4 * (cols + rows), "scratch");
    d->copy_in(*held, 0, bytes, size)->wait();
    std::vector<float> y(rows);
    matvec_job job;
    job.type = t, job.w = held->data(), job.n = 1, job.rows = rows, job.cols = cols, job.x = x.data(), job.y = y.data();
    job.scratch = scratch->data(), job.scratch_bytes = scratch->size();
    d->submit([&] { d->compute(job); })->wait();
    for (int r = 0; r < rows; ++r) EXPECT_NEAR(y[static_cast<size_t>(r)], want[static_cast<size_t>(r)], 1e-5) << r;
    EXPECT_GT(off, 1e-4) << "x rounded or not would give the same products: the case proves nothing";
  }
}

// Each way of waiting (--device-wait) wakes its waiter when the work ends, short or long, and the
// queue's worker (which also waits that way between jobs) takes work that comes after it slept.
TEST(Device, EveryWaitModeWakesItsWaiter) {
  for (auto mode : {device_wait::spin, device_wait::yield, device_wait::block}) {
    SCOPED_TRACE(device_wait_name(mode));
    set_device_wait(mode);
    auto d = sim(1 << 20);
    for (int ms : {0, 3, 0}) {
      std::atomic<int> ran{0};
      d->submit([&, ms] {
         std::this_thread::sleep_for(std::chrono::milliseconds(ms));
         ran = 1;
       })->wait();
      EXPECT_EQ(ran.load(), 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // (past the worker's spin: it sleeps)
    }
    EXPECT_EQ(parse_device_wait(device_wait_name(mode)), mode);
  }
  set_device_wait(device_wait::spin);
  EXPECT_THROW(parse_device_wait("sometimes"), std::invalid_argument);
}

TEST(Device, SimTransfersTakeTheModeledTime) {
  // 1 MB at 1 GB/s plus 200 us: at least 1.2 ms, whatever memcpy costs (a lower bound, not a timing
  // assertion on this machine's speed).
  auto d = sim(4 << 20, transfer_cost{1.0, 200.0});
  auto b = d->allocate(1 << 20, "rows");
  std::vector<uint8_t> in(1 << 20, 3);
  auto t0 = std::chrono::steady_clock::now();
  d->copy_in(*b, 0, in.data(), in.size())->wait();
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.2e-3);
}

// The operation table: host devices compute FFN rows of the types the CPU kernels read (the kernel
// table's, Q6_K included), through the
// job's CPU routine, on the device's own queue; a type outside the table is refused by name.
TEST(Device, OperationTableSaysWhatItComputesAndComputesIt) {
  device_options c;
  c.kind = "cpu";
  for (auto d : {sim(1 << 20), make_device(c)}) {
    SCOPED_TRACE(d->name());
    for (tensor_type t : {tensor_type::f32, tensor_type::f16, tensor_type::bf16, tensor_type::q8_0, tensor_type::q4_0, tensor_type::q4_k, tensor_type::q5_k,
                          tensor_type::q6_k})
      EXPECT_TRUE(d->supports(operation::ffn_rows, t)) << tensor_type_name(t);
    for (tensor_type t : {tensor_type::q3_k, tensor_type::q5_0, tensor_type::i32}) EXPECT_FALSE(d->supports(operation::ffn_rows, t)) << tensor_type_name(t);
    d->reserve(operation::ffn_rows, 4, 64, 256);
    EXPECT_EQ(d->used(), 0u);  // host devices need no scratch
    std::atomic<std::thread::id> ran_on{};
    ffn_rows_job job;
    job.type = tensor_type::f16;
    job.host = [&] { ran_on = std::this_thread::get_id(); };
    d->submit([&] { d->compute(job); })->wait();
    if (d->name() == "sim") EXPECT_NE(ran_on.load(), std::this_thread::get_id());  // on the sim's thread
    else EXPECT_EQ(ran_on.load(), std::this_thread::get_id());                    // the CPU runs it inline
    job.type = tensor_type::q3_k;
    auto e = d->submit([&] { d->compute(job); });
    try {
      e->wait();
      ADD_FAILURE() << "an unsupported type was computed";
    } catch (const std::invalid_argument& err) {
      EXPECT_NE(std::string(err.what()).find("Q3_K"), std::string::npos) << err.what();
    }
  }
}

// A back end's own buffers (the GPU's step buffers, made by reserve()) count in its budget but do not
// keep it alive: a device holding buffers that held it would never be freed — its stream, queue thread,
// pinned and device memory. Users' buffers keep their device alive as before.
class keeps_its_own final : public device {
 public:
  explicit keeps_its_own(int* freed) : device("own", device_kind::sim, 1 << 20), freed_(freed) {}
  void reserve(operation, int64_t, int64_t, int64_t) override { mine_ = allocate_own(4096, "step buffers"); }
  event copy_in(buffer&, uint64_t, const void*, uint64_t) override { return {}; }
  event copy_out(void*, const buffer&, uint64_t, uint64_t) override { return {}; }
  void zero(buffer&) override {}
  event submit(std::function<void()> work) override {
    work();
    return {};
  }
  void synchronize() override {}

 protected:
  void* raw_allocate(uint64_t bytes) override { return std::malloc(bytes); }
  void raw_free(void* p) override {
    std::free(p);
    ++*freed_;
  }

 private:
  int* freed_;
  std::shared_ptr<buffer> mine_;
};

TEST(Device, ItsOwnBuffersDoNotKeepADeviceAlive) {
  int freed = 0;
  auto d = std::make_shared<keeps_its_own>(&freed);
  d->reserve(operation::ffn_rows, 1, 64, 256);
  EXPECT_EQ(d->used(), 4096u);
  std::weak_ptr<device> w = d;
  auto users = d->allocate(100, "a user's");
  d.reset();
  EXPECT_FALSE(w.expired());  // (the user's buffer holds it)
  users.reset();
  EXPECT_TRUE(w.expired());
  EXPECT_EQ(freed, 2);
}

TEST(Device, KindsAUserCanAskFor) {
  device_options o;
  o.kind = "tpu";
  EXPECT_THROW(make_device(o), std::invalid_argument);
  o.kind = "sim";  // without a budget there is nothing to stand in for
  EXPECT_THROW(make_device(o), std::invalid_argument);
  o.kind = "cpu";
  auto cpu = make_device(o);
  EXPECT_EQ(cpu->kind(), device_kind::cpu);
  EXPECT_GT(cpu->budget(), 0u);
  o.kind = "auto";
  auto any = make_device(o);
  EXPECT_EQ(any->kind(), probe_cuda().devices.empty() ? device_kind::cpu : device_kind::cuda);
  o.kind = "cuda";
  if (probe_cuda().devices.empty()) {
    try {
      make_device(o);
      ADD_FAILURE() << "a CUDA device without a GPU";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
    }
  }
  o.kind = "hip";
  EXPECT_THROW(make_device(o), std::runtime_error);
}

}  // namespace
}  // namespace hotcold::devices
