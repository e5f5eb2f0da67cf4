#include "server/openai_tools.hpp"

#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "model/json_schema.hpp"

namespace hotcold::server {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view open_tag = "<tool_call>", close_tag = "</tool_call>";
constexpr std::string_view blanks = " \t\n\r";

std::string_view trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(blanks);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(blanks) - b + 1);
}

// A call's JSON {"name": ..., "arguments": {...}} (Llama's "parameters"; arguments may be a JSON string
// holding the object; Mistral's may carry an "id", not kept: the reply makes its own).
std::optional<parsed_call> call_of(const json& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const auto args = arguments_object(j.contains("arguments") ? j["arguments"] : j.contains("parameters") ? j["parameters"] : json::object());
  if (!args) return std::nullopt;
  return parsed_call{j["name"].get<std::string>(), args->dump(-1, ' ', false, json::error_handler_t::replace)};
}
std::optional<parsed_call> call_of(std::string_view text) { return call_of(json::parse(trimmed(text), nullptr, false)); }

constexpr std::string_view mistral_marker = "[TOOL_CALLS]";

// Llama 3.1's and Mistral's replies: the text after the blanks (and Mistral's marker, where the
// vocabulary writes it as text) — a call's opening ('{'; '[' then '{'), else content.
std::string_view call_text(std::string_view held, tool_format f) {
  std::string_view t = trimmed(held);
  if (f == tool_format::mistral && t.starts_with(mistral_marker)) t = trimmed(t.substr(mistral_marker.size()));
  return t;
}
// A JSON list of objects cut short ('[' first): the objects that closed, the one left open (from where
// it starts); nullopt where anything but blanks and commas stands between them, or the list closed.
struct open_list {
  std::vector<std::string_view> whole;
  std::string_view open;
};
std::optional<open_list> items_cut_short(std::string_view t) {
  open_list out;
  int depth = 0;
  bool in_string = false, escaped = false;
  size_t from = std::string_view::npos;
  for (size_t i = 0; i < t.size(); ++i) {
    const char ch = t[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
    } else if (depth == 1 && ch != '{' && ch != ',' && blanks.find(ch) == std::string_view::npos) {
      return std::nullopt;  // (a closed list, or something other than objects in it)
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (depth++ == 1) from = i;
    } else if ((ch == ']' || ch == '}') && --depth == 1) {
      out.whole.push_back(t.substr(from, i + 1 - from)), from = std::string_view::npos;
    }
  }
  if (from != std::string_view::npos) out.open = t.substr(from);
  return out;
}

int lead_of(std::string_view held, tool_format f) {
  const std::string_view t = call_text(held, f);
  if (f == tool_format::mistral && mistral_marker.starts_with(trimmed(held))) return 0;  // (the marker, coming)
  if (t.empty()) return 0;
  if (f == tool_format::llama31) return t.front() == '{' ? 1 : 2;
  if (t.front() != '[') return 2;
  const size_t next = t.find_first_not_of(blanks, 1);
  return next == std::string_view::npos ? 0 : t[next] == '{' ? 1 : 2;
}

// Where the value of "key" starts in a call's text so far (npos: not yet, or no such key).
size_t value_at(std::string_view body, std::string_view key) {
  const size_t k = body.find("\"" + std::string(key) + "\"");
  if (k == std::string_view::npos) return k;
  size_t at = body.find_first_not_of(blanks, k + key.size() + 2);
  if (at == std::string_view::npos || body[at] != ':') return std::string_view::npos;
  at = body.find_first_not_of(blanks, at + 1);
  return at;
}

}  // namespace

tool_format tool_format_of(const chat_template& t) {
  if (!t.has_tools()) return tool_format::qwen;
  return t.family() == chat_family::llama3 ? tool_format::llama31 : t.family() == chat_family::mistral ? tool_format::mistral : tool_format::qwen;
}

std::optional<json> arguments_object(const json& args) {
  json out = args.is_string() ? json::parse(args.get<std::string>(), nullptr, false) : args;
  if (out.is_discarded() || !out.is_object()) return std::nullopt;
  return out;
}

tool_request tools_of(const json& body) {
  tool_request t;
  auto it = body.find("tools");
  if (it != body.end() && !it->is_null()) {
    if (!it->is_array()) throw std::invalid_argument("tools: a list of {\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}");
    std::set<std::string> names;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& tool = (*it)[i];
      const std::string where = fmt::format("tools[{}]", i);
      if (!tool.is_object() || tool.value("type", "") != "function" || !tool.contains("function") || !tool["function"].is_object())
        throw std::invalid_argument(where + ": {\"type\": \"function\", \"function\": {...}} (only functions are tools here)");
      const json& f = tool["function"];
      for (const auto& [k, v] : f.items())
        if (k != "name" && k != "description" && k != "parameters" && k != "strict") throw std::invalid_argument(fmt::format("{}.function: unknown field '{}'", where, k));
      const std::string name = f.contains("name") && f["name"].is_string() ? f["name"].get<std::string>() : "";
      if (name.empty() || name.size() > 64 || name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos)
        throw std::invalid_argument(where + ".function.name: 1-64 letters, digits, '_' or '-'");
      if (!names.insert(name).second) throw std::invalid_argument(fmt::format("{}: a second function named '{}'", where, name));
      const json params = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : json{{"type", "object"}};
      if (!params.is_object()) throw std::invalid_argument(where + ".function.parameters: a JSON Schema (an object)");
      try {
        json_schema_grammar(params.dump());
      } catch (const json_schema_error& e) {
        throw std::invalid_argument(fmt::format("{}.function.parameters: {}", where, e.what()));
      }
      t.tools.push_back({name, params.dump(), tool.dump(-1, ' ', false, json::error_handler_t::replace)});
    }
  }
  auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string() && (*choice == "auto" || *choice == "none" || *choice == "required")) {
      t.choice = choice->get<std::string>();
    } else if (choice->is_object() && choice->value("type", "") == "function" && choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].contains("name") && (*choice)["function"]["name"].is_string()) {
      t.choice = (*choice)["function"]["name"].get<std::string>();
      if (std::none_of(t.tools.begin(), t.tools.end(), [&](const tool_def& d) { return d.name == t.choice; }))
        throw std::invalid_argument(fmt::format("tool_choice: no tool is named '{}'", t.choice));
    } else {
      throw std::invalid_argument("tool_choice: \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (t.tools.empty() && t.choice != "none" && t.choice != "auto") throw std::invalid_argument("tool_choice: there are no tools to call");
  }
  auto parallel = body.find("parallel_tool_calls");
  if (parallel != body.end() && !parallel->is_null()) {
    if (!parallel->is_boolean()) throw std::invalid_argument("parallel_tool_calls: true or false");
    t.parallel = parallel->get<bool>();
  }
  return t;
}

std::string call_grammar(const tool_request& t) {
  std::string calls, rules;
  for (size_t i = 0; i < t.tools.size(); ++i) {
    const tool_def& d = t.tools[i];
    if (t.choice != "required" && t.choice != d.name) continue;
    const std::string args = fmt::format("tool{}", i);
    calls += fmt::format("{}\"{}\" \"\\\", \\\"arguments\\\": \" {}", calls.empty() ? "" : " | ", d.name, args);  // (names are [A-Za-z0-9_-])
    rules += json_schema_rules(d.parameters, args);
  }
  if (t.format == tool_format::llama31) {  // one object: {"name": ..., "parameters": ...}
    std::string llama = calls;
    for (size_t at = 0; (at = llama.find("arguments", at)) != std::string::npos;) llama.replace(at, 9, "parameters");
    return fmt::format("root ::= \"{{\\\"name\\\": \\\"\" ({}) \"}}\"\n{}", llama, rules);
  }
  if (t.format == tool_format::mistral)  // a list of calls (after the [TOOL_CALLS] token, which a grammar leaves to the template's side)
    return fmt::format("root ::= \" \"? \"[\" call{} \"]\"\ncall ::= \"{{\\\"name\\\": \\\"\" ({}) \"}}\"\n{}", t.parallel ? " (\", \" call)*" : "", calls, rules);
  return fmt::format("root ::= call{}\ncall ::= \"<tool_call>\\n{{\\\"name\\\": \\\"\" ({}) \"}}\\n</tool_call>\"\n{}", t.parallel ? " (\"\\n\" call)*" : "", calls, rules);
}

void tool_stream::take(out& o, bool at_end) {
  for (;;) {
    if (!in_call_) {
      const size_t at = held_.find(open_tag);
      if (at == std::string::npos) {
        // Held back: an end that may begin the tag, and the blanks before it (the template's newline
        // before a call is not content).
        size_t keep = 0;
        for (size_t n = std::min(held_.size(), open_tag.size() - 1); n > 0 && !at_end; --n)
          if (open_tag.substr(0, n) == std::string_view(held_).substr(held_.size() - n)) {
            keep = n;
            break;
          }
        while (!at_end && keep < held_.size() && blanks.find(held_[held_.size() - keep - 1]) != std::string_view::npos) ++keep;
        std::string_view part = std::string_view(held_).substr(0, held_.size() - keep);
        if (after_call_ && trimmed(part).empty() && !at_end) return;  // (blanks between calls)
        o.content += part;
        held_.erase(0, held_.size() - keep);
        if (!part.empty()) after_call_ = false;
        return;
      }
      std::string_view before = std::string_view(held_).substr(0, at);
      if (!(after_call_ && trimmed(before).empty())) o.content += before.substr(0, before.find_last_not_of(blanks) + 1);  // (the template's newline before the tag)
      held_.erase(0, at + open_tag.size());
      in_call_ = true;
    }
    const size_t end = held_.find(close_tag);
    const std::string_view body = std::string_view(held_).substr(0, end == std::string::npos ? held_.size() : end);
    stream_call(o, body);
    if (end == std::string::npos && !at_end) return;
    if (auto c = call_of(body)) {
      // As it streamed: the arguments' own text where it could stream (an object), else compacted.
      if (call_.streamable && call_.end != std::string::npos) c->arguments = std::string(body.substr(call_.args_at, call_.end - call_.args_at));
      close_call(o, std::move(*c));
    } else {
      o.content += std::string(open_tag) + std::string(body) + (end == std::string::npos ? "" : std::string(close_tag));  // not a call after all: text
    }
    call_ = open_call{};
    held_.erase(0, end == std::string::npos ? held_.size() : end + close_tag.size());
    in_call_ = false, after_call_ = true;
    if (held_.empty()) return;
  }
}

void tool_stream::stream_call(out& o, std::string_view body) {
  open_call& c = call_;
  if (!c.named) {  // the name, once its string is whole
    const size_t at = value_at(body, "name");
    if (at == std::string_view::npos || at >= body.size() || body[at] != '"') return;
    size_t close = at + 1;
    while (close < body.size() && body[close] != '"') close += body[close] == '\\' ? 2 : 1;
    if (close >= body.size()) return;
    const json name = json::parse(body.substr(at, close + 1 - at), nullptr, false);
    if (!name.is_string()) return;
    c.named = true;
    o.deltas.push_back({next_index_++, name.get<std::string>(), ""});
  }
  if (c.args_at == std::string::npos) {
    const size_t at = value_at(body, "arguments");
    if (at == std::string_view::npos || at >= body.size()) return;
    c.args_at = c.scanned = at;
    c.streamable = body[at] == '{';  // (a string holding the object goes whole, at the end)
  }
  if (!c.streamable || c.end != std::string::npos) return;
  for (; c.scanned < body.size() && c.end == std::string::npos; ++c.scanned) {  // up to where the object closes
    const char ch = body[c.scanned];
    if (c.in_string) {
      if (c.escaped) c.escaped = false;
      else if (ch == '\\') c.escaped = true;
      else if (ch == '"') c.in_string = false;
    } else if (ch == '"') {
      c.in_string = true;
    } else if (ch == '{' || ch == '[') {
      ++c.depth;
    } else if ((ch == '}' || ch == ']') && --c.depth == 0) {
      c.end = c.scanned + 1;
    }
  }
  const size_t upto = c.end != std::string::npos ? c.end : body.size();
  if (upto > c.args_at + c.sent) {
    o.deltas.push_back({next_index_ - 1, "", std::string(body.substr(c.args_at + c.sent, upto - c.args_at - c.sent))});
    c.sent = upto - c.args_at;
  }
}

void tool_stream::close_call(out& o, parsed_call c) {
  if (!call_.named) o.deltas.push_back({next_index_++, c.name, c.arguments});  // (nothing streamed: the whole call)
  else if (call_.sent < c.arguments.size() && !(call_.streamable && call_.end != std::string::npos))
    o.deltas.push_back({next_index_ - 1, "", c.arguments.substr(call_.sent)});  // (what could not stream)
  o.calls.push_back(std::move(c));
}

tool_stream::out tool_stream::add(std::string_view text) {
  held_ += text;
  out o;
  if (format_ != tool_format::qwen) {  // a reply that opens as a call is held whole (calls, or else content at the end)
    if (whole_ == 0) whole_ = lead_of(held_, format_);
    if (whole_ == 2) o.content = std::move(held_), held_.clear();
    return o;
  }
  take(o, false);
  return o;
}

tool_stream::out tool_stream::finish() {
  out o;
  if (format_ != tool_format::qwen) {
    std::vector<parsed_call> calls;
    std::string_view rest = held_;  // (what is not calls: content)
    if (whole_ == 1 && format_ == tool_format::llama31) {
      if (auto c = call_of(std::string_view(held_))) calls.push_back(std::move(*c)), rest = {};
    } else if (whole_ == 1) {  // a list of calls; or one cut short (by the token limit): the calls that closed, the rest as text
      const std::string_view text = call_text(held_, format_);
      const json list = json::parse(text, nullptr, false);
      const auto cut = list.is_discarded() ? items_cut_short(text) : std::nullopt;
      std::vector<json> items;
      if (list.is_array()) items.assign(list.begin(), list.end());
      if (cut)
        for (const auto item : cut->whole) items.push_back(json::parse(item, nullptr, false));
      for (const json& item : items)
        if (auto c = call_of(item)) calls.push_back(std::move(*c));
      if (calls.size() != items.size()) calls.clear();
      else if (!calls.empty()) rest = cut ? cut->open : std::string_view();
    }
    o.content = std::string(rest);
    for (auto& c : calls) close_call(o, std::move(c));
    held_.clear();
    return o;
  }
  take(o, true);
  if (after_call_) o.content = std::string(trimmed(o.content));
  return o;
}

}  // namespace hotcold::server
