#pragma once
// The one mapping between the wire's sampling fields (protocol::sampling) and the sampler's
// (model/sampler.hpp): the server turns a request's into the sampler's; the command line's flags
// become the wire's, for `hotcold client` and for the one check of their values (protocol::check_sampling).
#include <cstdint>
#include <optional>

#include "model/sampler.hpp"
#include "protocol/messages.hpp"

namespace hotcold::server {

// seed: the one the sampler uses (the request's, or one the server picked).
sampling_params sampler_params_of(const protocol::sampling& s, uint64_t seed);
protocol::sampling wire_sampling_of(const sampling_params& p, std::optional<uint64_t> seed);

}  // namespace hotcold::server
