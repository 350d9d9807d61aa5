// Unit tests of tool_choice (core/serve/tool_choice.h) without a model: the
// incremental scanner of generated tool calls (every way of splitting the
// text gives the same calls, each name once), the schema and regex of
// "required" and a named function, the request checks and the response shapes.
#include "serve/tool_choice.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serve/chat_output.h"
#include "text/guided/regex_dfa.h"

namespace halo::serve {
namespace {

using text::guided::ByteDfa;

ToolChoice required() {
  ToolChoice tc;
  tc.mode = ToolChoice::Mode::kRequired;
  return tc;
}

ToolChoice named(const std::string& name) {
  ToolChoice tc;
  tc.mode = ToolChoice::Mode::kNamed;
  tc.name = name;
  return tc;
}

// What a client rebuilds from the deltas of feeding `pieces` in order; checks
// that each call's first delta (its name) comes once and before its arguments.
std::vector<ToolCall> replay(const ToolChoice& tc, const std::vector<std::string>& pieces) {
  ToolCallScanner scan(tc);
  std::vector<ToolCall> built;
  for (const auto& p : pieces) {
    for (const auto& d : scan.feed(p)) {
      if (d.first) {
        EXPECT_EQ(d.index, built.size()) << "a call starts twice or out of order";
        built.push_back({d.text, ""});
      } else {
        EXPECT_LT(d.index, built.size()) << "arguments before the call's name";
        if (d.index < built.size()) built[d.index].arguments += d.text;
        EXPECT_FALSE(d.text.empty());
      }
    }
  }
  EXPECT_EQ(built.size(), scan.calls().size());
  for (size_t i = 0; i < built.size() && i < scan.calls().size(); ++i) {
    EXPECT_EQ(built[i].name, scan.calls()[i].name);
    EXPECT_EQ(built[i].arguments, scan.calls()[i].arguments);
  }
  return built;
}

void expect_calls(const std::vector<ToolCall>& got, const std::vector<ToolCall>& want,
                  const std::string& how) {
  ASSERT_EQ(got.size(), want.size()) << how;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name) << how;
    EXPECT_EQ(got[i].arguments, want[i].arguments) << how;
  }
}

// Every split of `text` in two, in three around each pair of cuts' ends, and byte by byte.
void expect_any_split(const ToolChoice& tc, const std::string& text,
                      const std::vector<ToolCall>& want) {
  expect_calls(replay(tc, {text}), want, "whole");
  for (size_t i = 0; i <= text.size(); ++i) {
    expect_calls(replay(tc, {text.substr(0, i), text.substr(i)}), want,
                 "split at " + std::to_string(i));
    if (i + 1 < text.size())
      expect_calls(replay(tc, {text.substr(0, i), text.substr(i, 1), text.substr(i + 1)}), want,
                   "one byte at " + std::to_string(i));
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  expect_calls(replay(tc, bytes), want, "byte by byte");
}

TEST(ToolCallScanner, RequiredCallsComeOutTheSameHoweverTheTextIsSplit) {
  expect_any_split(
      required(),
      R"([{"name": "get_weather", "parameters": {"city": "Pa\"r}is", "days": [1, {"x": "]"}]}}, )"
      R"({"name":"lookup","parameters":{}}])",
      {{"get_weather", R"({"city": "Pa\"r}is", "days": [1, {"x": "]"}]})"}, {"lookup", "{}"}});
}

TEST(ToolCallScanner, NamesAreDecodedAndScalarParametersEndAtTheirDelimiter) {
  expect_any_split(
      required(),
      R"( [ {"name" : "a\u0062\\", "parameters" : 12.5e3 } , {"name":"t","parameters":true}])",
      {{"ab\\", "12.5e3"}, {"t", "true"}});
  expect_any_split(required(), R"([{"name":"s","parameters":"x\\\"y"}])", {{"s", R"("x\\\"y")"}});
}

TEST(ToolCallScanner, OtherKeysAreSkippedAndParametersBeforeTheNameWaitForIt) {
  expect_any_split(required(),
                   R"([{"parameters": {"a": [1, "}"]}, "extra": {"b": "]"}, "name": "late"}])",
                   {{"late", R"({"a": [1, "}"]})"}});
}

TEST(ToolCallScanner, AnUnfinishedTextGivesTheCallsStartedSoFar) {
  expect_any_split(required(), R"([{"name": "f", "parameters": {"q": "ab)",
                   {{"f", R"({"q": "ab)"}});
  expect_any_split(required(), R"([{"name": "f", "param)", {{"f", ""}});
  expect_any_split(required(), R"([{"name": "f)", {});
}

TEST(ToolCallScanner, ABrokenShapeEndsTheScan) {
  expect_any_split(required(), R"({"name": "f", "parameters": {}})", {});
  expect_any_split(required(), R"([{"name": "f", "parameters": {}} junk {"name": "g"}])",
                   {{"f", "{}"}});
}

TEST(ToolCallScanner, ANamedFunctionsArgumentsAreTheWholeText) {
  expect_any_split(named("get_weather"), R"({"city": "Paris", "n": [1, 2]})",
                   {{"get_weather", R"({"city": "Paris", "n": [1, 2]})"}});
  // Its first delta comes with the first feed, even an empty one.
  ToolCallScanner scan(named("f"));
  auto d = scan.feed("");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d[0].first);
  EXPECT_EQ(d[0].text, "f");
  EXPECT_TRUE(scan.feed("").empty());
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}}])");

TEST(RequiredToolsSchema, IsVllmsArrayOfNamedCalls) {
  json want = json::parse(R"({"type": "array", "minItems": 1, "items": {"anyOf": [
    {"type": "object", "properties": {"name": {"enum": ["get_weather"]}, "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}},
     "required": ["name", "parameters"], "additionalProperties": false},
    {"type": "object", "properties": {"name": {"enum": ["now"]}, "parameters": {"type": "object"}},
     "required": ["name", "parameters"], "additionalProperties": false}]}})");
  EXPECT_EQ(required_tools_schema(kTools, true), want);
  want["maxItems"] = 1;
  EXPECT_EQ(required_tools_schema(kTools, false), want);
}

ToolChoice parse(const std::string& body) {
  json j = json::parse(body);
  Fields f(j);
  return parse_tool_choice(f);
}

std::string regex_of(const ToolChoice& tc) {
  engine::RequestOptions o;
  constrain_to_tool_choice(tc, o);
  EXPECT_EQ(o.guided_what, tc.forced() ? "tool_choice" : "");
  return o.guided_regex;
}

TEST(ToolChoiceRegex, RequiredAllowsCallsOfTheToolsOnly) {
  json body{{"tools", kTools}, {"tool_choice", "required"}};
  const auto dfa = ByteDfa::compile(regex_of(parse(body.dump())));
  EXPECT_TRUE(dfa.matches(R"([{"name": "get_weather", "parameters": {"city": "Paris"}}])"));
  EXPECT_TRUE(
      dfa.matches(R"([{"name":"now","parameters":{}},{"name":"now","parameters":{"a":1}}])"));
  EXPECT_FALSE(dfa.matches("[]"));
  EXPECT_FALSE(dfa.matches(R"([{"name": "other", "parameters": {}}])"));
  EXPECT_FALSE(dfa.matches(R"([{"name": "get_weather", "parameters": {}}])"));  // city required
  EXPECT_FALSE(dfa.matches(R"([{"parameters": {}, "name": "now"}])"));          // name order
  EXPECT_FALSE(dfa.matches(R"([{"name": "now", "parameters": {}, "x": 1}])"));

  body["parallel_tool_calls"] = false;
  const auto one = ByteDfa::compile(regex_of(parse(body.dump())));
  EXPECT_TRUE(one.matches(R"([{"name":"now","parameters":{}}])"));
  EXPECT_FALSE(one.matches(R"([{"name":"now","parameters":{}},{"name":"now","parameters":{}}])"));
}

TEST(ToolChoiceRegex, ANamedFunctionIsItsParametersSchema) {
  json body{{"tools", kTools},
            {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}};
  const ToolChoice tc = parse(body.dump());
  EXPECT_EQ(tc.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(tc.name, "get_weather");
  const auto dfa = ByteDfa::compile(regex_of(tc));
  EXPECT_TRUE(dfa.matches(R"({"city": "Paris"})"));
  EXPECT_FALSE(dfa.matches(R"({"city": "Paris is far"})"));
  EXPECT_FALSE(dfa.matches(R"([{"name": "get_weather", "parameters": {"city": "Paris"}}])"));
  // Without parameters: any object.
  body["tool_choice"]["function"]["name"] = "now";
  EXPECT_TRUE(ByteDfa::compile(regex_of(parse(body.dump()))).matches(R"({"a": [1]})"));
}

TEST(ToolChoiceRequest, NoneAutoAndAbsentLeaveTheOutputFree) {
  for (const char* body : {R"({})", R"({"tool_choice": "none"})", R"({"tool_choice": "auto"})",
                           R"({"tool_choice": null, "tools": []})"}) {
    const ToolChoice tc = parse(body);
    EXPECT_FALSE(tc.forced()) << body;
    EXPECT_TRUE(regex_of(tc).empty()) << body;
  }
}

// The 400 a request gets: "param: message".
std::string error_of(const json& body, const std::string& guided_what = "") {
  try {
    engine::RequestOptions o;
    if (!guided_what.empty()) {
      o.guided_regex = "a";
      o.guided_what = guided_what;
    }
    json j = body;
    Fields f(j);
    constrain_to_tool_choice(parse_tool_choice(f), o);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param() + ": " + e.what();
  }
  return "accepted";
}

TEST(ToolChoiceRequest, MistakesAreA400NamingTheField) {
  const json fn{{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  EXPECT_EQ(error_of({{"tool_choice", "required"}}),
            "tools: 'tool_choice' \"required\" needs 'tools' (a non-empty list)");
  EXPECT_EQ(error_of({{"tool_choice", fn}, {"tools", json::array()}}),
            "tools: 'tool_choice' a named function needs 'tools' (a non-empty list)");
  EXPECT_EQ(error_of({{"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}},
                      {"tools", kTools}}),
            "tool_choice: 'tool_choice' names function 'nope', which is not among 'tools' "
            "('get_weather', 'now')");
  for (const json& bad : {json("always"), json(3), json{{"type", "function"}},
                          json{{"type", "function"}, {"function", {{"name", ""}}}},
                          json{{"function", {{"name", "now"}}}}}) {
    const std::string e = error_of({{"tool_choice", bad}, {"tools", kTools}});
    EXPECT_TRUE(
        e.starts_with("tool_choice: 'tool_choice' must be \"none\", \"auto\", \"required\""))
        << bad.dump() << " -> " << e;
  }
  EXPECT_EQ(error_of({{"tool_choice", "required"}, {"tools", kTools}}, "response_format"),
            "tool_choice: 'response_format' and 'tool_choice' cannot both constrain the output");
  EXPECT_EQ(error_of({{"tool_choice", fn}, {"tools", kTools}}, "guided_json"),
            "tool_choice: 'guided_json' and 'tool_choice' cannot both constrain the output");
  json tools = kTools;
  tools[1]["function"]["parameters"] = {{"type", "object"}, {"not", json::object()}};
  for (const json& tc :
       {json("required"), json{{"type", "function"}, {"function", {{"name", "now"}}}}}) {
    const std::string e = error_of({{"tool_choice", tc}, {"tools", tools}});
    EXPECT_TRUE(e.starts_with("tools[1].function.parameters: 'tools[1].function.parameters': "))
        << e;
    EXPECT_NE(e.find("'not'"), std::string::npos) << e;
  }
  // A named function does not compile the other tools' schemas.
  EXPECT_EQ(error_of({{"tool_choice", fn}, {"tools", tools}}), "accepted");
  // A $ref resolves against the tool's own schema, also once "required" has
  // put it inside its array (the reference is rebased).
  tools[1]["function"]["parameters"] = json::parse(
      R"({"$defs": {"c": {"type": "string"}}, "type": "object", "properties": {"a": {"$ref": "#/$defs/c"}}})");
  EXPECT_EQ(error_of({{"tool_choice", {{"type", "function"}, {"function", {{"name", "now"}}}}},
                      {"tools", tools}}),
            "accepted");
  EXPECT_EQ(error_of({{"tool_choice", "required"}, {"tools", tools}}), "accepted");
  const json schema = required_tools_schema(tools, true);
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["parameters"]["properties"]["a"]["$ref"],
            "#/items/anyOf/1/properties/parameters/$defs/c");
}

TEST(ChatOutput, FinishReasonFollowsOpenAI) {
  auto reason = [](const ToolChoice& tc, const std::string& parser, const std::string& text,
                   const char* engine) {
    ChatOutput o(tc, parser, "", false);
    o.feed(text);
    o.finish();
    const char* r = o.finish_reason(engine);
    return std::string(r ? r : "null");
  };
  const std::string call = R"([{"name": "f", "parameters": {}}])";
  EXPECT_EQ(reason(required(), "", call, "stop"), "tool_calls");
  EXPECT_EQ(reason(required(), "", call, "length"), "length");
  EXPECT_EQ(reason(required(), "", "", "stop"), "stop");
  EXPECT_EQ(reason(named("f"), "", "{}", "stop"), "stop");  // a named function ends with "stop"
  EXPECT_EQ(reason(required(), "", call, nullptr), "null");
  ToolChoice autotc;
  autotc.has_tools = true;
  const std::string hermes = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  EXPECT_EQ(reason(autotc, "hermes", hermes, "stop"), "tool_calls");
  EXPECT_EQ(reason(autotc, "hermes", "plain text", "stop"), "stop");
  EXPECT_EQ(reason(autotc, "", hermes, "stop"), "stop");  // no parser: the text is content
  ToolChoice none = autotc;
  none.none = true;
  EXPECT_EQ(reason(none, "hermes", hermes, "stop"), "stop");
}

// Reasoning, then an auto-parsed call, then text: the same in every split.
TEST(ChatOutput, ReasoningThenToolCallsInAnySplit) {
  ToolChoice tc;
  tc.has_tools = true;
  const std::string out =
      "<think>\nNeed the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Z\u00fcrich\"}}\n</tool_call>";
  for (size_t cut = 0; cut <= out.size(); ++cut) {
    ChatOutput o(tc, "hermes", "qwen3", false);
    ChatDelta d = o.feed(out.substr(0, cut));
    append(d, o.feed(out.substr(cut)));
    append(d, o.finish());
    EXPECT_EQ(d.reasoning, "\nNeed the weather.\n") << cut;
    ASSERT_EQ(o.calls().size(), 1u) << cut;
    EXPECT_EQ(o.calls()[0].name, "get_weather");
    EXPECT_EQ(o.calls()[0].arguments, "{\"city\": \"Z\u00fcrich\"}");
    EXPECT_EQ(d.content.find("tool_call"), std::string::npos) << cut << ": " << d.content;
    EXPECT_EQ(d.content.find("think"), std::string::npos) << cut << ": " << d.content;
  }
  // Guided decoding holds the output from its first token: no reasoning then.
  ChatOutput guided(ToolChoice{}, "", "deepseek_r1", true);
  ChatDelta d = guided.feed("{\"a\": 1}");
  append(d, guided.finish());
  EXPECT_EQ(d.content, "{\"a\": 1}");
  EXPECT_TRUE(d.reasoning.empty());
}

TEST(ToolChoiceResponse, CallsAndDeltasInOpenAIsShape) {
  int n = 0;
  auto ids = [&n] { return "chatcmpl-tool-" + std::to_string(n++); };
  EXPECT_EQ(
      tool_calls_json({{"f", R"({"a": 1})"}, {"g", "{}"}}, ids).dump(),
      R"([{"id":"chatcmpl-tool-0","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}},)"
      R"({"id":"chatcmpl-tool-1","type":"function","function":{"name":"g","arguments":"{}"}}])");
  EXPECT_EQ(
      tool_call_delta_json({1, true, "g"}, ids).dump(),
      R"({"index":1,"id":"chatcmpl-tool-2","type":"function","function":{"name":"g","arguments":""}})");
  EXPECT_EQ(tool_call_delta_json({1, false, "{\"a"}, ids).dump(),
            R"({"index":1,"function":{"arguments":"{\"a"}})");
  EXPECT_EQ(n, 3);
}

}  // namespace
}  // namespace halo::serve
