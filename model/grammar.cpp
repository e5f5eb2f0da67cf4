#include "model/grammar.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "model/utf8.hpp"

namespace hotcold {

grammar_error::grammar_error(const std::string& what, int line, int column)
    : std::invalid_argument(line > 0 ? fmt::format("grammar, line {} column {}: {}", line, column, what) : fmt::format("grammar: {}", what)),
      line_(line),
      column_(column) {}

namespace {

constexpr uint32_t max_repetitions = 2000;  // (llama.cpp's bound on {m,n})
constexpr size_t max_stacks = 100000;

// An element as the parser builds it: a character set with its ranges inline, or a rule reference.
struct proto {
  grammar::kind what = grammar::kind::chars;
  bool negated = false;
  uint32_t rule = 0;
  std::vector<grammar::range> ranges;
};
using sequence = std::vector<proto>;

}  // namespace

// The recursive-descent parser of GBNF text into rules of alternatives (groups and repetitions as
// rules of their own), then checked and flattened into a grammar.
class grammar_builder {
 public:
  explicit grammar_builder(std::string_view text) : text_(text) {}

  grammar build(std::string_view root_name) {
    skip_space(true);
    while (at_ < text_.size()) {
      parse_rule();
      skip_space(true);
    }
    for (uint32_t r = 0; r < names_.size(); ++r)
      if (!defined_[r]) fail_at(fmt::format("rule '{}' is used but never defined", names_[r]), used_at_[r]);
    const auto root = ids_.find(std::string(root_name));
    if (root == ids_.end()) throw grammar_error(fmt::format("no rule '{}' (the rule the text must match)", root_name), 0, 0);
    check_left_recursion();
    return flatten(root->second);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(what, at_); }
  [[noreturn]] void fail_at(const std::string& what, size_t offset) const {  // (the line and column of offset)
    int line = 1, column = 1;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) text_[i] == '\n' ? (++line, column = 1) : ++column;
    throw grammar_error(what, line, column);
  }
  bool more() const { return at_ < text_.size(); }
  char peek(size_t ahead = 0) const { return at_ + ahead < text_.size() ? text_[at_ + ahead] : '\0'; }

  // Spaces, tabs and comments; newlines too where `newlines` (inside groups, after `|`, between rules).
  void skip_space(bool newlines) {
    while (more()) {
      const char c = peek();
      if (c == '#') {
        while (more() && peek() != '\n') ++at_;
      } else if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++at_;
      } else {
        break;
      }
    }
  }
  static bool word_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }
  std::string parse_name() {
    const size_t start = at_;
    while (more() && word_char(peek())) ++at_;
    if (at_ == start) fail(more() ? fmt::format("expecting a rule name at '{}'", peek()) : "expecting a rule name, found the end");
    return std::string(text_.substr(start, at_ - start));
  }
  uint32_t rule_id(const std::string& name, size_t used_at) {
    auto [it, fresh] = ids_.try_emplace(name, static_cast<uint32_t>(names_.size()));
    if (fresh) {
      names_.push_back(name), defined_.push_back(false), rules_.emplace_back(), used_at_.push_back(used_at);
    }
    return it->second;
  }
  uint32_t new_rule(const std::string& base) {
    for (int n = 1;; ++n) {
      const std::string name = fmt::format("{}_{}", base, n);
      if (ids_.count(name)) continue;
      const uint32_t id = rule_id(name, at_);
      defined_[id] = true;
      return id;
    }
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++at_) {
      const char c = peek();
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail(fmt::format("expecting {} hex digits", digits));
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }
  // One character of a literal or a class: an escape, or a UTF-8 sequence.
  uint32_t parse_char() {
    if (!more()) fail("unexpected end of the grammar");
    const auto c = static_cast<unsigned char>(peek());
    if (c == '\\') {
      ++at_;
      const char e = peek();
      ++at_;
      switch (e) {
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case 't': return '\t';
        case 'r': return '\r';
        case 'n': return '\n';
        case '\\': case '"': case '[': case ']': case '\'': case '-': case '^': return static_cast<uint32_t>(e);
        default: at_ -= 2, fail(fmt::format("unknown escape '\\{}'", e));
      }
    }
    const auto v = utf8_decode(text_, at_);
    if (!v) fail("malformed UTF-8");
    return *v;
  }

  void parse_rule() {
    const size_t start = at_;
    const std::string name = parse_name();
    skip_space(false);
    if (text_.substr(at_, 3) != "::=") fail(fmt::format("expecting '::=' after '{}'", name));
    at_ += 3;
    skip_space(true);
    const uint32_t id = rule_id(name, start);
    if (defined_[id]) fail_at(fmt::format("rule '{}' is defined twice", name), start);
    defined_[id] = true;
    rules_[id] = parse_alternatives(name, false);
    if (more() && peek() != '\n' && peek() != '\r') fail(fmt::format("expecting a newline or the end, found '{}'", peek()));
  }

  // Sequences separated by `|` (a newline ends them outside a group, except before a `|`).
  std::vector<sequence> parse_alternatives(const std::string& name, bool nested) {
    std::vector<sequence> alts;
    alts.push_back(parse_sequence(name, nested));
    for (;;) {
      if (!nested) {  // (a continuation line beginning with `|`)
        size_t look = at_;
        while (look < text_.size() && (text_[look] == '\n' || text_[look] == '\r' || text_[look] == ' ' || text_[look] == '\t')) ++look;
        if (look < text_.size() && text_[look] == '|') at_ = look;
      }
      if (peek() != '|') break;
      ++at_;
      skip_space(true);
      alts.push_back(parse_sequence(name, nested));
    }
    return alts;
  }

  sequence parse_sequence(const std::string& name, bool nested) {
    sequence seq;
    size_t last = 0;  // where the last item's elements start (a repetition applies to them)
    bool have_last = false;
    while (more()) {
      const char c = peek();
      const size_t item_start = seq.size();
      if (c == '"' || c == '\'') {
        ++at_;
        while (more() && peek() != c) {
          proto p;
          const uint32_t v = parse_char();
          p.ranges.push_back({v, v});
          seq.push_back(std::move(p));
        }
        if (!more()) fail("unterminated string");
        ++at_;
      } else if (c == '[') {
        ++at_;
        proto p;
        if (peek() == '^') p.negated = true, ++at_;
        while (more() && peek() != ']') {
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (peek() == '-' && peek(1) != ']' && at_ + 1 < text_.size()) ++at_, hi = parse_char();
          if (hi < lo) fail("a character range whose end is before its start");
          p.ranges.push_back({lo, hi});
        }
        if (!more()) fail("unterminated character class");
        ++at_;
        seq.push_back(std::move(p));
      } else if (c == '.') {
        ++at_;
        proto p;
        p.negated = true;  // (no ranges: every code point)
        seq.push_back(std::move(p));
      } else if (c == '(') {
        ++at_;
        skip_space(true);
        const uint32_t g = new_rule(name);
        auto alts = parse_alternatives(name, true);
        if (peek() != ')') fail("expecting ')'");
        ++at_;
        rules_[g] = std::move(alts);
        seq.push_back(reference(g));
      } else if (c == '<') {
        fail("token references (<...>) are not supported; write the token's text");
      } else if (word_char(c)) {
        const size_t used = at_;
        seq.push_back(reference(rule_id(parse_name(), used)));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) fail(fmt::format("'{}' with nothing before it to repeat", c));
        repeat(seq, last, name);
        skip_space(nested);
        continue;
      } else {
        break;
      }
      last = item_start, have_last = true;
      skip_space(nested);
    }
    return seq;
  }
  static proto reference(uint32_t rule) {
    proto p;
    p.what = grammar::kind::rule, p.rule = rule;
    return p;
  }

  // The item at seq[last ..] repeated as the operator at at_ says: x* x+ x? x{m} x{m,} x{m,n} x{,n}.
  void repeat(sequence& seq, size_t last, const std::string& name) {
    sequence item(seq.begin() + static_cast<std::ptrdiff_t>(last), seq.end());
    seq.resize(last);
    uint32_t lo = 0, hi = 0;
    bool bounded = true;
    const char op = peek();
    ++at_;
    if (op == '*') bounded = false;
    else if (op == '+') lo = 1, bounded = false;
    else if (op == '?') hi = 1;
    else {
      skip_space(false);
      auto number = [&] {
        uint64_t v = 0;
        if (!(peek() >= '0' && peek() <= '9')) fail("expecting a number in {m,n}");
        while (peek() >= '0' && peek() <= '9') v = v * 10 + static_cast<uint64_t>(peek() - '0'), ++at_;
        if (v > max_repetitions) fail(fmt::format("a repetition of more than {} times", max_repetitions));
        return static_cast<uint32_t>(v);
      };
      if (peek() != ',') lo = number();
      skip_space(false);
      if (peek() == ',') {
        ++at_;
        skip_space(false);
        if (peek() == '}') bounded = false;
        else hi = number();
      } else {
        hi = lo;
      }
      skip_space(false);
      if (peek() != '}') fail("expecting '}'");
      ++at_;
      if (bounded && hi < lo) fail(fmt::format("{{{},{}}}: its most is less than its least", lo, hi));
    }
    for (uint32_t i = 0; i < lo; ++i) seq.insert(seq.end(), item.begin(), item.end());
    if (!bounded) {  // R ::= item R | (nothing)
      const uint32_t r = new_rule(name);
      sequence again = item;
      again.push_back(reference(r));
      rules_[r] = {again, {}};
      seq.push_back(reference(r));
    } else if (hi > lo) {  // hi - lo optional items, nested: R_k ::= item R_(k-1) | (nothing)
      uint32_t inner = 0;
      for (uint32_t k = 0; k < hi - lo; ++k) {
        const uint32_t r = new_rule(name);
        sequence alt = item;
        if (k > 0) alt.push_back(reference(inner));
        rules_[r] = {alt, {}};
        inner = r;
      }
      seq.push_back(reference(inner));
    }
  }

  // A rule whose leftmost element can lead back to itself (through rules that may match nothing)
  // would be followed forever: refused, as llama.cpp refuses it.
  void check_left_recursion() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const auto& alt : rules_[r])
          if (std::all_of(alt.begin(), alt.end(), [&](const proto& p) { return p.what == grammar::kind::rule && nullable[p.rule]; })) {
            nullable[r] = changed = true;
            break;
          }
      }
    }
    std::vector<std::vector<uint32_t>> left(n);  // the rules each may begin with
    for (size_t r = 0; r < n; ++r)
      for (const auto& alt : rules_[r])
        for (const proto& p : alt) {
          if (p.what != grammar::kind::rule) break;
          left[r].push_back(p.rule);
          if (!nullable[p.rule]) break;
        }
    std::vector<int> state(n, 0);  // 0 unseen, 1 on the path, 2 done
    auto visit = [&](auto&& self, uint32_t r) -> void {
      state[r] = 1;
      for (uint32_t next : left[r]) {
        if (state[next] == 1) throw grammar_error(fmt::format("rule '{}' is left-recursive (it can begin with itself)", names_[next]), 0, 0);
        if (state[next] == 0) self(self, next);
      }
      state[r] = 2;
    };
    for (uint32_t r = 0; r < n; ++r)
      if (state[r] == 0) visit(visit, r);
  }

  grammar flatten(uint32_t root) const {
    grammar g;
    g.root_ = root;
    g.names_ = names_;
    g.rules_.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r)
      for (const auto& alt : rules_[r]) {
        g.rules_[r].push_back(static_cast<uint32_t>(g.elements_.size()));
        for (const proto& p : alt) {
          grammar::element e;
          e.what = p.what, e.negated = p.negated, e.rule = p.rule;
          e.first = static_cast<uint32_t>(g.ranges_.size()), e.count = static_cast<uint32_t>(p.ranges.size());
          g.ranges_.insert(g.ranges_.end(), p.ranges.begin(), p.ranges.end());
          g.elements_.push_back(e);
        }
        g.elements_.push_back(grammar::element{});  // the alternative's end
      }
    return g;
  }

  std::string_view text_;
  size_t at_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<size_t> used_at_;  // where each rule was first named (its line and column worked out on an error alone)
  std::vector<std::vector<sequence>> rules_;
};

grammar grammar::parse(std::string_view text, std::string_view root) { return grammar_builder(text).build(root); }

bool grammar::takes(const element& e, uint32_t c) const {
  bool in = false;
  for (uint32_t i = e.first; i < e.first + e.count && !in; ++i) in = ranges_[i].lo <= c && c <= ranges_[i].hi;
  return in != e.negated;
}

bool grammar::takes_any(const element& e, uint32_t lo, uint32_t hi) const {
  if (!e.negated) {
    for (uint32_t i = e.first; i < e.first + e.count; ++i)
      if (ranges_[i].lo <= hi && lo <= ranges_[i].hi) return true;
    return false;
  }
  // Negated: some code point of lo .. hi outside every range, the ranges walked in order of their starts.
  std::vector<range> r(ranges_.begin() + e.first, ranges_.begin() + e.first + e.count);
  std::sort(r.begin(), r.end(), [](const range& a, const range& b) { return a.lo < b.lo; });
  uint64_t next = lo;  // the first code point not yet known to be covered
  for (const range& x : r) {
    if (x.lo > next) break;
    next = std::max<uint64_t>(next, uint64_t{x.hi} + 1);
  }
  return next <= hi;
}

grammar_matcher::grammar_matcher(const grammar& g) : g_(&g) {
  for (uint32_t first : g.alternatives(g.root())) expand({first}, stacks_);
  std::sort(stacks_.begin(), stacks_.end());
  stacks_.erase(std::unique(stacks_.begin(), stacks_.end()), stacks_.end());
}

void grammar_matcher::expand(std::vector<uint32_t> s, std::vector<std::vector<uint32_t>>& into) const {
  // (Rules that may match nothing, nested and repeated, can lead to more places than any text needs:
  // a grammar that does is refused rather than followed for ever.)
  if (into.size() > max_stacks) throw grammar_error(fmt::format("more than {} places to follow at once: the grammar is too ambiguous", max_stacks), 0, 0);
  const auto& el = g_->elements();
  while (!s.empty() && el[s.back()].what == grammar::kind::end) s.pop_back();  // (alternatives ended: back to their callers)
  if (s.empty() || el[s.back()].what == grammar::kind::chars) {
    into.push_back(std::move(s));
    return;
  }
  const uint32_t rule = el[s.back()].rule;
  ++s.back();  // where the caller goes on once the rule ends
  for (uint32_t first : g_->alternatives(rule)) {
    std::vector<uint32_t> t = s;
    t.push_back(first);
    expand(std::move(t), into);
  }
}

bool grammar_matcher::accept(uint32_t c) {
  std::vector<std::vector<uint32_t>> next;
  for (const auto& s : stacks_) {
    if (s.empty() || !g_->takes(g_->elements()[s.back()], c)) continue;
    std::vector<uint32_t> t = s;
    ++t.back();
    expand(std::move(t), next);
  }
  if (next.empty()) return false;
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
  stacks_ = std::move(next);
  return true;
}

bool grammar_matcher::accept_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto v = utf8_decode(text, i);
    if (!v || !accept(*v)) return false;
  }
  return true;
}

bool grammar_matcher::complete() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const std::vector<uint32_t>& s) { return s.empty(); });
}

bool grammar_matcher::may_take_any(uint32_t lo, uint32_t hi) const {
  return std::any_of(stacks_.begin(), stacks_.end(), [&](const std::vector<uint32_t>& s) { return !s.empty() && g_->takes_any(g_->elements()[s.back()], lo, hi); });
}

bool grammar_matcher::may_take(uint32_t c) const {
  return std::any_of(stacks_.begin(), stacks_.end(), [&](const std::vector<uint32_t>& s) { return !s.empty() && g_->takes(g_->elements()[s.back()], c); });
}

}  // namespace hotcold
