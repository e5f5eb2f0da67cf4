#pragma once
// The placement a run needs, made when it is missing or stale: `--device D --vram-budget G` on a
// sparse file uses the placement beside the model (or under the cache folder) when it was made for
// this budget, context and file (PowerInfer's placements, which do not say, are taken as they are);
// otherwise it plans one from the firing counts of a profile beside the model (prepare's MODEL.work),
// or of a short profile of text the model samples itself, and writes it beside the model — under the
// cache folder when the model's folder is read-only.
#include <cstdint>
#include <functional>
#include <string>

#include "model/placement_file.hpp"
#include "tools/placement.hpp"

namespace hotcold {
class model;
}

namespace hotcold::tools {

struct auto_placement {
  placement_data data;
  std::string path;    // where it was read or written
  bool made = false;   // planned now
  std::string reason;  // why it was planned now ("no placement", "made for another budget", ...)
  placement_plan plan; // when made
};

struct auto_placement_options {
  std::string cache_dir;       // where placements go when the model's folder is read-only, and short profiles
  int64_t profile_tokens = 512;
  int threads = 0;
  std::function<void(int64_t done, int64_t total)> progress;  // of a short profile
};

// The placement beside model_path (or in the cache folder) made for `budget` bytes and plan `p` (its
// context, sequences and KV cache type), made now when there is none or it was made for something else.
auto_placement ensure_placement(const std::string& model_path, const model& m, uint64_t budget, const plan_options& p, const auto_placement_options& o);

}  // namespace hotcold::tools
