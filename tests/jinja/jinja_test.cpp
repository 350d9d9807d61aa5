// halo_jinja against Python's jinja2 (the reference, configured as
// transformers configures it), plus error and API tests.
#include <gtest/gtest.h>
#include <unistd.h>

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
