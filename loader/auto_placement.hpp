#pragma once
// The placement a run needs, made when it is missing or stale: `--device D --vram-budget G` on a
// sparse file uses the placement beside the model (or under the cache folder) when it was made for
// this budget, context and file (PowerInfer's placements, which do not say, are taken as they are);
// otherwise it plans one from firing counts (the caller says where they come from: the launcher reads
// a profile beside the model, prepare's MODEL.work, or makes a short one, tools/profile.hpp) and
// writes it beside the model — under the cache folder when the model's folder is read-only.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/placement_file.hpp"
#include "loader/placement.hpp"

namespace hotcold {
class model;
}

namespace hotcold::loader {

struct auto_placement {
  placement_data data;
  std::string path;    // where it was read or written
  bool made = false;   // planned now
  std::string reason;  // why it was planned now ("no placement", "made for another budget", ...)
  placement_plan plan; // when made
};

// The firing counts (n_layer x n_ff, how often each FFN neuron fired) a new placement is planned from.
using firing_counts_source = std::function<std::vector<uint64_t>(const std::string& model_path, const model& m)>;

struct auto_placement_options {
  std::string cache_dir;               // where placements go when the model's folder is read-only
  firing_counts_source firing_counts;  // empty: a placement that is missing or stale is an error naming `hotcold place`
};

// The placement beside model_path (or in the cache folder) made for `budget` bytes and plan `p` (its
// context, sequences and KV cache type), made now when there is none or it was made for something else.
auto_placement ensure_placement(const std::string& model_path, const model& m, uint64_t budget, const plan_options& p, const auto_placement_options& o);

}  // namespace hotcold::loader
