#pragma once
#include <cstdint>

namespace hotcold {

// A move of cached rows between steps (every layer's keys and values; engine/prefix_index.hpp): a
// slot's positions into a block of the prefix store, a block into a slot's positions, or one slot's
// positions into another's.
struct cache_op {
  enum class kind : uint8_t { save, load, copy };
  kind what = kind::save;
  int64_t slot = 0;   // save: read from; load, copy: written
  int64_t from = 0;   // save, load: the block; copy: the slot read from
  int64_t pos = 0;    // the first position (save, load: a block's worth from there)
  int64_t count = 0;  // copy: positions
};

}  // namespace hotcold
