#pragma once
// hotcold replay: a recorded workload sent again to a server, or a what-if of other placements.
#include <string>

#include "tools/whatif.hpp"

namespace hotcold::launcher {

struct replay_args {
  std::string trace, endpoint = "tcp://127.0.0.1:5555", report;
  double speed = 1.0;
  int max_concurrency = 256;
  double timeout = 120, connect_timeout = 5;
  bool compare = false;
  std::string activations;
  tools::whatif_options w;
};

void run_replay(const replay_args& a);

}  // namespace hotcold::launcher
