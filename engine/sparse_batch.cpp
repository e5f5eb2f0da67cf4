// The sparse FFN for a batch (batch_neurons, engine/sparse_ffn.hpp): each chosen neuron's rows read
// once for the tokens that chose it.
#include <algorithm>
#include <vector>

#include "engine/layer_ops.hpp"
#include "engine/sparse_ffn.hpp"

namespace hotcold {

using namespace kernels;

namespace {

// A batch's pass over the neurons of a set, by the rows' type: F16/F32 rows are dotted in place; Q8_0
// and Q4_0 rows unpacked once for up to four tokens' Q8_0 inputs; other rows (BF16) converted once into
// a buffer. A neuron one token chose costs what it does for one token, and the tokens that share a
// neuron share its row loads (four at a time).
class batch_pass {
 public:
  batch_pass(const hparams& hp, float threshold, const neuron_rows& w, const neuron_set& set, const batch_ffn_input& x, float* hidden, float* acc)
      : hp_(hp), t_(threshold), w_(w), set_(set), x_(x), hidden_(hidden), acc_(acc), d_(x.d), n_ff_(x.n_ff), qrow_(x.d / qk8_0),
        quantized_(wants_q8_input(w.up.type)),
        in_place_(float_rows(w.up) && (!hp.gated_ffn || w.gate.type == w.up.type) && (!w.down_t || w.down_t.type == w.up.type)) {}

  void run() {
    if (!in_place_ && !quantized_) gbuf().resize(static_cast<size_t>(d_)), ubuf().resize(static_cast<size_t>(d_));
    who().resize(static_cast<size_t>(x_.n));
    rearrange_inputs();
    // Each token's down rows go through its own four-row batcher (one pass over its accumulator per
    // four rows, as for one token).
    auto& down = batchers();
    down.clear();
    down.reserve(static_cast<size_t>(x_.n));
    for (int64_t t = 0; t < x_.n; ++t) down.emplace_back(w_.down_t, acc_ + t * d_);
    // Where the gate decides alone whether a neuron can fire (ReLU family; a thresholded activation),
    // the gate rows go first, and only the neurons some token opened read their up (and down) rows,
    // for those tokens only — as one token's pass does (q4_0_gate_first). Four sequences' union chose
    // ~2x one token's neurons, and without this read every up row of it for every token that chose it.
    if (quantized_ && gate_decides(hp_, t_)) gate_first();
    else in_order();
    for (auto& b : down) b.flush();
  }

 private:
  // Q4_0 rows: the tokens' inputs rearranged (q8_0_to_x4) at the start of each call — once a piece of
  // the neurons, as one token's pass does — so a shared neuron's row is unpacked once for the tokens
  // that chose it and each token's product is what its own pass would give.
  void rearrange_inputs() {
    thread_local std::vector<q8_0_x4> x4s;
    const tensor_view &gate = w_.gate, &up = w_.up;
    rearranged_ = quantized_ && up.type == tensor_type::q4_0 && (!hp_.gated_ffn || gate.type == up.type) && qrow_ % 4 == 0 && x_.n <= 64;
    if (!rearranged_) return;
    x4s.resize(static_cast<size_t>(x_.n * qrow_ / 4));
    for (int64_t t = 0; t < x_.n; ++t) {
      q8_0_to_x4(x_.xq + t * qrow_, qrow_, x4s.data() + t * qrow_ / 4);
      x4_[t] = x4s.data() + t * qrow_ / 4;
    }
  }

  // Row r of w against the inputs of tokens ts[0..c) (converted rows: buf).
  void dots(const tensor_view& w, int64_t r, const float* buf, const int32_t* ts, int c, float* o) const {
    if (!quantized_) {
      for (int j = 0; j < c; ++j) o[j] = dot_f32(buf, x_.in + ts[j] * d_, d_);
      return;
    }
    const block_q8_0* xs[4];
    for (int j = 0; j < c; ++j) xs[j] = x_.xq + ts[j] * qrow_;
    if (w.type == tensor_type::q8_0) {
      dotn_q8_0(reinterpret_cast<const block_q8_0*>(w.row(r)), xs, c, d_, o);
    } else if (w.type == tensor_type::q4_0 && rearranged_) {
      const q8_0_x4* x4s_of[4];
      for (int j = 0; j < c; ++j) x4s_of[j] = x4_[ts[j]];
      dotn_q4_0_x4(reinterpret_cast<const block_q4_0*>(w.row(r)), xs, x4s_of, c, d_, o);
    } else if (w.type == tensor_type::q4_0) {
      dotn_q4_0(reinterpret_cast<const block_q4_0*>(w.row(r)), xs, c, d_, o);
    } else {
      for (int j = 0; j < c; ++j) o[j] = row_dot(w, r, x_.in + ts[j] * d_, xs[j]);
    }
  }

  // The tokens that chose neuron i, into who(); how many.
  int tokens_of(int64_t i) {
    int m = 0;
    for (int64_t t = 0; t < x_.n; ++t)
      if (x_.chosen[t * n_ff_ + i]) who()[static_cast<size_t>(m++)] = static_cast<int32_t>(t);
    return m;
  }

  // Token t's value of neuron i (row r) from its gate g and up u: kept, and its down row added.
  void take(int64_t t, int64_t i, int64_t r, float g, float u) {
    const float h = hidden_value(hp_, t_, g, u);
    hidden_[t * n_ff_ + i] = h;
    if (w_.down_t && h != 0.0f) batchers()[static_cast<size_t>(t)].add(static_cast<int32_t>(r), h);
  }

  void gate_first() {
    split_own_and_shared();
    open_shared_gates();
    open_up_rows();
  }

  // Q4_0: a neuron only one token chose (about half of four sequences' union) goes through that
  // token's own pass (token_neurons: four rows a call against its rearranged input, the up and down
  // rows of those it opened), where the row-against-its-tokens kernel would take it alone; the neurons
  // several tokens chose share their rows' loads (shared()).
  void split_own_and_shared() {
    thread_local std::vector<std::vector<int32_t>> own_ids, own_rows;
    shared().clear();
    const bool own_passes = w_.gate.type == tensor_type::q4_0 && w_.up.type == tensor_type::q4_0;
    if (own_passes) {
      own_ids.resize(static_cast<size_t>(x_.n)), own_rows.resize(static_cast<size_t>(x_.n));
      for (int64_t t = 0; t < x_.n; ++t) own_ids[static_cast<size_t>(t)].clear(), own_rows[static_cast<size_t>(t)].clear();
    }
    for (int64_t k = 0; k < set_.count; ++k) {
      int m = 0;
      int64_t last = 0;
      for (int64_t t = 0; t < x_.n; ++t)
        if (x_.chosen[t * n_ff_ + set_.ids[k]]) ++m, last = t;
      if (own_passes && m == 1) own_ids[static_cast<size_t>(last)].push_back(set_.ids[k]), own_rows[static_cast<size_t>(last)].push_back(set_.rows[k]);
      else if (m > 0) shared().push_back(static_cast<int32_t>(k));
    }
    if (!own_passes) return;
    for (int64_t t = 0; t < x_.n; ++t) {
      const auto& oi = own_ids[static_cast<size_t>(t)];
      if (!oi.empty())
        token_neurons(hp_, t_, w_, {oi.data(), own_rows[static_cast<size_t>(t)].data(), static_cast<int64_t>(oi.size())},
                      {x_.in + t * d_, x_.xq + t * qrow_, hidden_ + t * n_ff_, acc_ + t * d_});
    }
  }

  // The shared neurons' gate rows against their tokens: the (neuron, token) pairs whose gate opens,
  // neuron j's at open_tok[open_from[j] .. open_from[j + 1]); the others' values are 0.
  void open_shared_gates() {
    open_k().clear(), open_from().clear(), open_tok().clear(), open_gate().clear();
    const auto n_shared = static_cast<int64_t>(shared().size());
    for (int64_t s = 0; s < std::min(ahead, n_shared); ++s) prefetch_row(w_.gate, set_.rows[shared()[static_cast<size_t>(s)]]);
    for (int64_t s = 0; s < n_shared; ++s) {
      if (s + ahead < n_shared) prefetch_row(w_.gate, set_.rows[shared()[static_cast<size_t>(s + ahead)]]);
      const int64_t k = shared()[static_cast<size_t>(s)], i = set_.ids[k], r = set_.rows[k];
      const int m = tokens_of(i);
      const auto first = static_cast<int32_t>(open_tok().size());
      for (int g = 0; g < m; g += 4) {
        const int c = std::min(4, m - g);
        float gv[4];
        dots(w_.gate, r, nullptr, who().data() + g, c, gv);
        for (int j = 0; j < c; ++j) {
          const int32_t t = who()[static_cast<size_t>(g + j)];
          if (gate_opens(hp_, t_, gv[j])) open_tok().push_back(t), open_gate().push_back(gv[j]);
          else hidden_[t * n_ff_ + i] = 0.0f;
        }
      }
      if (static_cast<int32_t>(open_tok().size()) > first) open_k().push_back(static_cast<int32_t>(k)), open_from().push_back(first);
    }
    open_from().push_back(static_cast<int32_t>(open_tok().size()));
  }

  // The up rows (and down rows) of the opened neurons, for the tokens that opened them.
  void open_up_rows() {
    const auto n_open = static_cast<int64_t>(open_k().size());
    auto ask = [&](int64_t j) {
      prefetch_row(w_.up, set_.rows[open_k()[static_cast<size_t>(j)]]);
      if (w_.down_t) prefetch_row(w_.down_t, set_.rows[open_k()[static_cast<size_t>(j)]]);
    };
    for (int64_t j = 0; j < std::min(ahead, n_open); ++j) ask(j);
    for (int64_t j = 0; j < n_open; ++j) {
      if (j + ahead < n_open) ask(j + ahead);
      const int64_t k = open_k()[static_cast<size_t>(j)], i = set_.ids[k], r = set_.rows[k];
      const int32_t* ts = open_tok().data() + open_from()[static_cast<size_t>(j)];
      const float* gs = open_gate().data() + open_from()[static_cast<size_t>(j)];
      const int m = open_from()[static_cast<size_t>(j + 1)] - open_from()[static_cast<size_t>(j)];
      for (int g = 0; g < m; g += 4) {
        const int c = std::min(4, m - g);
        float uv[4];
        dots(w_.up, r, nullptr, ts + g, c, uv);
        for (int q = 0; q < c; ++q) take(ts[g + q], i, r, gs[g + q], uv[q]);
      }
    }
  }

  // Neuron by neuron in the set's order: gate and up rows against the tokens that chose each.
  void in_order() {
    const tensor_view &gate = w_.gate, &up = w_.up;
    const neuron_prefetch pf{hp_, gate, up, w_.down_t};
    const int64_t dist = pf.distance(), count = set_.count;
    for (int64_t k = 0; k < std::min(dist, count); ++k) pf.ahead(set_.rows[k]);
    for (int64_t k = 0; k < count; ++k) {
      if (k + dist < count) pf.ahead(set_.rows[k + dist]);
      const int64_t i = set_.ids[k], r = set_.rows[k];
      const int m = tokens_of(i);
      if (m == 0) continue;
      if (!in_place_ && !quantized_) {
        dequantize_row(up, r, ubuf().data());
        if (hp_.gated_ffn) dequantize_row(gate, r, gbuf().data());
      }
      for (int g = 0; g < m; g += 4) {
        const int c = std::min(4, m - g);
        float gv[4] = {}, uv[4];
        if (in_place_ && m == 1) {  // most neurons: one token chose it
          const float* in = x_.in + who()[0] * d_;
          if (hp_.gated_ffn) gv[0] = row_dot(gate, r, in, nullptr);
          uv[0] = row_dot(up, r, in, nullptr);
        } else if (in_place_) {
          const float* xs[4];
          for (int j = 0; j < c; ++j) xs[j] = x_.in + who()[static_cast<size_t>(g + j)] * d_;
          if (hp_.gated_ffn) rows2_dot(gate, up, r, xs, c, gv, uv);
          else row1_dot(up, r, xs, c, uv);
        } else {
          if (hp_.gated_ffn) dots(gate, r, gbuf().data(), who().data() + g, c, gv);
          dots(up, r, ubuf().data(), who().data() + g, c, uv);
        }
        for (int j = 0; j < c; ++j) take(who()[static_cast<size_t>(g + j)], i, r, gv[j], uv[j]);
      }
    }
  }

  // The thread's scratch, kept between calls.
  static std::vector<float>& gbuf() { thread_local std::vector<float> v; return v; }
  static std::vector<float>& ubuf() { thread_local std::vector<float> v; return v; }
  static std::vector<int32_t>& who() { thread_local std::vector<int32_t> v; return v; }
  static std::vector<axpy_batcher>& batchers() { thread_local std::vector<axpy_batcher> v; return v; }
  static std::vector<int32_t>& shared() { thread_local std::vector<int32_t> v; return v; }
  static std::vector<int32_t>& open_k() { thread_local std::vector<int32_t> v; return v; }
  static std::vector<int32_t>& open_from() { thread_local std::vector<int32_t> v; return v; }
  static std::vector<int32_t>& open_tok() { thread_local std::vector<int32_t> v; return v; }
  static std::vector<float>& open_gate() { thread_local std::vector<float> v; return v; }

  static constexpr int64_t ahead = 4;  // rows asked for ahead of their use
  const hparams& hp_;
  const float t_;
  const neuron_rows& w_;
  const neuron_set& set_;
  const batch_ffn_input& x_;
  float* hidden_;
  float* acc_;
  const int64_t d_, n_ff_, qrow_;
  const bool quantized_, in_place_;
  bool rearranged_ = false;
  const q8_0_x4* x4_[64] = {};
};

}  // namespace

void batch_neurons(const hparams& hp, float threshold, const neuron_rows& w, const neuron_set& set, const batch_ffn_input& x, float* hidden, float* acc) {
  // One token: its choice is the ids given; the single-token routine reads each row as it dots it.
  if (x.n == 1) return token_neurons(hp, threshold, w, set, {x.in, x.xq, hidden, acc});
  batch_pass(hp, threshold, w, set, x, hidden, acc).run();
}

}  // namespace hotcold
