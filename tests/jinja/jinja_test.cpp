// halo_jinja against Python's jinja2 (the reference, configured as
// transformers configures it), plus error and API tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "text/jinja/chat_template.h"
#include "text/jinja/template.h"

namespace {

using json = nlohmann::ordered_json;
using halo::text::ChatRenderRequest;
using halo::text::ChatTemplate;
using halo::text::jinja::Template;
using halo::text::jinja::TemplateError;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json load_cases() { return json::parse(read_file(HALO_JINJA_CASES)); }

// Runs render_reference.py once per process. Returns the expected outputs,
// or sets `error` (the test must then FAIL, not skip).
const json& reference(std::string& error) {
  static std::string err;
  static json ref = [&]() -> json {
    std::string python = HALO_JINJA_PYTHON;
    if (python.empty()) {
      err = "no python3 found at configure time (HALO_PYTHON); run scripts/install-deps.sh --test";
      return json();
    }
    std::filesystem::path out = std::filesystem::path(HALO_JINJA_EXPECTED_DIR) /
                                ("jinja_expected." + std::to_string(::getpid()) + ".json");
    std::string cmd = "'" + python + "' '" HALO_JINJA_REFERENCE_SCRIPT "' '" HALO_JINJA_CASES "' '" + out.string() +
                      "' '" HALO_SOURCE_DIR "'";
    int rc = std::system(cmd.c_str());
    if (rc != 0) {
      int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
      err = code == 3 ? "python3-jinja2 is missing: run scripts/install-deps.sh --test"
                      : "render_reference.py failed (exit " + std::to_string(code) + "): " + cmd;
      return json();
    }
    json r = json::parse(read_file(out));
    std::filesystem::remove(out);
    return r;
  }();
  error = err;
  return ref;
}

std::string describe_error(const std::exception& e) { return std::string("error: ") + e.what(); }

TEST(JinjaReference, TemplateCases) {
  std::string err;
  const json& ref = reference(err);
  ASSERT_TRUE(err.empty()) << err;
  json cases = load_cases();
  int compared = 0;
  for (const auto& c : cases["template_cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE("case " + name + ": " + c["template"].get<std::string>());
    const json& expected = ref["template_cases"][name];
    std::string got;
    bool threw = false;
    try {
      got = Template(c["template"].get<std::string>()).render(c["context"]);
    } catch (const TemplateError& e) {
      threw = true;
      got = describe_error(e);
    }
    if (expected.contains("error")) {
      EXPECT_TRUE(threw) << "jinja2 failed with " << expected["error"] << " but halo rendered: " << got;
    } else {
      EXPECT_FALSE(threw) << got;
      EXPECT_EQ(got, expected["text"].get<std::string>());
    }
    ++compared;
  }
  EXPECT_GT(compared, 50);
}

TEST(JinjaReference, ChatCases) {
  std::string err;
  const json& ref = reference(err);
  ASSERT_TRUE(err.empty()) << err;
  json cases = load_cases();
  int compared = 0;
  for (const auto& c : cases["chat_cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE("chat case " + name);
    const json& expected = ref["chat_cases"][name];
    std::string got;
    bool threw = false;
    try {
      std::filesystem::path cfg_path = std::filesystem::path(HALO_SOURCE_DIR) / c["config"].get<std::string>();
      auto tpl = ChatTemplate::from_tokenizer_config(cfg_path);
      json cfg = json::parse(read_file(cfg_path));
      ChatRenderRequest req;
      req.messages = c["messages"];
      req.tools = c.value("tools", json());
      req.add_generation_prompt = c.value("add_generation_prompt", true);
      req.continue_final_message = c.value("continue_final_message", false);
      req.chat_template_kwargs = c.value("chat_template_kwargs", json::object());
      req.bos_token = halo::text::special_token_text(cfg.value("bos_token", json()));
      req.eos_token = halo::text::special_token_text(cfg.value("eos_token", json()));
      got = tpl.render(req);
    } catch (const halo::Error& e) {
      threw = true;
      got = describe_error(e);
    }
    if (expected.contains("error")) {
      EXPECT_TRUE(threw) << "reference failed with " << expected["error"] << " but halo rendered: " << got;
    } else {
      EXPECT_FALSE(threw) << got;
      EXPECT_EQ(got, expected["text"].get<std::string>());
    }
    ++compared;
  }
  EXPECT_GT(compared, 20);
}

// ------------------------------------------------------------------ errors

std::string error_of(const std::string& source, const json& ctx = json::object()) {
  try {
    Template t(source);
    std::string out = t.render(ctx);
    return "no error, rendered: " + out;
  } catch (const TemplateError& e) {
    return e.what();
  }
}

TEST(JinjaErrors, SyntaxErrorNamesLine) {
  std::string msg = error_of("a\nb\n{{ 1 + }}");
  EXPECT_NE(msg.find("line 3"), std::string::npos) << msg;
  msg = error_of("x\n{% if true %}\ny\n{% endfor %}");
  EXPECT_NE(msg.find("line 4"), std::string::npos) << msg;
  msg = error_of("{% if x %}\nunclosed");
  EXPECT_NE(msg.find("endif"), std::string::npos) << msg;
  msg = error_of("ok\n{{ 'unterminated }}");
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  msg = error_of("{% frobnicate %}");
  EXPECT_NE(msg.find("frobnicate"), std::string::npos) << msg;
}

TEST(JinjaErrors, RaiseExceptionPropagatesMessage) {
  try {
    Template("a\n{% if x %}{{ raise_exception('Roles must alternate: ' ~ x) }}{% endif %}").render({{"x", "u"}});
    FAIL() << "expected TemplateError";
  } catch (const TemplateError& e) {
    EXPECT_TRUE(e.raised_by_template());
    EXPECT_EQ(e.message(), "Roles must alternate: u");
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Roles must alternate: u"), std::string::npos) << e.what();
  }
}

TEST(JinjaErrors, UndefinedCallAndAccess) {
  std::string msg = error_of("\n{{ nope() }}");
  EXPECT_NE(msg.find("'nope' is undefined"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  msg = error_of("{{ m.missing() }}", {{"m", json::object()}});
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  msg = error_of("{{ a.b.c }}");
  EXPECT_NE(msg.find("'a' is undefined"), std::string::npos) << msg;
}

TEST(JinjaErrors, UnknownFilterAndTestAtParseTime) {
  std::string msg = error_of("ok\n{% if false %}{{ x|nofilter }}{% endif %}");
  EXPECT_NE(msg.find("No filter named 'nofilter'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  msg = error_of("{{ x is notatest }}");
  EXPECT_NE(msg.find("notatest"), std::string::npos) << msg;
}

TEST(JinjaErrors, RecursionAndResourceGuards) {
  std::string msg = error_of("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}");
  EXPECT_NE(msg.find("recursion"), std::string::npos) << msg;
  // Deeply nested expressions / blocks: an error, not a stack overflow.
  msg = error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}");
  EXPECT_NE(msg.find("too deeply"), std::string::npos) << msg;
  std::string blocks;
  for (int i = 0; i < 3000; ++i) blocks += "{% if true %}";
  msg = error_of(blocks);
  EXPECT_NE(msg.find("too deeply"), std::string::npos) << msg;
  msg = error_of("{{ range(100000000)|length }}");
  EXPECT_NE(msg.find("range"), std::string::npos) << msg;
  msg = error_of("{{ 'x' * 10000000000 }}");
  EXPECT_NE(msg.find("exceeds"), std::string::npos) << msg;
  msg = error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  EXPECT_NE(msg.find("step limit"), std::string::npos) << msg;
}

// Issue "nothing a client sends can crash or stall the server": a request's
// chat_template is attacker-controlled, so each of these must fail fast with a
// message naming the limit, never overflow the stack or run for minutes.
std::string chain(const char* op, int n) {
  std::string s = "{{ 1";
  for (int i = 0; i < n; ++i) s.append(" ").append(op).append(" 1");
  return s + " }}";
}

TEST(JinjaLimits, LongOperatorChainsAreRefusedAtParseTime) {
  for (const char* op : {"+", "-", "*", "~", "and", "or", "**", "//"}) {
    std::string msg = error_of("line one\n" + chain(op, 10000));
    EXPECT_NE(msg.find("nesting limit"), std::string::npos) << op << ": " << msg;
    EXPECT_NE(msg.find("line 2"), std::string::npos) << op << ": " << msg;
  }
  // A long postfix chain builds the same deep tree.
  std::string attrs = "{{ x";
  for (int i = 0; i < 10000; ++i) attrs += ".a";
  EXPECT_NE(error_of(attrs + " }}").find("nesting limit"), std::string::npos);
  std::string items = "{{ x";
  for (int i = 0; i < 10000; ++i) items += "[0]";
  EXPECT_NE(error_of(items + " }}").find("nesting limit"), std::string::npos);
  std::string filters = "{{ x";
  for (int i = 0; i < 10000; ++i) filters += "|string";
  EXPECT_NE(error_of(filters + " }}").find("nesting limit"), std::string::npos);
  std::string calls = "{{ x";
  for (int i = 0; i < 10000; ++i) calls += "()";
  EXPECT_NE(error_of(calls + " }}").find("nesting limit"), std::string::npos);
  // Short chains (what real templates write) still work.
  EXPECT_EQ(Template(chain("+", 100)).render(json::object()), "101");
}

TEST(JinjaLimits, DeepNestingIsRefused) {
  auto nested = [](const std::string& open, const std::string& inner, const std::string& close, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += open;
    s += inner;
    for (int i = 0; i < n; ++i) s += close;
    return s;
  };
  const std::string cases[] = {
      "{{ " + nested("(", "1", ")", 100000) + " }}",
      "{{ " + nested("[", "1", "]", 100000) + " }}",
      "{{ " + nested("{'a': ", "1", "}", 100000) + " }}",
      "{{ " + nested("x|default(", "1", ")", 100000) + " }}",
      "{{ " + nested("not ", "1", "", 100000) + " }}",
      "{{ " + nested("-", "1", "", 100000) + " }}",
      "{{ " + nested("1 if ", "1", " else 2", 100000) + " }}",
      nested("{% if true %}", "x", "{% endif %}", 100000),
      nested("{% for i in [1] %}", "x", "{% endfor %}", 100000),
      nested("{% filter upper %}", "x", "{% endfilter %}", 100000),
  };
  for (const auto& src : cases) {
    std::string msg = error_of(src);
    EXPECT_NE(msg.find("nesting limit"), std::string::npos) << src.substr(0, 40) << ": " << msg;
  }
  // Moderate nesting is fine.
  EXPECT_EQ(Template("{{ " + nested("(", "1", ")", 50) + " }}").render(json::object()), "1");
  EXPECT_EQ(Template(nested("{% if true %}", "x", "{% endif %}", 50)).render(json::object()), "x");
}

TEST(JinjaLimits, HugeLoopsAndOutputsFailFast) {
  auto t0 = std::chrono::steady_clock::now();
  std::string msg = error_of("{% for i in range(1000000000) %}x{% endfor %}");
  EXPECT_NE(msg.find("range"), std::string::npos) << msg;
  msg = error_of("{{ 'x' * 1000000000 }}");
  EXPECT_NE(msg.find("output limit"), std::string::npos) << msg;
  msg = error_of("{% for i in range(1000000) %}{% for j in range(1000000) %}{{ i }}{% endfor %}{% endfor %}");
  EXPECT_NE(msg.find("step limit"), std::string::npos) << msg;
  // Quadratic string building: each step copies the whole string so far.
  msg = error_of("{% set ns = namespace(s='') %}{% for i in range(1000000) %}{% for j in range(1000) %}"
                 "{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxx' %}{% endfor %}{% endfor %}{{ ns.s|length }}");
  EXPECT_TRUE(msg.find("step limit") != std::string::npos || msg.find("output limit") != std::string::npos) << msg;
  // List growth the same way.
  msg = error_of("{% set ns = namespace(l=[]) %}{% for i in range(1000000) %}{% for j in range(1000) %}"
                 "{% set ns.l = ns.l + [j] %}{% endfor %}{% endfor %}{{ ns.l|length }}");
  EXPECT_TRUE(msg.find("step limit") != std::string::npos || msg.find("output limit") != std::string::npos) << msg;
  // Doubling a string: 30 doublings reach a gigabyte.
  msg = error_of("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
  EXPECT_NE(msg.find("output limit"), std::string::npos) << msg;
  msg = error_of("{{ (['xxxxxxxxxxxxxxxx'] * 1000000)|join('') * 1000 }}");
  EXPECT_NE(msg.find("output limit"), std::string::npos) << msg;
  // Values built by a loop: wrapping a list a million times, a namespace
  // holding itself, a shared list doubled into 2^60 leaves and printed.
  msg = error_of("{% set ns = namespace(l=[]) %}{% for i in range(1000000) %}{% set ns.l = [ns.l] %}{% endfor %}"
                 "{{ ns.l|length }}");
  EXPECT_NE(msg.find("nested too deeply"), std::string::npos) << msg;
  msg = error_of("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns == ns }}{{ ns }}");
  EXPECT_NE(msg.find("cannot store a namespace"), std::string::npos) << msg;
  msg = error_of("{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}"
                 "{{ ns.l|tojson }}");
  EXPECT_NE(msg.find("output limit"), std::string::npos) << msg;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Without the limits these run for hours; the bound leaves room for a
  // sanitizer build sharing two cores with other tests (33 s seen at -j2).
  EXPECT_LT(secs, 120.0) << "the limits should stop these quickly";
}

TEST(JinjaLimits, PerRenderBudgetIsConfigurable) {
  halo::text::jinja::RenderLimits small;
  small.max_steps = 100;
  Template loop("{% for i in range(1000) %}{{ i }}{% endfor %}");
  EXPECT_THROW(loop.render(json::object(), small), TemplateError);
  EXPECT_NO_THROW(loop.render(json::object()));
  small = {};
  small.max_output_bytes = 10;
  try {
    Template("{{ 'x' * 11 }}").render(json::object(), small);
    FAIL() << "expected the output limit";
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("output limit (10 bytes)"), std::string::npos) << e.what();
  }
  small = {};
  small.max_depth = 10;
  try {
    Template("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}").render(json::object(), small);
    FAIL() << "expected the depth limit";
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("depth limit (10)"), std::string::npos) << e.what();
  }
  // Through the chat API.
  ChatTemplate chat("{% for m in messages %}{{ m.content }}{% endfor %}");
  ChatRenderRequest req;
  req.messages = json::parse(R"([{"role":"user","content":"hello"}])");
  small = {};
  small.max_output_bytes = 3;
  EXPECT_THROW(chat.render(req, small), TemplateError);
  EXPECT_EQ(chat.render(req), "hello");
}

TEST(JinjaErrors, GarbageNeverCrashes) {
  const char* inputs[] = {"{{", "{%", "{#", "{{ }}", "{% %}", "{% endif %}", "{{ a[ }}", "{{ a. }}", "{{ 'a' | }}",
                          "{% for %}", "{% for x in %}{% endfor %}", "{% set %}", "{% macro %}", "{{ {1: } }}",
                          "{% raw %}", "{{ a(b=1, 2) }}", "{{ 1 if }}", "{{ x is }}", "}}{{", "{% set a.b = 1 %}",
                          "\xff\xfe{{ '\xc3' }}", "{{ '\\u12' }}", "{{ 1e }}", "{{ a[1:2:0] }}"};
  for (const char* in : inputs) {
    try {
      Template t(in);
      (void)t.render({{"a", json::array({1, 2, 3})}});
    } catch (const TemplateError&) {
    }
  }
  SUCCEED();
}

// ------------------------------------------------------------------ chat API

TEST(ChatTemplateApi, MissingTemplateNamesFile) {
  auto path = std::filesystem::path(HALO_TEST_DATA_DIR) / "tokenizers/mistral/tokenizer_config.json";
  try {
    (void)ChatTemplate::from_tokenizer_config(path);
    FAIL() << "expected halo::Error";
  } catch (const halo::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("chat_template"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplateApi, NamedTemplateListPicksDefault) {
  auto dir = std::filesystem::temp_directory_path() / ("halo_jinja_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  json cfg = {{"chat_template", json::array({{{"name", "tool_use"}, {"template", "TOOLS"}},
                                             {{"name", "default"}, {"template", "{{ messages[0].content }}!"}}})}};
  std::ofstream(dir / "tokenizer_config.json") << cfg.dump();
  ChatRenderRequest req;
  req.messages = json::parse(R"([{"role":"user","content":"hi"}])");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(dir / "tokenizer_config.json").render(req), "hi!");
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplateApi, BosDetectionAndFlags) {
  EXPECT_TRUE(halo::text::starts_with_bos("<s>[INST] hi", "<s>"));
  EXPECT_FALSE(halo::text::starts_with_bos("[INST] hi", "<s>"));
  EXPECT_FALSE(halo::text::starts_with_bos("<s>", ""));
  EXPECT_EQ(halo::text::special_token_text(json::parse(R"({"content":"<s>","lstrip":false})")), "<s>");
  EXPECT_EQ(halo::text::special_token_text(json()), "");

  ChatTemplate t("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{% if add_generation_prompt %}>{% endif %}"
                 "{{ tools is none }}{{ flag | default('') }}");
  ChatRenderRequest req;
  req.messages = json::parse(R"([{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}])");
  EXPECT_EQ(t.render(req), "[user:a\nb]>True");
  req.add_generation_prompt = false;
  req.chat_template_kwargs = {{"flag", "F"}};
  EXPECT_EQ(t.render(req), "[user:a\nb]TrueF");
  req.add_generation_prompt = true;
  req.continue_final_message = true;
  EXPECT_THROW(t.render(req), TemplateError);
  req.messages = json::parse(R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])");
  req.continue_final_message = false;
  EXPECT_THROW(t.render(req), TemplateError);
}

}  // namespace
