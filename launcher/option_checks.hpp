#pragma once
// The one check of the command line's sampling flags (protocol::check_sampling, with the flags' names).
#include "model/sampler.hpp"

namespace hotcold::launcher {

// Throws std::invalid_argument naming the flag (--temp, --min-p, ...) and its range.
void check_sampling_flags(const sampling_params& p);

}  // namespace hotcold::launcher
