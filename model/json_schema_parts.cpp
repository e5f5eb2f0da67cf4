#include "model/json_schema_parts.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "model/utf8.hpp"

namespace hotcold::schema_parts {

std::string join(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

namespace {

std::string digit_class(char lo, char hi) { return lo == hi ? literal(std::string(1, lo)) : fmt::format("[{}-{}]", lo, hi); }
std::string any_digits(size_t n) { return n == 0 ? std::string() : n == 1 ? "[0-9]" : fmt::format("[0-9]{{{}}}", n); }
std::string then(std::string a, const std::string& b) { return b.empty() ? a : a.empty() ? b : a + " " + b; }

// Digit strings of s's length from position i on, given the digits before i equal s's: at least s's
// (ge) or at most (le). `first_nonzero`: position 0 of a number longer than one digit.
std::string same_length_ge(const std::string& s, size_t i) {
  if (i == s.size()) return {};
  const char d = s[i];
  std::vector<std::string> alts;
  if (d < '9') alts.push_back(then(digit_class(static_cast<char>(d + 1), '9'), any_digits(s.size() - i - 1)));
  alts.push_back(then(literal(std::string(1, d)), same_length_ge(s, i + 1)));
  return join(alts);
}
std::string same_length_le(const std::string& s, size_t i) {
  if (i == s.size()) return {};
  const char d = s[i], lowest = i == 0 && s.size() > 1 ? '1' : '0';
  std::vector<std::string> alts;
  if (d > lowest) alts.push_back(then(digit_class(lowest, static_cast<char>(d - 1)), any_digits(s.size() - i - 1)));
  alts.push_back(then(literal(std::string(1, d)), same_length_le(s, i + 1)));
  return join(alts);
}
std::string same_length_between(const std::string& a, const std::string& b, size_t i) {
  if (i == a.size()) return {};
  if (a[i] == b[i]) return then(literal(std::string(1, a[i])), same_length_between(a, b, i + 1));
  std::vector<std::string> alts{then(literal(std::string(1, a[i])), same_length_ge(a, i + 1))};
  if (b[i] - a[i] > 1) alts.push_back(then(digit_class(static_cast<char>(a[i] + 1), static_cast<char>(b[i] - 1)), any_digits(a.size() - i - 1)));
  alts.push_back(then(literal(std::string(1, b[i])), same_length_le(b, i + 1)));
  return join(alts);
}
std::string of_length(size_t n) { return n == 1 ? "[0-9]" : then("[1-9]", any_digits(n - 1)); }

// ---- Fractions: the digits after the point, compared with a bound's (trailing zeros dropped) ----

// Digits after a fraction's first ones: at most 16 (as many as a double holds; a model left alone
// might write digits for ever).
const char* const any_tail = "[0-9]{0,16}";

// What may follow: nothing (the fraction ends), and/or these alternatives of one digit or more.
struct tail {
  bool may_end = false;
  std::vector<std::string> more;
  bool none() const { return !may_end && more.empty(); }
};
std::string after(const std::string& head, const tail& t) {  // head, then the tail
  if (t.more.empty()) return head;
  return then(head, join(t.more) + (t.may_end ? "?" : ""));
}
char digit_at(const std::string& s, size_t i) { return i < s.size() ? s[i] : '0'; }

// From position i, the fraction's digits (its earlier ones equal b's) make it >= b (> when strict).
tail frac_ge(const std::string& b, size_t i, bool strict) {
  if (i >= b.size()) return strict ? tail{false, {"\"0\"{0,15} [1-9] [0-9]{0,15}"}} : tail{true, {"[0-9]{1,16}"}};
  tail t;
  if (b[i] < '9') t.more.push_back(then(digit_class(static_cast<char>(b[i] + 1), '9'), any_tail));
  t.more.push_back(after(literal(std::string(1, b[i])), frac_ge(b, i + 1, strict)));
  return t;
}
tail frac_le(const std::string& b, size_t i, bool strict) {
  if (i >= b.size()) return strict ? tail{} : tail{true, {"\"0\"{1,16}"}};
  tail t{true, {}};  // ending here leaves zeros, below b's rest (not all zeros)
  if (b[i] > '0') t.more.push_back(then(digit_class('0', static_cast<char>(b[i] - 1)), any_tail));
  const tail rest = frac_le(b, i + 1, strict);
  if (!rest.none()) t.more.push_back(after(literal(std::string(1, b[i])), rest));
  return t;
}
// Between c and d (c <= d), the digits before i equal to both.
tail frac_between(const std::string& c, bool c_ex, const std::string& d, bool d_ex, size_t i) {
  const bool c_end = i >= c.size(), d_end = i >= d.size();
  if (c_end && d_end) return c_ex || d_ex ? tail{} : tail{true, {"\"0\"{1,16}"}};
  tail t;
  t.may_end = c_end && !c_ex;  // zeros from here: at least c; below d, whose rest is not all zeros
  const char cd = digit_at(c, i), dd = digit_at(d, i);
  if (cd == dd) {
    const tail rest = frac_between(c, c_ex, d, d_ex, i + 1);
    if (!rest.none()) t.more.push_back(after(literal(std::string(1, cd)), rest));
    return t;
  }
  const tail low = frac_ge(c, i + 1, c_ex), high = frac_le(d, i + 1, d_ex);
  if (!low.none()) t.more.push_back(after(literal(std::string(1, cd)), low));
  if (dd - cd > 1) t.more.push_back(then(digit_class(static_cast<char>(cd + 1), static_cast<char>(dd - 1)), any_tail));
  if (!high.none()) t.more.push_back(after(literal(std::string(1, dd)), high));
  return t;
}
// The fraction as JSON writes it: nothing, or a point and one digit or more.
std::optional<std::string> fraction(const tail& t) {
  if (t.none()) return std::nullopt;
  if (t.more.empty()) return std::string();
  return "(\".\" " + join(t.more) + ")" + (t.may_end ? "?" : "");
}
const std::string any_fraction = "(\".\" [0-9]{1,16})?";

// A non-negative bound's whole part and fraction digits (trailing zeros dropped).
struct decimal {
  uint64_t whole;
  std::string frac;
  bool excluded;
};
decimal decimal_of(double v, bool excluded) {
  if (!(std::fabs(v) < 1e15)) throw std::invalid_argument(fmt::format("a bound of {} (this server takes numbers' bounds within ±1e15)", v));
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::fixed);
  std::string s(buf, end);
  decimal out{0, {}, excluded};
  const size_t point = s.find('.');
  out.whole = std::stoull(s.substr(0, point));
  if (point != std::string::npos) out.frac = s.substr(point + 1);
  while (!out.frac.empty() && out.frac.back() == '0') out.frac.pop_back();
  return out;
}

bool ordered(const decimal& c, const std::optional<decimal>& d) { return !d || c.whole < d->whole || (c.whole == d->whole && c.frac <= d->frac); }

// Non-negative numbers from c to d (no d: unbounded), as alternatives.
void non_negative(const decimal& c, const std::optional<decimal>& d, std::vector<std::string>& alts) {
  auto add = [&](const std::string& whole, const std::optional<std::string>& frac) {
    if (frac) alts.push_back(then(whole, *frac));
  };
  const std::string c_whole = literal(std::to_string(c.whole));
  if (d && d->whole == c.whole) return add(c_whole, fraction(frac_between(c.frac, c.excluded, d->frac, d->excluded, 0)));
  add(c_whole, fraction(frac_ge(c.frac, 0, c.excluded)));
  if (!d) return add(whole_range(c.whole + 1, std::nullopt), any_fraction);
  if (d->whole > c.whole + 1) add(whole_range(c.whole + 1, d->whole - 1), any_fraction);
  add(literal(std::to_string(d->whole)), fraction(frac_le(d->frac, 0, d->excluded)));
}

// ---- Character sets, written as one character of a JSON string's text ----

struct char_set {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool negated = false;
  bool has(uint32_t c) const {
    const bool in = std::any_of(ranges.begin(), ranges.end(), [&](const auto& r) { return r.first <= c && c <= r.second; });
    return in != negated;
  }
};

std::string class_char(uint32_t c) {
  if (c < 0x20 || c == 0x7F || c == ']' || c == '\\' || c == '-' || c == '^' || c == '"' || c == '[') return fmt::format("\\x{:02X}", c);
  if (c < 0x80) return std::string(1, static_cast<char>(c));
  return c <= 0xFFFF ? fmt::format("\\u{:04X}", c) : fmt::format("\\U{:08X}", c);
}
std::string class_range(uint32_t lo, uint32_t hi) { return lo == hi ? class_char(lo) : class_char(lo) + "-" + class_char(hi); }

// The JSON text of one character of the set: itself where JSON writes it plainly, escaped where it
// must be (quote, backslash, tab, line feed, carriage return; other control characters are left out).
std::string json_char(const char_set& s) {
  std::vector<std::string> alts;
  std::string cls;
  if (s.negated) {
    cls = "[^";
    for (const auto& [lo, hi] : s.ranges) cls += class_range(lo, hi);
    cls += "\\x00-\\x1F\\x22\\x5C]";
    alts.push_back(cls);
  } else {
    for (const auto& [lo, hi] : s.ranges) {  // each range less what JSON escapes
      uint32_t from = std::max<uint32_t>(lo, 0x20);
      for (uint32_t cut : {0x22u, 0x5Cu}) {
        if (from > hi) break;
        if (cut < from || cut > hi) continue;
        if (cut > from) cls += class_range(from, cut - 1);
        from = cut + 1;
      }
      if (from <= hi) cls += class_range(from, hi);
    }
    if (!cls.empty()) alts.push_back("[" + cls + "]");
  }
  const std::pair<uint32_t, const char*> escaped[] = {{'"', "\\\\\\\""}, {'\\', "\\\\\\\\"}, {'\t', "\\\\t"}, {'\n', "\\\\n"}, {'\r', "\\\\r"}};
  for (const auto& [c, text] : escaped)
    if (s.has(c)) alts.push_back(fmt::format("\"{}\"", text));
  if (alts.empty()) throw std::invalid_argument("a character class that no character of a JSON string's text can match");
  return join(alts);
}

const std::string any_json_char = "([^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))";

// ECMAScript regular expressions as far as JSON Schema's patterns use them: alternatives, groups,
// classes, escapes, `.`, quantifiers; lookarounds, back references and word boundaries refused.
class regex_reader {
 public:
  explicit regex_reader(std::string_view p) : p_(p) {}

  std::string whole() {
    const bool start = take('^');
    std::string body = alternatives();
    if (at_ < p_.size()) fail(p_[at_] == ')' ? "an unmatched ')'" : "an unexpected character");
    std::string out = start ? std::string() : any_json_char + "*";
    out = then(out, body);
    if (!end_anchor_) out = then(out, any_json_char + "*");
    return out.empty() ? "\"\"" : out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw std::invalid_argument(fmt::format("pattern '{}': {} at offset {}", p_, what, at_)); }
  bool more() const { return at_ < p_.size(); }
  bool take(char c) {
    if (more() && p_[at_] == c) return ++at_, true;
    return false;
  }
  uint32_t next_code_point() {
    const auto v = utf8_decode(p_, at_);
    if (!v) fail("malformed UTF-8");
    return *v;
  }

  std::string alternatives() {
    std::vector<std::string> alts{sequence()};
    while (take('|')) alts.push_back(sequence());
    return alts.size() == 1 ? alts[0] : join(alts);
  }
  std::string sequence() {
    std::string out;
    while (more() && p_[at_] != '|' && p_[at_] != ')') {
      if (p_[at_] == '$') {
        ++at_;
        if (more() || depth_ > 0) fail("'$' before the pattern's end");
        end_anchor_ = true;
        break;
      }
      if (p_[at_] == '^') fail("'^' after the pattern's start");
      out = then(out, quantified(atom()));
    }
    return out.empty() ? "\"\"" : out;
  }
  std::string quantified(std::string a) {
    if (!more()) return a;
    const char q = p_[at_];
    std::string out;
    if (q == '*' || q == '+' || q == '?') {
      ++at_;
      out = "(" + a + ")" + q;
    } else if (q == '{' && at_ + 1 < p_.size() && std::isdigit(static_cast<unsigned char>(p_[at_ + 1]))) {
      ++at_;
      const size_t m = count();
      std::optional<size_t> n = m;
      if (take(',')) n = more() && p_[at_] == '}' ? std::nullopt : std::optional<size_t>(count());
      if (!take('}')) fail("a repetition without its '}'");
      if (n && *n < m) fail("a repetition {m,n} with n below m");
      if (m > 2000 || (n && *n > 2000)) fail("a repetition above 2000");
      out = "(" + a + ")" + (n == m ? fmt::format("{{{}}}", m) : n ? fmt::format("{{{},{}}}", m, *n) : fmt::format("{{{},}}", m));
    } else {
      return a;
    }
    take('?');  // lazy: the same strings
    return out;
  }
  size_t count() {
    size_t v = 0, digits = 0;
    while (more() && std::isdigit(static_cast<unsigned char>(p_[at_]))) v = std::min<size_t>(v * 10 + static_cast<size_t>(p_[at_++] - '0'), 100000), ++digits;
    if (digits == 0) fail("a repetition count expected");
    return v;
  }
  std::string atom() {
    const char c = p_[at_];
    if (c == '(') {
      ++at_;
      if (take('?')) {
        if (!take(':')) fail("lookarounds and named groups are not supported");
      }
      ++depth_;
      std::string inner = alternatives();
      --depth_;
      if (!take(')')) fail("a group without its ')'");
      return "(" + inner + ")";
    }
    if (c == '[') return ++at_, json_char(char_class());
    if (c == '.') return ++at_, json_char(char_set{{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true});
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier with nothing before it");
    if (c == '\\') {
      ++at_;
      return json_char(escape(false));
    }
    const uint32_t cp = next_code_point();
    return json_char(char_set{{{cp, cp}}, false});
  }
  // After a backslash: a class escape (\d \w \s and their negations) or one character.
  char_set escape(bool in_class) {
    if (!more()) fail("a '\\' at the end");
    const char e = p_[at_++];
    auto one = [](uint32_t c) { return char_set{{{c, c}}, false}; };
    const std::vector<std::pair<uint32_t, uint32_t>> digit{{'0', '9'}}, word{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}},
        space{{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x2028, 0x2029}, {0xFEFF, 0xFEFF}};
    switch (e) {
      case 'd': return {digit, false};
      case 'D': return {digit, true};
      case 'w': return {word, false};
      case 'W': return {word, true};
      case 's': return {space, false};
      case 'S': return {space, true};
      case 't': return one('\t');
      case 'n': return one('\n');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case 'x':
      case 'u': {
        const size_t n = e == 'x' ? 2 : 4;
        if (at_ + n > p_.size()) fail("a short hex escape");
        uint32_t v = 0;
        for (size_t i = 0; i < n; ++i) {
          const char h = p_[at_++];
          if (!std::isxdigit(static_cast<unsigned char>(h))) fail("a hex escape with a non-hex digit");
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        return one(v);
      }
      case 'b':
        if (in_class) return one('\b');
        fail("word boundaries (\\b) are not supported");
      default:
        if (std::isalnum(static_cast<unsigned char>(e))) fail(fmt::format("the escape '\\{}' is not supported", e));
        return one(static_cast<unsigned char>(e));
    }
  }
  char_set char_class() {
    char_set s;
    s.negated = take('^');
    bool first = true;
    while (more() && (p_[at_] != ']' || first)) {
      first = false;
      uint32_t lo;
      if (p_[at_] == '\\') {
        ++at_;
        const char_set e = escape(true);
        if (e.negated) fail("a negated class escape (\\D, \\W, \\S) inside a class");
        if (e.ranges.size() != 1 || e.ranges[0].first != e.ranges[0].second) {
          s.ranges.insert(s.ranges.end(), e.ranges.begin(), e.ranges.end());
          continue;
        }
        lo = e.ranges[0].first;
      } else {
        lo = next_code_point();
      }
      uint32_t hi = lo;
      if (at_ + 1 < p_.size() && p_[at_] == '-' && p_[at_ + 1] != ']') {
        ++at_;
        if (p_[at_] == '\\') {
          ++at_;
          const char_set e = escape(true);
          if (e.negated || e.ranges.size() != 1 || e.ranges[0].first != e.ranges[0].second) fail("a class escape as a range's end");
          hi = e.ranges[0].first;
        } else {
          hi = next_code_point();
        }
        if (hi < lo) fail("a range whose end is below its start");
      }
      s.ranges.push_back({lo, hi});
    }
    if (!take(']')) fail("a class without its ']'");
    return s;
  }

  std::string_view p_;
  size_t at_ = 0;
  int depth_ = 0;
  bool end_anchor_ = false;
};

}  // namespace

std::string literal(std::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02X}", c);
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

std::string whole_range(uint64_t lo, std::optional<uint64_t> hi) {
  const std::string a = std::to_string(lo);
  if (!hi) {
    std::vector<std::string> alts{same_length_ge(a, 0)};
    if (a.size() < 16) alts.push_back(fmt::format("[1-9] [0-9]{{{},{}}}", a.size(), 15));
    return join(alts);
  }
  if (*hi < lo) throw std::invalid_argument(fmt::format("no whole number from {} to {}", lo, *hi));
  const std::string b = std::to_string(*hi);
  if (a.size() == b.size()) return same_length_between(a, b, 0);
  std::vector<std::string> alts{same_length_ge(a, 0)};
  for (size_t n = a.size() + 1; n < b.size(); ++n) alts.push_back(of_length(n));
  alts.push_back(same_length_le(b, 0));
  return join(alts);
}

std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *hi < *lo) throw std::invalid_argument(fmt::format("no integer from {} to {}", *lo, *hi));
  std::vector<std::string> alts;
  if (!lo || *lo < 0) {  // the negative ones: "-" and a whole number from max(1, -hi) to -lo
    const uint64_t from = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    alts.push_back("\"-\" " + whole_range(from, lo ? std::optional<uint64_t>(static_cast<uint64_t>(-*lo)) : std::nullopt));
  }
  if (!hi || *hi >= 0) alts.push_back(whole_range(lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0, hi ? std::optional<uint64_t>(static_cast<uint64_t>(*hi)) : std::nullopt));
  return join(alts);
}

std::optional<std::string> number_range(std::optional<bound> lo, std::optional<bound> hi) {
  std::vector<std::string> alts;
  const bool negatives = !lo || lo->value < 0, non_negatives = !hi || hi->value > 0 || (hi->value == 0 && !hi->excluded);
  if (negatives) {  // -w, w from (hi < 0 ? -hi : just above 0) to -lo
    const decimal from = hi && hi->value < 0 ? decimal_of(hi->value, hi->excluded) : decimal{0, {}, true};
    std::optional<decimal> to;
    if (lo) to = decimal_of(lo->value, lo->excluded);
    std::vector<std::string> neg;
    if (ordered(from, to)) non_negative(from, to, neg);
    if (!neg.empty()) alts.push_back("\"-\" " + join(neg));
  }
  if (non_negatives) {
    const decimal from = lo && lo->value >= 0 ? decimal_of(lo->value, lo->excluded) : decimal{0, {}, false};
    std::optional<decimal> to;
    if (hi) to = decimal_of(hi->value, hi->excluded);
    if (ordered(from, to)) non_negative(from, to, alts);
  }
  if (alts.empty()) return std::nullopt;
  return join(alts);
}

std::string pattern_chars(std::string_view pattern) { return regex_reader(pattern).whole(); }

std::optional<std::string> format_chars(std::string_view format) {
  // A year 0001..9999; leap years (Feb 29): divisible by 4 but centuries only by 400.
  const std::string year = "([1-9] [0-9]{3} | \"0\" [1-9] [0-9]{2} | \"00\" [1-9] [0-9] | \"000\" [1-9])";
  const std::string four = "(\"0\" [48] | [2468] [048] | [13579] [26])";
  const std::string leap = fmt::format("([0-9]{{2}} {0} | {0} \"00\")", four);
  const std::string month_day =
      "((\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]) | (\"0\" [13-9] | \"1\" [0-2]) \"-\" (\"29\" | \"30\") | "
      "(\"0\" [13578] | \"1\" [02]) \"-31\")";
  const std::string date = fmt::format("({} \"-\" {} | {} \"-02-29\")", year, month_day, leap);
  const std::string time = "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
  if (format == "date") return date;
  if (format == "time") return time;
  if (format == "date-time") return date + " \"T\" " + time;
  if (format == "uuid") return "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}";
  return std::nullopt;
}

}  // namespace hotcold::schema_parts
