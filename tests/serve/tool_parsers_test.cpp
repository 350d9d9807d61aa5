// Unit tests of the tool-call parsers (core/serve/tool_parsers.h) on
// hand-written outputs in the formats the model families document: each
// text is parsed whole, split in two at every byte and fed byte by byte, and
// every way gives the same calls and content; the deltas rebuild the calls
// (names first, argument fragments concatenating exactly), no delta ends
// inside a UTF-8 character and no markup reaches content.
#include "serve/tool_parsers.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"

namespace halo::serve {
namespace {

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80             ? 1
                 : (b & 0xE0) == 0xC0 ? 2
                 : (b & 0xF0) == 0xE0 ? 3
                 : (b & 0xF8) == 0xF0 ? 4
                                      : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

struct Outcome {
  std::string content;
  std::vector<ToolCall> calls;  // calls()
  std::vector<ToolCall> built;  // rebuilt from the deltas
};

Outcome run(const std::string& parser, const std::vector<std::string_view>& pieces) {
  auto p = ToolCallParser::make(parser);
  Outcome o;
  auto apply = [&](const ToolParseDelta& d) {
    EXPECT_TRUE(valid_utf8(d.content)) << "content delta ends inside a character";
    o.content += d.content;
    for (const auto& t : d.tool_calls) {
      EXPECT_TRUE(valid_utf8(t.text)) << "a delta ends inside a character";
      if (t.first) {
        EXPECT_EQ(t.index, o.built.size()) << "a call starts twice or out of order";
        EXPECT_FALSE(t.text.empty());
        o.built.push_back({t.text, ""});
      } else {
        EXPECT_FALSE(t.text.empty());
        EXPECT_EQ(t.index + 1, o.built.size()) << "arguments not of the latest call";
        if (t.index < o.built.size()) o.built[t.index].arguments += t.text;
      }
    }
  };
  for (auto piece : pieces) apply(p->feed(piece));
  apply(p->finish());
  o.calls = p->calls();
  return o;
}

const std::vector<std::string> kMarkup = {"<tool_call>", "</tool_call>", "<|python_tag|>",
                                          "[TOOL_CALLS]", "[ARGS]"};

// Checks `text` under `parser` however it is split. `clean`: no markup may
// reach content (false for malformed or cut-off calls, which come back raw).
void check(const std::string& parser, const std::string& text, const std::string& want_content,
           const std::vector<ToolCall>& want_calls, bool clean = true) {
  std::vector<std::pair<std::string, std::vector<std::string_view>>> ways;
  std::string_view all(text);
  ways.push_back({"whole", {all}});
  for (size_t i = 1; i < text.size(); ++i) {
    ways.push_back({"split at " + std::to_string(i), {all.substr(0, i), all.substr(i)}});
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(all.substr(i, 1));
  ways.push_back({"byte by byte", bytes});

  for (const auto& [how, pieces] : ways) {
    SCOPED_TRACE(parser + ", " + how + ": " + text);
    Outcome o = run(parser, pieces);
    EXPECT_EQ(o.content, want_content);
    ASSERT_EQ(o.calls.size(), want_calls.size());
    for (size_t i = 0; i < want_calls.size(); ++i) {
      EXPECT_EQ(o.calls[i].name, want_calls[i].name) << "call " << i;
      EXPECT_EQ(o.calls[i].arguments, want_calls[i].arguments) << "call " << i;
      json args = json::parse(o.calls[i].arguments, nullptr, false);
      EXPECT_TRUE(args.is_object()) << o.calls[i].arguments;
    }
    // A call taken back at the end may have been streamed (only the last).
    ASSERT_GE(o.built.size(), o.calls.size());
    EXPECT_LE(o.built.size(), o.calls.size() + 1);
    if (clean) {
      EXPECT_EQ(o.built.size(), o.calls.size());
    }
    for (size_t i = 0; i < o.calls.size(); ++i) {
      EXPECT_EQ(o.built[i].name, o.calls[i].name);
      EXPECT_EQ(o.built[i].arguments, o.calls[i].arguments) << "fragments of call " << i;
    }
    if (clean) {
      for (const auto& m : kMarkup) {
        EXPECT_EQ(o.content.find(m), std::string::npos) << m;
      }
    }
    if (::testing::Test::HasFailure()) return;  // one failing way is enough to read
  }
}

ToolCall call(std::string name, std::string args) { return {std::move(name), std::move(args)}; }

TEST(ToolParsers, MakeKnowsTheNames) {
  for (const auto& n : ToolCallParser::names()) EXPECT_NE(ToolCallParser::make(n), nullptr);
  try {
    ToolCallParser::make("qwen3_xml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen3_xml"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hermes, llama3_json, mistral, pythonic"),
              std::string::npos)
        << e.what();
  }
}

// ---- hermes (Qwen2.5 / Qwen3 / Hermes 2 Pro) ----

TEST(HermesParser, OneCall) {
  check("hermes",
        "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": "
        "\"San Francisco, CA, USA\", \"unit\": \"celsius\"}}\n</tool_call>",
        "",
        {call("get_current_temperature",
              R"({"location": "San Francisco, CA, USA", "unit": "celsius"})")});
}

TEST(HermesParser, TwoCallsWithTextBefore) {
  check("hermes",
        "I'll look up both cities.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
        "\"arguments\": {\"city\": \"Berlin\", \"days\": 3}}\n</tool_call>",
        "I'll look up both cities.\n\n",
        {call("get_weather", R"({"city": "Paris"})"),
         call("get_weather", R"({"city": "Berlin", "days": 3})")});
}

TEST(HermesParser, ThinkingThenCallThenText) {
  check("hermes",
        "<think>\nThe user wants the time.\n</think>\n\n<tool_call>\n{\"name\": \"get_time\", "
        "\"arguments\": {}}\n</tool_call>\nChecking now.",
        "<think>\nThe user wants the time.\n</think>\n\n\nChecking now.", {call("get_time", "{}")});
}

TEST(HermesParser, UnicodeInArguments) {
  check("hermes",
        "Voilà ✓\n<tool_call>\n{\"name\": \"translate\", \"arguments\": {\"text\": \"Zürich "
        "東京 🌧\", \"escaped\": \"\\u00e9\\n\"}}\n</tool_call>",
        "Voilà ✓\n",
        {call("translate", R"({"text": "Zürich 東京 🌧", "escaped": "\u00e9\n"})")});
}

TEST(HermesParser, NestedArgumentsAndMarkupInStrings) {
  check("hermes",
        "<tool_call>\n{\"name\": \"run\", \"arguments\": {\"code\": \"print('</tool_call>') "
        "{[<tool_call>\", \"opts\": {\"a\": [1, {\"b\": null}], \"c\": true, \"d\": -1.5e3, "
        "\"e\": \"\\\"}\"}}}\n</tool_call>",
        "",
        {call("run",
              R"({"code": "print('</tool_call>') {[<tool_call>", "opts": {"a": [1, {"b": null}], )"
              R"("c": true, "d": -1.5e3, "e": "\"}"}})")});
}

TEST(HermesParser, ArgumentsBeforeNameAndOtherKeys) {
  check("hermes",
        "<tool_call>\n{\"arguments\": {\"symbol\": \"TSLA\"}, \"id\": 7, \"name\": "
        "\"get_stock_fundamentals\"}\n</tool_call>",
        "", {call("get_stock_fundamentals", R"({"symbol": "TSLA"})")});
}

TEST(HermesParser, CompactAndNoArguments) {
  check("hermes",
        "<tool_call>{\"name\":\"ping\"}</"
        "tool_call><tool_call>{\"name\":\"a\\\"b\",\"arguments\":{}}</tool_call>",
        "", {call("ping", "{}"), call("a\"b", "{}")});
}

TEST(HermesParser, PlainText) {
  check("hermes", "No tools needed: 2 < 3, <tool> and <tool_cal are not markers. ✓",
        "No tools needed: 2 < 3, <tool> and <tool_cal are not markers. ✓", {});
  check("hermes", "ends with a partial marker <tool_", "ends with a partial marker <tool_", {});
  check("hermes", "", "", {});
}

TEST(HermesParser, NeverClosedCallIsContent) {
  std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
  check("hermes", text, text, {}, false);
  // A first call stands; the cut-off second one is content.
  check("hermes",
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
        "\"b\"",
        "<tool_call>\n{\"name\": \"b\"", {call("a", "{}")}, false);
}

TEST(HermesParser, CompleteObjectWithoutClosingTagIsACall) {
  check("hermes", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n", "",
        {call("f", R"({"x": 1})")});
}

TEST(HermesParser, TextAfterAnUnclosedObjectAndStrayClosingTags) {
  check("hermes", "<tool_call>{\"name\": \"f\"}\n</tool_x and more", "\n</tool_x and more",
        {call("f", "{}")});
  check("hermes", "a</tool_call>b <tool_call>{\"name\": \"f\"}</tool_call></tool_call>\n", "ab ",
        {call("f", "{}")});
}

TEST(HermesParser, MalformedCallAndTheRestAreContent) {
  std::string bad =
      "<tool_call>\nget_weather(city=\"Paris\")\n</tool_call> then <tool_call>{\"name\": "
      "\"x\"}</tool_call>";
  check("hermes", "Hi " + bad, "Hi " + bad, {}, false);
  std::string nameless = "<tool_call>{\"arguments\": {\"a\": 1}}</tool_call>";
  check("hermes", nameless, nameless, {}, false);
  // Broken after the name: the call is taken back.
  std::string broken = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1,}}</tool_call>";
  check("hermes", broken, broken, {}, false);
}

// ---- llama3_json (Llama 3.1 / 3.2) ----

TEST(Llama3JsonParser, OneCall) {
  check("llama3_json",
        "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"San Francisco, "
        "CA\", \"unit\": \"Fahrenheit\"}}",
        "",
        {call("get_current_conditions",
              R"({"location": "San Francisco, CA", "unit": "Fahrenheit"})")});
}

TEST(Llama3JsonParser, PythonTagAndLeadingWhitespace) {
  check("llama3_json",
        "<|python_tag|>{\"name\": \"spotify_trending_songs\", \"parameters\": {\"n\": \"5\"}}", "",
        {call("spotify_trending_songs", R"({"n": "5"})")});
  check("llama3_json", "\n\n  {\"name\": \"f\", \"arguments\": {\"x\": [1, 2]}}", "",
        {call("f", R"({"x": [1, 2]})")});
}

TEST(Llama3JsonParser, TwoCallsSeparatedBySemicolon) {
  check(
      "llama3_json",
      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": "
      "\"get_time\", \"parameters\": {\"tz\": \"Europe/Paris\"}}",
      "",
      {call("get_weather", R"({"city": "Paris"})"), call("get_time", R"({"tz": "Europe/Paris"})")});
}

TEST(Llama3JsonParser, UnicodeNestedAndBracesInStrings) {
  check(
      "llama3_json",
      "{\"type\": \"function\", \"name\": \"search\", \"parameters\": {\"q\": \"café } ; { "
      "日本\", \"filters\": {\"tags\": [\"a\", {\"b\": [true, false, null]}], \"min\": 0.5}}}",
      "",
      {call(
          "search",
          R"({"q": "café } ; { 日本", "filters": {"tags": ["a", {"b": [true, false, null]}], "min": 0.5}})")});
}

TEST(Llama3JsonParser, TextAfterTheCalls) {
  check("llama3_json", "{\"name\": \"f\", \"parameters\": {}}\n\nDone.", "Done.",
        {call("f", "{}")});
}

TEST(Llama3JsonParser, PlainTextAndOtherJson) {
  check("llama3_json", "The weather in Paris is {sunny}.", "The weather in Paris is {sunny}.", {});
  check("llama3_json", "  Sure! {\"name\": \"f\", \"parameters\": {}}",
        "  Sure! {\"name\": \"f\", \"parameters\": {}}", {});
  check("llama3_json", "{\"answer\": 42, \"list\": [1, 2]}", "{\"answer\": 42, \"list\": [1, 2]}",
        {}, false);
  check("llama3_json", "<|python_ta", "<|python_ta", {});
}

TEST(Llama3JsonParser, NeverClosedCallIsContent) {
  std::string text = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Pa";
  check("llama3_json", text, text, {}, false);
  check("llama3_json", "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"para",
        "{\"name\": \"b\", \"para", {call("a", "{}")}, false);
  check("llama3_json", "{\"name\": \"a\", \"parameters\": {}};", "", {call("a", "{}")});
}

// ---- mistral ----

TEST(MistralParser, ArrayOneCall) {
  check("mistral",
        "[TOOL_CALLS] [{\"name\": \"get_current_weather\", \"arguments\": {\"location\": "
        "\"Paris, France\", \"format\": \"celsius\"}}]",
        "", {call("get_current_weather", R"({"location": "Paris, France", "format": "celsius"})")});
}

TEST(MistralParser, ArrayTwoCallsWithTextBefore) {
  check("mistral",
        "Let me look.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", "
        "\"arguments\": {\"x\": [1, {\"y\": \"] [TOOL_CALLS] }\"}]}}]",
        "Let me look.", {call("a", "{}"), call("b", R"({"x": [1, {"y": "] [TOOL_CALLS] }"}]})")});
}

TEST(MistralParser, ArgsFormOfNewTokenizers) {
  check("mistral",
        "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{\"tz\": "
        "\"Europe/Paris\", \"fmt\": {\"h24\": true}}",
        "",
        {call("get_weather", R"({"city": "Paris"})"),
         call("get_time", R"({"tz": "Europe/Paris", "fmt": {"h24": true}})")});
}

TEST(MistralParser, NameThenObjectForm) {
  check("mistral", "[TOOL_CALLS]add{\"a\": 3.5, \"b\": 4}", "",
        {call("add", R"({"a": 3.5, "b": 4})")});
}

TEST(MistralParser, Unicode) {
  check("mistral",
        "Ça marche ✓ [TOOL_CALLS][{\"name\": \"say\", \"arguments\": {\"text\": \"日本語 🎉\"}}]",
        "Ça marche ✓ ", {call("say", R"({"text": "日本語 🎉"})")});
}

TEST(MistralParser, PlainText) {
  check("mistral", "Arrays look like [1, 2] and [TOOL] is not a marker.",
        "Arrays look like [1, 2] and [TOOL] is not a marker.", {});
  check("mistral", "cut [TOOL_CALL", "cut [TOOL_CALL", {});
}

TEST(MistralParser, TextAfterCallsAndEmptyArray) {
  check("mistral", "[TOOL_CALLS][]", "", {});
  check("mistral", "[TOOL_CALLS]f[ARGS]{}\n\nAnything else?", "\n\nAnything else?",
        {call("f", "{}")});
  std::string bare = "[TOOL_CALLS]Sorry, no tool fits.";
  check("mistral", bare, bare, {}, false);
}

TEST(MistralParser, NeverClosedCallIsContent) {
  std::string text = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
  check("mistral", text, text, {}, false);
  check("mistral",
        "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"argu",
        " {\"name\": \"b\", \"argu", {call("a", R"({"x": 1})")}, false);
  check("mistral", "[TOOL_CALLS]f[ARGS]{\"x\": [1", "[TOOL_CALLS]f[ARGS]{\"x\": [1", {}, false);
  // Every call complete, the array not closed: the calls stand.
  check("mistral", "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}", "", {call("a", "{}")});
}

// ---- pythonic (Llama 3.2 / 4, ToolACE) ----

TEST(PythonicParser, OneCall) {
  check("pythonic", "[get_weather(city=\"Paris\", days=3)]", "",
        {call("get_weather", R"({"city": "Paris", "days": 3})")});
}

TEST(PythonicParser, TwoCallsWithLiterals) {
  check("pythonic",
        "[get_weather(city='San Francisco'), other(x=[1, 2], y={\"a\": None, 'b': True, 'c': "
        "False}, z=())]",
        "",
        {call("get_weather", R"({"city": "San Francisco"})"),
         call("other", R"({"x": [1, 2], "y": {"a": null, "b": true, "c": false}, "z": []})")});
}

TEST(PythonicParser, StringsEscapesAndUnicode) {
  check(
      "pythonic",
      "[note(text='Zürich \\'q\\' \"dq\" \\\\ tab\\t nl\\n \\x41\\u00e9', emoji=\"🌧 東京\", "
      "raw='\\d')]",
      "",
      {call(
          "note",
          R"({"text": "Zürich 'q' \"dq\" \\ tab\t nl\n Aé", "emoji": "🌧 東京", "raw": "\\d"})")});
}

TEST(PythonicParser, Numbers) {
  check(
      "pythonic", "[f(a=-1, b=2.5, c=1e3, d=0x1F, e=1_000, g=.5, h=5., i=-2.5E-3, j=0)]", "",
      {call(
          "f",
          R"({"a": -1, "b": 2.5, "c": 1e3, "d": 31, "e": 1000, "g": 0.5, "h": 5.0, "i": -2.5e-3, "j": 0})")});
}

TEST(PythonicParser, NestingBracketsInStringsAndTrailingCommas) {
  check(
      "pythonic",
      "[search(q=\"f(x) = [a, b]) {\", opts={'k': [1, [2, {'d': 'e]'}]], 3: 'three',}, "
      "tags=['a', 'b',],), get_time()]",
      "",
      {call(
           "search",
           R"({"q": "f(x) = [a, b]) {", "opts": {"k": [1, [2, {"d": "e]"}]], "3": "three"}, "tags": ["a", "b"]})"),
       call("get_time", "{}")});
}

TEST(PythonicParser, MultilineAndWhitespace) {
  check("pythonic", "\n[\n  book(\n    room = 'A',\n    at = 9\n  ) ,\n  ping ()\n]\n", "",
        {call("book", R"({"room": "A", "at": 9})"), call("ping", "{}")});
}

TEST(PythonicParser, TextAfterTheList) {
  check("pythonic", "[f(x=1)]\nDone.", "Done.", {call("f", R"({"x": 1})")});
}

TEST(PythonicParser, PlainText) {
  check("pythonic", "Paris is sunny today.", "Paris is sunny today.", {});
  check("pythonic", "[1] is a citation.", "[1] is a citation.", {}, false);
  check("pythonic", "[Note] see f(x=1)", "[Note] see f(x=1)", {}, false);
}

TEST(PythonicParser, NeverClosedCallIsContent) {
  check("pythonic", "[get_weather(city=\"Par", "[get_weather(city=\"Par", {}, false);
  check("pythonic", "[a(x=1), b(y=", " b(y=", {call("a", R"({"x": 1})")}, false);
  check("pythonic", "[a(x=1)", "", {call("a", R"({"x": 1})")});
}

TEST(PythonicParser, EmptyListIsContent) { check("pythonic", "[]", "[]", {}, false); }

TEST(PythonicParser, WhatIsNotALiteralIsContent) {
  for (std::string text : {"[f(x=foo)]", "[f(1)]", "[f(x=1+2)]", "[f(x={1, 2})]", "[f(x=1j)]"}) {
    check("pythonic", text, text, {}, false);
  }
}

// ---- every format, cut anywhere ----

// Generation can stop after any character (max_tokens): every prefix of these
// outputs, parsed whole and byte by byte, gives the same calls and content,
// never throws, and its calls' arguments are JSON objects.
TEST(ToolParsers, EveryPrefixParsesTheSameWholeAndByteByByte) {
  const std::vector<std::pair<std::string, std::string>> outputs = {
      {"hermes",
       "Sure ✓\n<tool_call>\n{\"arguments\": {\"q\": \"</tool_call> é\"}, \"name\": "
       "\"s\"}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"t\", \"arguments\": {\"n\": [1, -2.5e3, true, "
       "null]}}\n</tool_call>"},
      {"llama3_json",
       "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": \"{;}\"}}; {\"name\": \"b\", "
       "\"parameters\": {\"y\": [\"日本\"]}}"},
      {"mistral",
       "Ok [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": \"]}\"}}, {\"name\": \"b\", "
       "\"arguments\": {}}][TOOL_CALLS]c[ARGS]{\"z\": 1}"},
      {"pythonic", "[a(x='é]', y=[1, {'k': None}]), b(z=-3.5, w=\"q\\\"\")]"},
  };
  for (const auto& [parser, text] : outputs) {
    for (size_t n = 0; n <= text.size(); ++n) {
      if (n < text.size() && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) continue;
      std::string_view cut = std::string_view(text).substr(0, n);
      SCOPED_TRACE(parser + " cut at " + std::to_string(n) + ": " + std::string(cut));
      Outcome whole = run(parser, {cut});
      std::vector<std::string_view> bytes;
      for (size_t i = 0; i < n; ++i) bytes.push_back(cut.substr(i, 1));
      Outcome split = run(parser, bytes);
      EXPECT_EQ(whole.content, split.content);
      ASSERT_EQ(whole.calls.size(), split.calls.size());
      for (size_t i = 0; i < whole.calls.size(); ++i) {
        EXPECT_EQ(whole.calls[i].name, split.calls[i].name);
        EXPECT_EQ(whole.calls[i].arguments, split.calls[i].arguments);
        EXPECT_TRUE(json::parse(whole.calls[i].arguments, nullptr, false).is_object())
            << whole.calls[i].arguments;
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// ---- which parser a template implies ----

TEST(ToolParserForTemplate, SmallTemplates) {
  EXPECT_EQ(
      tool_parser_for_template(
          "{%- for tool in tools %}{{ tool | tojson }}{% endfor %}For each function call, return "
          "<tool_call>\n{\"name\": <function-name>, \"arguments\": "
          "<args-json-object>}\n</tool_call>"),
      "hermes");
  EXPECT_EQ(tool_parser_for_template(
                "[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS]"
                "{%- if message.tool_calls %}[TOOL_CALLS]{{ message.tool_calls|tojson }}"),
            "mistral");
  EXPECT_EQ(
      tool_parser_for_template(
          "<|start_header_id|>ipython<|end_header_id|>\n\n{{ message.content }}"
          "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument "
          "name and its value}."),
      "llama3_json");
  EXPECT_EQ(
      tool_parser_for_template("{%- if builtin_tools %}<|python_tag|>{{ tool_call.name }}.call("),
      "llama3_json");
  EXPECT_EQ(tool_parser_for_template(
                "you MUST put it in the format of [func_name1(params_name1=params_value1, "
                "params_name2=params_value2...), func_name2(params)]"),
            "pythonic");
  EXPECT_EQ(tool_parser_for_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ "
                                     "m.content }}<|im_end|>\n{% endfor %}"),
            "");
  EXPECT_EQ(tool_parser_for_template(""), "");
}

TEST(ToolParserForTemplate, Qwen3IsHermes) {
  std::ifstream in(std::string(HALO_TEST_DATA_DIR) + "/tokenizers/qwen3/tokenizer_config.json");
  ASSERT_TRUE(in) << "tests/data/tokenizers/qwen3/tokenizer_config.json";
  std::stringstream ss;
  ss << in.rdbuf();
  json config = json::parse(ss.str());
  ASSERT_TRUE(config["chat_template"].is_string());
  EXPECT_EQ(tool_parser_for_template(config["chat_template"].get<std::string>()), "hermes");
}

}  // namespace
}  // namespace halo::serve
