#include "server/fair_queue.hpp"

#include <algorithm>

namespace hotcold::server {

fair_queue::refusal fair_queue::push(const std::string& client, int64_t ticket) {
  if (size_ >= max_total_) return refusal::full;
  if (waiting_of(client) >= max_per_client_) return refusal::client_full;
  auto& q = clients_[client];
  if (q.tickets.empty()) {
    q.came = ++arrivals_;
    ready_.insert({q.last_served, q.came, client});
  }
  q.tickets.push_back(ticket);
  client_of_[ticket] = client;
  ++size_;
  return refusal::none;
}

std::optional<int64_t> fair_queue::pop() {
  if (ready_.empty()) return std::nullopt;
  const std::string client = std::get<2>(*ready_.begin());
  ready_.erase(ready_.begin());
  auto& q = clients_.at(client);
  const int64_t ticket = q.tickets.front();
  q.tickets.pop_front();
  q.last_served = ++turn_;
  if (!q.tickets.empty()) ready_.insert({q.last_served, q.came, client});
  client_of_.erase(ticket);
  --size_;
  forget_idle();
  return ticket;
}

bool fair_queue::remove(int64_t ticket) {
  const auto it = client_of_.find(ticket);
  if (it == client_of_.end()) return false;
  auto& q = clients_.at(it->second);
  q.tickets.erase(std::find(q.tickets.begin(), q.tickets.end(), ticket));
  if (q.tickets.empty()) ready_.erase({q.last_served, q.came, it->second});
  client_of_.erase(it);
  --size_;
  return true;
}

int64_t fair_queue::waiting_of(const std::string& client) const {
  const auto it = clients_.find(client);
  return it == clients_.end() ? 0 : static_cast<int64_t>(it->second.tickets.size());
}

std::map<std::string, int64_t> fair_queue::depths() const {
  std::map<std::string, int64_t> out;
  for (const auto& [c, q] : clients_)
    if (!q.tickets.empty()) out[c] = static_cast<int64_t>(q.tickets.size());
  return out;
}

// A client with nothing waiting is remembered (when it was served) while it may come back soon; past
// a bound, those served longer than that many turns ago are forgotten (as if new, when they return),
// so the map stays small however many clients come and go.
void fair_queue::forget_idle() {
  constexpr uint64_t bound = 4096;
  if (clients_.size() <= 2 * bound) return;  // (then many at once: the scan is rare)
  std::erase_if(clients_, [&](const auto& kv) { return kv.second.tickets.empty() && kv.second.last_served + bound < turn_; });
}

}  // namespace hotcold::server
