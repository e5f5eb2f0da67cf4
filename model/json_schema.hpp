#pragma once
// JSON Schema turned into a GBNF grammar (model/grammar.hpp), so that constrained sampling writes
// only JSON texts the schema accepts: what llama-server's `json_schema` and OpenAI's `response_format`
// ask for. The keywords taken, and how, are listed in docs/openai-api.md; any other keyword is refused
// by name (a schema is never silently loosened). Where JSON Schema allows more than the grammar
// writes (object properties in the schema's order, required ones first; no properties beyond the
// declared ones unless `additionalProperties` asks for them; bounded whitespace), every text the
// grammar allows still validates.
#include <stdexcept>
#include <string>
#include <string_view>

namespace hotcold {

// A schema that cannot be turned into a grammar: its message names where (a JSON pointer into the
// schema) and what.
class json_schema_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The grammar of the JSON texts `schema_json` (a schema as JSON text) accepts.
std::string json_schema_grammar(std::string_view schema_json);

// What a request's sampling follows: its GBNF, or its JSON Schema (JSON text) turned into GBNF, or
// nothing (both empty). Checked: parsed and followed from its start, so that a grammar that cannot be
// used (grammar_error: line and column) or a schema that cannot be turned (json_schema_error) is
// refused where it comes in, not where it is sampled.
std::string checked_grammar(std::string_view gbnf, std::string_view json_schema);

// The rules of json_schema_grammar(schema_json) renamed for a grammar of several schemas: its root rule
// is `name`, every other rule `name-RULE` (names inside literals and classes left as they are).
std::string json_schema_rules(std::string_view schema_json, const std::string& name);

// The grammar of any JSON object (OpenAI's response_format {"type": "json_object"}).
std::string json_object_grammar();

}  // namespace hotcold
