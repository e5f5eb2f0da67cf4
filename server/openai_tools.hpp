#pragma once
// Tool calls on /v1/chat/completions (docs/openai-api.md, "Tool calls"): the request's tools and
// tool_choice, the functions written into the prompt by the chat template (model/chat_template.hpp:
// Qwen 2.5's, Llama 3.1's and Mistral's v3 formats), a grammar that forces a well-formed call where tool_choice asks for
// one, and the model's text read back into calls — as it streams, so that content goes out at once
// and each call as soon as it closes.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/chat_template.hpp"

namespace hotcold::server {

struct tool_def {
  std::string name;
  std::string parameters;  // its JSON Schema, as JSON text
  std::string tool;        // the whole {"type": "function", "function": {...}}, as JSON text
};
// How a family's template has the model call: Qwen 2.5's <tool_call> blocks (one or more), Llama 3.1's
// reply that is one {"name", "parameters"} object, or Mistral's [TOOL_CALLS] and a list of {"name",
// "arguments"} objects (the marker a control token, which the reply's text leaves out).
enum class tool_format { qwen, llama31, mistral };
// The format of a template that has tools (Qwen's for those that have none: nothing is offered them).
tool_format tool_format_of(const chat_template& t);
struct tool_request {
  std::vector<tool_def> tools;
  std::string choice = "auto";  // auto, none, required, or one function's name
  bool parallel = true;         // parallel_tool_calls: several calls in one answer (Qwen's and Mistral's formats)
  tool_format format = tool_format::qwen;
  bool active() const { return !tools.empty() && choice != "none"; }
};

// tools, tool_choice and parallel_tool_calls of a chat request; throws std::invalid_argument naming the
// field (its first word) and what is wrong.
tool_request tools_of(const nlohmann::ordered_json& body);

// The GBNF of one call (or, with parallel in Qwen's and Mistral's formats, one or more), its arguments valid against
// the chosen function's parameters (required: any of the tools).
std::string call_grammar(const tool_request& t);

// A call's arguments as a JSON object: the object itself, or a string holding one (as the API sends
// them); nullopt for anything else.
std::optional<nlohmann::ordered_json> arguments_object(const nlohmann::ordered_json& args);

struct parsed_call {
  std::string name, arguments;  // arguments: the JSON object as the model wrote it
};
// A piece of a call as it streams (OpenAI's deltas): its name first (with what of its arguments is
// in), then more of its arguments.
struct call_delta {
  size_t index = 0;
  std::string name;  // on a call's first delta only
  std::string arguments;
};

// A reply's text as it streams: content (released as soon as it cannot be the start of a call), each
// call's name and arguments as they come (deltas), and the calls, each once its </tool_call> is in.
// Streamed arguments put together are the call's arguments.
class tool_stream {
 public:
  explicit tool_stream(tool_format f = tool_format::qwen) : format_(f) {}
  struct out {
    std::string content;
    std::vector<call_delta> deltas;
    std::vector<parsed_call> calls;
  };
  out add(std::string_view text);
  out finish();  // the end of the text: what is held back, a call left open read as far as it goes

 private:
  void take(out& o, bool at_end);
  // The open call's name and arguments so far (Qwen's format), as deltas.
  void stream_call(out& o, std::string_view body);
  // A call that closed: its deltas finished (what had not streamed), and the call.
  void close_call(out& o, parsed_call c);
  struct open_call {
    bool named = false, streamable = true;
    size_t args_at = std::string::npos, scanned = 0, sent = 0, end = std::string::npos;  // in the call's body
    int depth = 0;
    bool in_string = false, escaped = false;
  };
  open_call call_;
  size_t next_index_ = 0;
  tool_format format_;
  std::string held_;
  bool in_call_ = false, after_call_ = false;
  int whole_ = 0;  // Llama 3.1's and Mistral's: 0 not known yet, 1 a call (held to the end), 2 content
};

}  // namespace hotcold::server
