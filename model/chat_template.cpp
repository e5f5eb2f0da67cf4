#include "model/chat_template.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <initializer_list>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace hotcold {

namespace {

struct family_name {
  std::string_view name;
  chat_family family;
};
// (qwen: chatml with Qwen2's default system message.)
constexpr std::array<family_name, 13> family_names{{{"llama2", chat_family::llama2},
                                                   {"llama3", chat_family::llama3},
                                                   {"llama3.1", chat_family::llama3},
                                                   {"chatml", chat_family::chatml},
                                                   {"qwen", chat_family::chatml},
                                                   {"qwen2.5", chat_family::chatml},
                                                   {"phi3", chat_family::phi3},
                                                   {"mistral", chat_family::mistral},
                                                   {"mistral-v3", chat_family::mistral},
                                                   {"mistral-v3-tekken", chat_family::mistral},
                                                   {"gemma", chat_family::gemma},
                                                   {"zephyr", chat_family::zephyr},
                                                   {"falcon", chat_family::falcon}}};

constexpr std::string_view qwen_default_system = "You are a helpful assistant.";
constexpr std::string_view qwen25_default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

// What Python's str.strip() and Jinja's trim take off (ASCII whitespace).
constexpr std::string_view blanks = " \t\n\r\f\v";

// Python's str.strip() / Jinja's trim: whitespace off both ends.
std::string_view strip(std::string_view s) {
  const size_t b = s.find_first_not_of(blanks);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(blanks) - b + 1);
}

// ChatML's default system message where the template writes one for conversations without their own
// (Qwen: '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' inside a string literal).
std::string chatml_default_system(std::string_view t) {
  for (std::string_view open : {std::string_view("<|im_start|>system\\n"), std::string_view("<|im_start|>system\n")}) {
    for (size_t at = t.find(open); at != std::string_view::npos; at = t.find(open, at + 1)) {  // (Qwen 2.5's: the tools' branch first)
      const size_t from = at + open.size(), to = t.find("<|im_end|>", from);
      if (to == std::string_view::npos) continue;
      const std::string_view text = t.substr(from, to - from);
      // A literal only: a template that writes the system message from a variable has no default.
      if (text.empty() || text.find_first_of("{}'\"+") != std::string_view::npos) continue;
      std::string out;
      for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == 'n') out += '\n', ++i;
        else out += text[i];
      }
      return out;
    }
  }
  return {};
}

// The prompt being written: template text as it is, contents with their byte ranges.
struct writer {
  chat_prompt p;
  void lit(std::string_view s) { p.text += s; }
  void content(std::string_view s) {
    if (s.empty()) return;
    p.contents.emplace_back(p.text.size(), p.text.size() + s.size());
    p.text += s;
  }
};

// Parts of one text (template text, or a message's content when `content`) written with whitespace
// taken off both ends of their concatenation, as Python's strip() / Jinja's trim do to the whole.
struct part {
  std::string_view text;
  bool content;
};
void write_stripped(writer& w, std::initializer_list<part> parts) {
  std::vector<part> ps(parts);
  for (auto& p : ps) {  // from the front
    const size_t b = p.text.find_first_not_of(blanks);
    if (b != std::string_view::npos) {
      p.text = p.text.substr(b);
      break;
    }
    p.text = {};
  }
  for (auto it = ps.rbegin(); it != ps.rend(); ++it) {  // from the back
    const size_t e = it->text.find_last_not_of(blanks);
    if (e != std::string_view::npos) {
      it->text = it->text.substr(0, e + 1);
      break;
    }
    it->text = {};
  }
  for (const auto& p : ps) p.content ? w.content(p.text) : w.lit(p.text);
}

void check_roles(std::span<const chat_message> messages, std::string_view family) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (!messages[i].tool_calls.empty() || r == "tool")
      throw chat_template_error(fmt::format("message {}: the {} template writes no tool calls or results (tools: a template that has them, such as qwen2.5's)", i, family));
    if (r != "system" && r != "user" && r != "assistant")
      throw chat_template_error(fmt::format("message {}: role \"{}\" is not one the {} template writes (system, user, assistant)", i, r, family));
    if (r == "system" && i > 0) throw chat_template_error(fmt::format("message {}: the {} template takes a system message only first", i, family));
  }
}

// Templates that raise unless user and assistant turns alternate from a user turn, after an optional
// system message (written by llama2 inside its first turn; folded by mistral and gemma, which have no
// system role, into the first user turn: its text, a blank line, then the user's).
struct turns {
  bool has_system = false;
  std::string_view system;
  std::span<const chat_message> rest;
};
turns alternating(std::span<const chat_message> messages, std::string_view family) {
  check_roles(messages, family);
  turns t;
  t.rest = messages;
  if (!messages.empty() && messages[0].role == "system") t.has_system = true, t.system = messages[0].content, t.rest = messages.subspan(1);
  for (size_t i = 0; i < t.rest.size(); ++i)
    if ((t.rest[i].role == "user") != (i % 2 == 0))
      throw chat_template_error(fmt::format("the {} template needs user and assistant turns to alternate, starting with the user (message {} is the {}'s)",
                                            family, i + (t.has_system ? 1 : 0), t.rest[i].role));
  return t;
}

}  // namespace

chat_template chat_template::detect(std::string_view t) {
  if (strip(t).empty()) throw chat_template_error(fmt::format("the model has no chat template; pass --chat-template with one of: {}", names()));
  // (Whether BOS is written: the families that write it where their template's text says bos_token;
  // Phi-3.5's template, unlike Phi-3's, does not.)
  const bool bos = contains(t, "bos_token");
  if (contains(t, "<|im_start|>")) return {chat_family::chatml, chatml_default_system(t), true, contains(t, "<tool_call>")};
  if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) return {chat_family::llama3, {}, bos, contains(t, "Environment: ipython")};
  if (contains(t, "<start_of_turn>")) return {chat_family::gemma, {}, bos};
  // Mistral's v3 templates (v0.3, Large 2407; Nemo's tekken one without the spaces) write tools.
  if (contains(t, "[AVAILABLE_TOOLS]")) return {chat_family::mistral, {}, bos, true, contains(t, "[AVAILABLE_TOOLS][")};
  if (contains(t, "[INST]")) return {contains(t, "<<SYS>>") ? chat_family::llama2 : chat_family::mistral, {}, bos};
  if (contains(t, "<|assistant|>") && contains(t, "<|end|>")) return {chat_family::phi3, {}, bos};
  if (contains(t, "<|user|>") && contains(t, "<|assistant|>")) {
    // Zephyr ends every turn with EOS; Falcon 3 with a newline.
    const bool zephyr = contains(t, "<|endoftext|>") || contains(t, "'<|user|>\\n' + message['content'] + eos_token") ||
                        contains(t, "'<|user|>\n' + message['content'] + eos_token");
    return {zephyr ? chat_family::zephyr : chat_family::falcon, {}};
  }
  throw chat_template_error(fmt::format("the model's chat template is not one hotcold recognises; pass --chat-template with one of: {}", names()));
}

chat_template chat_template::named(std::string_view name) {
  for (const auto& f : family_names)
    if (f.name == name)
      return {f.family, name == "qwen" ? std::string(qwen_default_system) : name == "qwen2.5" ? std::string(qwen25_default_system) : std::string(), true,
              name == "qwen2.5" || name == "llama3.1" || name.starts_with("mistral-v3"), name == "mistral-v3-tekken"};
  throw chat_template_error(fmt::format("unknown chat template \"{}\" (one of: {})", name, names()));
}

chat_template chat_template::choose(std::string_view model_template, std::string_view name, std::string* note) {
  if (!name.empty()) return named(name);
  if (strip(model_template).empty()) {
    if (note) *note = "the model has no chat template: using chatml (--chat-template NAME chooses another)";
    return named("chatml");
  }
  return detect(model_template);
}

std::string chat_template::names() {
  std::string s;
  for (const auto& f : family_names) s += (s.empty() ? "" : ", ") + std::string(f.name);
  return s;
}

std::string_view chat_template::name() const {
  if (family_ == chat_family::chatml && tools_ && default_system_ == qwen25_default_system) return "qwen2.5";
  if (family_ == chat_family::llama3 && tools_) return "llama3.1";
  if (family_ == chat_family::mistral && tools_) return tekken_ ? "mistral-v3-tekken" : "mistral-v3";
  if (family_ == chat_family::chatml && !default_system_.empty()) return "qwen";
  for (const auto& f : family_names)
    if (f.family == family_) return f.name;
  return "?";
}

namespace {

// Qwen 2.5's template: with tools, the system message (the conversation's first, else the default)
// and the tools' section; an assistant's calls as <tool_call> blocks after its text; consecutive tool
// results as <tool_response> blocks of one user turn.
void chatml_tools(writer& w, std::span<const chat_message> messages, std::span<const std::string> tools, const std::string& default_system) {
  const bool system_first = !messages.empty() && messages[0].role == "system";
  if (!tools.empty()) {
    w.lit("<|im_start|>system\n");
    if (system_first) w.content(messages[0].content), w.lit("\n\n");
    else if (!default_system.empty()) w.lit(default_system), w.lit("\n\n");
    w.lit("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (const auto& t : tools) w.lit("\n"), w.content(python_json(t));
    w.lit("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
          "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
  } else if (system_first) {
    w.lit("<|im_start|>system\n"), w.content(messages[0].content), w.lit("<|im_end|>\n");
  } else if (!default_system.empty()) {
    w.lit("<|im_start|>system\n"), w.lit(default_system), w.lit("<|im_end|>\n");
  }
  for (size_t i = system_first ? 1 : 0; i < messages.size(); ++i) {
    const chat_message& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
      throw chat_template_error(fmt::format("message {}: role \"{}\" is not one the chatml template writes (system, user, assistant, tool)", i, m.role));
    if (!m.tool_calls.empty() && m.role != "assistant") throw chat_template_error(fmt::format("message {}: only an assistant's message makes tool calls", i));
    if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") w.lit("<|im_start|>user");
      w.lit("\n<tool_response>\n"), w.content(m.content), w.lit("\n</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") w.lit("<|im_end|>\n");
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      w.lit("<|im_start|>assistant");
      if (!m.content.empty()) w.lit("\n"), w.content(m.content);
      for (const auto& c : m.tool_calls) {
        w.lit("\n<tool_call>\n{\"name\": \""), w.content(c.name), w.lit("\", \"arguments\": "), w.content(python_json(c.arguments)), w.lit("}\n</tool_call>");
      }
      w.lit("<|im_end|>\n");
    } else {
      w.lit("<|im_start|>"), w.lit(m.role), w.lit("\n"), w.content(m.content), w.lit("<|im_end|>\n");
    }
  }
}

// Llama 3.1's template (its published Jinja, tools_in_user_message as it defaults): a system block
// always, with "Environment: ipython" where there are tools, the knowledge and today's dates (its
// default date_string) and the system message; the tools in the first user message with their
// instructions, each as json.dumps(indent=4); a call as {"name", "parameters"} (one a message); a
// tool's result under the ipython header, as tojson writes it (a JSON string: quoted).
void llama31_tools(writer& w, std::span<const chat_message> messages, std::span<const std::string> tools) {
  const bool system_first = !messages.empty() && messages[0].role == "system";
  w.lit("<|start_header_id|>system<|end_header_id|>\n\n");
  if (!tools.empty()) w.lit("Environment: ipython\n");
  w.lit("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
  if (system_first) w.content(strip(messages[0].content));
  w.lit("<|eot_id|>");
  size_t i = system_first ? 1 : 0;
  if (!tools.empty()) {
    if (i == messages.size()) throw chat_template_error("the llama3.1 template puts the tools in the first user message, and there is none");
    w.lit("<|start_header_id|>user<|end_header_id|>\n\n");
    w.lit("Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n"
          "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n");
    for (const auto& t : tools) w.content(python_json(t, 4)), w.lit("\n\n");
    w.content(strip(messages[i].content)), w.lit("<|eot_id|>");
    ++i;
  }
  for (; i < messages.size(); ++i) {
    const chat_message& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
      throw chat_template_error(fmt::format("message {}: role \"{}\" is not one the llama3.1 template writes (system, user, assistant, tool)", i, m.role));
    if (!m.tool_calls.empty()) {
      if (m.role != "assistant" || m.tool_calls.size() != 1)
        throw chat_template_error(fmt::format("message {}: the llama3.1 template writes one call a message, an assistant's", i));
      w.lit("<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \""), w.content(m.tool_calls[0].name), w.lit("\", \"parameters\": ");
      w.content(python_json(m.tool_calls[0].arguments)), w.lit("}<|eot_id|>");
    } else if (m.role == "tool") {  // (its text through tojson: a string is iterable in Jinja, so it comes quoted)
      w.lit("<|start_header_id|>ipython<|end_header_id|>\n\n");
      w.content(nlohmann::ordered_json(m.content).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)), w.lit("<|eot_id|>");
    } else {
      w.lit("<|start_header_id|>"), w.lit(m.role), w.lit("<|end_header_id|>\n\n"), w.content(strip(m.content)), w.lit("<|eot_id|>");
    }
  }
}


// Mistral's v3 template (Mistral-7B-Instruct-v0.3, Large 2407; tekken: Nemo's, without the spaces): BOS;
// the system message, where there is one, folded into the conversation's last message when that is
// the user's (and nowhere else); the tools before the last user message (and any earlier one of the
// same text, as the template compares them), each function's fields as the template joins them
// (strings unescaped); an assistant's calls as one [TOOL_CALLS] list with their ids, its text left
// out; a tool's result as raw text with the id of its call. Ids are mistral_call_id()'s.
void mistral_v3(writer& w, std::span<const chat_message> messages, std::span<const std::string> tools, bool tekken, std::string_view eos) {
  const std::string_view gap = tekken ? "" : " ";
  const bool system_first = !messages.empty() && messages[0].role == "system";
  const auto rest = messages.subspan(system_first ? 1 : 0);
  const chat_message* last_user = nullptr;
  size_t turn = 0;
  for (size_t i = 0; i < rest.size(); ++i) {
    const chat_message& m = rest[i];
    const size_t at = i + (system_first ? 1 : 0);
    if (m.role != "user" && m.role != "assistant" && m.role != "tool")
      throw chat_template_error(fmt::format("message {}: role \"{}\" is not one the mistral-v3 template writes (a first system message, then user, assistant, tool)", at, m.role));
    if (!m.tool_calls.empty() && m.role != "assistant") throw chat_template_error(fmt::format("message {}: only an assistant's message makes tool calls", at));
    if (m.role == "user") last_user = &m;
    if (m.role == "tool" || !m.tool_calls.empty()) continue;  // (calls and results stand outside the alternation)
    if ((m.role == "user") != (turn++ % 2 == 0))
      throw chat_template_error(fmt::format("the mistral-v3 template needs user and assistant turns to alternate, starting with the user (message {} is the {}'s)", at, m.role));
  }
  for (size_t i = 0; i < rest.size(); ++i) {
    const chat_message& m = rest[i];
    const size_t at = i + (system_first ? 1 : 0);
    if (m.role == "user") {
      if (!tools.empty() && m.content == last_user->content) {
        w.lit("[AVAILABLE_TOOLS]"), w.lit(gap), w.lit("[");
        for (size_t k = 0; k < tools.size(); ++k) {
          const auto f = nlohmann::ordered_json::parse(tools[k], nullptr, false).value("function", nlohmann::ordered_json::object());
          std::string fields;
          for (const auto& [key, val] : f.items()) {
            if (key == "return") continue;
            fields += fields.empty() ? "" : ", ";
            fields += "\"" + key + (val.is_string() ? "\": \"" + val.get<std::string>() + "\"" : "\": " + python_json(val.dump()));
          }
          w.lit("{\"type\": \"function\", \"function\": {"), w.content(fields), w.lit(k + 1 < tools.size() ? "}}, " : "}}]");
        }
        w.lit("[/AVAILABLE_TOOLS]");
      }
      w.lit("[INST]"), w.lit(gap);
      if (i + 1 == rest.size() && system_first) w.content(messages[0].content), w.lit("\n\n");
      w.content(m.content), w.lit("[/INST]");
    } else if (!m.tool_calls.empty()) {
      w.lit("[TOOL_CALLS]"), w.lit(gap), w.lit("[");
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const tool_call& c = m.tool_calls[k];
        const std::string function = python_json(nlohmann::ordered_json{{"name", c.name}, {"arguments", nlohmann::ordered_json::parse(c.arguments, nullptr, false)}}.dump());
        w.content(std::string_view(function).substr(0, function.size() - 1)), w.lit(", \"id\": \""), w.content(mistral_call_id(c.id, at)), w.lit("\"}");
        w.lit(k + 1 < m.tool_calls.size() ? ", " : "]"), w.lit(k + 1 < m.tool_calls.size() ? "" : eos);
      }
    } else if (m.role == "assistant") {
      w.lit(gap), w.content(tekken ? std::string_view(m.content) : strip(m.content)), w.lit(eos);
    } else {
      w.lit("[TOOL_RESULTS]"), w.lit(gap), w.lit("{\"content\": "), w.content(m.content), w.lit(", \"call_id\": \""), w.content(mistral_call_id(m.tool_call_id, at));
      w.lit("\"}[/TOOL_RESULTS]");
    }
  }
}
}  // namespace

std::string mistral_call_id(std::string_view id, size_t message) {
  if (id.empty()) throw chat_template_error(fmt::format("message {}: the mistral-v3 template writes each call's id and each tool result's tool_call_id; this one has none", message));
  std::string alnum;
  for (char c : id)
    if (std::isalnum(static_cast<unsigned char>(c))) alnum += c;
  if (alnum.size() >= 9) return alnum.substr(alnum.size() - 9);
  return std::string(9 - alnum.size(), '0') + alnum;
}

std::string python_json(std::string_view text, int indent) {
  const auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded()) throw chat_template_error(fmt::format("not JSON: {}", text.substr(0, 64)));
  if (indent >= 0) return j.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);  // (json.dumps(indent=N)'s layout)
  auto one = [](const auto& self, const nlohmann::ordered_json& v) -> std::string {
    if (v.is_object()) {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        out += (first ? "" : ", ") + nlohmann::ordered_json(k).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + ": " + self(self, x);
        first = false;
      }
      return out + "}";
    }
    if (v.is_array()) {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + self(self, v[i]);
      return out + "]";
    }
    return v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  };
  return one(one, j);
}

chat_prompt chat_template::render(std::span<const chat_message> messages, bool add_generation_prompt, std::string_view bos, std::string_view eos,
                                  std::span<const std::string> tools) const {
  if (!tools.empty() && !tools_)
    throw chat_template_error(fmt::format("the {} template has no tools (tools: a model whose template has them, or --chat-template qwen2.5)", name()));
  writer w;
  switch (family_) {
    case chat_family::llama2: {
      // meta-llama/Llama-2-7b-chat-hf: BOS and [INST] before every user turn, the system message
      // inside the first one between <<SYS>> markers, each turn stripped; ends with the user's turn.
      const turns t = alternating(messages, "llama2");
      for (size_t i = 0; i < t.rest.size(); ++i) {
        const std::string_view c = t.rest[i].content;
        if (t.rest[i].role == "user") {
          if (bos_) w.lit(bos);
          w.lit("[INST] ");
          if (i == 0 && t.has_system) write_stripped(w, {{"<<SYS>>\n", false}, {t.system, true}, {"\n<</SYS>>\n\n", false}, {c, true}});
          else w.content(strip(c));
          w.lit(" [/INST]");
        } else {
          w.lit(" "), w.content(strip(c)), w.lit(" "), w.lit(eos);
        }
      }
      break;
    }
    case chat_family::llama3: {
      // Meta-Llama-3(.1)-Instruct: BOS, then each message under its role's header, trimmed, ended by
      // <|eot_id|>; the assistant's header opens its turn.
      if (tools_) {
        if (bos_) w.lit(bos);
        llama31_tools(w, messages, tools);
        if (add_generation_prompt) w.lit("<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
      }
      check_roles(messages, "llama3");
      if (bos_) w.lit(bos);
      for (const auto& m : messages) {
        w.lit("<|start_header_id|>"), w.lit(m.role), w.lit("<|end_header_id|>\n\n");
        w.content(strip(m.content)), w.lit("<|eot_id|>");
      }
      if (add_generation_prompt) w.lit("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    }
    case chat_family::chatml: {
      // ChatML (Qwen, OpenHermes, Yi...): each message between <|im_start|>role and <|im_end|>, no BOS;
      // Qwen's templates write their default system message when the conversation has none.
      if (tools_) {
        chatml_tools(w, messages, tools, default_system_);
      } else {
        check_roles(messages, "chatml");
        if (!tools.empty()) throw chat_template_error("the chatml template has no tools (a model whose template has <tool_call>, or --chat-template qwen2.5)");
        if (!default_system_.empty() && (messages.empty() || messages[0].role != "system"))
          w.lit("<|im_start|>system\n"), w.lit(default_system_), w.lit("<|im_end|>\n");
        for (const auto& m : messages) w.lit("<|im_start|>"), w.lit(m.role), w.lit("\n"), w.content(m.content), w.lit("<|im_end|>\n");
      }
      if (add_generation_prompt) w.lit("<|im_start|>assistant\n");
      break;
    }
    case chat_family::phi3: {
      // Phi-3 (mini-4k-instruct): BOS, <|role|>, the message, <|end|>; the assistant's tag, or EOS
      // without a generation prompt.
      check_roles(messages, "phi3");
      if (bos_) w.lit(bos);
      for (const auto& m : messages) w.lit("<|"), w.lit(m.role), w.lit("|>\n"), w.content(m.content), w.lit("<|end|>\n");
      if (add_generation_prompt) w.lit("<|assistant|>\n");
      else w.lit(eos);
      break;
    }
    case chat_family::mistral: {
      // Mistral-7B-Instruct-v0.2 / Mixtral-8x7B-Instruct: BOS once, [INST] ... [/INST] around user
      // turns, EOS after the assistant's; no system role (folded into the first user turn).
      if (tools_) {
        if (bos_) w.lit(bos);
        mistral_v3(w, messages, tools, tekken_, eos);
        break;
      }
      const turns t = alternating(messages, "mistral");
      if (bos_) w.lit(bos);
      for (size_t i = 0; i < t.rest.size(); ++i) {
        if (t.rest[i].role == "user") {
          w.lit("[INST] ");
          if (i == 0 && t.has_system) w.content(t.system), w.lit("\n\n");
          w.content(t.rest[i].content), w.lit(" [/INST]");
        } else {
          w.content(t.rest[i].content), w.lit(eos);
        }
      }
      break;
    }
    case chat_family::gemma: {
      // gemma-7b-it: BOS, <start_of_turn>user|model, the trimmed message, <end_of_turn>; no system role
      // (folded into the first user turn).
      const turns t = alternating(messages, "gemma");
      if (bos_) w.lit(bos);
      for (size_t i = 0; i < t.rest.size(); ++i) {
        const bool user = t.rest[i].role == "user";
        w.lit("<start_of_turn>"), w.lit(user ? "user" : "model"), w.lit("\n");
        if (i == 0 && t.has_system) write_stripped(w, {{t.system, true}, {"\n\n", false}, {t.rest[i].content, true}});
        else w.content(strip(t.rest[i].content));
        w.lit("<end_of_turn>\n");
      }
      if (add_generation_prompt) w.lit("<start_of_turn>model\n");
      break;
    }
    case chat_family::zephyr: {
      // HuggingFaceH4/zephyr-7b-beta: <|role|>, the message, EOS and a newline; no BOS.
      check_roles(messages, "zephyr");
      for (const auto& m : messages) w.lit("<|"), w.lit(m.role), w.lit("|>\n"), w.content(m.content), w.lit(eos), w.lit("\n");
      if (add_generation_prompt) w.lit("<|assistant|>\n");
      break;
    }
    case chat_family::falcon: {
      // Falcon 3 (as llama.cpp writes it): <|role|>, the message and a newline; no BOS.
      check_roles(messages, "falcon");
      for (const auto& m : messages) w.lit("<|"), w.lit(m.role), w.lit("|>\n"), w.content(m.content), w.lit("\n");
      if (add_generation_prompt) w.lit("<|assistant|>\n");
      break;
    }
  }
  return std::move(w.p);
}

std::vector<token_id> chat_template::tokenize(const vocab& v, std::span<const chat_message> messages, bool add_generation_prompt,
                                             std::span<const std::string> tools) const {
  const std::string bos = v.bos() == no_token ? std::string() : std::string(v.text(v.bos()));
  const std::string eos = v.eos() == no_token ? std::string() : std::string(v.text(v.eos()));
  const chat_prompt p = render(messages, add_generation_prompt, bos, eos, tools);
  return v.tokenize_outside(p.text, p.contents);
}

}  // namespace hotcold
