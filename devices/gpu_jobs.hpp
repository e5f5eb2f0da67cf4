#pragma once
// What a GPU's jobs may hold (the row types its kernels read, shapes that agree), and sim's plain
// computation of each job (--sim-kernels): the operation table of kernels/gpu/decode.cu done row by
// row in float and double from the device's copies alone, so that everything above a GPU's kernels
// runs and is tested where there is no GPU (that computation: devices/sim_kernels.cpp). Used by the
// sim and cuda back ends (devices/device.cpp).
#include <string>
#include <vector>

#include "devices/device.hpp"
#include "kernels/gpu/decode.hpp"

namespace hotcold::devices {

// The row types hotcold's GPU kernels read: F16, Q8_0 and Q4_0 for every operation; Q6_K (a llama.cpp
// Q4_0 file's head) in the products (head, attention, dense FFNs), not in the FFN-rows kernel or
// predictors.
bool gpu_reads(tensor_type t);
// The GPU kernels' name for a row type they read (F16, Q8_0, Q4_0, Q6_K): the one mapping, for the
// CUDA/HIP back end and sim's plain computation alike; std::invalid_argument for any other.
kernels::gpu::row_type gpu_row_type(tensor_type t);
bool gpu_reads(operation op, tensor_type t);

// Throw std::invalid_argument (std::out_of_range for a token outside the cache) naming `device` and
// what is wrong: shapes that do not agree, weights of a type the GPU's kernels do not read.
void check_attention_job(const std::string& device, const attention_job& job);
void check_dense_ffn_job(const std::string& device, const dense_ffn_job& job);
// A dense-FFN job's parts: its own (ffn_part) list, else one part of its weights over all its rows.
std::vector<ffn_part> ffn_parts(const dense_ffn_job& job);

// The tokens a GPU's attention or dense-FFN job takes at a time (what its scratch holds); throws
// std::invalid_argument naming `device` and the bytes needed when not one token fits.
int64_t attention_chunk(const std::string& device, const attention_job& job);
int64_t dense_ffn_chunk(const std::string& device, const dense_ffn_job& job);
// Where a chunk of m tokens of a job keeps each of its values in the job's scratch: byte offsets from
// the scratch's start, each on a 16-byte boundary — the kernels read a product's input in 16-byte loads
// only where it is so aligned (kernels/gpu/rows.cuh's aligned16; a value 8 bytes off takes the 4-byte
// path) —, and the end. An attention job's inputs [x, in_end) cross as one copy: x, the angles, the
// sequences and positions (2m int32), the layer's input (with a predictor, or the residual stream with
// the FFN after it); then q/k/v, the heads' outputs, the output product; with a predictor its input,
// scores, choices (bytes) and hidden values (rank a token); with the FFN after it the residual after
// attention, the FFN's normalized input, its gate and up values and its output (the next layer's input).
inline constexpr uint64_t scratch_align = 16;
struct attention_scratch {
  uint64_t x = 0, angles = 0, seqpos = 0, layer_in = 0, in_end = 0, qkv = 0, attn = 0, out = 0;
  uint64_t pred_in = 0, scores = 0, chosen = 0, mid = 0;
  uint64_t resid = 0, ffn_x = 0, gate = 0, up = 0, ffn_out = 0;
  uint64_t end = 0;
};
attention_scratch attention_scratch_of(const attention_job& job, int64_t m);
// A dense FFN's: its input (and with weighted rows, their weights: one copy in), gate and up values, output.
struct dense_ffn_scratch {
  uint64_t x = 0, weights = 0, in_end = 0, gate = 0, up = 0, out = 0, end = 0;
};
dense_ffn_scratch dense_ffn_scratch_of(int64_t d, int64_t n_ff, int64_t m, bool weights = false);
// Throws std::logic_error naming `device` unless the scratch and every offset of the layout lie on
// 16-byte boundaries and its end fits in scratch_bytes: what the kernels assume of their inputs.
void check_scratch_layout(const std::string& device, const void* scratch, uint64_t scratch_bytes, const attention_scratch& s);
void check_scratch_layout(const std::string& device, const void* scratch, uint64_t scratch_bytes, const dense_ffn_scratch& s);

// What a chunk of m tokens of an attention job leaves of its scratch (after its layout's end), in
// floats from a 16-byte boundary. Flash-decoding's partial sums live there (a decode step's chunk of
// one token leaves most of it).
struct scratch_tail {
  int64_t offset = 0, floats = 0;
};
scratch_tail attention_scratch_tail(const attention_job& job, int64_t m);
// The latest position among tokens t0 .. t0 + m - 1 of a job, and the splits the GPU's attention takes
// for them (kernels/gpu/decode.hpp's attend_splits, by that position and the scratch's tail; 1: none).
int64_t attention_latest_position(const attention_job& job, int64_t t0, int64_t m);
int64_t attention_splits(const attention_job& job, int64_t t0, int64_t m);
// A predictor job's chunk of m tokens: their inputs, hidden values (rank each), scores and choices
// (bytes); the tokens it takes at a time (throws std::invalid_argument naming `device` when not one
// fits).
struct predict_scratch {
  uint64_t x = 0, mid = 0, scores = 0, chosen = 0, end = 0;
};
predict_scratch predict_scratch_of(int64_t d, int64_t rank, int64_t n_ff, int64_t m);
int64_t predict_chunk(const std::string& device, const predict_job& job);
// Throws std::invalid_argument naming `device` when a product's scratch is short.
void check_scratch(const std::string& device, const predict_job& job);
void check_scratch(const std::string& device, const matvec_job& job);

// Uploads of more than gpu_upload_chunk / 16 bytes go through pinned chunks of this size.
inline constexpr uint64_t gpu_upload_chunk = 16ull << 20;

// The launches, copies and syncs the GPU back end (devices/cuda) makes for a job of the operation
// table, and for a copy in or out: what sim with kernels counts for the same work, so that the round
// trips a decoded token costs a GPU are seen and tested where there is none (a GPU test holds the
// GPU's own counts to these). Jobs as the back end takes them (after their checks).
device_traffic gpu_traffic(const ffn_rows_job& job);
device_traffic gpu_traffic(const predict_job& job);
device_traffic gpu_traffic(const matvec_job& job);
device_traffic gpu_traffic(const attention_job& job);
device_traffic gpu_traffic(const dense_ffn_job& job);
device_traffic gpu_copy_traffic(uint64_t bytes, bool to_device);

namespace sim_kernels {
void ffn_rows(const ffn_rows_job& job);
void predict(const predict_job& job);
void matvec(const matvec_job& job);
void attention(const attention_job& job);
void dense_ffn(const dense_ffn_job& job);
}  // namespace sim_kernels

}  // namespace hotcold::devices
