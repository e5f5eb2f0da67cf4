#include "engine/sparse_ffn.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu/dot.hpp"
#include "engine/thread_pool.hpp"
#include "engine/trace.hpp"

namespace hotcold {

using namespace kernels;

namespace {

// One token's pass over its chosen neurons (token_neurons), by the rows' type: each way of reading
// shares the neurons, the input and the outputs, and the neurons that fired with their values (for a
// pass over their down rows).
class token_pass {
 public:
  token_pass(const hparams& hp, float threshold, const neuron_rows& w, const neuron_set& set, const token_ffn_io& io)
      : hp_(hp), t_(threshold), gate_(w.gate), up_(w.up), down_t_(w.down_t), ids_(set.ids), rows_(set.rows), count_(set.count), in_(io.in), xq_(io.xq),
        hidden_(io.hidden), acc_(io.acc), given_gates_(io.gates), fired_(fired_rows()), values_(fired_values()) {
    fired_.clear(), values_.clear();
  }
  void run() {
    const bool f16_rows = hp_.gated_ffn && gate_.type == tensor_type::f16 && up_.type == tensor_type::f16 && (!down_t_ || down_t_.type == tensor_type::f16);
    if (given_gates_ && hp_.gated_ffn && t_ > 0.0f && !f16_rows) {
      if (q4_0_bundled()) return q4_0_given_gates();
      return with_given_gates();
    }
    if (hp_.gated_ffn && up_.type == tensor_type::q4_0 && gate_.type == tensor_type::q4_0 && xq_) return q4_0_rows();
    if (f16_rows) return f16_pairs(f16_threshold_first());
    float_rows_one_by_one();
  }

 private:
  // Keeps a neuron's value; its down row is read in the last pass when it fired.
  void keep(int32_t r, float v) {
    if (down_t_ && v != 0.0f) fired_.push_back(r), values_.push_back(v);
  }
  static const uint16_t* f16(const tensor_view& w, int64_t r) { return reinterpret_cast<const uint16_t*>(w.row(r)); }

  // The gates given (a matrix-vector product read them as two streams): the up rows of the neurons
  // that pass, asked for a few ahead, and their down rows four at a time (F16 rows: f16_threshold_first).
  void with_given_gates() {
    axpy_batcher down(down_t_, acc_);
    thread_local std::vector<int32_t> open;
    thread_local std::vector<float> gates;
    open_by_given_gates(open, gates);
    const auto m = static_cast<int64_t>(open.size());
    constexpr int64_t ahead = 4;
    for (int64_t j = 0; j < std::min(ahead, m); ++j) prefetch_row_start(up_, rows_[open[static_cast<size_t>(j)]]);
    for (int64_t j = 0; j < m; ++j) {
      if (j + ahead < m) prefetch_row_start(up_, rows_[open[static_cast<size_t>(j + ahead)]]);
      const int32_t c = open[static_cast<size_t>(j)];
      const float v = hidden_value(hp_, t_, given_gates_[ids_[c]], row_dot(up_, rows_[c], in_, xq_));
      hidden_[ids_[c]] = v;
      if (down_t_ && v != 0.0f) down.add(rows_[c], v);
    }
  }

  // Q4_0, in passes over one kind of row at a time, four rows a call (the input's side done once; the
  // input rearranged once per call for the four-blocks-a-register kernel where the CPU has it), the
  // next four rows asked for as a call reads; then the down rows of the neurons that fired only, four
  // at a time, also asked for ahead. A Q4_0 predictor chooses half as many neurons again as fire:
  // asking for every chosen neuron's down row with its gate and up rows spent a third of those reads
  // on rows never used.
  void q4_0_rows() {
    const kernels::q8_0_x4* x4 = rearranged_input(gate_.ne0 / kernels::qk4_0);
    if (gate_decides(hp_, t_)) q4_0_gate_first(x4);
    else q4_0_pairs(x4);
    down_rows_of_fired();
  }

  // The Q8_0 input rearranged for the four-blocks-a-register kernels (kernels::q8_0_to_x4), in the
  // thread's buffer; null where the rows' nb blocks do not come in fours.
  const kernels::q8_0_x4* rearranged_input(int64_t nb) const {
    thread_local std::vector<kernels::q8_0_x4> x4;
    if (nb % 4 != 0) return nullptr;
    x4.resize(static_cast<size_t>(nb / 4));
    kernels::q8_0_to_x4(xq_, nb, x4.data());
    return x4.data();
  }

  // The neurons whose given gate passes the threshold (positions j, and their gates); the others' values are 0.
  void open_by_given_gates(std::vector<int32_t>& open, std::vector<float>& gates) {
    open.clear(), gates.clear();
    for (int64_t j = 0; j < count_; ++j) {
      const float g = given_gates_[ids_[j]];
      if (passes(hp_, t_, g)) open.push_back(static_cast<int32_t>(j)), gates.push_back(g);
      else hidden_[ids_[j]] = 0.0f;
    }
  }

  // A bundled file's up and down_t rows of a neuron lie side by side (model_weights::ffn_bundle).
  bool up_down_adjacent() const {
    return down_t_ && down_t_.type == up_.type && down_t_.data == up_.data + up_.row_bytes && down_t_.row_stride() == up_.row_stride();
  }
  bool q4_0_bundled() const { return up_.type == tensor_type::q4_0 && xq_ && up_.ne0 % 128 == 0 && up_down_adjacent(); }

  // The gates given (the exact variant of a thresholded layer: every gate row read as one product) and
  // bundled Q4_0 rows: the neurons that pass read their up and down rows side by side, four a call.
  void q4_0_given_gates() {
    thread_local std::vector<int32_t> open;
    thread_local std::vector<float> gates;
    open_by_given_gates(open, gates);
    q4_0_up_down(rearranged_input(up_.ne0 / kernels::qk4_0), open, gates);
  }

  // relu(gate) x up and relu(gate) x relu(up) are zero wherever the gate is not positive, so the gate
  // rows go first and only the neurons whose gate is positive have their up rows read: about a third
  // of a Q4_0 predictor's choice is skipped (the FFN 12-16% faster on the 1B file's rows, a decoded
  // token +0.6 to +5.6% in five alternations in one process). A thresholded activation likewise: only
  // the neurons with |act(gate)| >= t read their up rows — the exact variant of SwiGLU sparsity.
  void q4_0_gate_first(const kernels::q8_0_x4* x4) {
    thread_local std::vector<int32_t> open;
    thread_local std::vector<float> gates;
    constexpr int64_t rows_ahead = 8;
    // One pass over rows at(0..n) of w, four a call (past n the last row again, so that every row
    // goes through the same kernel and a neuron's value does not depend on its neighbours), rows
    // ahead asked for: take(j, row at(j) . input).
    auto pass = [&](const tensor_view& w, const auto& at, int64_t n, const auto& take) {
      // Rows of a multiple of 128 values: the next four rows asked for at the offsets the kernel
      // reads, one call ahead (+4 to +6% a sparse Q4_0 token against whole rows eight ahead, three
      // alternations in one process, Intel Xeon: bursts of whole rows stall on the miss buffers).
      const bool spread = x4 != nullptr;
      for (int64_t j = 0; j < std::min(spread ? 4 : rows_ahead, n); ++j) prefetch_row(w, at(j));
      for (int64_t q = 0; q < n; q += 4) {
        if (!spread)
          for (int64_t j = q + rows_ahead; j < std::min(q + rows_ahead + 4, n); ++j) prefetch_row(w, at(j));
        else  // and the four after those whole into L2, a call earlier (against their first lines only: a
              // bundled file's token median +7% in six alternations, Zen 4; first lines against nothing
              // +3%): more lines in flight than L1's fill buffers hold
          for (int64_t j = q + 8; j < std::min(q + 12, n); ++j) prefetch_row_l2(w, at(j));
        const kernels::block_q4_0 *w4[4], *next[4];
        for (int64_t i = 0; i < 4; ++i) {
          w4[i] = reinterpret_cast<const kernels::block_q4_0*>(w.row(at(std::min(q + i, n - 1))));
          next[i] = reinterpret_cast<const kernels::block_q4_0*>(w.row(at(std::min(q + 4 + i, n - 1))));
        }
        float o[4];
        if (spread) kernels::dot4r_q4_0_x4_ahead(w4, xq_, x4, w.ne0, o, next);
        else kernels::dot4r_q4_0(w4, xq_, w.ne0, o);
        for (int64_t i = 0; i < 4 && q + i < n; ++i) take(q + i, o[i]);
      }
    };
    open.clear(), gates.clear();
    pass(gate_, [&](int64_t j) { return rows_[j]; }, count_, [&](int64_t j, float g) {
      if (gate_opens(hp_, t_, g)) open.push_back(static_cast<int32_t>(j)), gates.push_back(g);
      else hidden_[ids_[j]] = 0.0f;
    });
    if (x4 && up_down_adjacent()) return q4_0_up_down(x4, open, gates);
    pass(up_, [&](int64_t j) { return rows_[open[static_cast<size_t>(j)]]; }, static_cast<int64_t>(open.size()), [&](int64_t j, float u) {
      const int32_t c = open[static_cast<size_t>(j)];
      const float v = hidden_value(hp_, t_, gates[static_cast<size_t>(j)], u);
      hidden_[ids_[c]] = v;
      keep(rows_[c], v);
    });
  }

  // Bundled rows: the open neurons' up rows four a call and, at once, their down rows beside them
  // (one contiguous read a neuron), the next four neurons' up and down rows asked for at the offsets
  // read. A neuron past the open ones is the last again, with coefficient 0 (adds nothing).
  void q4_0_up_down(const kernels::q8_0_x4* x4, const std::vector<int32_t>& open, const std::vector<float>& gates) {
    const auto m = static_cast<int64_t>(open.size());
    auto up = [&](int64_t j) { return reinterpret_cast<const kernels::block_q4_0*>(up_.row(rows_[open[static_cast<size_t>(std::min(j, m - 1))]])); };
    auto down = [&](int64_t j) { return reinterpret_cast<const kernels::block_q4_0*>(down_t_.row(rows_[open[static_cast<size_t>(std::min(j, m - 1))]])); };
    for (int64_t j = 0; j < std::min<int64_t>(4, m); ++j) {
      prefetch_row(up_, rows_[open[static_cast<size_t>(j)]]);
      prefetch_row(down_t_, rows_[open[static_cast<size_t>(j)]]);
    }
    for (int64_t q = 0; q < m; q += 4) {
      for (int64_t j = q + 8; j < std::min(q + 12, m); ++j) prefetch_row_start(up_, rows_[open[static_cast<size_t>(j)]]);
      const kernels::block_q4_0 *u4[4], *nu[4], *d4[4], *nd[4];
      for (int64_t i = 0; i < 4; ++i) u4[i] = up(q + i), nu[i] = up(q + 4 + i), d4[i] = down(q + i), nd[i] = down(q + 4 + i);
      float o[4], v[4];
      kernels::dot4r_q4_0_x4_ahead(u4, xq_, x4, up_.ne0, o, nu);
      for (int64_t i = 0; i < 4; ++i) {
        v[i] = 0.0f;
        if (q + i >= m) continue;
        const int32_t c = open[static_cast<size_t>(q + i)];
        v[i] = hidden_value(hp_, t_, gates[static_cast<size_t>(q + i)], o[i]);
        hidden_[ids_[c]] = v[i];
      }
      kernels::axpy4_q4_0_ahead(v, d4, acc_, down_t_.ne0, nd);
    }
  }

  // Other activations need both: gate and up rows of two neurons at once (four streams).
  void q4_0_pairs(const kernels::q8_0_x4* x4) {
    const int64_t dist = up_.row_bytes <= short_row_bytes ? 4 : 2;
    auto ask = [&](int64_t j) {
      if (j < count_) prefetch_row(gate_, rows_[j]), prefetch_row(up_, rows_[j]);
    };
    for (int64_t j = 0; j < dist; ++j) ask(j);
    int64_t k = 0;
    for (; k + 2 <= count_; k += 2) {
      ask(k + dist), ask(k + dist + 1);
      const int32_t r0 = rows_[k], r1 = rows_[k + 1];
      const kernels::block_q4_0* w4[4] = {reinterpret_cast<const kernels::block_q4_0*>(gate_.row(r0)), reinterpret_cast<const kernels::block_q4_0*>(up_.row(r0)),
                                          reinterpret_cast<const kernels::block_q4_0*>(gate_.row(r1)), reinterpret_cast<const kernels::block_q4_0*>(up_.row(r1))};
      float o[4];
      if (x4) kernels::dot4r_q4_0_x4(w4, xq_, x4, gate_.ne0, o);
      else kernels::dot4r_q4_0(w4, xq_, gate_.ne0, o);
      const float v0 = hidden_value(hp_, t_, o[0], o[1]), v1 = hidden_value(hp_, t_, o[2], o[3]);
      hidden_[ids_[k]] = v0, hidden_[ids_[k + 1]] = v1;
      keep(r0, v0), keep(r1, v1);
    }
    for (; k < count_; ++k) {
      const float v = hidden_value(hp_, t_, row_dot(gate_, rows_[k], in_, xq_), row_dot(up_, rows_[k], in_, xq_));
      hidden_[ids_[k]] = v;
      keep(rows_[k], v);
    }
  }

  // The down rows of the neurons that fired (after the Q4_0 passes).
  void down_rows_of_fired() {
    const int64_t n_fired = static_cast<int64_t>(fired_.size()), ahead = 8;  // two batches of four
    if (down_t_.type == tensor_type::q4_0) {
      // Q4_0 down rows four a call, the next four asked for at the offsets read (+3 to +6% a sparse
      // Q4_0 token against whole rows eight ahead in five of six alternations, Intel Xeon).
      auto row4 = [&](int64_t j) { return reinterpret_cast<const kernels::block_q4_0*>(down_t_.row(fired_[static_cast<size_t>(std::min(j, n_fired - 1))])); };
      for (int64_t j = 0; j < std::min<int64_t>(4, n_fired); ++j) prefetch_row(down_t_, fired_[static_cast<size_t>(j)]);
      int64_t j = 0;
      for (; j + 4 <= n_fired; j += 4) {
        const kernels::block_q4_0* x[4] = {row4(j), row4(j + 1), row4(j + 2), row4(j + 3)};
        const kernels::block_q4_0* next[4] = {row4(j + 4), row4(j + 5), row4(j + 6), row4(j + 7)};
        kernels::axpy4_q4_0_ahead(values_.data() + j, x, acc_, down_t_.ne0, next);
      }
      for (; j < n_fired; ++j) row_axpy(down_t_, fired_[static_cast<size_t>(j)], values_[static_cast<size_t>(j)], acc_);
      return;
    }
    axpy_batcher down(down_t_, acc_);
    for (int64_t j = 0; j < std::min(ahead, n_fired); ++j) prefetch_row(down_t_, fired_[static_cast<size_t>(j)]);
    for (int64_t j = 0; j < n_fired; ++j) {
      if (j + ahead < n_fired) prefetch_row(down_t_, fired_[static_cast<size_t>(j + ahead)]);
      down.add(fired_[static_cast<size_t>(j)], values_[static_cast<size_t>(j)]);
    }
  }

  void f16_take(int64_t j, float g, float u) {
    const float v = hidden_value(hp_, t_, g, u);
    hidden_[ids_[j]] = v;
    if (down_t_ && v != 0.0f) fired_.push_back(rows_[j]), values_.push_back(v);
  }

  // F16 rows of a thresholded activation: the gate rows first, four at a time (the next four asked
  // for at the same offsets), then the up rows of the neurons whose |act(gate)| passes the threshold
  // only — the exact variant reads the gate rows of every neuron given and the up and down rows of
  // those it keeps. Returns the neurons done (all of them, or none without a threshold).
  int64_t f16_threshold_first() {
    if (t_ <= 0.0f) return 0;
    thread_local std::vector<int32_t> open;
    thread_local std::vector<float> gates;
    open.clear(), gates.clear();
    const int64_t d = gate_.ne0;
    // Four rows a call; past m the last row again, so that every row goes through the same kernel and
    // a neuron's value does not depend on where it falls among the others.
    auto four = [&](const tensor_view& w, auto row_of, int64_t m, auto&& use) {
      for (int64_t q = 0; q < std::min<int64_t>(4, m); ++q) prefetch_row_start(w, row_of(q));
      for (int64_t q = 0; q < m; q += 4) {
        const uint16_t *x4[4], *next[4];
        for (int64_t i = 0; i < 4; ++i) x4[i] = f16(w, row_of(std::min(q + i, m - 1))), next[i] = f16(w, row_of(std::min(q + 4 + i, m - 1)));
        float o[4];
        kernels::dot4_f16_ahead(x4, in_, d, o, next);
        for (int64_t i = 0; i < 4 && q + i < m; ++i) use(q + i, o[i]);
      }
    };
    auto gate_of = [&](int64_t j, float g) {
      if (passes(hp_, t_, g)) open.push_back(static_cast<int32_t>(j)), gates.push_back(g);
      else hidden_[ids_[j]] = 0.0f;
    };
    if (given_gates_) {  // read already (the exact variant's product)
      for (int64_t j = 0; j < count_; ++j) gate_of(j, given_gates_[ids_[j]]);
    } else {
      four(gate_, [&](int64_t j) { return rows_[j]; }, count_, gate_of);
    }
    four(up_, [&](int64_t j) { return rows_[open[static_cast<size_t>(j)]]; }, static_cast<int64_t>(open.size()),
         [&](int64_t j, float u) { f16_take(open[static_cast<size_t>(j)], gates[static_cast<size_t>(j)], u); });
    return count_;
  }

  // F16, in two passes from neuron k: two neurons' gate and up rows together (four streams) while the
  // next two neurons' are asked for at the same offsets (dot4_f16_ahead; an odd last neuron alone);
  // then the down rows of the neurons that fired, four at a time, the next four asked for likewise.
  // Each row's lines are on their way one step (8 or 16 KiB) ahead, spread through the reading, where
  // asking for the first lines of rows two neurons ahead left the hardware's streams to start on each
  // 4 KiB row afresh. Two neurons a step rather than one: four streams keep the miss buffers busy
  // where two leave them idle on some cores (docs/kernels.md has the measurements).
  void f16_pairs(int64_t k) {
    const int64_t d = gate_.ne0;
    for (int64_t j = 0; j < std::min<int64_t>(2, count_ - k); ++j) prefetch_row_start(gate_, rows_[k + j]), prefetch_row_start(up_, rows_[k + j]);
    for (; k + 2 <= count_; k += 2) {
      // (past the end: the last row, read already)
      const int32_t r0 = rows_[k], r1 = rows_[k + 1], n0 = rows_[std::min(k + 2, count_ - 1)], n1 = rows_[std::min(k + 3, count_ - 1)];
      const uint16_t* w[4] = {f16(gate_, r0), f16(up_, r0), f16(gate_, r1), f16(up_, r1)};
      const uint16_t* next[4] = {f16(gate_, n0), f16(up_, n0), f16(gate_, n1), f16(up_, n1)};
      float o[4];
      kernels::dot4_f16_ahead(w, in_, d, o, next);
      f16_take(k, o[0], o[1]), f16_take(k + 1, o[2], o[3]);
    }
    if (k < count_) {
      float g, u;
      kernels::dot2_f16_ahead(f16(gate_, rows_[k]), f16(up_, rows_[k]), in_, d, &g, &u, f16(gate_, rows_[k]), f16(up_, rows_[k]));
      f16_take(k, g, u);
    }
    const int64_t n_fired = static_cast<int64_t>(fired_.size());
    for (int64_t j = 0; j < std::min<int64_t>(4, n_fired); ++j) prefetch_row_start(down_t_, fired_[static_cast<size_t>(j)]);
    int64_t j = 0;
    for (; j + 4 <= n_fired; j += 4) {
      const uint16_t *x[4], *next[4];
      for (int64_t q = 0; q < 4; ++q)
        x[q] = f16(down_t_, fired_[static_cast<size_t>(j + q)]), next[q] = f16(down_t_, fired_[static_cast<size_t>(std::min(j + 4 + q, n_fired - 1))]);
      kernels::axpy4_f16_ahead(values_.data() + j, x, acc_, down_t_.ne0, next);
    }
    for (; j < n_fired; ++j) row_axpy(down_t_, fired_[static_cast<size_t>(j)], values_[static_cast<size_t>(j)], acc_);
  }

  // Other rows, neuron by neuron: gate and up rows of a float type are dotted together, two
  // independent streams from memory (a thresholded activation reads the gate first, and up only where
  // the gate passes).
  void float_rows_one_by_one() {
    const neuron_prefetch pf{hp_, gate_, up_, down_t_};
    const int64_t dist = pf.distance();
    axpy_batcher down(down_t_, acc_);
    const bool pair = hp_.gated_ffn && float_rows(up_) && gate_.type == up_.type && t_ <= 0.0f;
    for (int64_t j = 0; j < std::min(dist, count_); ++j) pf.ahead(rows_[j]);
    for (int64_t k = 0; k < count_; ++k) {
      if (k + dist < count_) pf.ahead(rows_[k + dist]);
      const int32_t r = rows_[k];
      float g = 0.0f, u = 0.0f;
      if (pair) {
        rows2_dot(gate_, up_, r, &in_, 1, &g, &u);
      } else {
        if (hp_.gated_ffn) g = row_dot(gate_, r, in_, xq_);
        if (hp_.gated_ffn && t_ > 0.0f && !passes(hp_, t_, g)) {
          hidden_[ids_[k]] = 0.0f;
          continue;
        }
        u = row_dot(up_, r, in_, xq_);
      }
      const float v = hidden_value(hp_, t_, g, u);
      hidden_[ids_[k]] = v;
      if (down_t_ && v != 0.0f) down.add(r, v);
    }
  }

  const hparams& hp_;
  const float t_;
  const tensor_view &gate_, &up_, &down_t_;
  const int32_t* ids_;
  const int32_t* rows_;
  const int64_t count_;
  const float* in_;
  const kernels::block_q8_0* xq_;
  float* hidden_;
  float* acc_;
  const float* given_gates_;
  // The neurons that fired and their values, for a pass over their down rows (the thread's own buffers).
  std::vector<int32_t>& fired_;
  std::vector<float>& values_;
  static std::vector<int32_t>& fired_rows() {
    thread_local std::vector<int32_t> v;
    return v;
  }
  static std::vector<float>& fired_values() {
    thread_local std::vector<float> v;
    return v;
  }
};

}  // namespace

void token_neurons(const hparams& hp, float threshold, const neuron_rows& w, const neuron_set& set, const token_ffn_io& io) {
  token_pass(hp, threshold, w, set, io).run();
}

}  // namespace hotcold
