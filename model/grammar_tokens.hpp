#pragma once
// Which tokens a grammar (model/grammar.hpp) lets come next, for constrained sampling. A token is its
// piece's bytes; it may end inside a UTF-8 sequence (a byte token, or a byte-level BPE token), whose
// code point the next tokens finish, so the state is the grammar's matcher and the code point still
// being read. One token is checked by taking its bytes in turn; every token at once by walking the
// vocabulary's pieces as a trie of bytes, so that tokens sharing a beginning share its work.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/grammar.hpp"
#include "model/vocab.hpp"

namespace hotcold {

// A vocabulary's pieces as grammars see them: each token's bytes (empty for control, unknown and
// unused tokens: text never holds them), the end-of-generation tokens apart, and the trie of the
// pieces.
class grammar_vocab {
 public:
  explicit grammar_vocab(const vocab& v);
  size_t size() const { return bytes_.size(); }
  const std::string& bytes(token_id t) const { return bytes_[static_cast<size_t>(t)]; }
  bool ends_generation(token_id t) const { return ends_[static_cast<size_t>(t)] != 0; }
  token_id end_token() const { return end_; }  // an end-of-generation token (EOS where there is one)

  struct node {
    std::vector<std::pair<uint8_t, uint32_t>> next;  // (byte, node), by byte
    std::vector<token_id> tokens;                     // the tokens whose bytes end here
  };
  const std::vector<node>& trie() const { return trie_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<uint8_t> ends_;
  token_id end_ = -1;
  std::vector<node> trie_;  // node 0: the root (no bytes)
};

class token_grammar {
 public:
  token_grammar(const grammar& g, const grammar_vocab& tokens);
  // The same, keeping the grammar alive with it.
  token_grammar(std::shared_ptr<const grammar> g, const grammar_vocab& tokens) : token_grammar(*g, tokens) { owned_ = std::move(g); }
  // Whether token t may come next: its bytes taken from here, each a step the grammar allows (the
  // last code point may be unfinished if some code point it can become is allowed); an
  // end-of-generation token where the text may end here.
  bool allows(token_id t) const;
  // Every token's answer: mask[t] = 1 where allows(t).
  void allowed(std::vector<uint8_t>& mask) const;
  // Takes token t: std::invalid_argument where !allows(t).
  void accept(token_id t);
  // Whether the text so far is a whole sentence of the grammar (no code point unfinished).
  bool complete() const;
  // The token that ends the text where nothing else may come (the vocabulary's).
  token_id end_token() const { return tokens_->end_token(); }
  // States met so far (each a matcher's stacks with the code point being read), for tests and limits.
  size_t states_known() const { return states_.size(); }

 private:
  // The matcher with the code point being read: its bits so far and the continuation bytes it needs.
  struct reading {
    grammar_matcher m;
    uint32_t partial = 0;
    int need = 0;
    uint32_t least = 0;  // the smallest code point its length may encode (shorter ones are overlong)
  };
  // Takes byte b into r: false where the grammar allows no text that goes on this way.
  static bool feed(reading& r, uint8_t b);
  // States are interned: the same stacks and code point in reading, the same number, and each state's
  // step on a byte remembered (-1: none, the grammar allows no such text), so that walking the trie
  // of pieces is a table lookup a byte once the states it meets are known.
  int32_t intern(reading&& r) const;
  int32_t step(int32_t state, uint8_t b) const;
  // The state after token t from here: -1 where the grammar refuses it (an end-of-generation token:
  // here, where the text may end).
  int32_t after(token_id t) const;
  void walk(uint32_t node, int32_t state, std::vector<uint8_t>& mask) const;
  const grammar_vocab* tokens_;
  std::shared_ptr<const grammar> owned_;
  mutable std::vector<reading> states_;
  mutable std::vector<std::array<int32_t, 256>> steps_;  // -2: not yet worked out
  mutable std::unordered_map<std::string, int32_t> ids_;
  int32_t at_ = 0;  // the state of the text so far
};

}  // namespace hotcold
