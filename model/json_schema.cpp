#include "model/json_schema.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/grammar.hpp"
#include "model/json_schema_parts.hpp"
#include "model/utf8.hpp"

namespace hotcold {
namespace {

using json = nlohmann::ordered_json;  // properties in the schema's order
using schema_parts::literal;

// The JSON values every schema may fall back on; each value is followed by `sp`, bounded whitespace.
const std::pair<const char*, const char*> primitives[] = {
    {"sp", "(\" \" | \"\\n\" [ \\t]{0,20})?"},
    {"char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})"},
    {"string", "\"\\\"\" char* \"\\\"\" sp"},
    {"number", "\"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? sp"},
    {"integer", "\"-\"? (\"0\" | [1-9] [0-9]{0,15}) sp"},
    {"boolean", "(\"true\" | \"false\") sp"},
    {"null", "\"null\" sp"},
    {"value", "object | array | string | number | boolean | null"},
    {"object", "\"{\" sp (string \":\" sp value (\",\" sp string \":\" sp value)*)? \"}\" sp"},
    {"array", "\"[\" sp (value (\",\" sp value)*)? \"]\" sp"},
};

// Keywords that only describe: taken and left aside.
const std::set<std::string> annotations = {"title", "description", "$schema", "$id", "$comment", "examples", "default", "deprecated", "readOnly", "writeOnly",
                                           "$defs", "definitions"};
const std::set<std::string> known_types = {"string", "integer", "number", "boolean", "null", "object", "array"};
const std::set<std::string> understood = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required", "additionalProperties",
                                          "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
                                          "maximum", "exclusiveMinimum", "exclusiveMaximum"};

std::string pointer(const std::string& path) { return path.empty() ? "the schema" : "the schema at " + path; }

using schema_parts::join;

bool of_type(const json& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

class converter {
 public:
  explicit converter(json doc) : doc_(std::move(doc)) {}

  std::string grammar() {
    const std::string root = visit(doc_, "", "root");
    std::string out = "root ::= " + root + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  [[noreturn]] static void fail(const std::string& path, const std::string& what) { throw json_schema_error(fmt::format("{}: {}", pointer(path), what)); }

  // A rule for a primitive, defined on first use (with what it uses).
  std::string prim(const std::string& name) {
    if (defined_.insert(name).second)
      for (const auto& [n, body] : primitives)
        if (n == name) {
          rules_.emplace_back(n, body);
          for (const char* dep : {"sp", "char", "string", "number", "boolean", "null", "object", "array", "value"})
            if (std::string(body).find(dep) != std::string::npos && dep != name) prim(dep);
        }
    return name;
  }
  // A rule of its own for the expression, named after where it is (the same expression, the same rule).
  std::string rule(const std::string& hint, const std::string& body) {
    if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
    std::string base;
    for (char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(static_cast<unsigned char>(c))) : '-';
    if (base.empty() || !std::isalpha(static_cast<unsigned char>(base[0]))) base = "r-" + base;
    std::string name = base;
    for (int n = 2; defined_.count(name) || name == "root"; ++n) name = fmt::format("{}-{}", base, n);
    defined_.insert(name);
    rules_.emplace_back(name, body);
    by_body_[body] = name;
    return name;
  }

  std::string visit(const json& s, const std::string& path, const std::string& hint) {
    if (++depth_ > 64) fail(path, "nests deeper than 64 schemas");
    std::string out = visit_inner(s, path, hint);
    --depth_;
    return out;
  }

  std::string visit_inner(const json& s, const std::string& path, const std::string& hint) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "false accepts nothing");
      return prim("value");
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    for (const auto& [k, v] : s.items())
      if (!annotations.count(k) && !understood.count(k)) fail(path, fmt::format("'{}' is not supported (docs/openai-api.md lists the keywords taken)", k));
    if (s.contains("$ref")) return reference(s, path);
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) fail(path + "/allOf", "'allOf' is taken with one schema only");
      return visit(all[0], path + "/allOf/0", hint);
    }
    for (const char* key : {"anyOf", "oneOf"}) {  // oneOf as anyOf: a text may match more than one
      if (!s.contains(key)) continue;
      const json& any = s[key];
      if (!any.is_array() || any.empty()) fail(path + "/" + key, fmt::format("'{}' must be a non-empty list of schemas", key));
      std::vector<std::string> alts;
      for (size_t i = 0; i < any.size(); ++i) alts.push_back(visit(any[i], fmt::format("{}/{}/{}", path, key, i), fmt::format("{}-{}", hint, i)));
      return rule(hint, join(alts));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array())
        for (const auto& x : t) types.push_back(x.is_string() ? x.get<std::string>() : "");
      for (const auto& x : types)
        if (!known_types.count(x)) fail(path + "/type", fmt::format("unknown type '{}'", x));
    }
    if (s.contains("const") || s.contains("enum")) return choices(s, types, path, hint);
    if (types.empty()) types = inferred(s);
    std::vector<std::string> alts;
    for (const auto& t : types) alts.push_back(typed(s, t, path, hint));
    if (alts.empty()) fail(path + "/type", "an empty list of types accepts nothing");
    return alts.size() == 1 ? alts[0] : rule(hint, join(alts));
  }

  // The type a schema without "type" has, from its keywords; none: any value.
  static std::vector<std::string> inferred(const json& s) {
    for (const char* k : {"properties", "required", "additionalProperties"})
      if (s.contains(k)) return {"object"};
    for (const char* k : {"items", "prefixItems", "minItems", "maxItems"})
      if (s.contains(k)) return {"array"};
    for (const char* k : {"minLength", "maxLength", "pattern", "format"})
      if (s.contains(k)) return {"string"};
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k)) return {"number"};
    return {"string", "number", "boolean", "null", "object", "array"};
  }

  std::string reference(const json& s, const std::string& path) {
    if (!s["$ref"].is_string()) fail(path + "/$ref", "'$ref' must be a string");
    const std::string ref = s["$ref"].get<std::string>();
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.rfind("#", 0) != 0) fail(path + "/$ref", fmt::format("'{}': only references inside the schema (#/...) are taken", ref));
    json::json_pointer at;
    try {
      at = json::json_pointer(ref.substr(1));
    } catch (const json::exception&) {
      fail(path + "/$ref", fmt::format("'{}' is not a JSON pointer", ref));
    }
    if (!doc_.contains(at)) fail(path + "/$ref", fmt::format("'{}' names nothing in the schema", ref));
    // Named before it is visited: a schema may refer to itself.
    const std::string leaf = ref.substr(ref.rfind('/') + 1);
    std::string name = "ref-" + leaf;
    for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(static_cast<unsigned char>(c))) : '-';
    for (int n = 2; defined_.count(name); ++n) name = fmt::format("ref-{}-{}", leaf, n);
    defined_.insert(name);
    refs_[ref] = name;
    const size_t slot = rules_.size();
    rules_.emplace_back(name, "");
    const std::string body = visit(doc_[at], ref.substr(1), leaf);
    rules_[slot].second = body;
    return name;
  }

  std::string choices(const json& s, const std::vector<std::string>& types, const std::string& path, const std::string& hint) {
    std::vector<json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail(path + "/enum", "'enum' must be a non-empty list");
      for (const auto& v : s["enum"])
        if (!s.contains("const") || v == s["const"]) values.push_back(v);
    }
    std::vector<std::string> alts;
    for (const auto& v : values)
      if (types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& t) { return of_type(v, t); }))
        alts.push_back(literal(v.dump(-1, ' ', false, json::error_handler_t::strict)) + " " + prim("sp"));
    if (alts.empty()) fail(path, "no value of 'enum' or 'const' is of the schema's type");
    return rule(hint, join(alts));
  }

  std::string typed(const json& s, const std::string& t, const std::string& path, const std::string& hint) {
    if (t == "boolean" || t == "null") return prim(t);
    if (t == "string") return string_rule(s, path, hint);
    if (t == "integer" || t == "number") return number_rule(s, t == "integer", path, hint);
    if (t == "object") return object_rule(s, path, hint);
    return array_rule(s, path, hint);
  }

  std::optional<uint64_t> count(const json& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return std::nullopt;
    const json& v = s[key];
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) fail(path + "/" + key, fmt::format("'{}' must be a whole number", key));
    if (v.get<uint64_t>() > 2000) fail(path + "/" + key, fmt::format("'{}' above 2000 is not supported", key));
    return v.get<uint64_t>();
  }

  std::string string_rule(const json& s, const std::string& path, const std::string& hint) {
    const auto lo = count(s, "minLength", path), hi = count(s, "maxLength", path);
    const bool pattern = s.contains("pattern"), format = s.contains("format");
    if ((pattern || format) && (lo || hi)) fail(path, fmt::format("'{}' together with 'minLength' or 'maxLength' is not supported", pattern ? "pattern" : "format"));
    if (pattern && format) fail(path, "'pattern' together with 'format' is not supported");
    std::string inside;
    if (pattern) {
      if (!s["pattern"].is_string()) fail(path + "/pattern", "'pattern' must be a string");
      try {
        inside = schema_parts::pattern_chars(s["pattern"].get<std::string>());
      } catch (const std::invalid_argument& e) {
        fail(path + "/pattern", e.what());
      }
    } else if (format) {
      const auto f = s["format"].is_string() ? schema_parts::format_chars(s["format"].get<std::string>()) : std::nullopt;
      if (!f) fail(path + "/format", fmt::format("the format {} is not supported (date, time, date-time, uuid)", s["format"].dump()));
      inside = "(" + *f + ")";
    } else if (lo || hi) {
      if (lo && hi && *hi < *lo) fail(path, "'maxLength' below 'minLength' accepts nothing");
      const std::string c = prim("char");
      inside = hi ? fmt::format("{}{{{},{}}}", c, lo.value_or(0), *hi) : fmt::format("{}{{{},}}", c, *lo);
    } else {
      return prim("string");
    }
    prim("sp");
    return rule(hint, "\"\\\"\" " + inside + " \"\\\"\" sp");
  }

  std::optional<schema_parts::bound> bound_of(const json& s, const char* inclusive, const char* exclusive, bool lower, const std::string& path) {
    std::optional<schema_parts::bound> b;
    for (const char* key : {inclusive, exclusive}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_number()) fail(path + "/" + key, fmt::format("'{}' must be a number", key));
      const schema_parts::bound next{s[key].get<double>(), key == exclusive};
      if (!std::isfinite(next.value)) fail(path + "/" + key, fmt::format("'{}' must be finite", key));
      // Both given: the tighter one.
      if (!b || (lower ? next.value > b->value || (next.value == b->value && next.excluded) : next.value < b->value || (next.value == b->value && next.excluded))) b = next;
    }
    return b;
  }

  std::string number_rule(const json& s, bool integer, const std::string& path, const std::string& hint) {
    const auto lo = bound_of(s, "minimum", "exclusiveMinimum", true, path), hi = bound_of(s, "maximum", "exclusiveMaximum", false, path);
    if (!lo && !hi) return prim(integer ? "integer" : "number");
    prim("sp");
    try {
      if (integer) {
        auto whole = [&](const schema_parts::bound& b, bool lower) {
          if (std::fabs(b.value) >= 1e15) fail(path, fmt::format("a bound of {} (this server takes bounds within ±1e15)", b.value));
          double v = lower ? std::ceil(b.value) : std::floor(b.value);
          if (b.excluded && v == b.value) v += lower ? 1 : -1;
          return static_cast<int64_t>(v);
        };
        std::optional<int64_t> l, h;
        if (lo) l = whole(*lo, true);
        if (hi) h = whole(*hi, false);
        if (l && h && *h < *l) fail(path, "no integer lies between 'minimum' and 'maximum'");
        return rule(hint, schema_parts::integer_range(l, h) + " sp");
      }
      const auto range = schema_parts::number_range(lo, hi);
      if (!range) fail(path, "no number lies between 'minimum' and 'maximum'");
      return rule(hint, *range + " sp");
    } catch (const std::invalid_argument& e) {
      if (dynamic_cast<const json_schema_error*>(&e)) throw;
      fail(path, e.what());
    }
  }

  std::string object_rule(const json& s, const std::string& path, const std::string& hint);
  // A name's characters between its quotes, spelling none of `taken` (names that JSON must escape
  // are not told apart).
  std::string other_name(const std::set<std::string>& taken);
  std::string array_rule(const json& s, const std::string& path, const std::string& hint);

  json doc_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> defined_;
  std::map<std::string, std::string> by_body_, refs_;
  int depth_ = 0;
};

std::string converter::object_rule(const json& s, const std::string& path, const std::string& hint) {
  const json empty = json::object();
  const json& props = s.contains("properties") ? s["properties"] : empty;
  if (!props.is_object()) fail(path + "/properties", "'properties' must be an object");
  std::vector<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) fail(path + "/required", "'required' must be a list of names");
    for (const auto& r : s["required"]) {
      if (!r.is_string()) fail(path + "/required", "'required' must be a list of names");
      required.push_back(r.get<std::string>());
    }
  }
  // Beyond the declared properties: none unless additionalProperties asks (none either when it is
  // absent, as llama.cpp does; any when nothing at all is declared).
  std::optional<json> extra;
  if (s.contains("additionalProperties")) {
    const json& a = s["additionalProperties"];
    if (!(a.is_boolean() && !a.get<bool>())) extra = a;
  } else if (props.empty() && required.empty()) {
    extra = json(true);
  }
  prim("sp");
  auto kv = [&](const std::string& name, const json& schema, const std::string& where) {
    const std::string key = json(name).dump(-1, ' ', false, json::error_handler_t::strict);
    return literal(key) + " sp \":\" sp " + visit(schema, where, hint + "-" + name);
  };
  std::vector<std::string> required_kvs, optional_kvs;
  std::set<std::string> names;
  for (const auto& name : required) {
    if (!names.insert(name).second) continue;
    if (props.contains(name)) required_kvs.push_back(kv(name, props[name], path + "/properties/" + name));
    else required_kvs.push_back(kv(name, extra ? *extra : json(true), path + "/required"));
  }
  for (const auto& [name, schema] : props.items())
    if (names.insert(name).second) optional_kvs.push_back(kv(name, schema, path + "/properties/" + name));
  std::string extra_kv;
  if (extra) {
    prim("char");
    // A name none of the declared ones is (a duplicate name would not validate as its own property).
    extra_kv = rule(hint + "-extra-kv", schema_parts::literal("\"") + " " + other_name(names) + " \"\\\"\" sp \":\" sp " + visit(*extra, path + "/additionalProperties", hint + "-extra"));
  }
  const std::string more_extra = extra ? "(\",\" sp " + extra_kv + ")*" : "";
  // rest[i]: the optional ones from i on, each after a comma, then the extras.
  std::vector<std::string> rest(optional_kvs.size() + 1);
  rest.back() = more_extra;
  for (size_t i = optional_kvs.size(); i-- > 0;) {
    const std::string body = "(\",\" sp " + optional_kvs[i] + ")?" + (rest[i + 1].empty() ? "" : " " + rest[i + 1]);
    rest[i] = rule(fmt::format("{}-rest-{}", hint, i), body);
  }
  std::string inside;
  if (!required_kvs.empty()) {
    for (size_t i = 0; i < required_kvs.size(); ++i) inside += (i ? " \",\" sp " : "") + required_kvs[i];
    if (!rest[0].empty()) inside += " " + rest[0];
  } else {
    std::vector<std::string> firsts;
    for (size_t i = 0; i < optional_kvs.size(); ++i) firsts.push_back(optional_kvs[i] + (rest[i + 1].empty() ? "" : " " + rest[i + 1]));
    if (extra) firsts.push_back(extra_kv + " " + more_extra);
    if (!firsts.empty()) inside = join(firsts) + "?";
  }
  return rule(hint, "\"{\" sp " + (inside.empty() ? "" : inside + " ") + "\"}\" sp");
}

std::string converter::other_name(const std::set<std::string>& taken) {
  struct node {
    std::map<uint32_t, node> next;
    bool ends = false;
  };
  node top;
  for (const auto& name : taken) {
    if (std::any_of(name.begin(), name.end(), [](char c) { return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20; })) continue;
    node* at = &top;
    for (size_t i = 0; i < name.size();) {
      const auto c = utf8_decode(name, i);
      if (!c) break;
      at = &at->next[*c];
    }
    at->ends = true;
  }
  const std::string any = prim("char") + "*";
  auto walk = [&](auto&& self, const node& n) -> std::string {
    std::string others = "[^";
    for (const auto& [c, _] : n.next) others += c < 0x80 && std::isalnum(static_cast<int>(c)) ? std::string(1, static_cast<char>(c)) : (c <= 0xFFFF ? fmt::format("\\u{:04X}", c) : fmt::format("\\U{:08X}", c));
    others += "\\x00-\\x1F\\x22\\x5C] " + any;
    std::vector<std::string> alts{others, "\"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) " + any};
    for (const auto& [c, child] : n.next) alts.push_back(literal(utf8_encode(c)) + " " + self(self, child));
    const std::string body = join(alts);
    return n.ends ? body : "(" + body + ")?";  // where a taken name ends, this one goes on
  };
  return walk(walk, top);
}

std::string converter::array_rule(const json& s, const std::string& path, const std::string& hint) {
  std::vector<std::string> fixed;
  if (s.contains("prefixItems")) {
    if (!s["prefixItems"].is_array()) fail(path + "/prefixItems", "'prefixItems' must be a list of schemas");
    for (size_t i = 0; i < s["prefixItems"].size(); ++i) fixed.push_back(visit(s["prefixItems"][i], fmt::format("{}/prefixItems/{}", path, i), fmt::format("{}-{}", hint, i)));
  }
  // After the fixed items: those of `items`, or none where it is false or (as llama.cpp writes a
  // tuple) absent beside prefixItems.
  std::optional<std::string> more;
  if (s.contains("items")) {
    if (!(s["items"].is_boolean() && !s["items"].get<bool>())) more = visit(s["items"], path + "/items", hint + "-item");
  } else if (fixed.empty()) {
    more = prim("value");
  }
  // A tuple is written whole unless minItems says fewer will do (llama.cpp writes it whole too).
  const uint64_t lo = count(s, "minItems", path).value_or(fixed.size());
  const auto hi_given = count(s, "maxItems", path);
  std::optional<uint64_t> hi = hi_given;
  if (!more) hi = hi ? std::min<uint64_t>(*hi, fixed.size()) : fixed.size();
  if (hi && *hi < lo) fail(path, "no array has the items asked for ('minItems', 'maxItems', 'prefixItems', 'items')");
  prim("sp");
  // From item i on, each after a comma.
  auto from = [&](auto&& self, uint64_t i) -> std::string {
    if (hi && i >= *hi) return "";
    if (i >= fixed.size()) {
      const uint64_t at_least = lo > i ? lo - i : 0;
      const std::string rep = hi ? fmt::format("{{{},{}}}", at_least, *hi - i) : fmt::format("{{{},}}", at_least);
      return "(\",\" sp " + *more + ")" + rep;
    }
    const std::string next = self(self, i + 1);
    const std::string part = "\",\" sp " + fixed[i] + (next.empty() ? "" : " " + next);
    return i < lo ? part : "(" + part + ")?";
  };
  std::string first;
  if (!hi || *hi > 0) {
    const std::string head = fixed.empty() ? *more : fixed[0];
    const std::string next = from(from, 1);
    first = head + (next.empty() ? "" : " " + next);
    if (lo == 0) first = "(" + first + ")?";
  }
  return rule(hint, "\"[\" sp " + (first.empty() ? "" : first + " ") + "\"]\" sp");
}

}  // namespace

std::string json_schema_grammar(std::string_view schema_json) {
  json doc = json::parse(schema_json.begin(), schema_json.end(), nullptr, false);
  if (doc.is_discarded()) throw json_schema_error("the schema is not valid JSON");
  return converter(std::move(doc)).grammar();
}

std::string checked_grammar(std::string_view gbnf, std::string_view json_schema) {
  if (!gbnf.empty() && !json_schema.empty()) throw std::invalid_argument("give a grammar or a JSON schema, not both");
  std::string text = json_schema.empty() ? std::string(gbnf) : json_schema_grammar(json_schema);
  if (!text.empty()) {
    const hotcold::grammar g = hotcold::grammar::parse(text);
    grammar_matcher follow(g);
  }
  return text;
}

std::string json_schema_rules(std::string_view schema_json, const std::string& name) {
  const std::string g = json_schema_grammar(schema_json);
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; };
  std::set<std::string> names;
  for (size_t at = 0; at < g.size(); at = g.find('\n', at) + 1) names.insert(g.substr(at, g.find(" ::= ", at) - at));
  auto renamed = [&](const std::string& n) { return n == "root" ? name : name + "-" + n; };
  std::string out;
  for (size_t i = 0; i < g.size();) {
    const char c = g[i];
    if (c == '"' || c == '[') {  // a literal or a class, as it is
      const char close = c == '"' ? '"' : ']';
      size_t j = i + 1;
      while (j < g.size() && g[j] != close) j += g[j] == '\\' ? 2 : 1;
      out.append(g, i, j + 1 - i);
      i = j + 1;
    } else if (ident(c) && (i == 0 || !ident(g[i - 1]))) {
      size_t j = i;
      while (j < g.size() && ident(g[j])) ++j;
      const std::string word = g.substr(i, j - i);
      out += names.count(word) ? renamed(word) : word;
      i = j;
    } else {
      out += c, ++i;
    }
  }
  return out;
}

std::string json_object_grammar() { return json_schema_grammar(R"({"type":"object"})"); }

}  // namespace hotcold
