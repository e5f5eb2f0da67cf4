#include "server/sampling_map.hpp"

namespace hotcold::server {

sampling_params sampler_params_of(const protocol::sampling& s, uint64_t seed) {
  sampling_params p;
  p.temperature = static_cast<float>(s.temperature);
  p.top_k = s.top_k;
  p.top_p = static_cast<float>(s.top_p);
  p.min_p = static_cast<float>(s.min_p);
  p.repeat_penalty = static_cast<float>(s.repeat_penalty);
  p.penalty_last_n = s.repeat_last_n;
  p.frequency_penalty = static_cast<float>(s.frequency_penalty);
  p.presence_penalty = static_cast<float>(s.presence_penalty);
  p.seed = seed;
  return p;
}

protocol::sampling wire_sampling_of(const sampling_params& p, std::optional<uint64_t> seed) {
  protocol::sampling s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.repeat_penalty = p.repeat_penalty;
  s.repeat_last_n = p.penalty_last_n;
  s.frequency_penalty = p.frequency_penalty;
  s.presence_penalty = p.presence_penalty;
  s.seed = seed;
  return s;
}

}  // namespace hotcold::server
