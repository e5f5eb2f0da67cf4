#include "server/client_accounts.hpp"

#include <fmt/format.h>

namespace hotcold::server {

namespace {

// A reply in ZeroMQ's hands: the bytes and the account they are counted against.
struct outgoing_reply {
  std::string bytes;
  std::shared_ptr<client_account> account;
};

void free_reply(void*, void* hint) {
  auto* r = static_cast<outgoing_reply*>(hint);
  r->account->queued.fetch_sub(static_cast<int64_t>(r->bytes.size()));
  delete r;
}

}  // namespace

std::shared_ptr<client_account>& client_accounts::account(const std::string& identity) {
  auto& a = clients_[identity];
  if (!a) a = std::make_shared<client_account>();
  return a;
}

bool client_accounts::cut_off(const std::string& identity) const {
  const auto it = clients_.find(identity);
  return it != clients_.end() && it->second->cut_off;
}

// A client that has gone (the ROUTER cannot route to it) is lost. So is a client that stops reading:
// when ZeroMQ's queue for it is full, or its unread replies would pass the buffer's bytes (one reply
// larger than that still goes when nothing else of its waits), it is cut off.
bool client_accounts::send(const address& to, std::string payload) {
  auto& acct = account(to.identity);
  if (acct->cut_off) return false;
  const int64_t queued = acct->queued.load(), size = static_cast<int64_t>(payload.size());
  if (queued > 0 && queued + size > max_buffer_) {
    cut(to.identity, fmt::format("{} bytes of replies unread", queued));
    return false;
  }
  auto* box = new outgoing_reply{std::move(payload), acct};
  acct->queued.fetch_add(size);
  zmq::message_t body(box->bytes.data(), box->bytes.size(), free_reply, box);  // freed (and uncounted) by ZeroMQ
  auto& sock = to.local() ? local_ : remote_;
  for (int attempt = 0;; ++attempt) {
    try {
      if (!sock.send(zmq::buffer(to.wire_identity()), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        cut(to.identity, "its ZeroMQ queue is full");
        return false;
      }
      if (to.delimiter) sock.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      sock.send(body, zmq::send_flags::dontwait);  // the rest of a message the first frame got in goes through
      return true;
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR && attempt < 3) continue;
      if (e.num() != EHOSTUNREACH) throw;
      lost_(to.identity, false, "unreachable");
      return false;
    }
  }
}

void client_accounts::cut(const std::string& identity, const std::string& why) {
  auto& acct = account(identity);
  if (acct->cut_off) return;
  acct->cut_off = true;
  lost_(identity, true, fmt::format("{}; limit {} bytes", why, max_buffer_));
}

int64_t client_accounts::tend() {
  int64_t total = 0;
  for (auto it = clients_.begin(); it != clients_.end();) {
    auto& a = *it->second;
    const int64_t q = a.queued.load();
    total += q;
    if (a.cut_off && q == 0 && a.in_flight == 0) a.cut_off = false;
    if (!a.cut_off && q == 0 && a.text_jobs == 0 && a.in_flight == 0) it = clients_.erase(it);
    else ++it;
  }
  return total;
}

}  // namespace hotcold::server
