#include "engine/spec_decode/speculative_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <utility>

#include "common/error.h"

namespace halo::engine::spec {
namespace {

using Json = nlohmann::json;
using Method = SpeculativeConfig::Method;

// vLLM's prompt_lookup_min/max when neither is given.
constexpr int kDefaultPromptLookup = 5;

// The keys halo reads.
constexpr std::array<std::string_view, 7> kOwnKeys = {"method",
                                                      "model",
                                                      "revision",
                                                      "num_speculative_tokens",
                                                      "prompt_lookup_min",
                                                      "prompt_lookup_max",
                                                      "disable_by_batch_size"};

// vLLM keys about how vLLM loads or runs the draft: accepted, checked, without effect.
constexpr std::array<std::string_view, 7> kIgnoredKeys = {
    "draft_tensor_parallel_size",
    "max_model_len",
    "code_revision",
    "quantization",
    "enforce_eager",
    "disable_padded_drafter_batch",  // EAGLE only in vLLM
    "disable_log_stats"};

// vLLM keys for what halo lacks (other methods, other acceptance rules, per-draft kernels):
// refused, so that a config never silently means less than it says.
constexpr std::array<std::string_view, 31> kUnsupportedKeys = {
    "tensor_parallel_size",
    "moe_backend",
    "attention_backend",
    "kv_cache_dtype",
    "index_share_for_mtp_iteration",
    "disable_eagle_block_drop",
    "use_local_argmax_reduction",
    "use_heterogeneous_vocab",
    "parallel_drafting",
    "speculative_token_tree",
    "num_speculative_tokens_per_batch_size",
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
    "draft_load_config",
    "rejection_sample_method",
    "synthetic_acceptance_rates",
    "synthetic_acceptance_length",
    "enable_adaptive_verification",
    "draft_sample_method",
    "dspark_draft_topk",
    "target_model_config",
    "target_parallel_config",
    "draft_model_config",
    "draft_parallel_config",
    "acceptance_method",
    "posterior_threshold",
    "posterior_alpha",
    "disable_logprobs",
    "disable_mqa_scorer"};

// vLLM methods halo has not (besides "*_mtp", vLLM's aliases of mtp).
constexpr std::array<std::string_view, 11> kOtherVllmMethods = {
    "eagle",  "eagle3", "medusa",       "mlp_speculator",
    "mtp",    "suffix", "custom_class", "extract_hidden_states",
    "dflash", "dspark", "ngram_gpu"};

constexpr std::string_view kSupported = "halo supports ngram and draft_model";

[[noreturn]] void fail(const std::string& message) {
  throw Error("--speculative-config: " + message);
}

bool contains(std::span<const std::string_view> list, std::string_view key) {
  return std::find(list.begin(), list.end(), key) != list.end();
}

std::string known_keys() {
  std::string out;
  auto add = [&](std::span<const std::string_view> keys) {
    for (std::string_view key : keys) out += (out.empty() ? "" : ", ") + std::string(key);
  };
  add(kOwnKeys);
  add(kIgnoredKeys);
  return out;
}

[[noreturn]] void refuse_key(const std::string& key) {
  if (key == "tensor_parallel_size")
    fail(
        "'tensor_parallel_size' is not a speculative_config field; the draft's is "
        "'draft_tensor_parallel_size'");
  if (contains(kUnsupportedKeys, key))
    fail(fmt::format("'{}' is a vLLM field halo does not support (known: {})", key, known_keys()));
  fail(fmt::format("unknown field '{}' (known: {})", key, known_keys()));
}

[[noreturn]] void wrong_value(std::string_view key, std::string_view expected, const Json& v) {
  fail(fmt::format("'{}' must be {}, got {}", key, expected,
                   v.dump(-1, ' ', false, Json::error_handler_t::replace)));
}

int integer(std::string_view key, const Json& v, int lo, int hi) {
  const std::string expected = hi == INT_MAX ? fmt::format("an integer >= {}", lo)
                                             : fmt::format("an integer from {} to {}", lo, hi);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX))
    wrong_value(key, expected, v);
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi) wrong_value(key, expected, v);
  return static_cast<int>(n);
}

std::string text(std::string_view key, const Json& v) {
  if (!v.is_string()) wrong_value(key, "a string", v);
  return v.get<std::string>();
}

// What the JSON said, before the method is known; nullopt: absent or null.
struct Given {
  std::optional<std::string> method, model, revision;
  std::optional<int> k, lookup_min, lookup_max, disable_by_batch_size;
  std::vector<std::string> ignored;
};

void read_own(Given& g, const std::string& key, const Json& v) {
  if (key == "method") {
    g.method = text(key, v);
  } else if (key == "model") {
    g.model = text(key, v);
    if (g.model->empty()) wrong_value(key, "a non-empty string", v);
  } else if (key == "revision") {
    g.revision = text(key, v);
  } else if (key == "num_speculative_tokens") {
    g.k = integer(key, v, 1, kMaxSpeculativeTokens);
  } else if (key == "prompt_lookup_min") {
    g.lookup_min = integer(key, v, 1, INT_MAX);
  } else if (key == "prompt_lookup_max") {
    g.lookup_max = integer(key, v, 1, INT_MAX);
  } else {
    g.disable_by_batch_size = integer(key, v, 2, INT_MAX);  // vLLM: must be > 1
  }
}

// An ignored key still has the type vLLM gives it.
void check_ignored(const std::string& key, const Json& v) {
  if (key == "draft_tensor_parallel_size") {
    if (!v.is_number_integer() || v.get<int64_t>() != 1)
      wrong_value(key, "1 (halo runs the draft on one device)", v);
  } else if (key == "max_model_len") {
    integer(key, v, 1, INT_MAX);
  } else if (key == "enforce_eager" || key == "disable_padded_drafter_batch" ||
             key == "disable_log_stats") {
    if (!v.is_boolean()) wrong_value(key, "true or false", v);
  } else {
    text(key, v);  // code_revision, quantization
  }
}

Given read_keys(const Json& j) {
  Given g;
  for (const auto& [key, v] : j.items()) {
    const bool own = contains(kOwnKeys, key), ignored = contains(kIgnoredKeys, key);
    if (v.is_null() && (own || ignored || contains(kUnsupportedKeys, key))) continue;  // None
    if (own) {
      read_own(g, key, v);
    } else if (ignored) {
      check_ignored(key, v);
      g.ignored.push_back(key);
    } else {
      refuse_key(key);
    }
  }
  return g;
}

// vLLM's stand-ins for "no model" with the ngram method.
bool names_ngram(std::string_view model) { return model == "ngram" || model == "[ngram]"; }

bool is_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// vLLM takes a model that is a dotted Python import path ("pkg.MyProposer") as method
// custom_class.
bool is_class_path(std::string_view model) {
  if (model.starts_with("http://") || model.starts_with("https://") ||
      model.starts_with("file://") || model.find('/') != std::string_view::npos)
    return false;
  int parts = 0;
  for (size_t begin = 0;; ++parts) {
    const size_t dot = model.find('.', begin);
    if (!is_identifier(model.substr(begin, dot - begin))) return false;
    if (dot == std::string_view::npos) return parts + 1 >= 2;
    begin = dot + 1;
  }
}

// vLLM runs a draft whose name says EAGLE, DFlash or DSpark as that method, whatever the
// method given.
std::optional<std::string_view> method_in_name(std::string_view model) {
  std::string lower(model);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static constexpr std::pair<std::string_view, std::string_view> kMarks[] = {
      {"eagle-", "eagle"}, {"eagle3", "eagle3"}, {"dflash", "dflash"}, {"dspark", "dspark"}};
  for (auto [mark, method] : kMarks)
    if (lower.find(mark) != std::string::npos) return method;
  return std::nullopt;
}

Method method_from_name(const std::string& name) {
  if (name == "ngram" || name == "[ngram]") return Method::kNgram;
  if (name == "draft_model") return Method::kDraftModel;
  if (contains(kOtherVllmMethods, name) || name.ends_with("_mtp"))
    fail(fmt::format("method '{}' is not supported yet: {}", name, kSupported));
  fail(fmt::format("unknown method '{}': {}", name, kSupported));
}

// vLLM's inference when no method is given: the model names ngram, a Python class, or a draft.
Method infer_method(const Given& g) {
  if (g.method) return method_from_name(*g.method);
  if (!g.model) fail(fmt::format("needs a 'method' or a 'model' ({})", kSupported));
  if (names_ngram(*g.model)) return Method::kNgram;
  if (is_class_path(*g.model))
    fail(
        fmt::format("'model' \"{}\" is a Python class path, which vLLM runs as method "
                    "custom_class; {} (a local directory: write \"./{}\")",
                    *g.model, kSupported, *g.model));
  return Method::kDraftModel;
}

void resolve_ngram(Given& g, SpeculativeConfig& c) {
  if (g.model && !names_ngram(*g.model))
    fail(fmt::format("'model' \"{}\" is for method draft_model; method ngram takes no model",
                     *g.model));
  if (g.revision) g.ignored.push_back("revision");
  c.prompt_lookup_min = g.lookup_min.value_or(g.lookup_max.value_or(kDefaultPromptLookup));
  c.prompt_lookup_max = g.lookup_max.value_or(g.lookup_min.value_or(kDefaultPromptLookup));
  if (c.prompt_lookup_min > c.prompt_lookup_max)
    fail(fmt::format("prompt_lookup_min={} must be <= prompt_lookup_max={}", c.prompt_lookup_min,
                     c.prompt_lookup_max));
}

void resolve_draft_model(Given& g, SpeculativeConfig& c) {
  if (!g.model)
    fail("method draft_model needs a 'model' (the draft's directory or Hugging Face id)");
  if (names_ngram(*g.model))
    fail(
        fmt::format("'model' \"{}\" names the ngram method, not a draft; write "
                    "\"method\": \"ngram\"",
                    *g.model));
  if (auto m = method_in_name(*g.model))
    fail(fmt::format("'model' \"{}\": vLLM runs a draft so named as method {}; {}", *g.model, *m,
                     kSupported));
  c.model = *g.model;
  c.revision = g.revision.value_or("");
  // vLLM drops the ngram window for other methods.
  if (g.lookup_min) g.ignored.push_back("prompt_lookup_min");
  if (g.lookup_max) g.ignored.push_back("prompt_lookup_max");
}

}  // namespace

const char* method_name(Method method) {
  return method == Method::kNgram ? "ngram" : "draft_model";
}

std::string SpeculativeConfig::to_json() const {
  Json j;
  j["method"] = method_name(method);
  j["num_speculative_tokens"] = num_speculative_tokens;
  if (method == Method::kNgram) {
    j["prompt_lookup_min"] = prompt_lookup_min;
    j["prompt_lookup_max"] = prompt_lookup_max;
  } else {
    j["model"] = model;
    if (!revision.empty()) j["revision"] = revision;
  }
  if (disable_by_batch_size != 0) j["disable_by_batch_size"] = disable_by_batch_size;
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

SpeculativeConfig parse_speculative_config(std::string_view json_text) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {
    fail(fmt::format("not JSON: {}", e.what()));
  }
  if (!j.is_object()) fail("must be a JSON object");
  Given g = read_keys(j);
  SpeculativeConfig c;
  c.method = infer_method(g);
  if (!g.k)
    fail(fmt::format("'num_speculative_tokens' is required (an integer from 1 to {})",
                     kMaxSpeculativeTokens));
  c.num_speculative_tokens = *g.k;
  c.disable_by_batch_size = g.disable_by_batch_size.value_or(0);
  if (c.method == Method::kNgram)
    resolve_ngram(g, c);
  else
    resolve_draft_model(g, c);
  c.ignored = std::move(g.ignored);
  std::sort(c.ignored.begin(), c.ignored.end());
  return c;
}

}  // namespace halo::engine::spec
