#pragma once
// A request the actors' tests send: greedy, running its n_predict tokens whatever they are.
#include <vector>

#include "actors/messages.hpp"

namespace hotcold::test {

inline actors::generation_request greedy(std::vector<token_id> prompt, int32_t n_predict) {
  actors::generation_request q;
  q.prompt = std::move(prompt);
  q.n_predict = n_predict;
  q.ignore_eos = true;
  q.sampling.temperature = 0;
  return q;
}

}  // namespace hotcold::test
