#include "serve/model_repository.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.h"

namespace halo::serve {
namespace fs = std::filesystem;
namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the file", p.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// 1-based line of the first `"key"` in the text (0 when not found).
int line_of_key(const std::string& text, const std::string& key) {
  size_t at = text.find("\"" + key + "\"");
  if (at == std::string::npos) return 0;
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
}

bool is_number(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

SettingLayer model_json_layer(const fs::path& file) {
  const std::string text = read_file(file);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", file.string(), e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: expected a JSON object of engine arguments", file.string()));
  // vLLM engine-argument names -> halo's (same spelling with dashes otherwise).
  static const std::map<std::string, std::string> renamed = {
      {"gpu_memory_utilization", "device-memory-utilization"},
      {"kv_cache_memory_bytes", "kv-cache-memory"},
      {"max_tokens_in_paged_kv_cache", "max-kv-tokens"},
      {"enable_kv_cache_reuse", "enable-prefix-caching"},
  };
  static const std::set<std::string> ignored = {"disable_log_requests", "disable_log_stats", "enforce_eager",
                                                "trust_remote_code", "swap_space", "distributed_executor_backend",
                                                "disable_custom_all_reduce", "worker_use_ray", "engine_use_ray"};
  const fs::path base = file.parent_path();
  SettingLayer layer;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    int line = line_of_key(text, k);
    std::string source = line ? fmt::format("{}:{} key '{}'", file.string(), line, k)
                              : fmt::format("{} key '{}'", file.string(), k);
    if (ignored.count(k)) {
      spdlog::info("{}: no effect in halo", source);
      continue;
    }
    std::string key;
    if (auto r = renamed.find(k); r != renamed.end()) {
      key = r->second;
    } else {
      key = k;
      std::replace(key.begin(), key.end(), '_', '-');
      const auto& keys = setting_keys();
      if (std::find(keys.begin(), keys.end(), key) == keys.end())
        throw Error(fmt::format("{}: unknown engine argument (halo reads: {})", source, fmt::join(keys, ", ")));
    }
    const auto& v = it.value();
    std::string value;
    if (v.is_string()) value = v.get<std::string>();
    else if (v.is_boolean()) value = v.get<bool>() ? "true" : "false";
    else if (v.is_number()) value = v.dump();
    else throw Error(fmt::format("{}: expected a string, number or boolean, got {}", source, v.dump()));
    if ((key == "model" || key == "compiled-model-dir") && !value.empty() && fs::path(value).is_relative())
      value = (base / value).lexically_normal().string();
    layer.push_back({key, value, source});
  }
  return layer;
}

PbtxtConfig read_config_pbtxt(const fs::path& file) {
  const std::string text = read_file(file);
  PbtxtConfig c;
  int depth = 0;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (size_t h = line.find('#'); h != std::string::npos) line.resize(h);
    if (depth == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string key = line.substr(0, colon);
        key.erase(0, key.find_first_not_of(" \t"));
        key.erase(key.find_last_not_of(" \t\r") + 1);
        std::string value = line.substr(colon + 1);
        value.erase(0, value.find_first_not_of(" \t"));
        value.erase(value.find_last_not_of(" \t\r") + 1);
        if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
        if (key == "name") c.name = value;
        else if (key == "backend" || key == "platform") c.backend = value;
        else if (key == "max_batch_size") {
          if (!is_number(value))
            throw Error(fmt::format("{}:{}: max_batch_size: expected a non-negative integer, got '{}'", file.string(), n,
                                    value));
          c.max_batch_size = std::stoi(value);
        }
      }
    }
    for (char ch : line) {
      if (ch == '{' || ch == '[') ++depth;
      if (ch == '}' || ch == ']') --depth;
    }
  }
  return c;
}

std::vector<RepositoryModel> scan_model_repository(const fs::path& repo) {
  std::error_code ec;
  if (!fs::is_directory(repo, ec))
    throw Error(fmt::format("--model-repository {}: not a directory", repo.string()));
  std::vector<RepositoryModel> out;
  for (const auto& entry : fs::directory_iterator(repo)) {
    if (!entry.is_directory() || entry.path().filename().string().starts_with(".")) continue;
    RepositoryModel m;
    m.name = entry.path().filename().string();
    try {
      const fs::path pbtxt = entry.path() / "config.pbtxt";
      if (fs::exists(pbtxt)) {
        PbtxtConfig c = read_config_pbtxt(pbtxt);
        if (!c.name.empty() && c.name != m.name)
          throw Error(fmt::format("{}: name \"{}\" does not match the directory name \"{}\"", pbtxt.string(), c.name,
                                  m.name));
        m.max_batch_size = c.max_batch_size;
      }
      int best = -1;
      for (const auto& v : fs::directory_iterator(entry.path())) {
        std::string vn = v.path().filename().string();
        if (v.is_directory() && is_number(vn) && vn.size() < 9 && fs::exists(v.path() / "model.json") &&
            std::stoi(vn) > best)
          best = std::stoi(vn);
      }
      if (best < 0)
        throw Error(fmt::format("{}: no version directory with a model.json (expected {}/1/model.json)",
                                entry.path().string(), entry.path().string()));
      m.version = std::to_string(best);
      m.model_json = entry.path() / m.version / "model.json";
      m.settings = model_json_layer(m.model_json);
      if (std::none_of(m.settings.begin(), m.settings.end(), [](const Setting& s) { return s.key == "model"; }))
        throw Error(fmt::format("{}: \"model\" (the model directory) is required", m.model_json.string()));
    } catch (const Error& e) {
      m.error = e.what();
    }
    out.push_back(std::move(m));
  }
  if (out.empty()) throw Error(fmt::format("--model-repository {}: holds no model directories", repo.string()));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace halo::serve
