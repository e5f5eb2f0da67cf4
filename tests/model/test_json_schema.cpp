// JSON Schema turned into GBNF (model/json_schema.hpp): the texts the grammar allows are the schema's
// (numbers inside their bounds to the last digit, dates that exist, patterns), random texts walked
// through the grammar parse and validate, and what the converter does not take is refused by name.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/grammar.hpp"
#include "model/json_schema.hpp"

namespace hotcold {
namespace {

struct schema_grammar {
  explicit schema_grammar(const std::string& schema) : text(json_schema_grammar(schema)), g(grammar::parse(text)) {}
  bool takes(const std::string& s) const {
    grammar_matcher m(g);
    return m.accept_utf8(s) && m.complete();
  }
  std::string text;
  grammar g;
};

// A text the grammar allows, drawn a character at a time among printable ASCII and a few others;
// at a place where it may end, it ends with probability `end_p`.
std::string walk(const grammar& g, std::mt19937& rng, double end_p = 0.3) {
  grammar_matcher m(g);
  std::string out;
  std::vector<uint32_t> pool;
  for (uint32_t c = 0x20; c < 0x7F; ++c) pool.push_back(c);
  for (uint32_t c : {uint32_t{'\n'}, uint32_t{'\t'}, 0xE9u, 0x4E2Du}) pool.push_back(c);
  for (int steps = 0; steps < 4000; ++steps) {
    if (m.complete() && std::uniform_real_distribution<>(0, 1)(rng) < end_p) return out;
    std::vector<uint32_t> can;
    for (uint32_t c : pool)
      if (m.may_take(c)) can.push_back(c);
    if (can.empty()) {
      EXPECT_TRUE(m.complete()) << out;
      return out;
    }
    // Closing characters more often, so that texts end.
    uint32_t c = can[std::uniform_int_distribution<size_t>(0, can.size() - 1)(rng)];
    for (char closer : {'"', '}', ']', ','})
      if (m.may_take(closer) && std::uniform_real_distribution<>(0, 1)(rng) < 0.15) c = closer;
    EXPECT_TRUE(m.accept(c));
    if (c < 0x80) out += static_cast<char>(c);
    else if (c < 0x800) out += static_cast<char>(0xC0 | (c >> 6)), out += static_cast<char>(0x80 | (c & 0x3F));
    else out += static_cast<char>(0xE0 | (c >> 12)), out += static_cast<char>(0x80 | ((c >> 6) & 0x3F)), out += static_cast<char>(0x80 | (c & 0x3F));
  }
  ADD_FAILURE() << "the walk did not end: " << out.substr(0, 200);
  return out;
}

const char* person_schema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "height": {"type": "number", "exclusiveMinimum": 0.5, "maximum": 2.75},
    "role": {"enum": ["admin", "user", 7, null]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 1, "maxItems": 3},
    "address": {"$ref": "#/$defs/address"},
    "born": {"type": "string", "format": "date"}
  },
  "required": ["name", "age", "tags"],
  "$defs": {"address": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}, "city": {"type": "string", "maxLength": 8}},
                        "required": ["zip"]}}
})";

// What the person schema asks, checked on a parsed value as a validator would.
bool valid_person(const nlohmann::json& v, std::string& why) {
  auto no = [&](std::string w) { return why = std::move(w), false; };
  if (!v.is_object()) return no("not an object");
  for (const char* k : {"name", "age", "tags"})
    if (!v.contains(k)) return no(fmt::format("no {}", k));
  for (const auto& [k, x] : v.items()) {
    if (k == "name" && !(x.is_string() && x.get<std::string>().size() <= 12 * 4)) return no("name");
    else if (k == "age" && !(x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() <= 150)) return no("age");
    else if (k == "height" && !(x.is_number() && x.get<double>() > 0.5 && x.get<double>() <= 2.75)) return no("height");
    else if (k == "role" && !(x == "admin" || x == "user" || x == 7 || x.is_null())) return no("role");
    else if (k == "tags" && !(x.is_array() && x.size() >= 1 && x.size() <= 3)) return no("tags");
    else if (k == "address" && !(x.is_object() && x.contains("zip") && x["zip"].is_string() && x["zip"].get<std::string>().size() == 5)) return no("address");
    else if (k == "born" && !(x.is_string() && x.get<std::string>().size() == 10)) return no("born");
    else if (k != "name" && k != "age" && k != "height" && k != "role" && k != "tags" && k != "address" && k != "born") return no("extra " + k);
  }
  return true;
}

TEST(JsonSchema, TakesWhatTheSchemaAcceptsAndNothingElse) {
  const schema_grammar s(person_schema);
  for (const char* ok : {R"({"name": "Ann", "age": 31, "tags": ["a"]})", R"({"name":"","age":0,"tags":["ab","c",""],"height":2.75,"role":7})",
                         R"({"name": "B", "age": 150, "tags": ["x"], "role": null, "address": {"zip": "01234", "city": "Oslo"}, "born": "2024-02-29"})"})
    EXPECT_TRUE(s.takes(ok)) << ok;
  for (const char* bad : {R"({"name": "Ann", "age": 31})",                             // tags required
                          R"({"name": "Ann", "age": 151, "tags": ["a"]})",              // above maximum
                          R"({"name": "Ann", "age": -1, "tags": ["a"]})",               // below minimum
                          R"({"name": "Ann", "age": 3, "tags": []})",                   // minItems
                          R"({"name": "Ann", "age": 3, "tags": ["a","b","c","d"]})",    // maxItems
                          R"({"name": "Ann", "age": 3, "tags": ["abcde"]})",            // maxLength
                          R"({"name": "Ann", "age": 3, "tags": ["a"], "role": "root"})",  // enum
                          R"({"name": "Ann", "age": 3, "tags": ["a"], "height": 0.5})",   // exclusiveMinimum
                          R"({"name": "Ann", "age": 3, "tags": ["a"], "height": 2.7501})",
                          R"({"name": "Ann", "age": 3, "tags": ["a"], "nick": "x"})",   // no additional properties
                          R"({"name": "Ann", "age": 3, "tags": ["a"], "address": {"zip": "1234"}})",
                          R"({"name": "Ann", "age": 3, "tags": ["a"], "born": "2023-02-29"})"})
    EXPECT_FALSE(s.takes(bad)) << bad;
  // Texts walked at random through the grammar parse and validate.
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    const std::string text = walk(s.g, rng);
    const auto v = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << text;
    std::string why;
    EXPECT_TRUE(valid_person(v, why)) << why << ": " << text;
  }
}

TEST(JsonSchema, IntegerBoundsToTheLastDigit) {
  const std::pair<std::optional<int64_t>, std::optional<int64_t>> cases[] = {{0, 150}, {-45, 1003}, {-999, -7}, {7, std::nullopt}, {std::nullopt, -12},
                                                                             {std::nullopt, 99}, {100, 100}, {-1, 1}, {19, 201}};
  for (const auto& [lo, hi] : cases) {
    nlohmann::json schema{{"type", "integer"}};
    if (lo) schema["minimum"] = *lo;
    if (hi) schema["maximum"] = *hi;
    const schema_grammar s(schema.dump());
    for (int64_t x = -1300; x <= 1300; ++x) {
      const bool in = (!lo || x >= *lo) && (!hi || x <= *hi);
      ASSERT_EQ(s.takes(std::to_string(x)), in) << schema.dump() << " " << x;
    }
    EXPECT_FALSE(s.takes("-0"));
    EXPECT_FALSE(s.takes("007"));
  }
  // Exclusive bounds on integers, and non-integer bounds: 2.5 < x < 6 is 3, 4, 5.
  const schema_grammar e(R"({"type":"integer","exclusiveMinimum":2.5,"exclusiveMaximum":6})");
  for (int x = 0; x < 9; ++x) EXPECT_EQ(e.takes(std::to_string(x)), x >= 3 && x <= 5) << x;
}

TEST(JsonSchema, NumberBoundsToTheLastDigit) {
  struct bounds {
    const char* schema;
    double lo, hi;
    bool lo_ex, hi_ex;
  };
  const bounds cases[] = {{R"({"type":"number","minimum":0.5,"maximum":2.25})", 0.5, 2.25, false, false},
                          {R"({"type":"number","exclusiveMinimum":-1.05,"exclusiveMaximum":1})", -1.05, 1, true, true},
                          {R"({"type":"number","minimum":0.25,"exclusiveMaximum":0.75})", 0.25, 0.75, false, true},
                          {R"({"type":"number","minimum":-2,"maximum":-0.5})", -2, -0.5, false, false},
                          {R"({"type":"number","exclusiveMinimum":0})", 0, 1e9, true, false},
                          {R"({"type":"number","maximum":0})", -1e9, 0, false, false}};
  for (const auto& c : cases) {
    const schema_grammar s(c.schema);
    // Every value k/100 between -3 and 3, written as JSON may: 1.5, 1.50, 1.500; and 1.505 (thousandths).
    for (int k = -3000; k <= 3000; ++k) {
      const double x = k / 1000.0;
      const bool in = (c.lo_ex ? x > c.lo + 1e-12 : x >= c.lo - 1e-12) && (c.hi_ex ? x < c.hi - 1e-12 : x <= c.hi + 1e-12);
      const int64_t whole = std::abs(k) / 1000, frac = std::abs(k) % 1000;
      const std::string sign = k < 0 ? "-" : "";
      std::vector<std::string> texts{fmt::format("{}{}.{:03}", sign, whole, frac), fmt::format("{}{}.{:03}0", sign, whole, frac)};
      if (frac == 0 && k != 0) texts.push_back(fmt::format("{}{}", sign, whole));
      if (frac % 10 == 0) texts.push_back(fmt::format("{}{}.{:02}", sign, whole, frac / 10));
      for (const auto& t : texts) ASSERT_EQ(s.takes(t), in) << c.schema << " " << t;
    }
    EXPECT_FALSE(s.takes("1."));
    EXPECT_FALSE(s.takes("-0"));
  }
  EXPECT_THROW(json_schema_grammar(R"({"type":"number","exclusiveMinimum":1,"exclusiveMaximum":1})"), json_schema_error);
}

TEST(JsonSchema, PatternsAndFormats) {
  const schema_grammar p(R"({"type":"string","pattern":"^[a-z]{2,3}-\\d+(\\.\\d)?$"})");
  for (const char* ok : {"\"ab-1\"", "\"xyz-042.5\""}) EXPECT_TRUE(p.takes(ok)) << ok;
  for (const char* bad : {"\"a-1\"", "\"abcd-1\"", "\"ab-\"", "\"ab-1.\"", "\" ab-1\""}) EXPECT_FALSE(p.takes(bad)) << bad;
  // Not anchored: anywhere in the text. A quote or a backslash in the pattern is escaped in the JSON.
  const schema_grammar q(R"({"pattern":"a\"b|\\\\"})");
  for (const char* ok : {R"("xxa\"byy")", R"("\\")", R"("q\\")"}) EXPECT_TRUE(q.takes(ok)) << ok;
  for (const char* bad : {R"("ab")", R"("a"b")"}) EXPECT_FALSE(q.takes(bad)) << bad;
  const schema_grammar d(R"({"type":"string","format":"date"})");
  for (const char* ok : {"\"2024-02-29\"", "\"2000-02-29\"", "\"1999-12-31\"", "\"0001-01-01\"", "\"2023-04-30\""}) EXPECT_TRUE(d.takes(ok)) << ok;
  for (const char* bad : {"\"2023-02-29\"", "\"1900-02-29\"", "\"2023-04-31\"", "\"2023-13-01\"", "\"0000-01-01\"", "\"2023-1-01\""}) EXPECT_FALSE(d.takes(bad)) << bad;
  const schema_grammar dt(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(dt.takes("\"2024-06-01T23:59:59.5+02:00\""));
  EXPECT_TRUE(dt.takes("\"2024-06-01T00:00:00Z\""));
  EXPECT_FALSE(dt.takes("\"2024-06-01T24:00:00Z\""));
  EXPECT_FALSE(dt.takes("\"2024-06-01 10:00:00Z\""));
  const schema_grammar u(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(u.takes("\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_FALSE(u.takes("\"123e4567-e89b-12d3-a456-42661417400\""));
}

TEST(JsonSchema, ReferencesTuplesAndAlternatives) {
  // A tree: a schema that refers to itself.
  const schema_grammar t(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
                             "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}}})");
  EXPECT_TRUE(t.takes(R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]})"));
  EXPECT_FALSE(t.takes(R"({"v": 1, "kids": [{"w": 2}]})"));
  const schema_grammar tuple(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"boolean"}]})");
  EXPECT_TRUE(tuple.takes(R"(["a", true])"));
  EXPECT_FALSE(tuple.takes(R"(["a"])"));  // (valid JSON Schema, but a tuple is written whole unless minItems says less)
  EXPECT_FALSE(tuple.takes(R"(["a", true, 1])"));
  const schema_grammar any(R"({"anyOf":[{"type":"string","maxLength":1},{"type":"null"}],"title":"Opt"})");
  EXPECT_TRUE(any.takes("null"));
  EXPECT_TRUE(any.takes("\"x\""));
  EXPECT_FALSE(any.takes("\"xy\""));
  // Extra properties when asked for, but never a declared name again.
  const schema_grammar extra(R"({"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})");
  EXPECT_TRUE(extra.takes(R"({"id": 1, "i": true, "idx": false})"));
  EXPECT_FALSE(extra.takes(R"({"id": 1, "id": true})"));
  EXPECT_FALSE(extra.takes(R"({"id": 1, "x": 2})"));
  EXPECT_TRUE(extra.takes(R"({"x": false})"));
  const schema_grammar object(json_object_grammar().empty() ? "{}" : R"({"type":"object"})");
  EXPECT_TRUE(object.takes(R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(object.takes("[1]"));
  EXPECT_EQ(json_object_grammar(), object.text);
}

TEST(JsonSchema, RefusesByNameWhatItDoesNotTake) {
  auto refusal = [](const char* schema) {
    try {
      json_schema_grammar(schema);
    } catch (const json_schema_error& e) {
      return std::string(e.what());
    }
    return std::string("(taken)");
  };
  EXPECT_NE(refusal(R"({"type":"integer","multipleOf":3})").find("'multipleOf' is not supported"), std::string::npos) << refusal(R"({"multipleOf":3})");
  EXPECT_NE(refusal(R"({"type":"object","properties":{"a":{"not":{}}}})").find("/properties/a: 'not'"), std::string::npos);
  EXPECT_NE(refusal(R"({"type":"string","format":"email"})").find("format \"email\""), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref":"https://example.com/s.json"})").find("only references inside"), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref":"#/$defs/missing"})").find("names nothing"), std::string::npos);
  EXPECT_NE(refusal(R"({"type":"string","pattern":"(?=a)b"})").find("lookarounds"), std::string::npos);
  EXPECT_NE(refusal(R"({"type":"integer","minimum":5,"maximum":4})").find("no integer"), std::string::npos);
  EXPECT_NE(refusal(R"({"type":"strin"})").find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(refusal("{not json").find("not valid JSON"), std::string::npos);
}

}  // namespace
}  // namespace hotcold
