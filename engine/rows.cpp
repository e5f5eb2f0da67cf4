#include "engine/rows.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace hotcold {

const kernels::row_kernels& row_kernels_of(tensor_type t) {
  const kernels::row_kernels* k = kernels::row_kernels_for(t);
  if (!k) throw std::logic_error(fmt::format("the CPU engine has no kernels for {} rows", tensor_type_name(t)));
  return *k;
}

const kernels::block_q8_0* quantize_for_rows(const tensor_view& w, const float* in, int64_t n, int64_t d, q8_rows& out) {
  if (!wants_q8_input(w.type)) return nullptr;
  const int64_t q = d / kernels::qk8_0;
  if (static_cast<int64_t>(out.size()) < n * q) out.resize(static_cast<size_t>(n * q));
  for (int64_t t = 0; t < n; ++t) kernels::quantize_row_q8_0(in + t * d, out.data() + t * q, d);
  return out.data();
}

std::shared_ptr<q8_rows> quantize_for_rows(const tensor_view& w, const float* in, int64_t n, int64_t d) {
  if (!wants_q8_input(w.type)) return nullptr;
  auto out = std::make_shared<q8_rows>();
  quantize_for_rows(w, in, n, d, *out);
  return out;
}

using namespace kernels;

float row_dot(const tensor_view& w, int64_t r, const float* x, const block_q8_0* xq) { return row_kernels_of(w.type).dot(w.row(r), x, xq, w.ne0); }

void row_axpy(const tensor_view& w, int64_t r, float a, float* y) { row_kernels_of(w.type).axpy(a, w.row(r), y, w.ne0); }

void row_axpy4(const tensor_view& w, const int32_t* r, const float* a, float* y) {
  const void* rows[4] = {w.row(r[0]), w.row(r[1]), w.row(r[2]), w.row(r[3])};
  row_kernels_of(w.type).axpy4(a, rows, y, w.ne0);
}

int64_t fired_rows(const float* hidden, const uint8_t* chosen, int64_t n, int64_t n_ff, const int32_t* ids, int64_t count) {
  int64_t fired = 0;
  for (int64_t k = 0; k < count; ++k) {
    bool any = false;
    for (int64_t t = 0; t < n && !any; ++t) {
      const int64_t at = t * n_ff + ids[k];
      any = (!chosen || chosen[at]) && hidden[at] != 0.0f;
    }
    fired += any;
  }
  return fired;
}

}  // namespace hotcold
