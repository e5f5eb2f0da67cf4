#pragma once
// What a run recorded of its FFNs' choices (FILE.activations beside a --trace-out trace, written by
// engine/trace.hpp; docs/traces.md), or a profile folder's (loader/profile.hpp: the neurons that truly
// fired, one token a step), read back: what-if replays (tools/whatif.hpp, tools/expert_cache.hpp) and a
// mixture's first experts on a device (--experts-from) read it.
#include <cstdint>
#include <string>
#include <vector>

namespace hotcold::loader {

struct activation_record {
  int64_t n_layer = 0, n_ff = 0;
  std::vector<std::vector<int32_t>> hot;  // the placement while recording, per layer (empty: none)
  struct entry {
    int64_t step = 0, layer = 0, tokens = 0;
    std::vector<uint8_t> bits;  // tokens x ceil(n_ff/8): bit i of a token's row = it computed neuron i
  };
  std::vector<entry> entries;
  std::string source;  // the path read
  bool from_profile = false;
};

// Reads FILE.activations, or (given FILE.json) the FILE.json.activations beside it, or a profile folder.
// Throws std::runtime_error naming the file and what is wrong with it.
activation_record read_activation_record(const std::string& path);

// Each layer's experts, most chosen first (ties to the lower number), over a record of routings.
std::vector<std::vector<int32_t>> experts_by_popularity(const activation_record& rec);

}  // namespace hotcold::loader
