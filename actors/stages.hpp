#pragma once
// Stages of layers on other hosts (docs/distributed.md): a worker process (`hotcold worker`) holds
// a stage host actor, published on a port through CAF's network layer (its middleman); the
// coordinator's pipeline reaches it as a remote actor, checks it, and assigns it layers, which it
// runs on its own copy of the file with its own KV caches. Only activations cross: each step's
// residual stream (n x n_embd floats) and each token's sequence slot and position, there and back,
// on a ZeroMQ connection to the port after the CAF one (stage_data.hpp: it measured faster).
//
// The protocol on CAF, each a request with a reply:
//   hello  version, file identity, the coordinator's CurveZMQ public key ("" on plain links)
//                                      -> "" or why the worker refuses (another version or file),
//                                         and the worker's data key ("" on plain links)
//   assign first, last, ctx, n_seq, kv type, mode, token
//                                      -> "" or why not (layers outside the file, a context too large);
//                                         the data requests must carry the token from now on
//   ping                                -> ping (the heartbeat; answered by the worker's front actor,
//                                         which does not wait for the one reading layers)
//   probe                               -> the worker's read speed (bytes/s, measured at its start with
//                                         its threads), its available memory now, its threads
//
// Links to other hosts run over TLS with certificates on both sides (stage_keys.hpp): configure_network
// with a folder of `hotcold keygen --tls`, and both ends trust only that folder's authority; the
// data connection is then CurveZMQ with keys swapped in the hello.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/live_stats.hpp"
#include "engine/forward.hpp"
#include "model/model.hpp"

namespace hotcold::actors {

using hello_atom = caf::atom_constant<caf::atom("hello")>;
using assign_atom = caf::atom_constant<caf::atom("assign")>;
// layers_atom: a step to a stage link (seqs, positions, x as float_bytes, the moves of cached rows the
// worker makes first as cache_op's five numbers each -> x, the worker's compute
// nanoseconds, the round trip's nanoseconds).
using layers_atom = caf::atom_constant<caf::atom("layers")>;
using data_atom = caf::atom_constant<caf::atom("data")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using probe_atom = caf::atom_constant<caf::atom("probe")>;
// (watch_atom, watcher) to a stage link: the watcher hears (stage_atom, the stage's place in the list
// from 0, up, why) at each change (up false: the stage is lost, and why; true: it is back, assigned
// again, with empty caches).
using watch_atom = caf::atom_constant<caf::atom("watch")>;
using stage_atom = caf::atom_constant<caf::atom("stage")>;

// The protocol above as types: what a worker's front answers, checked by the compiler on both ends.
// The hello keeps its shape across versions (so that a worker of another one can say so).
using stage_hello = caf::replies_to<hello_atom, std::string, std::string, std::string>::with<std::string, std::string>;
// (first, last, the caches' shape {n_ctx, n_seq, store blocks, block tokens}, the keys' and the values'
// cache types, mode, token)
using stage_assign =
    caf::replies_to<assign_atom, int64_t, int64_t, std::vector<int64_t>, tensor_type, tensor_type, ffn_mode, std::string>::with<std::string>;
using stage_worker_actor = caf::typed_actor<stage_hello, stage_assign, caf::replies_to<ping_atom>::with<ping_atom>,
                                            caf::replies_to<probe_atom>::with<double, uint64_t, int64_t>>;

// How a worker refuses a step of an assignment it no longer runs (another coordinator's hello took it
// while this one was silent): the coordinator reads it as the stage lost, and takes it back when it can.
constexpr std::string_view reassigned_refusal = "a step of another assignment";

// What both ends of a stage link must run alike: hotcold's version, the stage protocol's, CAF's, and
// the floats' byte order (their bytes cross as they are in memory).
std::string stage_version();

// Rows of floats as their bytes in memory (the `layers` messages' x).
using float_bytes = std::string;
float_bytes pack_floats(const float* x, size_t n);
// The floats of b into out (b.size() / 4 of them).
void unpack_floats(const float_bytes& b, float* out);

// A configuration that can carry stage messages between hosts: CAF's middleman loaded and the
// messages' types announced (both ends call it before building their actor system). With tls_dir
// (a folder of hotcold keygen --tls, checked by check_tls_dir: std::invalid_argument naming what is
// wrong) CAF's OpenSSL module is loaded with its certificates: publish_stage and the links then
// speak TLS, each side requiring the other's certificate signed by the folder's authority.
void configure_network(caf::actor_system_config& cfg, const std::string& tls_dir = {});
// The network layer's actor of a system so configured: OpenSSL's where it speaks TLS, else the
// plain middleman's (connect, publish and unpublish requests go to it).
caf::io::middleman_actor network_actor(caf::actor_system& sys);

struct stage_host_options {
  // The file, mapped (use_mmap: nothing read yet). At each assignment of other layers than it holds,
  // the host reads a private copy of those layers alone (model::load's first_layer, last_layer)
  // unless `mmap` says to compute from the mapping (whose pages are read as they are used).
  std::shared_ptr<const model> m;
  bool mmap = false;
  // The disk tier (engine/ram_tier; --ram-budget): the assigned layers' weights held in memory, their
  // other FFN rows read from the file as steps choose them. 0: all of them read at the assignment.
  uint64_t ram_budget = 0;
  std::string file_id;  // file_identity() of m's file, as the worker computed it
  int threads = 1;      // the CPU workers of the stage's context
  double read_bytes_per_second = 0;  // measured with those threads at the worker's start (the probe's answer)
  std::function<uint64_t()> available_memory;  // bytes the system has available now (the probe's answer)
  // The KV cache's types this worker holds (its --cache-type-k/-v); absent: whichever the coordinator
  // assigns. An assignment of other types is refused, naming both.
  std::optional<kv_types> kv;
  // Opens the context for an assignment's layers (first .. last - 1 of the model given): with the
  // worker's hot device, what the plan puts there for those layers (loader::open_for_running), and
  // the disk tier of ram_budget beside it (the host makes none then). Empty: a context on the CPU alone.
  std::function<std::shared_ptr<inference_context>(std::shared_ptr<const model>, int64_t first, int64_t last, int64_t n_ctx, int64_t n_seq, kv_types kv,
                                                   ffn_mode mode)>
      open;
  std::function<void(const std::string&)> log;  // what the worker prints (connections, refusals)
};
// A stage host published on host:port for CAF (port 0: one the system picks) over TLS where the
// system's configuration has it (configure_network), its data port (stage_data.hpp) bound on the
// port after it. It reads layers on a thread of its own at each assignment and computes steps on
// its data thread, one at a time in the order they come. std::runtime_error naming what cannot be
// bound.
class basp_guard;
struct stage_host {
  stage_worker_actor actor;
  uint16_t port = 0;  // the CAF port (a plain link's: its guard's, which forwards to CAF's own); the data port is the next
  std::shared_ptr<basp_guard> guard;  // plain links: what a peer can make the worker hold, bounded (actors/basp_guard.hpp)
};
stage_host start_stage_host(caf::actor_system& sys, stage_host_options o, const std::string& host, uint16_t port);

// A stage as the coordinator names it, and as it holds it once connected and assigned.
struct stage_address {
  std::string host;
  uint16_t port = 0;
  int64_t first = 0, last = 0;  // the layers it runs: first .. last - 1
  std::string where() const;    // "tcp://HOST:PORT (layers A-B)"
};
// The stages a coordinator runs its layers on (--workers, --split, --workers-tls).
struct stage_plan {
  std::vector<stage_address> stages;
  std::string file_id;  // file_identity() of the coordinator's file: each worker's must be the same
  std::string tls_dir;  // a folder of hotcold keygen --tls ("": plain links, loopback workers only)
  bool auto_split = false;          // --split auto: connect_stages plans the layers (plan_split); stages' ranges are an even split until then
  uint64_t kv_layer_row_bytes = 0;  // a layer's K and V bytes for one position of one sequence (the memory plan's)
  bool empty() const { return stages.empty(); }
  // Every stage on one host (they share its memory bus).
  bool one_host() const {
    return std::all_of(stages.begin(), stages.end(), [&](const stage_address& s) { return s.host == stages.front().host; });
  }
};

// What a worker answers to the probe.
struct worker_probe {
  double read_bytes_per_second = 0;
  uint64_t available_bytes = 0;
  int64_t threads = 0;
};

// Layers per worker for --split auto: a decode step is read-bound, so each stage's share of a token's
// time is its layers' bytes over its read speed; layers go one at a time to the worker whose time
// would be least with it (every worker one first), none taking more layers than memory_share of its
// available memory holds at the largest layer's bytes (weights + kv_layer_bytes) each. Contiguous
// ranges in the workers' order follow from the counts. std::runtime_error when the workers' memory
// cannot hold every layer (saying how many it holds), or a worker has room for none.
std::vector<int64_t> plan_split(const std::vector<worker_probe>& workers, const std::vector<uint64_t>& layer_bytes, uint64_t kv_layer_bytes,
                                double memory_share = 0.9);

// How a link watches its stage.
struct stage_timing {
  std::chrono::milliseconds heartbeat{250};           // from a heartbeat's answer to the next ping
  std::chrono::milliseconds heartbeat_timeout{1250};  // a ping unanswered this long: the stage is lost
  std::chrono::milliseconds retry{500};               // between attempts to re-admit a lost stage
  std::chrono::milliseconds answer{20000};            // for a connection and the handshake
  std::chrono::milliseconds assign{30 * 60 * 1000};   // for an assignment: the worker reads its layers first
};

// actor: the coordinator's link to a stage (a scheduled actor, the only one of the pipeline known to
// the network: CAF 0.17's actor system would wait at shutdown for a detached actor's thread while
// its network layer still holds it). It forwards `layers` requests, answering (x, the worker's
// compute nanoseconds, the round trip's nanoseconds); it watches the worker by CAF's down messages
// and a heartbeat, and when the worker is gone or silent it fails the requests in flight and every
// later one with why, tells its watcher (watch_atom), and tries to connect again every
// timing.retry: a worker back at the address with the same file and version is assigned the
// stage's layers again (empty caches) and the watcher told so.
struct remote_stage {
  caf::actor actor;
  int64_t first = 0, last = 0;
  std::string where;
};
// What a coordinator's stages run alike with it: its file (file_identity(), each worker's must be the
// same), the KV caches' positions and sequence slots and their types (keys' and values': f32, f16, q8_0, q4_0), the FFN
// mode (the coordinator's, which the stages follow), and the prefix store's blocks (each host keeps its
// layers' rows of every block; the coordinator's index decides what is reused: actors/prefix_reuse.hpp).
struct stage_context {
  std::string file_id;
  int64_t n_ctx = 0, n_seq = 1;
  kv_types kv;
  ffn_mode mode = ffn_mode::dense;
  int64_t store_blocks = 0, block_tokens = 16;
};
// Connects to each stage from `sys` (configured by configure_network with the plan's tls_dir),
// checks the versions and the file at the handshake, probes each worker, plans the split where the
// plan says auto (plan_split over layer_bytes: each layer's weights), prints the stage table, and
// assigns each its layers in the context c (its file_id: the plan's). Throws std::runtime_error naming
// the stage and why (no answer within timing.answer, another version or file, layers it cannot hold,
// memory too small for an automatic split). stats: where each link counts its heartbeats' round trips
// (live_stats::add_stage_heartbeat).
std::vector<remote_stage> connect_stages(caf::actor_system& sys, const stage_plan& plan, const std::vector<uint64_t>& layer_bytes, const stage_context& c,
                                         std::shared_ptr<live_stats> stats, const stage_timing& timing = {});

// The workers (host and port each, in order) given their layers by --split N1,N2,... (layers per
// worker, in order, summing to n_layer) or "auto" (an even split, the first workers taking one more
// where it does not divide). std::invalid_argument naming what is wrong (a count, more workers than
// layers).
std::vector<stage_address> split_layers(std::vector<stage_address> workers, const std::vector<std::string>& split, int64_t n_layer);

}  // namespace hotcold::actors
