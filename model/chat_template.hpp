#pragma once
// Chat templates: a conversation (system / user / assistant messages) as the prompt text a chat model
// was trained on. A GGUF file carries its template as Jinja (`tokenizer.chat_template`); no Jinja
// engine is packaged for C++ here, so — as llama.cpp did for years — the common families are
// recognised from the template's text and each is applied as its published template writes it
// (special tokens, BOS rules, the assistant prefix), byte for byte (docs/chat-templates.md).
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/vocab.hpp"

namespace hotcold {

enum class chat_family { llama2, llama3, chatml, phi3, mistral, gemma, zephyr, falcon };

// A bad template name, an unrecognised template, or a conversation the template cannot write (a role
// it does not know, turns that do not alternate where it requires them to). what() says which.
class chat_template_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A call an assistant message made: the function's name and its arguments, a JSON object's text.
struct tool_call {
  std::string name;
  std::string arguments;
  std::string id = {};  // the call's id (Mistral's templates write it; others leave it out)
};

struct chat_message {
  std::string role;  // "system", "user", "assistant", or "tool" (a tool's result: families with tools)
  std::string content;
  std::vector<tool_call> tool_calls = {};  // an assistant's calls (families with tools)
  std::string tool_call_id = {};           // a tool's result: the id of the call it answers (Mistral's templates write it)
};

// A rendered conversation: the text, and the byte ranges of it that are message contents (tokenized
// as plain text: a user who types "<|im_end|>" gets those characters, not the control token).
struct chat_prompt {
  std::string text;
  std::vector<std::pair<size_t, size_t>> contents;  // [begin, end) byte offsets, ascending
};

// JSON text as Python's json.dumps writes it, which is what chat templates' tojson writes: indent < 0,
// one line with ", " and ": " between items; else json.dumps(indent=N)'s lines. Keys in their order,
// non-ASCII as it is. Throws chat_template_error for text that is not JSON.
std::string python_json(std::string_view json_text, int indent = -1);

// A call's id as Mistral's v3 templates take it (9 letters or digits): an id that is one, as it is; any
// other, its last 9 letters and digits (zeros before, where it has fewer), so that a call and the
// result that names it still match. Throws chat_template_error, naming message `message`, for none.
std::string mistral_call_id(std::string_view id, size_t message);

class chat_template {
 public:
  // The family a template's Jinja text belongs to; throws chat_template_error for one hotcold does
  // not recognise (or an empty one), naming the families --chat-template accepts.
  static chat_template detect(std::string_view jinja);
  // A family by name (--chat-template): llama2, llama3, llama3.1 (its system block with the dates, and
  // tools), chatml, qwen (chatml with Qwen's default system message), qwen2.5 (Qwen 2.5's: its default
  // system message, and tools), phi3, mistral (v0.2's), mistral-v3 (Mistral-7B-Instruct-v0.3's and
  // Mistral-Large-2407's, with tools), mistral-v3-tekken (Mistral-Nemo's: v3 without the spaces),
  // gemma, zephyr, falcon.
  static chat_template named(std::string_view name);
  // The names named() accepts, comma-separated, for messages and --help.
  static std::string names();
  // The template to apply: named(name) when a name is given (--chat-template); else the family of the
  // model's template text; else — a model without a template — ChatML, as llama.cpp does, with `note`
  // (when given) set to a line saying so. Throws chat_template_error for an unrecognised template.
  static chat_template choose(std::string_view model_template, std::string_view name, std::string* note = nullptr);

  // The Jinja text of the published template of a family (named()'s names; the one each family's
  // rendering follows, as GGUF files carry it), for files made here (gen-model --chat-template).
  static std::string_view published(std::string_view name);

  chat_family family() const { return family_; }
  std::string_view name() const;
  // The system message written when the conversation has none (Qwen's ChatML templates); empty: none.
  const std::string& default_system() const { return default_system_; }

  // Whether the template writes tools, calls and their results: Qwen 2.5's (tools in the system
  // message, <tool_call> and <tool_response> tags), Llama 3.1's (tools in the first user message, a
  // call as one JSON object, results under the ipython header) or Mistral's v3 (tools before the last
  // user message, calls after [TOOL_CALLS], results in [TOOL_RESULTS], each with a 9-character id).
  bool has_tools() const { return tools_; }

  // The conversation as the template writes it. bos / eos: the texts of the vocabulary's BOS and EOS
  // tokens, where the template writes them. add_generation_prompt: end with the assistant's prefix
  // (families whose template always ends with the user's turn ignore it). tools: the functions offered,
  // each {"type": "function", "function": {...}} as JSON text (written as the template writes JSON).
  chat_prompt render(std::span<const chat_message> messages, bool add_generation_prompt, std::string_view bos, std::string_view eos,
                     std::span<const std::string> tools = {}) const;
  // render() with the vocabulary's BOS/EOS texts, tokenized: the template's control tokens as tokens,
  // the contents as plain text, no BOS/EOS added besides what the template writes.
  std::vector<token_id> tokenize(const vocab& v, std::span<const chat_message> messages, bool add_generation_prompt, std::span<const std::string> tools = {}) const;

 private:
  chat_template(chat_family f, std::string default_system, bool bos = true, bool tools = false, bool tekken = false)
      : family_(f), default_system_(std::move(default_system)), bos_(bos), tools_(tools), tekken_(tekken) {}
  chat_family family_;
  std::string default_system_;
  bool bos_;    // whether the template writes BOS (llama2, llama3, phi3, mistral, gemma: where its text says bos_token)
  bool tools_;  // the template writes tools (detected from its text, or qwen2.5 / llama3.1 / mistral-v3 by name)
  bool tekken_;  // Mistral's v3-tekken: its markers without the spaces v3 writes after them
};

}  // namespace hotcold
