// Tool calls' pieces (server/openai_tools.hpp): JSON as the templates write it, the request's tools
// read and refused by name, the grammar that forces a call, and a reply's text split into content and
// calls as it streams, however its tokens cut the tags.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "model/grammar.hpp"
#include "server/openai_tools.hpp"

namespace hotcold::server {
namespace {

using json = nlohmann::ordered_json;

const json weather = json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                 "required": ["city", "days"], "additionalProperties": false}}})");

TEST(Tools, ReadFromTheRequestOrRefusedByName) {
  const tool_request t = tools_of(json{{"tools", {weather}}, {"tool_choice", "required"}, {"parallel_tool_calls", false}});
  ASSERT_EQ(t.tools.size(), 1u);
  EXPECT_EQ(t.tools[0].name, "get_weather");
  EXPECT_EQ(t.tools[0].tool.rfind(R"({"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{)", 0), 0u);
  EXPECT_EQ(t.choice, "required");
  EXPECT_FALSE(t.parallel);
  EXPECT_TRUE(t.active());
  EXPECT_FALSE(tools_of(json{{"tools", {weather}}, {"tool_choice", "none"}}).active());
  EXPECT_EQ(tools_of(json{{"tools", {weather}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}).choice, "get_weather");
  auto refusal = [](const json& body) {
    try {
      tools_of(body);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(taken)");
  };
  EXPECT_EQ(refusal(json{{"tools", {weather}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}).substr(0, 12), "tool_choice:");
  json bad = weather;
  bad["function"]["parameters"]["properties"]["city"]["format"] = "email";
  EXPECT_NE(refusal(json{{"tools", {bad}}}).find("tools[0].function.parameters: the schema at /properties/city"), std::string::npos);
  bad = weather;
  bad["function"]["name"] = "get weather";
  EXPECT_NE(refusal(json{{"tools", {bad}}}).find("tools[0].function.name"), std::string::npos);
  EXPECT_NE(refusal(json{{"tools", {weather, weather}}}).find("a second function named 'get_weather'"), std::string::npos);
}

TEST(Tools, TheGrammarForcesAWellFormedCall) {
  tool_request t = tools_of(json{{"tools", {weather}}, {"tool_choice", "required"}});
  const grammar g = grammar::parse(call_grammar(t));
  auto takes = [&](const std::string& s) {
    grammar_matcher m(g);
    return m.accept_utf8(s) && m.complete();
  };
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>";
  EXPECT_TRUE(takes(call));
  EXPECT_TRUE(takes(call + "\n" + call));  // parallel calls
  EXPECT_FALSE(takes("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 9}}\n</tool_call>"));
  EXPECT_FALSE(takes("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(takes("Sure! " + call));
  t.format = tool_format::llama31;  // Llama 3.1's: the reply is one object, "parameters"
  const grammar llama = grammar::parse(call_grammar(t));
  grammar_matcher l(llama);
  EXPECT_TRUE(l.accept_utf8("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"days\": 3}}") && l.complete());
  t.format = tool_format::mistral;  // Mistral's: a list of calls after the [TOOL_CALLS] token (the token itself left to the model)
  const grammar mistral = grammar::parse(call_grammar(t));
  auto mistral_takes = [&](const std::string& s) {
    grammar_matcher m(mistral);
    return m.accept_utf8(s) && m.complete();
  };
  const std::string one_call = R"({"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}})";
  EXPECT_TRUE(mistral_takes(" [" + one_call + "]"));
  EXPECT_TRUE(mistral_takes("[" + one_call + ", " + one_call + "]"));
  EXPECT_FALSE(mistral_takes("[]"));
  EXPECT_FALSE(mistral_takes(one_call));
  EXPECT_FALSE(mistral_takes(R"([{"name": "get_weather", "arguments": {"city": "Oslo"}}])"));  // (days is required)
  t.format = tool_format::qwen;
  t.parallel = false;
  const grammar one = grammar::parse(call_grammar(t));
  grammar_matcher m(one);
  EXPECT_TRUE(m.accept_utf8(call) && m.complete());
  EXPECT_FALSE(m.accept('\n'));
}

TEST(Tools, RepliesSplitIntoContentAndCallsHoweverTheyStream) {
  const std::string text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>\n"
                           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Rome\\\", \\\"days\\\": 1}\"}\n</tool_call>";
  for (size_t step : {size_t{1}, size_t{3}, size_t{7}, text.size()}) {
    tool_stream s;
    std::string content, joined_names;
    std::vector<parsed_call> calls;
    std::map<size_t, std::string> joined_args;
    int pieces = 0;
    auto deltas = [&](const tool_stream::out& o) {
      for (const auto& d : o.deltas) {
        if (!d.name.empty()) joined_names += d.name + ",";
        joined_args[d.index] += d.arguments;
        pieces += !d.arguments.empty();
      }
    };
    for (size_t at = 0; at < text.size(); at += step) {
      auto o = s.add(std::string_view(text).substr(at, step));
      deltas(o);
      content += o.content;
      calls.insert(calls.end(), o.calls.begin(), o.calls.end());
      if (at + step < text.size() - 2) {
        EXPECT_EQ(content.find('<'), std::string::npos) << step;  // (a tag never leaks as content)
      }
    }
    auto o = s.finish();
    deltas(o);
    content += o.content;
    calls.insert(calls.end(), o.calls.begin(), o.calls.end());
    EXPECT_EQ(content, "Let me check.") << step;
    ASSERT_EQ(calls.size(), 2u) << step;
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(calls[0].arguments, R"({"city": "Oslo", "days": 3})");  // (as the model wrote it)
    EXPECT_EQ(calls[1].arguments, R"({"city":"Rome","days":1})");      // (a string holding it: compacted)
    // The deltas put together as a client does: the same calls.
    EXPECT_EQ(joined_names, "get_weather,get_weather,") << step;
    EXPECT_EQ(joined_args[0], calls[0].arguments) << step;
    EXPECT_EQ(joined_args[1], calls[1].arguments) << step;
    if (step == 1) {
      EXPECT_GT(pieces, 10) << "the arguments streamed in pieces";
    }
  }
  // Llama 3.1's: a reply that is one JSON object is a call; any other reply streams as content.
  tool_stream llama(tool_format::llama31);
  auto l1 = llama.add(" {\"name\": \"get_weather\", \"param");
  auto l2 = llama.add("eters\": {\"city\": \"Oslo\"}}");
  auto l3 = llama.finish();
  EXPECT_TRUE(l1.content.empty() && l2.content.empty() && l3.content.empty());
  ASSERT_EQ(l3.calls.size(), 1u);
  EXPECT_EQ(l3.calls[0].arguments, R"({"city":"Oslo"})");
  tool_stream prose(tool_format::llama31);
  EXPECT_EQ(prose.add("It is ").content, "It is ");
  EXPECT_EQ(prose.add("{sunny}").content, "{sunny}");
  EXPECT_TRUE(prose.finish().calls.empty());
  // Mistral's: a reply that opens as a list of objects is read as calls at its end (the [TOOL_CALLS]
  // token renders as nothing; where a vocabulary writes it as text it is taken off); any other reply,
  // a link in brackets among them, streams as content as soon as it cannot be a call.
  for (std::string_view lead : {" ", "[TOOL_CALLS] ", ""}) {
    tool_stream mistral(tool_format::mistral);
    auto m1 = mistral.add(std::string(lead) + "[");
    auto m2 = mistral.add(R"({"name": "get_weather", "arguments": {"city": "Oslo"}, "id": "a1b2c3d4e"}, {"name": "noop", "argu)");
    auto m3 = mistral.add(R"(ments": "{}"}])");
    auto m4 = mistral.finish();
    EXPECT_TRUE(m1.content.empty() && m2.content.empty() && m3.content.empty() && m4.content.empty()) << lead;
    ASSERT_EQ(m4.calls.size(), 2u) << lead;
    EXPECT_EQ(m4.calls[0].name, "get_weather");
    EXPECT_EQ(m4.calls[0].arguments, R"({"city":"Oslo"})");
    EXPECT_EQ(m4.calls[1].name, "noop");
    EXPECT_EQ(m4.calls[1].arguments, "{}");
    ASSERT_EQ(m4.deltas.size(), 2u);  // (each call whole, once the list is in)
    EXPECT_EQ(m4.deltas[1].index, 1u);
  }
  tool_stream link(tool_format::mistral);
  EXPECT_EQ(link.add(" [").content, "");
  EXPECT_EQ(link.add("docs](x)").content, " [docs](x)");
  tool_stream half(tool_format::mistral);  // a list cut short: its text, as content
  EXPECT_EQ(half.add(R"([{"name": "noop", "arguments": {)").content, "");
  const auto h = half.finish();
  EXPECT_TRUE(h.calls.empty());
  EXPECT_EQ(h.content, R"([{"name": "noop", "arguments": {)");
  tool_stream cut(tool_format::mistral);  // cut short after a call (the token limit): that call, the rest as text
  EXPECT_EQ(cut.add(R"( [{"name": "noop", "arguments": {"a": "]}"}}, {"name": "ge)").content, "");
  const auto k = cut.finish();
  ASSERT_EQ(k.calls.size(), 1u);
  EXPECT_EQ(k.calls[0].arguments, R"({"a":"]}"})");
  EXPECT_EQ(k.content, R"({"name": "ge)");
  for (std::string_view not_calls : {R"([{"name": "noop", "arguments": {}}] and more)", R"([{"name": "noop", "arguments": {}}, 7, {"name": "x)", R"([{"nom": 1}, {"name": "noop)"}) {
    tool_stream other(tool_format::mistral);
    other.add(not_calls);
    const auto x = other.finish();
    EXPECT_TRUE(x.calls.empty()) << not_calls;
    EXPECT_EQ(x.content, not_calls);
  }
  // Text that only looks like a tag, or a call that is not JSON, stays text.
  tool_stream plain;
  auto a = plain.add("a <tool");
  auto b = plain.finish();
  EXPECT_EQ(a.content + b.content, "a <tool");
  tool_stream broken;
  auto c = broken.add("<tool_call>\n{not json}\n</tool_call>");
  EXPECT_TRUE(c.calls.empty());
  EXPECT_EQ(c.content + broken.finish().content, "<tool_call>\n{not json}\n</tool_call>");
}

}  // namespace
}  // namespace hotcold::server
