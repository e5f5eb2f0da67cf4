#pragma once
// The FFN's activations, one enum for the whole house: a model's file says which (model/arch.hpp reads
// it), the CPU's and the GPU's kernels compute it, a device's jobs carry it. drelu: relu(gate) relu(up).
namespace hotcold::kernels {

enum class activation : int { silu, relu, drelu, gelu };

}  // namespace hotcold::kernels
