#include "model/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>

namespace hotcold::sampling {

void softmax(std::vector<candidate>& c) {
  std::sort(c.begin(), c.end(), [](const candidate& a, const candidate& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });
  if (c.empty()) return;
  float max_l = c.front().logit;
  double sum = 0;
  for (auto& x : c) sum += (x.p = std::exp(x.logit - max_l));
  for (auto& x : c) x.p = static_cast<float>(x.p / sum);
}

void penalties(std::vector<candidate>& c, std::span<const token_id> recent, float repeat, float frequency, float presence) {
  if (recent.empty() || (repeat == 1.0f && frequency == 0.0f && presence == 0.0f)) return;
  std::unordered_map<token_id, int> count;
  for (token_id t : recent) ++count[t];
  for (auto& x : c) {
    auto it = count.find(x.id);
    if (it == count.end()) continue;
    x.logit = x.logit > 0 ? x.logit / repeat : x.logit * repeat;
    x.logit -= static_cast<float>(it->second) * frequency + presence;
  }
}

void top_k(std::vector<candidate>& c, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= c.size()) return;
  auto better = [](const candidate& a, const candidate& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  std::partial_sort(c.begin(), c.begin() + k, c.end(), better);
  c.resize(static_cast<size_t>(k));
}

void top_p(std::vector<candidate>& c, float p) {
  if (p >= 1.0f || c.empty()) return;
  softmax(c);
  double cum = 0;
  size_t keep = c.size();
  for (size_t i = 0; i < c.size(); ++i) {
    cum += c[i].p;
    if (cum >= p) {
      keep = i + 1;
      break;
    }
  }
  c.resize(keep);
}

void min_p(std::vector<candidate>& c, float p) {
  if (p <= 0.0f || c.empty()) return;
  softmax(c);
  float threshold = c.front().p * p;
  size_t keep = 1;
  while (keep < c.size() && c[keep].p >= threshold) ++keep;
  c.resize(keep);
}

void temperature(std::vector<candidate>& c, float t) {
  for (auto& x : c) x.logit /= t;
}

}  // namespace hotcold::sampling

namespace hotcold {

token_logprobs logprobs_of(std::span<const float> logits, token_id t, int top) {
  if (t < 0 || static_cast<size_t>(t) >= logits.size()) throw std::invalid_argument("logprobs_of: a token outside the logits");
  const float max_l = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max_l));
  const double log_z = static_cast<double>(max_l) + std::log(sum);
  token_logprobs out;
  out.logprob = static_cast<float>(logits[static_cast<size_t>(t)] - log_z);
  const size_t n = std::min(static_cast<size_t>(std::max(top, 0)), logits.size());
  if (n == 0) return out;
  std::vector<token_id> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<token_id>(i);
  auto better = [&](token_id a, token_id b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] || (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), better);
  for (size_t i = 0; i < n; ++i) out.top.emplace_back(ids[i], static_cast<float>(logits[static_cast<size_t>(ids[i])] - log_z));
  return out;
}

sampler::sampler(const sampling_params& params) : params_(params), rng_(params.seed) {}

sampler::sampler(const sampling_params& params, const grammar_vocab* tokens) : sampler(params) {
  if (params.grammar.empty()) return;
  if (!tokens) throw std::invalid_argument("a grammar needs the model's vocabulary");
  constrain(std::make_shared<token_grammar>(std::make_shared<const hotcold::grammar>(hotcold::grammar::parse(params.grammar)), *tokens));
}

void sampler::accept(token_id id) {
  recent_.push_back(id);
  // -1: the whole context (every token so far), as llama.cpp's repeat_last_n.
  while (params_.penalty_last_n >= 0 && recent_.size() > static_cast<size_t>(params_.penalty_last_n)) recent_.pop_front();
}

double sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

token_id sampler::sample(std::span<const float> logits) {
  bool bad = false;
  for (float v : logits) bad |= !(v < INFINITY);  // (NaN or +inf; one pass the compiler vectorizes)
  if (bad) {
    size_t at = 0;
    while (logits[at] < INFINITY) ++at;
    throw logits_error(fmt::format("the forward pass gave a logit of {} (token {}): the model's weights or metadata are not right", logits[at], at));
  }
  if (!grammar_) return draw(logits);
  const token_id first = draw(logits);
  if (grammar_->allows(first)) {
    grammar_->accept(first);
    return first;
  }
  grammar_->allowed(mask_);
  if (mask_.size() != logits.size()) throw std::invalid_argument("the grammar's vocabulary is not the logits'");
  masked_.assign(logits.begin(), logits.end());
  bool any = false;
  for (size_t i = 0; i < masked_.size(); ++i) {
    if (mask_[i]) any = true;
    else masked_[i] = -INFINITY;
  }
  if (!any) return grammar_->end_token();  // (no token of this vocabulary goes on as the grammar asks: the text ends)
  const token_id t = draw(masked_);
  grammar_->accept(t);
  return t;
}

token_id sampler::draw(std::span<const float> logits) {
  const bool penalized = !recent_.empty() && (params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f);
  if (params_.temperature <= 0.0f && !penalized) {
    // Greedy without penalties: the first best logit, read in place — the largest value found in
    // sixteen lanes (a loop the compiler vectorizes, not one compare-and-keep chain), then its first position. A NaN is never the largest; a NaN
    // first logit wins, as it did when each logit was compared with the best so far.
    const size_t n = logits.size();
    if (n == 0 || std::isnan(logits[0])) return 0;
    float lane[16];
    std::fill(lane, lane + 16, logits[0]);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (int k = 0; k < 16; ++k) lane[k] = logits[i + k] > lane[k] ? logits[i + k] : lane[k];
    float best = lane[0];
    for (int k = 1; k < 16; ++k) best = lane[k] > best ? lane[k] : best;
    for (; i < n; ++i) best = logits[i] > best ? logits[i] : best;
    return static_cast<token_id>(std::find(logits.begin(), logits.end(), best) - logits.begin());
  }
  cands_.clear();
  cands_.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cands_.push_back({static_cast<token_id>(i), logits[i]});
  std::vector<token_id> recent(recent_.begin(), recent_.end());
  sampling::penalties(cands_, recent, params_.repeat_penalty, params_.frequency_penalty, params_.presence_penalty);
  if (params_.temperature <= 0.0f) {
    auto best = std::max_element(cands_.begin(), cands_.end(), [](const candidate& a, const candidate& b) {
      return a.logit < b.logit || (a.logit == b.logit && a.id > b.id);
    });
    return best->id;
  }
  sampling::top_k(cands_, params_.top_k);
  sampling::top_p(cands_, params_.top_p);
  sampling::min_p(cands_, params_.min_p);
  sampling::temperature(cands_, params_.temperature);
  sampling::softmax(cands_);
  double r = uniform(), cum = 0;
  for (const auto& x : cands_) {
    cum += x.p;
    if (r < cum) return x.id;
  }
  return cands_.back().id;
}

}  // namespace hotcold
