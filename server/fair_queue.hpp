#pragma once
// The requests that wait for a free sequence slot, shared among clients: at most max_total wait in
// all and max_per_client of any one client, and free slots go to the waiting clients in turn — the
// one served longest ago first (a client new to the queue before one already served), each client's
// own requests in the order they came. So a client that sends one request while another has hundreds
// waiting starts at the next free slot.
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <string>

namespace hotcold::server {

class fair_queue {
 public:
  fair_queue(int64_t max_total, int64_t max_per_client) : max_total_(max_total), max_per_client_(max_per_client) {}
  enum class refusal { none, full, client_full };
  // Queues `ticket` for `client`, or says why not.
  refusal push(const std::string& client, int64_t ticket);
  // The next request to start (nullopt: none waits).
  std::optional<int64_t> pop();
  // Takes a waiting request out (cancelled, or its client gone); false when it does not wait here.
  bool remove(int64_t ticket);
  int64_t size() const { return size_; }
  int64_t waiting_of(const std::string& client) const;
  // Requests waiting, by client (clients with none left out).
  std::map<std::string, int64_t> depths() const;
  int64_t max_total() const { return max_total_; }
  int64_t max_per_client() const { return max_per_client_; }

 private:
  struct client_queue {
    std::deque<int64_t> tickets;
    uint64_t last_served = 0;  // the turn it was last served (0: never), then the order it came in
    uint64_t came = 0;
  };
  int64_t max_total_, max_per_client_;
  int64_t size_ = 0;
  uint64_t turn_ = 0, arrivals_ = 0;
  std::map<std::string, client_queue> clients_;  // those with requests waiting, and those served lately
  std::map<int64_t, std::string> client_of_;     // waiting ticket -> client
  std::set<std::tuple<uint64_t, uint64_t, std::string>> ready_;  // clients with requests waiting, next first
  void forget_idle();
};

}  // namespace hotcold::server
