#pragma once
// Placement files (PowerInfer's `<model>.generated.gpuidx`): GGUF layout, PWRI magic,
// `split.vram_capacity` (u64: bytes of hot FFN rows), and per layer `blk.N.gpu_idx` (I32[n_ff], 1 = the
// neuron lives on the fast device) and `blk.N.gpu_bucket` (I32: the hot neuron ids, sorted; absent
// when a layer has none). Layers are handled by number.
#include <cstdint>
#include <string>
#include <vector>

namespace hotcold {

struct placement_data {
  uint64_t vram_capacity = 0;
  std::vector<std::vector<int32_t>> hot;  // per layer: hot neuron ids, sorted
};

std::string placement_path(const std::string& model_path);  // <model>.generated.gpuidx
void write_placement_file(const placement_data& p, const std::string& path, int64_t n_ff);
// Throws std::runtime_error naming the tensor when the file does not describe n_layer x n_ff.
placement_data read_placement_file(const std::string& path, int64_t n_layer, int64_t n_ff);

}  // namespace hotcold
