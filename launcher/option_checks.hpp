#pragma once
// The one check of the command line's sampling flags (protocol::check_sampling, with the flags' names).
#include <string>
#include <vector>

#include "kernels/tensor_types.hpp"
#include "model/sampler.hpp"

namespace hotcold::launcher {

// Throws std::invalid_argument naming the flag (--temp, --min-p, ...) and its range.
void check_sampling_flags(const sampling_params& p);

// The KV cache's types the flags name ("f16", "q8_0", ...; empty: f16).
kv_types parse_cache_types(const std::string& k, const std::string& v);

}  // namespace hotcold::launcher
