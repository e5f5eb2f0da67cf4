#include "server/admission.hpp"

#include <utility>

#include <fmt/format.h>

namespace hotcold::server {

std::optional<prompt_refusal> check_prompt(std::span<const token_id> tokens, int64_t n_vocab, int64_t max_prompt, int64_t n_ctx) {
  using protocol::error_code;
  if (tokens.empty()) return prompt_refusal{error_code::invalid_field, "the prompt is empty and the model adds no BOS token"};
  for (token_id t : tokens)
    if (t >= n_vocab) return prompt_refusal{error_code::invalid_field, fmt::format("token id {} is outside the vocabulary of {}", t, n_vocab)};
  if (static_cast<int64_t>(tokens.size()) > max_prompt)
    return prompt_refusal{error_code::too_large, fmt::format("the prompt has {} tokens, more than {} ({})", tokens.size(), max_prompt,
                                                             max_prompt < n_ctx ? "serve --max-prompt-tokens" : "the context: serve -c")};
  return std::nullopt;
}

admission::decision admission::admit(const std::string& client, int64_t ticket) {
  decision d;
  d.start_now = in_pipeline_ < slots_ && waiting_.size() == 0;
  if (d.start_now) return d;
  const auto refused = waiting_.push(client, ticket);
  if (refused == fair_queue::refusal::none) {
    changed_ = true;
    return d;
  }
  d.busy = refused == fair_queue::refusal::full
               ? fmt::format("{} requests wait for a sequence slot: the queue is full (serve --max-queue {})", waiting_.size(), waiting_.max_total())
               : fmt::format("this client has {} requests waiting for a sequence slot, its share of the queue (serve --max-queued-per-client {})",
                             waiting_.waiting_of(client), waiting_.max_per_client());
  d.retry_ms = 100 + 10 * waiting_.size();
  return d;
}

std::optional<int64_t> admission::next() {
  if (in_pipeline_ >= slots_) return std::nullopt;
  const auto ticket = waiting_.pop();
  if (ticket) changed_ = true;
  return ticket;
}

bool admission::remove(int64_t ticket) {
  if (!waiting_.remove(ticket)) return false;
  changed_ = true;
  return true;
}

}  // namespace hotcold::server
