#pragma once
// Which generates the server takes (server.cpp): a prompt the context can hold, then a free sequence
// slot at once, or a turn in the fair queue within its limits (serve --max-queue,
// --max-queued-per-client); else `busy`, with the reason and a retry hint.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "model/vocab.hpp"
#include "protocol/messages.hpp"
#include "server/fair_queue.hpp"

namespace hotcold::server {

// Why a prompt cannot run: an id outside the vocabulary, or more tokens than max_prompt (the context,
// or serve --max-prompt-tokens below it: n_ctx says which).
struct prompt_refusal {
  protocol::error_code code;
  std::string why;
};
std::optional<prompt_refusal> check_prompt(std::span<const token_id> tokens, int64_t n_vocab, int64_t max_prompt, int64_t n_ctx);

class admission {
 public:
  admission(int64_t slots, int64_t max_queue, int64_t max_per_client) : slots_(slots), waiting_(max_queue, max_per_client) {}
  struct decision {
    bool start_now = false;      // a free slot and no one waiting
    std::optional<std::string> busy;  // refused: why (the queue, or the client's share of it)
    int64_t retry_ms = 0;
  };
  // A generate of `client` numbered `ticket`: it starts now, waits its turn, or is refused.
  decision admit(const std::string& client, int64_t ticket);
  // A waiting ticket for a free slot (none: no slot free, or nothing waits).
  std::optional<int64_t> next();
  // Takes a waiting ticket out (cancelled, its client gone); false when it does not wait.
  bool remove(int64_t ticket);
  void started() { ++in_pipeline_; }
  void ended() { --in_pipeline_; }
  int64_t in_pipeline() const { return in_pipeline_; }
  int64_t waiting() const { return waiting_.size(); }
  int64_t max_per_client() const { return waiting_.max_per_client(); }
  const fair_queue& queue() const { return waiting_; }
  // Whether the queue changed since the last call (for /metrics' per-client depths).
  bool changed() { return std::exchange(changed_, false); }

 private:
  int64_t slots_, in_pipeline_ = 0;  // in_pipeline_: requests the pipeline has (at most its slots)
  fair_queue waiting_;
  bool changed_ = false;
};

}  // namespace hotcold::server
