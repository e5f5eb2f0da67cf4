#pragma once
// What a GPU's jobs may hold (the row types its kernels read, shapes that agree), and sim's plain
// computation of each job (--sim-kernels): the operation table of kernels/gpu/decode.cu done row by
// row in float and double from the device's copies alone, so that everything above a GPU's kernels
// runs and is tested where there is no GPU. Used by the sim and cuda back ends (devices/device.cpp).
#include <string>

#include "devices/device.hpp"

namespace hotcold::devices {

// The row types hotcold's GPU kernels read: F16, Q8_0 and Q4_0 for every operation; Q6_K (a llama.cpp
// Q4_0 file's head) in the products (head, attention, dense FFNs), not in the FFN-rows kernel or
// predictors.
bool gpu_reads(tensor_type t);
bool gpu_reads(operation op, tensor_type t);

// Throw std::invalid_argument (std::out_of_range for a token outside the cache) naming `device` and
// what is wrong: shapes that do not agree, weights of a type the GPU's kernels do not read.
void check_attention_job(const std::string& device, const attention_job& job);
void check_dense_ffn_job(const std::string& device, const dense_ffn_job& job);

namespace sim_kernels {
void ffn_rows(const ffn_rows_job& job);
void predict(const predict_job& job);
void matvec(const matvec_job& job);
void attention(const attention_job& job);
void dense_ffn(const dense_ffn_job& job);
}  // namespace sim_kernels

}  // namespace hotcold::devices
