#pragma once
// GBNF grammars, as llama.cpp writes them (its grammars/README.md): what constrained sampling keeps
// the generated text inside. A grammar is rules, `name ::= alternatives`, each alternative a sequence
// of literal strings ("..." with \n \t \r \" \\ \xHH \uHHHH \UHHHHHHHH escapes), character classes
// ([a-z0-9_], [^"\\], the same escapes), `.` (any character), references to rules, groups in
// parentheses and repetitions (* + ? {m} {m,} {m,n}); `#` starts a comment; the text must match
// `root`. Characters are Unicode code points.
//
// grammar::parse turns the text into flat rules (groups and repetitions become rules of their own);
// a grammar_matcher follows one text through them: the set of places the grammar may be at (stacks
// of positions), advanced a code point at a time, which says what may come next and whether the
// text may end here.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hotcold {

// A grammar that cannot be used, with where: line and column (from 1) of the text, 0 for a fault of the
// whole (no root rule, a rule used but never defined, left recursion).
class grammar_error : public std::invalid_argument {
 public:
  grammar_error(const std::string& what, int line, int column);
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  int line_, column_;
};

class grammar {
 public:
  // One element of an alternative: a set of code points (ranges, lo <= c <= hi, or all but them), a
  // reference to a rule, or the alternative's end.
  enum class kind : uint8_t { chars, rule, end };
  struct element {
    kind what = kind::end;
    bool negated = false;  // chars: every code point but the ranges'
    uint32_t rule = 0;     // rule: its index
    uint32_t first = 0, count = 0;  // chars: ranges_[first .. first + count)
  };
  struct range {
    uint32_t lo, hi;
  };

  // Parses GBNF text; grammar_error naming the line and column of what is wrong, or the rule.
  static grammar parse(std::string_view text, std::string_view root = "root");

  // The elements, alternatives after one another, each closed by an end; a rule's alternatives start
  // at the positions alternatives(rule) gives.
  const std::vector<element>& elements() const { return elements_; }
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return rules_[rule]; }
  uint32_t root() const { return root_; }
  size_t rule_count() const { return rules_.size(); }
  // Whether element e (chars) takes code point c; some code point in lo .. hi.
  bool takes(const element& e, uint32_t c) const;
  bool takes_any(const element& e, uint32_t lo, uint32_t hi) const;
  // A rule's name as the text gave it (or a made one: NAME_N for its groups and repetitions).
  const std::string& name(uint32_t rule) const { return names_[rule]; }

 private:
  friend class grammar_builder;
  std::vector<element> elements_;
  std::vector<range> ranges_;
  std::vector<std::vector<uint32_t>> rules_;  // per rule: its alternatives' first positions
  std::vector<std::string> names_;
  uint32_t root_ = 0;
};

// One text followed through a grammar. Each stack is positions in grammar::elements(), its top (back)
// the element to match next, the others where to go on when the rule above it ends; only stacks whose
// top takes a character (or empty ones: the grammar complete) are kept.
class grammar_matcher {
 public:
  explicit grammar_matcher(const grammar& g);
  // Takes code point c: false (and the state unchanged) where no place of the grammar takes it.
  bool accept(uint32_t c);
  // Takes each code point of UTF-8 text in turn; false at the first one it cannot take (the state then
  // holds what came before it).
  bool accept_utf8(std::string_view text);
  // Whether the text so far may end here (a stack is empty).
  bool complete() const;
  // Whether some continuation is still possible (any stack at all).
  bool alive() const { return !stacks_.empty(); }
  // Whether code point c may come next; some code point in lo .. hi.
  bool may_take(uint32_t c) const;
  bool may_take_any(uint32_t lo, uint32_t hi) const;
  const std::vector<std::vector<uint32_t>>& stacks() const { return stacks_; }

 private:
  // The stacks that `from` leads to once every rule reference and end on top is followed.
  void expand(std::vector<uint32_t> from, std::vector<std::vector<uint32_t>>& into) const;
  const grammar* g_;
  std::vector<std::vector<uint32_t>> stacks_;
};

}  // namespace hotcold
