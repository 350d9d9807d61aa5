#include "serve/pooling_config.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/file_text.h"

namespace halo::serve {

namespace {

using nlohmann::json;

json parse_object(const std::string& text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON ({})", what, e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: expected a JSON object", what));
  return j;
}

// modules.json: a list of {"path": ..., "type": "sentence_transformers.models.X"}.
const json& module_list(const json& modules) {
  if (!modules.is_array()) throw Error("modules.json: expected a list of modules");
  for (const auto& m : modules)
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
      throw Error("modules.json: every module needs a string 'type'");
  return modules;
}

json parse_modules(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("modules.json: not valid JSON ({})", e.what()));
  }
  module_list(j);
  return j;
}

std::string module_kind(const json& m) {
  const std::string t = m["type"].get<std::string>();
  const auto dot = t.rfind('.');
  return dot == std::string::npos ? t : t.substr(dot + 1);
}

}  // namespace

std::optional<engine::PoolingParams> parse_pooler_config(const std::string& json_text) {
  if (json_text.empty()) return std::nullopt;
  const json j = parse_object(json_text, "--pooler-config");
  engine::PoolingParams p;
  p.type = engine::PoolingType::kLast;
  for (const auto& [key, v] : j.items()) {
    if (key == "pooling_type") {
      if (!v.is_string())
        throw Error("--pooler-config: pooling_type must be a string (LAST, MEAN or CLS)");
      try {
        p.type = engine::parse_pooling_type(v.get<std::string>());
      } catch (const Error& e) {
        throw Error(fmt::format("--pooler-config: {}", e.what()));
      }
    } else if (key == "normalize") {
      if (!v.is_boolean()) throw Error("--pooler-config: normalize must be true or false");
      p.normalize = v.get<bool>();
    } else {
      throw Error(fmt::format(
          "--pooler-config: unknown key '{}' (halo reads pooling_type and normalize)", key));
    }
  }
  return p;
}

std::string sentence_transformers_pooling_dir(const std::string& modules_json) {
  for (const auto& m : parse_modules(modules_json))
    if (module_kind(m) == "Pooling") {
      if (!m.contains("path") || !m["path"].is_string())
        throw Error("modules.json: the Pooling module needs a string 'path'");
      const std::string path = m["path"].get<std::string>();
      if (std::filesystem::path(path).is_absolute() || path.find("..") != std::string::npos)
        throw Error(fmt::format(
            "modules.json: the Pooling module's path '{}' leaves the model directory", path));
      return path;
    }
  return "";
}

engine::PoolingParams parse_sentence_transformers(const std::string& modules_json,
                                                  const std::string& pooling_config) {
  engine::PoolingParams p;
  p.type = engine::PoolingType::kLast;
  p.normalize = false;
  bool pooling = false;
  for (const auto& m : parse_modules(modules_json)) {
    const std::string kind = module_kind(m);
    if (kind == "Transformer") continue;
    if (kind == "Normalize") {
      p.normalize = true;
    } else if (kind == "Pooling") {
      pooling = true;
    } else {
      throw Error(
          fmt::format("modules.json: module {} is not applied by halo (it serves Transformer, "
                      "Pooling and Normalize)",
                      m["type"].get<std::string>()));
    }
  }
  if (!pooling) return p;
  const json c = parse_object(pooling_config, "the Pooling module's config.json");
  auto flag = [&](const char* k) { return c.contains(k) && c[k].is_boolean() && c[k].get<bool>(); };
  for (const char* unsupported : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                                  "pooling_mode_weightedmean_tokens"})
    if (flag(unsupported))
      throw Error(fmt::format(
          "the Pooling module's config.json: {} is not supported (halo pools LAST, MEAN "
          "or CLS)",
          unsupported));
  if (c.contains("include_prompt") && c["include_prompt"].is_boolean() &&
      !c["include_prompt"].get<bool>())
    throw Error(
        "the Pooling module's config.json: include_prompt false is not supported (halo pools every "
        "prompt token)");
  const int modes = int(flag("pooling_mode_cls_token")) + int(flag("pooling_mode_mean_tokens")) +
                    int(flag("pooling_mode_lasttoken"));
  if (modes != 1)
    throw Error(fmt::format(
        "the Pooling module's config.json: expected exactly one of pooling_mode_cls_token, "
        "pooling_mode_mean_tokens, pooling_mode_lasttoken true, got {}",
        modes));
  p.type = flag("pooling_mode_cls_token")     ? engine::PoolingType::kCls
           : flag("pooling_mode_mean_tokens") ? engine::PoolingType::kMean
                                              : engine::PoolingType::kLast;
  return p;
}

engine::PoolingParams resolve_pooling(const std::string& pooler_config,
                                      const std::filesystem::path& dir) {
  if (auto p = parse_pooler_config(pooler_config)) return *p;
  const auto modules = dir / "modules.json";
  if (std::filesystem::exists(modules)) {
    const std::string text = read_file_text(modules);
    std::string config;
    try {
      const std::string sub = sentence_transformers_pooling_dir(text);
      if (!sub.empty()) config = read_file_text(dir / sub / "config.json");
      return parse_sentence_transformers(text, config);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", dir.string(), e.what()));
    }
  }
  engine::PoolingParams p;
  p.type = engine::PoolingType::kLast;
  p.normalize = true;
  return p;
}

}  // namespace halo::serve
