#include "serve/tool_choice.h"

#include <fmt/format.h>

#include <utility>

#include "serve/guided_request.h"

namespace halo::serve {

namespace {

constexpr const char* kToolChoiceShape =
    "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
    "\"function\": {\"name\": \"...\"}}";

// A tool's parameters schema; a function without one takes any object.
json parameters_of(const json& tool) {
  const json& fn = tool["function"];
  auto p = fn.find("parameters");
  if (p == fn.end() || p->is_null()) return json{{"type", "object"}};
  return *p;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A schema moved to `base` (a JSON pointer) inside a larger one: its local
// $refs ("#", "#/$defs/x") are rewritten to point below `base`. (A `const` or
// `enum` value that holds {"$ref": "#..."} as data would be rewritten too.)
json rebased(json schema, const std::string& base) {
  if (schema.is_object()) {
    for (auto& [key, v] : schema.items()) {
      if (key == "$ref" && v.is_string() && v.get_ref<const std::string&>().starts_with("#"))
        v = "#" + base + v.get_ref<const std::string&>().substr(1);
      else
        v = rebased(std::move(v), base);
    }
  } else if (schema.is_array()) {
    for (auto& v : schema) v = rebased(std::move(v), base);
  }
  return schema;
}

}  // namespace

ToolChoice parse_tool_choice(Fields& f) {
  ToolChoice tc;
  if (auto p = f.boolean("parallel_tool_calls")) tc.parallel_tool_calls = *p;
  const json* listed = f.get("tools");
  tc.has_tools = listed && listed->is_array() && !listed->empty();
  const json* c = f.get("tool_choice");
  if (!c) return tc;
  if (c->is_string()) {
    const auto& s = c->get_ref<const std::string&>();
    tc.none = s == "none";
    if (s == "none" || s == "auto") return tc;
    if (s != "required")
      throw ApiError(400, fmt::format("{}, got \"{}\"", kToolChoiceShape, s), "tool_choice",
                     error_code::kInvalidValue);
    tc.mode = ToolChoice::Mode::kRequired;
  } else if (c->is_object()) {
    auto type = c->find("type");
    auto fn = c->find("function");
    if (type == c->end() || *type != "function" || fn == c->end() || !fn->is_object() ||
        !fn->contains("name") || !(*fn)["name"].is_string() ||
        (*fn)["name"].get_ref<const std::string&>().empty())
      throw ApiError(400, kToolChoiceShape, "tool_choice", error_code::kInvalidValue);
    tc.mode = ToolChoice::Mode::kNamed;
    tc.name = (*fn)["name"].get<std::string>();
  } else {
    throw ApiError(400, kToolChoiceShape, "tool_choice", error_code::kInvalidType);
  }
  const char* what = tc.mode == ToolChoice::Mode::kNamed ? "a named function" : "\"required\"";
  const json* tools = f.get("tools");
  if (!tools || !tools->is_array() || tools->empty())
    throw ApiError(400, fmt::format("'tool_choice' {} needs 'tools' (a non-empty list)", what),
                   "tools", error_code::kMissingParameter);
  tc.tools = *tools;
  if (tc.mode == ToolChoice::Mode::kNamed) {
    std::string names;
    for (const auto& t : tc.tools) {
      const auto& n = t["function"]["name"].get_ref<const std::string&>();
      if (n == tc.name) return tc;
      names += (names.empty() ? "'" : ", '") + n + "'";
    }
    throw ApiError(400,
                   fmt::format("'tool_choice' names function '{}', which is not among 'tools' ({})",
                               tc.name, names),
                   "tool_choice", error_code::kInvalidValue);
  }
  return tc;
}

json required_tools_schema(const json& tools, bool parallel_tool_calls) {
  json alts = json::array();
  for (const auto& t : tools) {
    json name{{"enum", json::array({t["function"]["name"]})}};
    const std::string base = fmt::format("/items/anyOf/{}/properties/parameters", alts.size());
    alts.push_back({{"type", "object"},
                    {"properties",
                     {{"name", std::move(name)}, {"parameters", rebased(parameters_of(t), base)}}},
                    {"required", json::array({"name", "parameters"})},
                    {"additionalProperties", false}});
  }
  json schema{{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", std::move(alts)}}}};
  if (!parallel_tool_calls) schema["maxItems"] = 1;
  return schema;
}

void constrain_to_tool_choice(const ToolChoice& tc, engine::RequestOptions& o) {
  if (!tc.forced()) return;
  check_unconstrained(o, "tool_choice");  // before any schema is compiled
  // Each tool's schema is compiled on its own first, so that a refused one is
  // named by its place in the request.
  std::string regex;
  for (size_t i = 0; i < tc.tools.size(); ++i) {
    const json& t = tc.tools[i];
    if (tc.mode == ToolChoice::Mode::kNamed && t["function"]["name"] != tc.name) continue;
    regex = guided_schema_regex(parameters_of(t), fmt::format("tools[{}].function.parameters", i));
    if (tc.mode == ToolChoice::Mode::kNamed) break;
  }
  if (tc.mode == ToolChoice::Mode::kRequired)
    regex = guided_schema_regex(required_tools_schema(tc.tools, tc.parallel_tool_calls), "tools");
  set_guided_regex(o, std::move(regex), "tool_choice");
}

// ------------------------------------------------------------ ToolCallScanner

ToolCallScanner::ToolCallScanner(const ToolChoice& tc)
    : named_(tc.mode == ToolChoice::Mode::kNamed), named_name_(tc.name) {}

std::vector<ToolCallDelta> ToolCallScanner::feed(std::string_view text) {
  std::vector<ToolCallDelta> out;
  if (named_) {
    if (calls_.empty()) {
      calls_.push_back({named_name_, ""});
      out.push_back({0, true, named_name_});
    }
    add_arguments(text, out);
    return out;
  }
  for (char c : text) step(c, out);
  return out;
}

void ToolCallScanner::add_arguments(std::string_view s, std::vector<ToolCallDelta>& out) {
  if (s.empty()) return;
  if (!named_ && !have_name_) {  // held until the call has a name
    pending_ += s;
    return;
  }
  const size_t i = calls_.size() - 1;
  calls_.back().arguments += s;
  if (!out.empty() && out.back().index == i && !out.back().first)
    out.back().text += s;
  else
    out.push_back({i, false, std::string(s)});
}

void ToolCallScanner::start_call(std::vector<ToolCallDelta>& out) {
  std::string name;
  try {
    name = json::parse(name_).get<std::string>();
  } catch (const json::exception&) {
    state_ = State::kDone;
    return;
  }
  calls_.push_back({name, ""});
  have_name_ = true;
  out.push_back({calls_.size() - 1, true, std::move(name)});
  add_arguments(std::exchange(pending_, {}), out);
}

bool ToolCallScanner::string_ends(char c) {
  if (escape_) {
    escape_ = false;
    return false;
  }
  if (c == '\\') {
    escape_ = true;
    return false;
  }
  return c == '"';
}

// long: one switch over the scanner's states, clearer read whole than split
void ToolCallScanner::step(char c, std::vector<ToolCallDelta>& out) {
  const auto pass_on = [&] {
    if (in_params_) add_arguments(std::string_view(&c, 1), out);
  };
  switch (state_) {
    case State::kArrayOpen:
      if (!is_space(c)) state_ = c == '[' ? State::kItemOpen : State::kDone;
      return;
    case State::kItemOpen:  // after '[' or ','
      if (is_space(c)) return;
      if (c != '{') {  // ']' (no call: the schema's minItems prevents it) or a broken shape
        state_ = State::kDone;
        return;
      }
      have_name_ = false;
      pending_.clear();
      state_ = State::kKeyOpen;
      return;
    case State::kAfterItem:
      if (!is_space(c)) state_ = c == ',' ? State::kItemOpen : State::kDone;
      return;
    case State::kKeyOpen:  // after '{' or ','
      if (is_space(c)) return;
      if (c == '"') {
        key_.assign(1, '"');  // (not = "\"": GCC 12 -Wrestrict false positive)
        escape_ = false;
        state_ = State::kKey;
      } else {
        state_ = c == '}' ? State::kAfterItem : State::kDone;
      }
      return;
    case State::kKey:
      key_ += c;
      if (!string_ends(c)) return;
      try {
        key_ = json::parse(key_).get<std::string>();
        state_ = State::kColon;
      } catch (const json::exception&) {
        state_ = State::kDone;
      }
      return;
    case State::kColon:
      if (!is_space(c)) state_ = c == ':' ? State::kValueOpen : State::kDone;
      return;
    case State::kValueOpen:
      if (is_space(c)) return;
      escape_ = false;
      if (key_ == "name" && c == '"') {
        name_.assign(1, '"');
        state_ = State::kName;
        return;
      }
      in_params_ = key_ == "parameters";
      in_string_ = c == '"';
      scalar_ = c != '"' && c != '{' && c != '[';
      depth_ = (c == '{' || c == '[') ? 1 : 0;
      pass_on();
      state_ = State::kValue;
      return;
    case State::kName:
      name_ += c;
      if (!string_ends(c)) return;
      start_call(out);
      if (state_ != State::kDone) state_ = State::kAfterValue;
      return;
    case State::kValue:
      if (scalar_) {  // a number or literal ends at the delimiter after it
        if (c == ',' || c == '}' || c == ']' || is_space(c)) {
          in_params_ = false;
          state_ = State::kAfterValue;
          step(c, out);
        } else {
          pass_on();
        }
        return;
      }
      pass_on();
      if (in_string_) {
        if (string_ends(c)) in_string_ = false;
      } else if (c == '"') {
        in_string_ = true;
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if (c == '}' || c == ']') {
        --depth_;
      }
      if (!in_string_ && depth_ == 0 && (c == '"' || c == '}' || c == ']')) {
        in_params_ = false;
        state_ = State::kAfterValue;
      }
      return;
    case State::kAfterValue:
      if (is_space(c)) return;
      if (c == ',')
        state_ = State::kKeyOpen;
      else
        state_ = c == '}' ? State::kAfterItem : State::kDone;
      return;
    case State::kDone:
      return;
  }
}

// ------------------------------------------------------------ the response

ojson tool_calls_json(const std::vector<ToolCall>& calls,
                      const std::function<std::string()>& new_id) {
  ojson out = ojson::array();
  for (const auto& c : calls)
    out.push_back({{"id", new_id()},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

ojson tool_call_delta_json(const ToolCallDelta& d, const std::function<std::string()>& new_id) {
  if (d.first)
    return ojson{{"index", d.index},
                 {"id", new_id()},
                 {"type", "function"},
                 {"function", {{"name", d.text}, {"arguments", ""}}}};
  return ojson{{"index", d.index}, {"function", {{"arguments", d.text}}}};
}

}  // namespace halo::serve
