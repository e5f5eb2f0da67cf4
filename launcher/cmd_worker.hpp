#pragma once
// hotcold worker --listen tcp://ADDR:PORT -m FILE: a stage host for a pipeline across hosts
// (docs/distributed.md).
#include <string>

namespace hotcold::launcher {

struct worker_args {
  std::string listen = "tcp://127.0.0.1:0";  // port 0: one the system picks (printed)
  std::string model;
  int threads = 0;  // 0: every hardware thread
  bool mmap = false;
  bool allow_remote = false;  // bind beyond loopback (needs tls)
  std::string tls;            // a folder of hotcold keygen --tls: TLS links, coordinators with its authority's certificates only
  // Its own hot device (the plan of `hotcold run --device`, for the layers it is assigned).
  std::string device = "auto";
  double vram_budget_gib = 0;
  bool sim_kernels = false;
  double ram_budget_gib = 0;  // --ram-budget: its layers' weights in memory, the rest of their FFN rows read from the file (0: all)
  // The KV cache types this worker holds (--cache-type-k, --cache-type-v): empty takes the
  // coordinator's; given, an assignment of other types is refused by name.
  std::string cache_type_k, cache_type_v;
};

// Serves stage requests until SIGINT or SIGTERM.
void run_worker(const worker_args& a);

}  // namespace hotcold::launcher
