#pragma once
// Stages of layers on other hosts (docs/distributed.md): a worker process (`hotcold worker`) holds
// a stage host actor, published on a port through CAF's network layer (its middleman); the
// coordinator's pipeline reaches it as a remote actor and hands it the residual stream of a step
// for the layers it was assigned, which it runs on its own copy of the file with its own KV caches.
// Only activations cross: the residual stream (n x n_embd floats) and each token's sequence slot and
// position, there and back, as CAF messages.
//
// The protocol, each a request with a reply:
//   hello  version, file identity      -> "" or why the worker refuses (another version or file)
//   assign first, last, ctx, n_seq, kv type, mode
//                                      -> "" or why not (layers outside the file, a context too large)
//   layers seqs, positions, x           -> x after the stage's layers (an error names what failed)
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

#include "model/model.hpp"

namespace hotcold::actors {

using hello_atom = caf::atom_constant<caf::atom("hello")>;
using assign_atom = caf::atom_constant<caf::atom("assign")>;
using layers_atom = caf::atom_constant<caf::atom("layers")>;

// What both ends of a stage link must run alike: hotcold's version, the stage protocol's, CAF's.
std::string stage_version();

// A configuration that can carry stage messages between hosts: CAF's middleman loaded and the
// messages' types announced (both ends call it before building their actor system).
void configure_network(caf::actor_system_config& cfg);

struct stage_host_options {
  std::shared_ptr<const model> m;
  std::string file_id;  // file_identity() of m's file, as the worker computed it
  int threads = 1;      // the CPU workers of the stage's context
  std::string mode;     // "dense", "sparse", or "" (sparse when the file has predictors)
  std::function<void(const std::string&)> log;  // what the worker prints (connections, refusals)
};
// The stage host: computes on its own thread (detached), one step at a time.
caf::actor spawn_stage_host(caf::actor_system& sys, stage_host_options o);

// A stage as the coordinator names it, and as it holds it once connected and assigned.
struct stage_address {
  std::string host;
  uint16_t port = 0;
  int64_t first = 0, last = 0;  // the layers it runs: first .. last - 1
  std::string where() const;    // "tcp://HOST:PORT (layers A-B)"
};
// actor: a local link to the worker's stage host (a scheduled actor that forwards each request and
// monitors the worker, ending with the down message's reason when the worker is gone), so that no
// detached actor of the pipeline is known across the network (CAF 0.17's actor system would wait
// at shutdown for such an actor's thread while its network layer still holds it).
struct remote_stage {
  caf::actor actor;
  int64_t first = 0, last = 0;
  std::string where;
};
// Connects to each stage from `sys` (configured by configure_network), checks the versions and the
// file at the handshake and assigns each its layers for a context of ctx positions and n_seq
// sequences. Throws std::runtime_error naming the stage and why (no answer within `timeout`, another
// version or file, layers it cannot hold).
// kv_type: "f16" or "f32"; mode: "dense" or "sparse" (the coordinator's, which the stages follow).
std::vector<remote_stage> connect_stages(caf::actor_system& sys, const std::vector<stage_address>& stages, const std::string& file_id, int64_t ctx,
                                         int64_t n_seq, const std::string& kv_type, const std::string& mode,
                                         std::chrono::milliseconds timeout = std::chrono::seconds(20));

// The stages of --workers W1,W2,... (tcp://HOST:PORT each, protocol::parse_endpoint) with --split
// N1,N2,... (layers per worker, in order, summing to n_layer) or "auto" (an even split, the first
// workers taking one more where it does not divide). std::invalid_argument naming what is wrong (an
// address, a count, more workers than layers).
std::vector<stage_address> split_layers(const std::vector<std::string>& workers, const std::vector<std::string>& split, int64_t n_layer);

}  // namespace hotcold::actors
