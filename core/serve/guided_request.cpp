#include "serve/guided_request.h"

#include <fmt/format.h>

#include "text/guided/json_schema_regex.h"

namespace halo::serve {

std::string guided_schema_regex(const json& schema, const std::string& field) {
  try {
    if (schema.is_string())
      return text::guided::json_schema_to_regex(json::parse(schema.get<std::string>()));
    if (!schema.is_object()) throw Error("a JSON schema must be an object");
    return text::guided::json_schema_to_regex(schema);
  } catch (const json::exception& e) {
    throw ApiError(400, fmt::format("'{}': not a JSON schema: {}", field, e.what()), field,
                   error_code::kInvalidValue);
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("'{}': {}", field, e.what()), field, error_code::kInvalidValue);
  }
}

void set_guided_regex(engine::RequestOptions& o, std::string regex, const std::string& what) {
  if (!o.guided_regex.empty())
    throw ApiError(
        400, fmt::format("'{}' and '{}' cannot both constrain the output", o.guided_what, what),
        what, error_code::kInvalidValue);
  o.guided_regex = std::move(regex);
  o.guided_what = what;
}


void parse_guided(Fields& f, engine::RequestOptions& o) {
  if (auto r = f.string("guided_regex"); r && !r->empty()) set_guided_regex(o, *r, "guided_regex");
  if (const json* c = f.get("guided_choice"); c && !(c->is_array() && c->empty())) {
    if (!c->is_array())
      throw ApiError(400, "'guided_choice' must be a list of strings", "guided_choice",
                     error_code::kInvalidType);
    std::string alt;
    for (const auto& item : *c) {
      if (!item.is_string() || item.get<std::string>().empty())
        throw ApiError(400, "'guided_choice' must be a list of non-empty strings", "guided_choice",
                       error_code::kInvalidValue);
      if (!alt.empty()) alt += '|';
      alt += text::guided::regex_escape(item.get<std::string>());
    }
    set_guided_regex(o, "(" + alt + ")", "guided_choice");
  }
  if (const json* j = f.get("guided_json")) set_guided_regex(o, guided_schema_regex(*j, "guided_json"), "guided_json");
  if (const json* rf = f.get("response_format")) {
    const std::string type = rf->is_object() ? rf->value("type", std::string()) : std::string();
    if (type == "json_object") {
      set_guided_regex(o, text::guided::json_schema_to_regex(json{{"type", "object"}}), "response_format");
    } else if (type == "json_schema") {
      const json* js = rf->contains("json_schema") ? &(*rf)["json_schema"] : nullptr;
      if (!js || !js->is_object() || !js->contains("schema"))
        throw ApiError(400, "'response_format' json_schema needs 'json_schema': {'name', 'schema'}",
                       "response_format", error_code::kInvalidValue);
      set_guided_regex(o, guided_schema_regex((*js)["schema"], "response_format"), "response_format");
    } else if (type != "text") {
      throw ApiError(400, "'response_format' must have 'type' text, json_object or json_schema",
                     "response_format", error_code::kInvalidValue);
    }
  }
  f.touch("guided_decoding_backend");  // halo has one
}

}  // namespace halo::serve
