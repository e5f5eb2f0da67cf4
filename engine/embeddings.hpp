#pragma once
// Embeddings: a text's tokens run through the model (dense, from position 0 of a context of their
// own) and every token's state after the final norm pooled into one vector, L2-normalized — what
// llama.cpp's embedding mode and llama-server's /v1/embeddings give for --pooling mean, last or cls.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/forward.hpp"

namespace hotcold {

enum class pooling { mean, last, cls };
std::optional<pooling> pooling_from_name(std::string_view name);  // mean, last, cls
std::string_view pooling_name(pooling p);
// The pooling a file asks for ({arch}.pooling_type: 1 mean, 2 cls, 3 last), else mean.
pooling default_pooling(const model& m);

// n x d hidden states pooled into one vector of d, scaled to length 1 (a zero vector stays zero).
std::vector<float> pooled(std::span<const float> hidden, int64_t n, int64_t d, pooling p);

// One request at a time on a context of its own, beside whatever else runs the model.
class embedder {
 public:
  embedder(std::shared_ptr<const model> m, int64_t n_ctx, int n_threads, pooling p);
  // Throws std::out_of_range for more tokens than the context holds, std::invalid_argument for none.
  std::vector<float> embed(std::span<const token_id> tokens);
  int64_t n_ctx() const { return ctx_.n_ctx(); }
  int64_t n_embd() const { return n_embd_; }
  pooling how() const { return p_; }

 private:
  std::mutex mu_;
  inference_context ctx_;
  int64_t n_embd_;
  pooling p_;
};

}  // namespace hotcold
