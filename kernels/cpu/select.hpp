#pragma once
// A predictor's choice: which scores reach a threshold, as a 0/1 byte each and as the list of their
// indices. Whether a neuron is chosen is close to a coin toss, so no path here branches on it.
#include <cstdint>

namespace hotcold::kernels {

// chosen[i] = scores[i] >= threshold (1 or 0) for i < n; the indices where it is 1 go to ids in
// ascending order, the count returned. ids must have room for n + 16 values (the vector path stores
// sixteen at a time past the last one it keeps). A NaN score is not chosen.
int64_t select_at_least(const float* scores, int64_t n, float threshold, uint8_t* chosen, int32_t* ids);
// The same without the vector paths (the reference the tests hold them against).
int64_t select_at_least_scalar(const float* scores, int64_t n, float threshold, uint8_t* chosen, int32_t* ids);

}  // namespace hotcold::kernels
