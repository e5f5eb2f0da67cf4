#pragma once
// The stages' activations on ZeroMQ frames beside CAF's messages (docs/distributed.md): a step's
// residual stream to a worker and back. CAF's network layer carries the stage protocol (hello,
// probe, assign, ping) and tells who is gone; the bytes of each step go on a ZeroMQ connection of
// their own, to the port after the worker's CAF port: a round trip a few times faster than a CAF
// request between two processes (docs/performance.md).
//
// A worker binds a ROUTER; a coordinator's link to it connects a DEALER once the worker has
// accepted its hello and its layers. Each request carries the assignment's token (random, sent in
// the assign message): a worker computes only for the coordinator that assigned its layers, and a
// request of an earlier assignment is refused. Between hosts (a TLS-configured network, whose hello
// travels authenticated and encrypted) the data connection is CurveZMQ: each end makes a key pair
// when it starts, they swap the public halves in the hello, and the worker lets in only the keys of
// coordinators whose hello it accepted.
//
// Frames, native byte order (the stage version names it; both ends check it at the hello):
//   request  [id u64, rows u64] [token] [seqs: rows i64] [positions: rows i64] [x: rows x n_embd f32]
//            [cache ops: 5 i64 each (kind, slot, from, pos, count: engine/cache_op.hpp), made first]
//            rows 0: a ping on the data path (the link's check that the port answers before it admits)
//   reply    [id u64, compute ns i64, status u64 (0: done, 1: failed)] [x after the layers, or why]
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hotcold::actors {

// A ZeroMQ address for host and port (IPv6 in brackets).
std::string stage_data_address(const std::string& host, uint16_t port);

// A Z85 CurveZMQ key pair, made now.
struct data_keys {
  std::string public_key, secret_key;
};
data_keys make_data_keys();

// One step as a worker receives it.
struct stage_step {
  std::string token;
  std::span<const int64_t> seqs, positions;
  std::span<const float> x;  // rows x n_embd, copied out of the frame (aligned)
  std::span<const int64_t> cache_ops;  // moves of cached rows before the step, 5 numbers each
};
// Computes a step: "" and out filled (rows x n_embd floats), or why not.
using stage_compute = std::function<std::string(const stage_step& step, std::vector<float>& out)>;
// Answers a ping: "" where the token is the current assignment's, or why not.
using stage_token_check = std::function<std::string(const std::string& token)>;

// The worker's side: a thread with a ROUTER bound at host:port that computes each request in turn
// (so a worker takes steps in the order they come: micro-batches pipeline across stages).
class stage_data_server {
 public:
  // curve: the connection is CurveZMQ with keys of this server's own; clients get in once allow()ed.
  // Throws std::runtime_error naming the address where it cannot bind.
  stage_data_server(const std::string& host, uint16_t port, bool curve, stage_compute compute, stage_token_check check);
  ~stage_data_server();  // stops the thread; requests not yet answered get no answer
  stage_data_server(const stage_data_server&) = delete;
  stage_data_server& operator=(const stage_data_server&) = delete;
  const std::string& public_key() const;  // "" for a plain connection
  // Lets a coordinator's public key in (a hello accepted over the authenticated network).
  void allow(const std::string& client_key);
  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

// What comes back for a request (or why the data connection failed: lost true, id 0).
struct stage_data_reply {
  uint64_t id = 0;
  bool ok = false;
  bool lost = false;
  std::string bytes;  // x after the layers (ok), or why not
  int64_t compute_ns = 0;
};

// The coordinator's side, one a link's admission: a thread with a DEALER connected to the worker's
// data port that hands each reply, and the loss of the connection (closed, or let go by the kernel
// when silent: TCP keepalive and a 10 s retransmission limit), to on_reply. A hung worker is named by
// the CAF link's heartbeat, on its own connection, which no frame fills.
class stage_data_client {
 public:
  // server_key "": plain; else CurveZMQ with `mine` as the client's pair.
  stage_data_client(const std::string& host, uint16_t port, const std::string& server_key, const data_keys& mine, std::function<void(stage_data_reply)> on_reply);
  ~stage_data_client();
  stage_data_client(const stage_data_client&) = delete;
  stage_data_client& operator=(const stage_data_client&) = delete;
  // Queues a request (rows 0: a ping). Called from one thread at a time (the link's).
  void send(uint64_t id, const std::string& token, const std::vector<int64_t>& seqs, const std::vector<int64_t>& positions, const std::string& x,
            const std::vector<int64_t>& cache_ops = {});
  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace hotcold::actors
