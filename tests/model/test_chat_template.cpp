// Chat templates: each family's rendering of one fixed conversation, byte for byte, against the text
// its published Jinja template produces (worked out by hand from the template, written out below);
// recognition from template texts; the errors; and contents that are never read as control tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/chat_template.hpp"
#include "model/gguf.hpp"
#include "model/vocab.hpp"

namespace hotcold {
namespace {

// A system message, alternating turns, an assistant turn with spaces around it (the families that
// trim or strip show it) and a last user turn.
const std::vector<chat_message> conversation = {
    {"system", "You are a helpful assistant"}, {"user", "Hello"},    {"assistant", "Hi there"},
    {"user", "Who are you"},                   {"assistant", "   I am an assistant   "}, {"user", "Another question"},
};

std::string rendered(std::string_view name, const std::vector<chat_message>& messages, std::string_view bos, std::string_view eos, bool gen = true) {
  return chat_template::named(name).render(messages, gen, bos, eos).text;
}

TEST(ChatTemplate, Llama2WritesBosAndInstEveryUserTurnTheSystemInsideTheFirst) {
  // {% if messages[0]['role'] == 'system' %}...'<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + content
  // user: bos_token + '[INST] ' + content.strip() + ' [/INST]'; assistant: ' ' + content.strip() + ' ' + eos_token
  EXPECT_EQ(rendered("llama2", conversation, "<s>", "</s>"),
            "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s>"
            "<s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question [/INST]");
}

TEST(ChatTemplate, Llama3TrimsEachMessageUnderItsHeader) {
  EXPECT_EQ(rendered("llama3", conversation, "<|begin_of_text|>", "<|eot_id|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  // Without the generation prompt the last turn is the user's.
  const std::string no_gen = rendered("llama3", {{"user", "Hi"}}, "<|begin_of_text|>", "<|eot_id|>", false);
  EXPECT_EQ(no_gen, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplate, ChatMLKeepsContentsAsTheyAreAndQwenAddsItsDefaultSystem) {
  EXPECT_EQ(rendered("chatml", conversation, "<s>", "</s>"),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
            "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<chat_message> no_system(conversation.begin() + 1, conversation.begin() + 2);
  EXPECT_EQ(rendered("qwen", no_system, "", "<|im_end|>"),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  // With a system message of its own, no default.
  EXPECT_EQ(rendered("qwen", {conversation[0], conversation[1]}, "", "<|im_end|>"),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Phi3TagsEveryRoleAndEndsWithTheAssistantOrEos) {
  EXPECT_EQ(rendered("phi3", conversation, "<s>", "<|endoftext|>"),
            "<s><|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n"
            "<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n");
  EXPECT_EQ(rendered("phi3", {{"user", "Hi"}}, "<s>", "<|endoftext|>", false), "<s><|user|>\nHi<|end|>\n<|endoftext|>");
}

TEST(ChatTemplate, MistralWritesBosOnceAndFoldsTheSystemIntoTheFirstTurn) {
  EXPECT_EQ(rendered("mistral", conversation, "<s>", "</s>"),
            "<s>[INST] You are a helpful assistant\n\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   </s>"
            "[INST] Another question [/INST]");
}

TEST(ChatTemplate, GemmaCallsTheAssistantModelAndTrims) {
  EXPECT_EQ(rendered("gemma", conversation, "<bos>", "<eos>"),
            "<bos><start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n"
            "<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n"
            "<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplate, ZephyrEndsEveryTurnWithEos) {
  EXPECT_EQ(rendered("zephyr", conversation, "<s>", "</s>"),
            "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi there</s>\n<|user|>\nWho are you</s>\n"
            "<|assistant|>\n   I am an assistant   </s>\n<|user|>\nAnother question</s>\n<|assistant|>\n");
}

TEST(ChatTemplate, FalconEndsEveryTurnWithANewline) {
  EXPECT_EQ(rendered("falcon", conversation, "", "<|endoftext|>"),
            "<|system|>\nYou are a helpful assistant\n<|user|>\nHello\n<|assistant|>\nHi there\n<|user|>\nWho are you\n"
            "<|assistant|>\n   I am an assistant   \n<|user|>\nAnother question\n<|assistant|>\n");
}

// The texts of published templates (as GGUF files carry them: Jinja with \n escapes inside string
// literals) are recognised, and what they say about BOS and a default system message is kept.
TEST(ChatTemplate, RecognisesTheFamiliesFromTheirTemplates) {
  struct known {
    const char* text;
    const char* name;
  };
  const known templates[] = {
      {"{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
       "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
       "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
       "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
       "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
       "llama2"},
      {"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + "
       "'<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
       "{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}",
       "llama3"},
      {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
       "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
       "chatml"},
      {"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
       "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
       "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
       "qwen"},
      {"{{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + '<|end|>\\n' }}{% endfor %}"
       "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}",
       "phi3"},
      {"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
       "roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
       "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}",
       "mistral"},
      {"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
       "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
       "{{'<start_of_turn>model\\n'}}{% endif %}",
       "gemma"},
      {"{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + eos_token }}\n"
       "{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n"
       "{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n"
       "{% endif %}\n{% endfor %}",
       "zephyr"},
      {"{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'user' %}"
       "{{ '<|user|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + message['content'] + '\\n' }}"
       "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}",
       "falcon"},
  };
  for (const auto& k : templates) {
    const chat_template t = chat_template::detect(k.text);
    EXPECT_EQ(t.name(), k.name) << k.text;
  }
  // The texts gen-model writes into files are recognised as what they are.
  for (const char* name : {"llama2", "llama3", "chatml", "qwen", "phi3", "mistral", "gemma", "zephyr", "falcon"})
    EXPECT_EQ(chat_template::detect(chat_template::published(name)).name(), name);
  EXPECT_EQ(chat_template::detect(templates[3].text).default_system(), "You are a helpful assistant.");
  EXPECT_EQ(chat_template::detect(templates[2].text).default_system(), "");
  // Phi-3.5's template writes no BOS; Phi-3's does.
  const std::vector<chat_message> hi = {{"user", "Hi"}};
  const std::string phi35 =
      "{% for message in messages %}{% if message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}";
  EXPECT_EQ(chat_template::detect(phi35).render(hi, true, "<s>", "<|endoftext|>").text, "<|user|>\nHi<|end|>\n<|assistant|>\n");
  EXPECT_EQ(chat_template::detect(templates[4].text).render(hi, true, "<s>", "<|endoftext|>").text, "<s><|user|>\nHi<|end|>\n<|assistant|>\n");
}

TEST(ChatTemplate, ClearErrorsForWhatCannotBeWritten) {
  auto message_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const chat_template_error& e) {
      return e.what();
    }
    return "no error";
  };
  {
    const std::string unknown = message_of([] { chat_template::detect("{{ messages | tojson }}"); });
    EXPECT_NE(unknown.find("not one hotcold recognises"), std::string::npos) << unknown;
    EXPECT_NE(unknown.find("--chat-template"), std::string::npos) << unknown;
    EXPECT_NE(unknown.find("zephyr"), std::string::npos) << unknown;
  }
  EXPECT_NE(message_of([] { chat_template::detect(""); }).find("no chat template"), std::string::npos);
  EXPECT_NE(message_of([] { chat_template::named("vicuna"); }).find("unknown chat template \"vicuna\""), std::string::npos);
  const std::string role = message_of([] { chat_template::named("chatml").render(std::vector<chat_message>{{"function", "x"}}, true, "", ""); });
  EXPECT_NE(role.find("role \"function\""), std::string::npos) << role;
  const std::string tool = message_of([] { chat_template::named("chatml").render(std::vector<chat_message>{{"tool", "x"}}, true, "", ""); });
  EXPECT_NE(tool.find("writes no tool calls or results"), std::string::npos) << tool;
  const std::string order = message_of([] {
    chat_template::named("mistral").render(std::vector<chat_message>{{"user", "a"}, {"user", "b"}}, true, "<s>", "</s>");
  });
  EXPECT_NE(order.find("alternate"), std::string::npos) << order;
  EXPECT_NE(order.find("message 1"), std::string::npos) << order;
  EXPECT_NE(message_of([] { chat_template::named("llama3").render(std::vector<chat_message>{{"user", "a"}, {"system", "b"}}, true, "", ""); }).find("only first"),
            std::string::npos);
}

// Tokenized, the template's control tokens are tokens and the contents are text: a user who writes
// "</s>" does not end the turn.
TEST(ChatTemplate, ContentsAreNeverControlTokens) {
  const auto file = gguf::file::open(HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf");
  const vocab v = vocab::from_gguf(file);
  const std::vector<chat_message> messages = {{"user", "say </s> please"}, {"assistant", "ok"}, {"user", "again"}};
  const std::vector<token_id> ids = chat_template::named("llama2").tokenize(v, messages, true);
  // The template's BOS twice (one per user turn) and its EOS once (after the assistant's turn).
  EXPECT_EQ(std::count(ids.begin(), ids.end(), v.bos()), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), v.eos()), 1);
  EXPECT_EQ(ids.front(), v.bos());
  // The same prompt tokenized with every control token parsed has one more EOS: the user's.
  const chat_prompt p = chat_template::named("llama2").render(messages, true, "<s>", "</s>");
  const std::vector<token_id> all = v.tokenize(p.text, false, true);
  EXPECT_EQ(std::count(all.begin(), all.end(), v.eos()), 2);
  // Elsewhere both ways agree: the contents' text tokenized in place.
  const std::vector<chat_message> plain = {{"user", "Hello there"}};
  const chat_prompt q = chat_template::named("llama2").render(plain, true, "<s>", "</s>");
  EXPECT_EQ(chat_template::named("llama2").tokenize(v, plain, true), v.tokenize(q.text, false, true));
  EXPECT_EQ(v.detokenize(chat_template::named("llama2").tokenize(v, plain, true), true), q.text);
}

}  // namespace
// Qwen 2.5's template with tools (worked out from its published Jinja, above in chat_template.cpp):
// the system message then the tools' section, an assistant's calls as <tool_call> blocks, consecutive
// tool results as <tool_response> blocks of one user turn; without a system message its default.
TEST(ChatTemplate, Qwen25WritesToolsCallsAndResults) {
  const std::string tool =
      R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})";
  const std::vector<chat_message> m = {{"system", "Be brief."},
                                       {"user", "Weather in Paris?"},
                                       {"assistant", "", {{"get_weather", R"({"city": "Paris"})"}}},
                                       {"tool", R"({"temp": 21})"},
                                       {"tool", "sunny"},
                                       {"assistant", "It is 21."},
                                       {"user", "Thanks"}};
  const std::vector<std::string> tools{tool};
  const auto t = chat_template::named("qwen2.5");
  EXPECT_TRUE(t.has_tools());
  const std::string tools_section =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML "
      "tags:\n<tools>\n" + tool + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> "
      "XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  EXPECT_EQ(t.render(m, true, "", "", tools).text,
            "<|im_start|>system\nBe brief.\n\n" + tools_section +
                "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
                "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
                "<|im_start|>assistant\nIt is 21.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<chat_message> hi = {{"user", "Hi"}};
  EXPECT_EQ(t.render(hi, true, "", "", tools).text, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n" + tools_section +
                                                       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.render(hi, true, "", "").text, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                                            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // Recognised from its text; a template without tools refuses them, and calls in the history, by name.
  const auto detected = chat_template::detect(chat_template::published("qwen2.5"));
  EXPECT_TRUE(detected.has_tools());
  EXPECT_EQ(detected.name(), "qwen2.5");
  EXPECT_EQ(detected.default_system(), "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_FALSE(chat_template::detect(chat_template::published("qwen")).has_tools());
  auto refusal = [](auto&& f) {
    try {
      f();
    } catch (const chat_template_error& e) {
      return std::string(e.what());
    }
    return std::string("(written)");
  };
  EXPECT_NE(refusal([&] { chat_template::named("llama3").render(hi, true, "", "", tools); }).find("the llama3 template has no tools"), std::string::npos);
  EXPECT_NE(refusal([&] { chat_template::named("chatml").render(m, true, "", ""); }).find("writes no tool calls"), std::string::npos);
}

// Llama 3.1's template with tools (its published Jinja, tools in the first user message): the system
// block with "Environment: ipython" and the dates, the tools as json.dumps(indent=4), a call as one
// {"name", "parameters"} object, a result under the ipython header.
TEST(ChatTemplate, Llama31WritesToolsCallsAndResults) {
  const std::string tool = R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}})";
  const std::vector<chat_message> m = {{"system", "Be brief."},
                                       {"user", "Weather in Paris?"},
                                       {"assistant", "", {{"get_weather", R"({"city":"Paris"})"}}},
                                       {"tool", "sunny"},
                                       {"user", "Thanks"}};
  const auto t = chat_template::named("llama3.1");
  ASSERT_TRUE(t.has_tools());
  EXPECT_EQ(t.render(m, true, "<|begin_of_text|>", "<|eot_id|>", std::vector<std::string>{tool}).text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
            "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a function call "
            "with its proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of "
            "argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"
            "        \"parameters\": {\n            \"type\": \"object\"\n        }\n    }\n}\n\nWeather in Paris?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>"
            "<|start_header_id|>ipython<|end_header_id|>\n\n\"sunny\"<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nThanks<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(t.render(std::vector<chat_message>{{"user", " Hi "}}, true, "<|begin_of_text|>", "").text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_TRUE(chat_template::detect("{{- bos_token }}{%- if tools is not none %}{{- \"Environment: ipython\\n\" }}{%- endif %}<|start_header_id|>"
                                    "{{ message['role'] }}<|end_header_id|>").has_tools());
}

// Mistral's v3 templates (v0.3's and Nemo's tekken one, raw above in chat_template_published.cpp), each
// rendered by Jinja (Python's jinja2 with transformers' tojson) for three conversations and written out:
// the tools before the last user message, the system message folded into the last message only when it
// is the user's, calls with their ids after [TOOL_CALLS] with the assistant's text left out, results as
// raw text with their call's id; the v3 one trims the assistant's text, the tekken one does not.
TEST(ChatTemplate, MistralV3WritesToolsCallsAndResultsWhereItsTemplateDoes) {
  const std::string weather =
      R"({"type": "function", "function": {"name": "get_weather", "description": "Weather \"now\"", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true}})";
  const std::vector<std::string> tools{weather, R"({"type":"function","function":{"name":"noop","parameters":{"type":"object"}}})"};
  const std::vector<chat_message> calls = {{"system", "Be brief."},
                                           {"user", "Weather in Paris?"},
                                           {"assistant", "", {{"get_weather", R"({"city":"Paris"})", "abc123XYZ"}, {"noop", "{}", "n00p00000"}}},
                                           {"tool", R"({"temp": 21})", {}, "abc123XYZ"},
                                           {"tool", "done", {}, "n00p00000"},
                                           {"assistant", "  It is 21.  "},
                                           {"user", "Thanks"}};
  const std::vector<chat_message> ending_with_results(calls.begin(), calls.begin() + 5);
  struct rendering {
    std::string_view name, with_calls, ending_with_results, without_tools;
  };
  const rendering renderings[] = {
      {"mistral-v3",
       "<s>[INST] Weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\""
       ": \"abc123XYZ\"}, {\"name\": \"noop\", \"arguments\": {}, \"id\": \"n00p00000\"}]</s>[TOOL_RESULTS] {\"content\": {\"tem"
       "p\": 21}, \"call_id\": \"abc123XYZ\"}[/TOOL_RESULTS][TOOL_RESULTS] {\"content\": done, \"call_id\": \"n00p00000\"}[/TOOL"
       "_RESULTS] It is 21.</s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"descripti"
       "on\": \"Weather \"now\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}, \""
       "strict\": true}}, {\"type\": \"function\", \"function\": {\"name\": \"noop\", \"parameters\": {\"type\": \"object\"}}}]["
       "/AVAILABLE_TOOLS][INST] Be brief.\n\nThanks[/INST]",
       "<s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather \"no"
       "w\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}, \"strict\": true}}, {"
       "\"type\": \"function\", \"function\": {\"name\": \"noop\", \"parameters\": {\"type\": \"object\"}}}][/AVAILABLE_TOOLS][I"
       "NST] Weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a"
       "bc123XYZ\"}, {\"name\": \"noop\", \"arguments\": {}, \"id\": \"n00p00000\"}]</s>[TOOL_RESULTS] {\"content\": {\"temp\": "
       "21}, \"call_id\": \"abc123XYZ\"}[/TOOL_RESULTS][TOOL_RESULTS] {\"content\": done, \"call_id\": \"n00p00000\"}[/TOOL_RESU"
       "LTS]",
       "<s>[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>[INST] You are a helpful assistant\n\n"
       "Another question[/INST]"},
      {"mistral-v3-tekken",
       "<s>[INST]Weather in Paris?[/INST][TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
       "\"abc123XYZ\"}, {\"name\": \"noop\", \"arguments\": {}, \"id\": \"n00p00000\"}]</s>[TOOL_RESULTS]{\"content\": {\"temp\""
       ": 21}, \"call_id\": \"abc123XYZ\"}[/TOOL_RESULTS][TOOL_RESULTS]{\"content\": done, \"call_id\": \"n00p00000\"}[/TOOL_RES"
       "ULTS]  It is 21.  </s>[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description"
       "\": \"Weather \"now\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}, \"s"
       "trict\": true}}, {\"type\": \"function\", \"function\": {\"name\": \"noop\", \"parameters\": {\"type\": \"object\"}}}][/"
       "AVAILABLE_TOOLS][INST]Be brief.\n\nThanks[/INST]",
       "<s>[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather \"now"
       "\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}, \"strict\": true}}, {\""
       "type\": \"function\", \"function\": {\"name\": \"noop\", \"parameters\": {\"type\": \"object\"}}}][/AVAILABLE_TOOLS][INS"
       "T]Weather in Paris?[/INST][TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc12"
       "3XYZ\"}, {\"name\": \"noop\", \"arguments\": {}, \"id\": \"n00p00000\"}]</s>[TOOL_RESULTS]{\"content\": {\"temp\": 21}, "
       "\"call_id\": \"abc123XYZ\"}[/TOOL_RESULTS][TOOL_RESULTS]{\"content\": done, \"call_id\": \"n00p00000\"}[/TOOL_RESULTS]",
       "<s>[INST]Hello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   </s>[INST]You are a helpful assistant\n\n"
       "Another question[/INST]"}};
  for (const auto& r : renderings) {
    const auto t = chat_template::named(r.name);
    ASSERT_TRUE(t.has_tools());
    EXPECT_EQ(t.render(calls, true, "<s>", "</s>", tools).text, r.with_calls) << r.name;
    EXPECT_EQ(t.render(ending_with_results, true, "<s>", "</s>", tools).text, r.ending_with_results) << r.name;
    EXPECT_EQ(t.render(conversation, true, "<s>", "</s>").text, r.without_tools) << r.name;
    const auto detected = chat_template::detect(chat_template::published(r.name));
    EXPECT_TRUE(detected.has_tools());
    EXPECT_EQ(detected.name(), r.name);
  }
}

// Ids that are not Mistral's 9 letters or digits are written as their last 9 letters and digits, the
// same for a call and the result that names it; none at all, and turns out of order, are refused.
TEST(ChatTemplate, MistralV3CallIdsAndRefusals) {
  EXPECT_EQ(mistral_call_id("abc123XYZ", 0), "abc123XYZ");
  EXPECT_EQ(mistral_call_id("call_5f3a9c0e11b2_0_1", 0), "c0e11b201");
  EXPECT_EQ(mistral_call_id("c-7", 0), "0000000c7");
  const auto t = chat_template::named("mistral-v3");
  const std::vector<std::string> tools{R"({"type":"function","function":{"name":"f"}})"};
  auto with_ids = [](std::string call, std::string result) {
    return std::vector<chat_message>{{"user", "Go"}, {"assistant", "", {{"f", "{}", std::move(call)}}}, {"tool", "ok", {}, std::move(result)}};
  };
  EXPECT_EQ(t.render(with_ids("call_5f3a9c0e11b2_0_1", "call_5f3a9c0e11b2_0_1"), true, "<s>", "</s>", tools).text,
            t.render(with_ids("c0e11b201", "c0e11b201"), true, "<s>", "</s>", tools).text);
  auto refusal = [&](const std::vector<chat_message>& m) {
    try {
      t.render(m, true, "<s>", "</s>", tools);
    } catch (const chat_template_error& e) {
      return std::string(e.what());
    }
    return std::string("(written)");
  };
  EXPECT_NE(refusal(with_ids("abc123XYZ", "")).find("message 2: the mistral-v3 template writes each call's id"), std::string::npos);
  EXPECT_NE(refusal({{"user", "a"}, {"user", "b"}}).find("alternate"), std::string::npos);
  EXPECT_NE(refusal({{"user", "a"}, {"system", "b"}}).find("message 1: role \"system\""), std::string::npos);
  // v0.2's template (no tools) stays as it was: the system message in the first turn.
  EXPECT_FALSE(chat_template::detect(chat_template::published("mistral")).has_tools());
}

// JSON as Python's json.dumps writes it: templates' tojson.
TEST(ChatTemplate, JsonAsPythonWritesIt) {
  EXPECT_EQ(python_json(R"({"b":[1,2.5,"é"],"a":{"x":null,"y":true}})"), R"({"b": [1, 2.5, "é"], "a": {"x": null, "y": true}})");
  EXPECT_EQ(python_json(R"({"q":"say \"hi\"\n"})"), R"({"q": "say \"hi\"\n"})");
  EXPECT_EQ(python_json(R"({"a":[1,{}],"b":[]})", 2), "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
  EXPECT_THROW(python_json("{x"), chat_template_error);
}

}  // namespace hotcold
