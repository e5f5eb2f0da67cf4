#pragma once
// The pieces of GBNF that model/json_schema.cpp puts together: literals and character classes written
// for the grammar parser, numbers inside bounds, strings that match a regular expression, and the
// formats (date, time, date-time, uuid). Each returns a GBNF expression (no rule of its own), or
// throws json_schema_error naming what it cannot express.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hotcold::schema_parts {

// A GBNF literal for these bytes ("..." with escapes for quotes, backslashes and control bytes).
std::string literal(std::string_view bytes);
// One of these expressions: itself alone, else "(a | b | ...)".
std::string join(const std::vector<std::string>& alts);

// Non-negative integers without leading zeros from lo to hi (no hi: any at least lo, at most 16
// digits in all when lo has fewer).
std::string whole_range(uint64_t lo, std::optional<uint64_t> hi);

// Integers from lo to hi (either may be absent), as JSON writes them.
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

// One bound of a number: its value, and whether it is excluded (exclusiveMinimum, exclusiveMaximum).
struct bound {
  double value;
  bool excluded = false;
};
// Numbers between the bounds as JSON writes them without an exponent; nullopt when none is.
std::optional<std::string> number_range(std::optional<bound> lo, std::optional<bound> hi);

// The inside of a JSON string (what comes between its quotes, escapes as JSON writes them) whose
// decoded text matches the ECMAScript regular expression `pattern` (anchored with ^ and $ or, where
// not, matching anywhere in the text).
std::string pattern_chars(std::string_view pattern);

// The inside of a JSON string in the format (date, time, date-time, uuid); nullopt for another name.
std::optional<std::string> format_chars(std::string_view format);

}  // namespace hotcold::schema_parts
