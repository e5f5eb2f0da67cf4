#pragma once
// Placement files (PowerInfer's `<model>.generated.gpuidx`): GGUF layout, PWRI magic,
// `split.vram_capacity` (u64: bytes of hot FFN rows), and per layer `blk.N.gpu_idx` (I32[n_ff], 1 = the
// neuron lives on the fast device) and `blk.N.gpu_bucket` (I32: the hot neuron ids, sorted; absent
// when a layer has none). Layers are handled by number.
#include <cstdint>
#include <string>
#include <vector>

namespace hotcold {

// What a placement was made for (hotcold's keys `hotcold.placement.budget`, `.ctx`, `.model_bytes`,
// `.model_mtime_ns`, `.kv_layer_bytes`, all u64): a placement made for another budget, context or file is made again.
// PowerInfer's files have none of them (known = false) and are taken as they are.
struct placement_origin {
  bool known = false;
  uint64_t budget = 0;         // bytes of the device's budget
  uint64_t ctx = 0;            // context the KV cache was planned for
  uint64_t model_bytes = 0;    // the model file's size
  uint64_t model_mtime_ns = 0; // and its modification time
  uint64_t kv_layer_bytes = 0; // `hotcold.placement.kv_layer_bytes`: one layer's KV cache on the device (context x sequences x the cache's type)
  bool operator==(const placement_origin&) const = default;
};
// The origin of a plan for `model_path` (its size and modification time now).
placement_origin placement_origin_of(const std::string& model_path, uint64_t budget, uint64_t ctx);

struct placement_data {
  uint64_t vram_capacity = 0;
  std::vector<std::vector<int32_t>> hot;  // per layer: hot neuron ids, sorted
  placement_origin origin;
};

std::string placement_path(const std::string& model_path);  // <model>.generated.gpuidx
void write_placement_file(const placement_data& p, const std::string& path, int64_t n_ff);
// Throws std::runtime_error naming the tensor when the file does not describe n_layer x n_ff.
placement_data read_placement_file(const std::string& path, int64_t n_layer, int64_t n_ff);

}  // namespace hotcold
