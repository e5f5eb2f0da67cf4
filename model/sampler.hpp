#pragma once
// Turning logits into the next token. The chain, in order: repetition / frequency / presence
// penalties over the last `penalty_last_n` tokens, top-k, top-p, min-p, temperature, then a draw
// from the remaining distribution. Temperature 0 is greedy (the best token after penalties).
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/grammar_tokens.hpp"
#include "model/vocab.hpp"

namespace hotcold {

struct sampling_params {
  float temperature = 0.8f;
  int32_t top_k = 40;          // <= 0: off
  float top_p = 0.95f;         // >= 1: off
  float min_p = 0.05f;         // <= 0: off
  float repeat_penalty = 1.0f; // 1: off; > 1 discourages repeats (divides positive logits, multiplies negative)
  float frequency_penalty = 0.0f;  // subtracted once per earlier occurrence
  float presence_penalty = 0.0f;   // subtracted once if the token occurred
  int32_t penalty_last_n = 64;     // how many recent tokens the penalties look at (-1: all of them)
  uint64_t seed = 0;
  std::string grammar;             // GBNF the output must follow (model/grammar.hpp; empty: none)
  int32_t logprobs = -1;           // -1: none; 0..20: each sampled token's log probability, and that many most likely tokens'
};

// A token's log probability under the model: the log-softmax of the logits as the model gave them
// (before penalties, temperature, filters or a grammar: what OpenAI's logprobs and llama-server's
// n_probs report), and the `top` most likely tokens' (most likely first; ties by id).
struct token_logprobs {
  float logprob = 0;
  std::vector<std::pair<token_id, float>> top;
};
token_logprobs logprobs_of(std::span<const float> logits, token_id t, int top);

struct candidate {
  token_id id;
  float logit;
  float p = 0.0f;
};

// The chain's stages on a candidate list, exposed for tests. After softmax(), candidates are sorted
// by descending probability; every stage keeps at least one candidate.
namespace sampling {
void softmax(std::vector<candidate>& c);
void penalties(std::vector<candidate>& c, std::span<const token_id> recent, float repeat, float frequency, float presence);
void top_k(std::vector<candidate>& c, int32_t k);
void top_p(std::vector<candidate>& c, float p);
void min_p(std::vector<candidate>& c, float p);
void temperature(std::vector<candidate>& c, float t);
}  // namespace sampling

// Logits that cannot be sampled: a NaN or +infinity among them (the forward pass went wrong: the
// file's weights or metadata). what() says so; the text is never made from them.
class logits_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class sampler {
 public:
  explicit sampler(const sampling_params& params);
  // With params.grammar, constrained by it over the vocabulary `tokens` (grammar_error where the text is
  // not a grammar it can follow; std::invalid_argument without tokens).
  sampler(const sampling_params& params, const grammar_vocab* tokens);

  // Samples from logits (one per vocabulary entry), using the accepted history for penalties. With a
  // grammar, only a token it allows: the draw is checked first and, where the grammar refuses it, drawn
  // again from the logits of the tokens it allows alone (the same distribution as masking first: a token
  // it allows comes out with its probability over theirs), and the grammar takes the token. Throws
  // logits_error for logits with a NaN or +infinity.
  token_id sample(std::span<const float> logits);
  // From now on, sample only what g allows (null: no constraint).
  void constrain(std::shared_ptr<token_grammar> g) { grammar_ = std::move(g); }
  const token_grammar* grammar() const { return grammar_.get(); }
  // Records a token (prompt or generated) for the penalties.
  void accept(token_id id);
  // A uniform draw in [0, 1) from the sampler's generator, the same sequence on every platform.
  double uniform();

  const sampling_params& params() const { return params_; }

 private:
  sampling_params params_;
  std::mt19937_64 rng_;
  token_id draw(std::span<const float> logits);
  std::deque<token_id> recent_;
  std::vector<candidate> cands_;
  std::shared_ptr<token_grammar> grammar_;
  std::vector<uint8_t> mask_;
  std::vector<float> masked_;
};

}  // namespace hotcold
