#pragma once
// What travels between hotcold's actors. Activation tensors are immutable and reference-counted:
// a message carries the pointer, never a copy of the values, so handing a layer's activations from
// the hot executor to the cold pool costs the same whatever their size.
#include <cstdint>
#include <memory>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>

namespace hotcold::actors {

struct activation {
  std::shared_ptr<const std::vector<float>> values;  // rows x cols, row-major
  int64_t rows = 0;   // tokens in the micro-batch
  int64_t cols = 0;   // values per token (n_embd, or n_ff for hidden vectors)
  int64_t step = 0;   // the scheduler's step
  int64_t layer = 0;

  const float* data() const { return values ? values->data() : nullptr; }
  // Wraps `v` (moved, not copied) as an immutable tensor.
  static activation wrap(std::vector<float> v, int64_t rows, int64_t cols, int64_t step, int64_t layer) {
    return {std::make_shared<const std::vector<float>>(std::move(v)), rows, cols, step, layer};
  }
};

}  // namespace hotcold::actors

// Local messages only: CAF may pass the shared pointer along but never serializes it.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::activation)
