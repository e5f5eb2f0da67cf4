#pragma once
// The server's clients as its ROUTER sockets see them (server.cpp): where a reply goes, and each
// client's account — the bytes of its replies ZeroMQ still holds, whether it is cut off for not reading
// them, its requests waiting for the text worker and in flight. Replies go out through send(), which
// never waits: a client that cannot be reached, or that stops reading (ZeroMQ's queue for it full, or
// its unread replies past the buffer limit), is told to the server through `lost`.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <zmq.hpp>

namespace hotcold::server {

// Where a reply goes: which ROUTER (the one clients connect to, or the in-process one of the HTTP
// API's requests) and its identity frame there, as one key (a tag byte, then the frame), and whether
// the client put an empty delimiter frame before its payload (REQ sockets do; DEALERs need not).
struct address {
  std::string identity;
  bool delimiter = false;
  std::string client;  // who it is for the queue's shares (fair_queue): a CURVE key, a peer, an HTTP key or address
  bool local() const { return !identity.empty() && identity[0] == local_tag; }
  std::string_view wire_identity() const { return std::string_view(identity).substr(1); }
  static constexpr char local_tag = 'L', remote_tag = 'R';
};

// One client (a ROUTER identity) as the server sees it.
struct client_account {
  // Bytes of its replies that ZeroMQ holds, not yet written to its connection: counted up when a
  // reply is handed over, down when ZeroMQ frees it (on its I/O thread).
  std::atomic<int64_t> queued{0};
  bool cut_off = false;   // its replies are dropped until it has read what is queued
  int64_t text_jobs = 0;  // its requests waiting for the text worker
  int64_t in_flight = 0;  // its generates running or queued in the pipeline
};

class client_accounts {
 public:
  // A client nothing more can be sent to: it left (cut_off false) or stopped reading (true, with why).
  using lost_fn = std::function<void(const std::string& identity, bool cut_off, const std::string& why)>;
  client_accounts(zmq::socket_t& remote, zmq::socket_t& local, int64_t max_buffer, lost_fn lost)
      : remote_(remote), local_(local), max_buffer_(max_buffer), lost_(std::move(lost)) {}

  std::shared_ptr<client_account>& account(const std::string& identity);
  bool cut_off(const std::string& identity) const;
  // Sends one reply without waiting; false where it did not go (the client is cut off, or lost now).
  bool send(const address& to, std::string payload);
  // Cut-off clients that have read what was queued for them are served again; accounts with nothing
  // in flight are forgotten. Returns the bytes queued for all.
  int64_t tend();

 private:
  void cut(const std::string& identity, const std::string& why);
  zmq::socket_t& remote_;
  zmq::socket_t& local_;
  int64_t max_buffer_;
  lost_fn lost_;
  std::map<std::string, std::shared_ptr<client_account>> clients_;  // by identity
};

}  // namespace hotcold::server
