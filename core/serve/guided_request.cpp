#include "serve/guided_request.h"

#include <fmt/format.h>

#include "common/json_depth.h"
#include "text/guided/json_schema_regex.h"

namespace halo::serve {

std::string guided_schema_regex(const json& schema, const std::string& field) {
  try {
    // A schema as JSON text: no deeper than a default request body.
    if (schema.is_string())
      return text::guided::json_schema_to_regex(
          parse_json_bounded(schema.get_ref<const std::string&>(), kDefaultMaxJsonDepth));
    if (!schema.is_object()) throw Error("a JSON schema must be an object");
    return text::guided::json_schema_to_regex(schema);
  } catch (const json::exception& e) {
    throw ApiError(400, fmt::format("'{}': not a JSON schema: {}", field, e.what()), field,
                   error_code::kInvalidValue);
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("'{}': {}", field, e.what()), field, error_code::kInvalidValue);
  }
}

void check_unconstrained(const engine::RequestOptions& o, const std::string& what) {
  if (o.guided())
    throw ApiError(
        400, fmt::format("'{}' and '{}' cannot both constrain the output", o.guided_what, what),
        what, error_code::kInvalidValue);
}

namespace {

void set_grammar(engine::RequestOptions& o, const json& grammar, const std::string& what) {
  if (!grammar.is_string() || grammar.get<std::string>().empty())
    throw ApiError(400, fmt::format("'{}' must be a non-empty string (a GBNF grammar)", what), what,
                   error_code::kInvalidType);
  check_unconstrained(o, what);
  o.guided_grammar = grammar.get<std::string>();
  o.guided_what = what;
}

std::string choice_regex(const json& c, const std::string& what) {
  if (!c.is_array())
    throw ApiError(400, fmt::format("'{}' must be a list of strings", what), what,
                   error_code::kInvalidType);
  // An empty list matches no text at all: refused, never left unconstrained.
  if (c.empty())
    throw ApiError(400, fmt::format("'{}' is an empty list: no output can match it", what), what,
                   error_code::kInvalidValue);
  std::string alt;
  for (const auto& item : c) {
    if (!item.is_string() || item.get<std::string>().empty())
      throw ApiError(400, fmt::format("'{}' must be a list of non-empty strings", what), what,
                     error_code::kInvalidValue);
    if (!alt.empty()) alt += '|';
    alt += text::guided::regex_escape(item.get<std::string>());
  }
  return "(" + alt + ")";
}

// vLLM's newer form: structured_outputs {json | regex | choice | grammar | json_object}.
void parse_structured_outputs(const json& so, engine::RequestOptions& o) {
  const std::string what = "structured_outputs";
  if (!so.is_object())
    throw ApiError(400, "'structured_outputs' must be an object", what, error_code::kInvalidType);
  for (const auto& [key, v] : so.items()) {
    if (v.is_null()) continue;
    const std::string field = what + "." + key;
    if (key == "json") {
      set_guided_regex(o, guided_schema_regex(v, field), field);
    } else if (key == "regex") {
      if (!v.is_string())
        throw ApiError(400, fmt::format("'{}' must be a string", field), field,
                       error_code::kInvalidType);
      set_guided_regex(o, v.get<std::string>(), field);
    } else if (key == "choice") {
      set_guided_regex(o, choice_regex(v, field), field);
    } else if (key == "grammar") {
      set_grammar(o, v, field);
    } else if (key == "json_object") {
      if (v == true)
        set_guided_regex(o, text::guided::json_schema_to_regex(json{{"type", "object"}}), field);
    } else if (key != "backend" && key != "disable_fallback" && key != "disable_any_whitespace" &&
               key != "disable_additional_properties" && key != "whitespace_pattern") {
      throw ApiError(400,
                     fmt::format("'{}' is not a structured output halo knows (json, regex, choice, "
                                 "grammar, json_object)",
                                 field),
                     field, error_code::kUnsupportedValue);
    }
  }
}

}  // namespace

void set_guided_regex(engine::RequestOptions& o, std::string regex, const std::string& what) {
  check_unconstrained(o, what);
  o.guided_regex = std::move(regex);
  o.guided_what = what;
}

void parse_guided(Fields& f, engine::RequestOptions& o) {
  if (auto r = f.string("guided_regex"); r && !r->empty()) set_guided_regex(o, *r, "guided_regex");
  if (const json* c = f.get("guided_choice"); c && !c->is_null())
    set_guided_regex(o, choice_regex(*c, "guided_choice"), "guided_choice");
  if (const json* j = f.get("guided_json"))
    set_guided_regex(o, guided_schema_regex(*j, "guided_json"), "guided_json");
  if (const json* rf = f.get("response_format")) {
    const std::string type = rf->is_object() ? rf->value("type", std::string()) : std::string();
    if (type == "json_object") {
      set_guided_regex(o, text::guided::json_schema_to_regex(json{{"type", "object"}}),
                       "response_format");
    } else if (type == "json_schema") {
      const json* js = rf->contains("json_schema") ? &(*rf)["json_schema"] : nullptr;
      if (!js || !js->is_object() || !js->contains("schema"))
        throw ApiError(400, "'response_format' json_schema needs 'json_schema': {'name', 'schema'}",
                       "response_format", error_code::kInvalidValue);
      set_guided_regex(o, guided_schema_regex((*js)["schema"], "response_format"),
                       "response_format");
    } else if (type != "text") {
      throw ApiError(400, "'response_format' must have 'type' text, json_object or json_schema",
                     "response_format", error_code::kInvalidValue);
    }
  }
  if (const json* gr = f.get("guided_grammar"); gr && !gr->is_null())
    set_grammar(o, *gr, "guided_grammar");
  if (const json* so = f.get("structured_outputs"); so && !so->is_null())
    parse_structured_outputs(*so, o);
  f.touch("guided_decoding_backend");  // halo has one
}

}  // namespace halo::serve

namespace halo::serve {

void parse_trtllm_guided(Fields& f, engine::RequestOptions& o) {
  const std::string what = "guided_decoding_guide";
  const auto type = f.string("guided_decoding_guide_type");
  const json* guide = f.get(what);
  if (!type || type->empty()) {
    if (guide && !(guide->is_string() && guide->get<std::string>().empty()))
      throw ApiError(400, "'guided_decoding_guide' needs 'guided_decoding_guide_type'", what,
                     error_code::kInvalidValue);
    return;
  }
  if (*type == "json") {  // any JSON object, as TensorRT-LLM's "json" guide
    set_guided_regex(o, text::guided::json_schema_to_regex(json{{"type", "object"}}), what);
    return;
  }
  if (*type != "json_schema" && *type != "regex" && *type != "ebnf_grammar")
    throw ApiError(
        400,
        fmt::format(
            "'guided_decoding_guide_type' {} is not one halo takes (json, json_schema, regex, "
            "ebnf_grammar)",
            json(*type).dump()),
        "guided_decoding_guide_type", error_code::kUnsupportedValue);
  if (!guide || !guide->is_string() || guide->get<std::string>().empty())
    throw ApiError(
        400, fmt::format("'guided_decoding_guide' must be a non-empty string (the {})", *type),
        what, error_code::kInvalidValue);
  if (*type == "json_schema") {
    set_guided_regex(o, guided_schema_regex(*guide, what), what);
  } else if (*type == "regex") {
    set_guided_regex(o, guide->get<std::string>(), what);
  } else {
    set_grammar(o, *guide, what);
  }
}

}  // namespace halo::serve
