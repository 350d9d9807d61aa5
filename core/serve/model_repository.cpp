#include "serve/model_repository.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/file_text.h"
#include "serve/engine_args.h"

namespace halo::serve {
namespace fs = std::filesystem;
namespace {


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
  const std::string text = read_file_text(file);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", file.string(), e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: expected a JSON object of engine arguments", file.string()));
  // TensorRT-LLM's names that the vLLM backend's model.json also takes.
  static const std::map<std::string, std::string> trtllm = {
      {"max_tokens_in_paged_kv_cache", "max-kv-tokens"},
      {"enable_kv_cache_reuse", "enable-prefix-caching"},
  };
  const fs::path base = file.parent_path();
  SettingLayer layer;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    int line = line_of_key(text, k);
    std::string source = line ? fmt::format("{}:{} key '{}'", file.string(), line, k)
                              : fmt::format("{} key '{}'", file.string(), k);
    const auto& v = it.value();
    std::string value;
    if (v.is_string()) value = v.get<std::string>();
    else if (v.is_boolean()) value = v.get<bool>() ? "true" : "false";
    else if (v.is_number()) value = v.dump();
    else if (v.is_object() && k == "speculative_config") value = v.dump();  // vLLM's one JSON-valued argument
    else throw Error(fmt::format("{}: expected a string, number or boolean, got {}", source, v.dump()));
    // vLLM's engine arguments mean what they mean on the command line (serve/engine_args.h).
    std::string key;
    if (auto r = trtllm.find(k); r != trtllm.end()) {
      key = r->second;
    } else if (const VllmArg* arg = find_vllm_arg(k)) {
      key = vllm_arg_key(*arg, value, source);
      if (key.empty()) continue;  // accepted, no effect (logged)
    } else {
      key = k;
      std::replace(key.begin(), key.end(), '_', '-');
      const auto& keys = setting_keys();
      if (std::find(keys.begin(), keys.end(), key) == keys.end())
        throw Error(fmt::format("{}: unknown engine argument (halo reads vLLM's engine arguments, see "
                                "docs/serving.md, and its own settings: {})",
                                source, fmt::join(keys, ", ")));
    }
    // Relative paths are relative to this file; "org/name" not found there is a Hub id.
    const bool hub_id = value.find('/') != std::string::npos && model::looks_like_hub_id(value) &&
                        !fs::exists(base / value);
    if ((key == "model" || key == "compiled-model-dir" || key == "tokenizer") && !value.empty() &&
        fs::path(value).is_relative() && !hub_id)
      value = (base / value).lexically_normal().string();
    layer.push_back({key, value, source});
  }
  return layer;
}

namespace {

// Protocol buffers' text format, as far as config.pbtxt uses it:
// `name: scalar`, `name { ... }`, `name: { ... }`, `name: [a, b]` and
// `name [ {...}, {...} ]`. A template's bare `${x}` is read as a scalar so
// that it can be reported by name.
struct PbNode {
  std::string name;
  int line = 0;
  std::string value;  // scalars (strings unquoted)
  bool is_message = false;
  std::vector<PbNode> children;
};

class PbtxtParser {
 public:
  PbtxtParser(const std::string& text, const fs::path& file) : file_(file) { lex(text); }

  std::vector<PbNode> parse() { return message(false); }

 private:
  enum class Kind { kWord, kString, kPunct, kEnd };
  struct Tok {
    Kind kind;
    std::string text;
    int line;
  };

  [[noreturn]] void fail(int line, const std::string& why) const {
    throw Error(fmt::format("{}:{}: cannot parse: {}", file_.string(), line, why));
  }

  void lex(const std::string& t) {
    int line = 1;
    size_t i = 0;
    while (i < t.size()) {
      const char c = t[i];
      if (c == '\n') {
        ++line, ++i;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
      } else if (c == '#') {
        while (i < t.size() && t[i] != '\n') ++i;
      } else if (c == '"' || c == '\'') {
        std::string v;
        size_t j = i + 1;
        for (; j < t.size() && t[j] != c; ++j) {
          if (t[j] == '\n') fail(line, "unterminated string");
          if (t[j] == '\\' && j + 1 < t.size()) ++j;
          v += t[j];
        }
        if (j >= t.size()) fail(line, "unterminated string");
        toks_.push_back({Kind::kString, v, line});
        i = j + 1;
      } else if (std::strchr("{}[]:,;", c)) {
        toks_.push_back({Kind::kPunct, std::string(1, c), line});
        ++i;
      } else if (c == '$' && i + 1 < t.size() && t[i + 1] == '{') {
        size_t j = t.find('}', i);
        if (j == std::string::npos) fail(line, "unterminated ${...}");
        toks_.push_back({Kind::kWord, t.substr(i, j - i + 1), line});
        i = j + 1;
      } else {
        size_t j = i;
        while (j < t.size() && (std::isalnum(static_cast<unsigned char>(t[j])) || std::strchr("_.+-", t[j]))) ++j;
        if (j == i) fail(line, fmt::format("unexpected '{}'", c));
        toks_.push_back({Kind::kWord, t.substr(i, j - i), line});
        i = j;
      }
    }
    toks_.push_back({Kind::kEnd, "", line});
  }

  const Tok& peek() const { return toks_[pos_]; }
  bool accept(const char* punct) {
    if (peek().kind != Kind::kPunct || peek().text != punct) return false;
    ++pos_;
    return true;
  }
  void expect(const char* punct) {
    if (!accept(punct)) fail(peek().line, fmt::format("expected '{}', got '{}'", punct, peek().text));
  }

  PbNode scalar(const std::string& name) {
    const Tok& t = peek();
    if (t.kind != Kind::kWord && t.kind != Kind::kString) fail(t.line, fmt::format("{}: expected a value", name));
    ++pos_;
    return PbNode{name, t.line, t.text, false, {}};
  }

  PbNode nested(const std::string& name) {
    PbNode n{name, peek().line, "", true, {}};
    expect("{");
    n.children = message(true);
    expect("}");
    return n;
  }

  std::vector<PbNode> message(bool inner) {
    std::vector<PbNode> nodes;
    for (;;) {
      const Tok& t = peek();
      if (t.kind == Kind::kEnd) {
        if (inner) fail(t.line, "missing '}'");
        return nodes;
      }
      if (t.kind == Kind::kPunct && t.text == "}") {
        if (!inner) fail(t.line, "unexpected '}'");
        return nodes;
      }
      if (t.kind != Kind::kWord) fail(t.line, fmt::format("expected a field name, got '{}'", t.text));
      const std::string name = t.text;
      ++pos_;
      const bool colon = accept(":");
      if (peek().kind == Kind::kPunct && peek().text == "{") {
        nodes.push_back(nested(name));
      } else if (accept("[")) {
        while (!accept("]")) {
          if (peek().kind == Kind::kPunct && peek().text == "{") nodes.push_back(nested(name));
          else nodes.push_back(scalar(name));
          if (!accept(",")) {
            expect("]");
            break;
          }
        }
      } else {
        if (!colon) fail(peek().line, fmt::format("expected ':' after '{}'", name));
        nodes.push_back(scalar(name));
      }
      if (!accept(",")) accept(";");
    }
  }

  fs::path file_;
  std::vector<Tok> toks_;
  size_t pos_ = 0;
};

std::string unfilled(const std::string& source, const std::string& value) {
  return fmt::format("{}: the template placeholder {} was not filled (fill the template, e.g. with TensorRT-LLM's "
                     "tools/fill_template.py, or write the value)",
                     source, value);
}

// Triton cannot parse a bare `${x}`, nor load a backend named "${x}": refused
// anywhere outside a parameter's string_value.
void check_placeholders(const std::vector<PbNode>& nodes, const fs::path& file, bool top) {
  for (const auto& n : nodes) {
    if (top && n.name == "parameters") continue;
    if (n.is_message) check_placeholders(n.children, file, false);
    else if (is_template_placeholder(n.value))
      throw Error(unfilled(fmt::format("{}:{} key '{}'", file.string(), n.line, n.name), n.value));
  }
}

PbtxtParameter read_parameter(const PbNode& n, const fs::path& file) {
  PbtxtParameter p;
  for (const auto& c : n.children) {
    if (c.name == "key" && !c.is_message) p.key = c.value;
    if (c.name == "value" && c.is_message)
      for (const auto& v : c.children)
        if (v.name == "string_value") p.value = v.value, p.line = v.line;
  }
  if (p.key.empty()) throw Error(fmt::format("{}:{}: a parameters entry without a key", file.string(), n.line));
  if (!p.line) p.line = n.line;
  return p;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::optional<bool> parse_bool(const std::string& v) {
  const std::string l = lower(v);
  if (l == "true" || l == "1" || l == "yes") return true;
  if (l == "false" || l == "0" || l == "no") return false;
  return std::nullopt;
}

bool truthy(const std::string& source, const std::string& v) {
  auto b = parse_bool(v);
  if (!b) throw Error(fmt::format("{}: expected true or false, got '{}'", source, v));
  return *b;
}

}  // namespace

bool is_template_placeholder(const std::string& value) {
  size_t at = value.find("${");
  return at != std::string::npos && value.find('}', at) != std::string::npos;
}

PbtxtConfig read_config_pbtxt(const fs::path& file) {
  const std::vector<PbNode> nodes = PbtxtParser(read_file_text(file), file).parse();
  check_placeholders(nodes, file, true);
  PbtxtConfig c;
  c.file = file;
  for (const auto& n : nodes) {
    if (n.name == "parameters" && n.is_message) {
      c.parameters.push_back(read_parameter(n, file));
    } else if (n.name == "model_transaction_policy" && n.is_message) {
      for (const auto& d : n.children)
        if (d.name == "decoupled")
          c.decoupled = truthy(fmt::format("{}:{} key 'decoupled'", file.string(), d.line), d.value);
    } else if (n.is_message) {
      continue;
    } else if (n.name == "name") {
      c.name = n.value;
    } else if (n.name == "backend") {
      c.backend = n.value;
    } else if (n.name == "platform") {
      c.platform = n.value;
    } else if (n.name == "max_batch_size") {
      if (!is_number(n.value) || n.value.size() > 9)
        throw Error(fmt::format("{}:{} key 'max_batch_size': expected a non-negative integer, got '{}'",
                                file.string(), n.line, n.value));
      c.max_batch_size = std::stoi(n.value);
    }
  }
  if (c.backend.empty()) c.backend = c.platform;
  return c;
}

SettingLayer tensorrt_llm_layer(const PbtxtConfig& c) {
  // TensorRT-LLM's parameter -> halo's setting.
  static const std::map<std::string, std::string> mapped = {
      {"kv_cache_free_gpu_mem_fraction", "device-memory-utilization"},
      {"enable_kv_cache_reuse", "enable-prefix-caching"},
      {"max_tokens_in_paged_kv_cache", "max-kv-tokens"},
      {"enable_chunked_context", "enable-chunked-prefill"},
  };
  // Accepted without effect: why, for the log.
  const std::string engine = "the TensorRT engine; halo runs the Hugging Face checkpoint instead";
  const std::string tuning = "TensorRT-LLM runtime tuning without a counterpart in halo";
  const std::map<std::string, std::string> no_effect = {
      {"gpt_model_path", engine}, {"engine_dir", engine}, {"encoder_model_path", engine},
      {"encoder_engine_dir", engine}, {"executor_worker_path", engine},
      {"max_attention_window_size", "halo attends to the whole context (up to max-model-len)"},
      {"sink_token_length", "halo attends to the whole context"},
      {"batch_scheduler_policy", "halo's scheduler admits while KV blocks last and preempts when they run out"},
      {"kv_cache_host_memory_bytes", "halo keeps the KV cache on the device"},
      {"kv_cache_onboard_blocks", "halo keeps the KV cache on the device"},
      {"cross_kv_cache_fraction", "encoder-decoder models only"},
      {"triton_max_batch_size", "Triton's batch size; halo's running batch is max-num-seqs"},
      {"max_queue_delay_microseconds", "halo schedules every engine step without a delay"},
      {"max_queue_size", "halo's queue limits are --max-queued-requests / --max-queued-tokens"},
      {"FORCE_CPU_ONLY_INPUT_TENSORS", tuning}, {"enable_trt_overlap", tuning},
      {"cancellation_check_period_ms", tuning}, {"stats_check_period_ms", tuning}, {"recv_poll_period_ms", tuning},
      {"iter_stats_max_iterations", tuning}, {"request_stats_max_iterations", tuning},
      {"participant_ids", tuning}, {"num_nodes", tuning}, {"gpu_weights_percent", tuning},
      {"enable_context_fmha_fp32_acc", tuning}, {"multi_block_mode", tuning}, {"cuda_graph_mode", tuning},
      {"cuda_graph_cache_size", tuning}, {"logits_datatype", tuning}, {"encoder_input_features_data_type", tuning},
      {"lora_cache_optimal_adapter_size", "halo serves no LoRA adapters"},
      {"lora_cache_max_adapter_size", "halo serves no LoRA adapters"},
      {"lora_cache_gpu_memory_fraction", "halo serves no LoRA adapters"},
      {"lora_cache_host_memory_bytes", "halo serves no LoRA adapters"},
      {"lora_prefetch_dir", "halo serves no LoRA adapters"},
      {"medusa_choices", "halo decodes without speculation"}, {"eagle_choices", "halo decodes without speculation"},
      {"lookahead_window_size", "halo decodes without speculation"},
      {"lookahead_ngram_size", "halo decodes without speculation"},
      {"lookahead_verification_set_size", "halo decodes without speculation"},
      {"speculative_decoding_fast_logits", "halo decodes without speculation"},
      {"guided_decoding_backend", "halo has one guided decoding backend (regex DFA and GBNF grammars)"},
      {"xgrammar_tokenizer_info_path", "halo matches grammars against its own tokenizer"},
  };
  SettingLayer layer;
  for (const auto& p : c.parameters) {
    const std::string source = fmt::format("{}:{} key '{}'", c.file.string(), p.line, p.key);
    std::string v = p.value;
    v.erase(0, v.find_first_not_of(" \t"));
    v.erase(v.find_last_not_of(" \t") + 1);
    if (is_template_placeholder(v)) {
      // TensorRT-LLM reads an unfilled optional parameter as "not set".
      if (p.key == "gpt_model_path" || p.key == "gpt_model_type") throw Error(unfilled(source, v));
      spdlog::info("{}: {} not filled: not set", source, v);
      continue;
    }
    if (p.key == "tokenizer_dir") continue;  // the checkpoint: scan_model_repository
    if (v.empty()) continue;                 // TensorRT-LLM's "not set"
    if (auto m = mapped.find(p.key); m != mapped.end()) {
      layer.push_back({m->second, v, source});
    } else if (p.key == "gpt_model_type" || p.key == "batching_strategy") {
      const std::string s = lower(v);
      if (s == "v1")
        spdlog::warn("{}: V1 (static batching): halo batches in flight regardless; the outputs are the same", source);
      else if (s != "inflight_fused_batching" && s != "inflight_batching")
        throw Error(fmt::format("{}: expected inflight_fused_batching, inflight_batching or V1, got '{}'", source, v));
    } else if (p.key == "max_beam_width") {
      if (!is_number(v) || v.size() > 9 || std::stoi(v) < 1)
        throw Error(fmt::format("{}: expected a positive integer, got '{}'", source, v));
      // Beam search needs no engine built for it: any beam_width up to max_num_seqs is served.
    } else if (p.key == "decoding_mode") {
      const std::string s = lower(v);
      if (s != "beam_search" && s != "top_k" && s != "top_p" && s != "top_k_top_p" && s != "auto")
        spdlog::info("{}: {}: halo decodes without speculation (the target model alone)", source, v);
    } else if (p.key == "gpu_device_ids") {
      if (!is_number(v) || v.size() > 9)
        throw Error(fmt::format("{}: '{}': halo runs a model on one device index (set tensor-parallel-size in "
                                "model.json for several chips)",
                                source, v));
      layer.push_back({"device-index", v, source});
    } else if (p.key == "exclude_input_in_output") {
      if (truthy(source, v))
        spdlog::info("{}: true: send exclude_input_in_output: true with each request; halo's generate otherwise "
                     "returns the prompt first, as the vLLM backend does",
                     source);
    } else if (p.key == "normalize_log_probs") {
      if (!truthy(source, v)) spdlog::info("{}: false: halo's log probabilities are always normalized", source);
    } else if (auto n = no_effect.find(p.key); n != no_effect.end()) {
      spdlog::info("{}: no effect in halo ({})", source, n->second);
    } else {
      std::vector<std::string> known;
      for (const auto& [k, _] : mapped) known.push_back(k);
      throw Error(fmt::format("{}: unknown TensorRT-LLM parameter (halo maps {}, checks gpt_model_type, "
                              "max_beam_width, decoding_mode, gpu_device_ids, and accepts the runtime tuning "
                              "parameters of TensorRT-LLM's templates)",
                              source, fmt::join(known, ", ")));
    }
  }
  return layer;
}

namespace {

// The highest numeric version directory of `dir` (holding `file` when not
// empty), or -1.
int best_version(const fs::path& dir, const std::string& file) {
  int best = -1;
  std::error_code ec;
  for (const auto& v : fs::directory_iterator(dir, ec)) {
    std::string vn = v.path().filename().string();
    if (v.is_directory() && is_number(vn) && vn.size() < 9 && (file.empty() || fs::exists(v.path() / file)))
      best = std::max(best, std::stoi(vn));
  }
  return best;
}

void check_name(const PbtxtConfig& c, const std::string& dir_name) {
  if (!c.name.empty() && c.name != dir_name)
    throw Error(fmt::format("{}: name \"{}\" does not match the directory name \"{}\"", c.file.string(), c.name,
                            dir_name));
}

// A model as Triton's vLLM backend lays it out: <version>/model.json.
RepositoryModel vllm_model(const fs::path& dir) {
  RepositoryModel m;
  m.name = dir.filename().string();
  try {
    const fs::path pbtxt = dir / "config.pbtxt";
    if (fs::exists(pbtxt)) {
      PbtxtConfig c = read_config_pbtxt(pbtxt);
      check_name(c, m.name);
      m.max_batch_size = c.max_batch_size;
    }
    int best = best_version(dir, "model.json");
    if (best < 0)
      throw Error(fmt::format("{}: no version directory with a model.json (expected {}/1/model.json)", dir.string(),
                              dir.string()));
    m.version = std::to_string(best);
    m.model_json = dir / m.version / "model.json";
    m.settings = model_json_layer(m.model_json);
    if (std::none_of(m.settings.begin(), m.settings.end(), [](const Setting& s) { return s.key == "model"; }))
      throw Error(fmt::format("{}: \"model\" (the model directory) is required", m.model_json.string()));
  } catch (const Error& e) {
    m.error = e.what();
  }
  return m;
}

// The Hugging Face checkpoint of a TensorRT-LLM pipeline: the first
// tokenizer_dir (tensorrt_llm's, preprocessing's, postprocessing's) that is set.
Setting checkpoint_setting(const std::map<std::string, PbtxtConfig>& configs, const std::string& engine,
                           const fs::path& repo) {
  std::string unfilled_source, unfilled_value;
  for (const std::string& n : {engine, std::string("preprocessing"), std::string("postprocessing")}) {
    auto it = configs.find(n);
    if (it == configs.end()) continue;
    for (const auto& p : it->second.parameters) {
      if (p.key != "tokenizer_dir" || p.value.empty()) continue;
      const std::string source = fmt::format("{}:{} key 'tokenizer_dir'", it->second.file.string(), p.line);
      if (is_template_placeholder(p.value)) {
        if (unfilled_source.empty()) unfilled_source = source, unfilled_value = p.value;
        continue;
      }
      if (!fs::exists(fs::path(p.value) / "config.json"))
        throw Error(fmt::format("{}: {} holds no Hugging Face checkpoint (config.json): halo cannot run the "
                                "TensorRT engine (gpt_model_path) and loads the checkpoint tokenizer_dir names; "
                                "point it at the checkpoint, or name one in {}/1/model.json {{\"model\": DIR}}",
                                source, p.value, (repo / engine).string()));
      return Setting{"model", p.value, source};
    }
  }
  if (!unfilled_source.empty()) throw Error(unfilled(unfilled_source, unfilled_value));
  throw Error(fmt::format("{}: no model: halo cannot run the TensorRT engine and needs the Hugging Face checkpoint: "
                          "set tokenizer_dir in preprocessing/config.pbtxt, or write {}/1/model.json "
                          "{{\"model\": DIR}}",
                          (repo / engine).string(), (repo / engine).string()));
}

// The TensorRT-LLM pipeline (`members` present, `engine` the tensorrtllm
// model) as one served model.
RepositoryModel tensorrt_llm_pipeline(const fs::path& repo, const std::string& engine,
                                      const std::set<std::string>& members) {
  RepositoryModel m;
  m.name = members.count("ensemble") ? "ensemble" : members.count("tensorrt_llm_bls") ? "tensorrt_llm_bls" : engine;
  for (const std::string& n : {std::string("ensemble"), std::string("tensorrt_llm_bls"), engine})
    if (members.count(n) && n != m.name) m.aliases.push_back(n);
  const int version = best_version(repo / m.name, "");
  m.version = std::to_string(version < 0 ? 1 : version);
  try {
    std::map<std::string, PbtxtConfig> configs;
    for (const auto& n : members) {
      const fs::path f = repo / n / "config.pbtxt";
      if (!fs::exists(f)) {
        if (n == engine) throw Error(fmt::format("{}: missing (it holds the TensorRT-LLM parameters)", f.string()));
        continue;
      }
      configs[n] = read_config_pbtxt(f);
      check_name(configs[n], n);
    }
    if (auto it = configs.find(m.name); it != configs.end()) m.max_batch_size = it->second.max_batch_size;
    m.settings = tensorrt_llm_layer(configs.at(engine));
    for (const auto& [n, c] : configs) {
      if (n == engine || n == m.name) continue;
      if (n == "preprocessing" || n == "postprocessing")
        spdlog::info("{}: '{}' is not served on its own: halo tokenizes with the checkpoint's tokenizer", c.file.string(), n);
      for (const auto& p : c.parameters)
        if (p.key == "tensorrt_llm_draft_model_name" && !p.value.empty() && !is_template_placeholder(p.value))
          spdlog::info("{}:{} key '{}': halo decodes without a draft model", c.file.string(), p.line, p.key);
    }
    // The weights: tensorrt_llm/<version>/model.json (halo's own way) wins over tokenizer_dir.
    if (int jv = best_version(repo / engine, "model.json"); jv >= 0) {
      m.model_json = repo / engine / std::to_string(jv) / "model.json";
      SettingLayer extra = model_json_layer(m.model_json);
      m.settings.insert(m.settings.end(), extra.begin(), extra.end());
    }
    if (std::none_of(m.settings.begin(), m.settings.end(), [](const Setting& s) { return s.key == "model"; }))
      m.settings.insert(m.settings.begin(), checkpoint_setting(configs, engine, repo));
    spdlog::info("{}: the TensorRT-LLM pipeline is served as '{}'{}", repo.string(), m.name,
                 m.aliases.empty() ? "" : fmt::format(" (also named {})", fmt::join(m.aliases, ", ")));
  } catch (const Error& e) {
    m.error = e.what();
  }
  return m;
}

// The tensorrtllm model of the repository: `tensorrt_llm`, else the first
// whose config.pbtxt says backend "tensorrtllm"; "" when none.
std::string find_tensorrt_llm(const std::vector<fs::path>& dirs) {
  for (const auto& d : dirs)
    if (d.filename() == "tensorrt_llm") return d.filename().string();
  for (const auto& d : dirs) {
    try {
      if (fs::exists(d / "config.pbtxt") && read_config_pbtxt(d / "config.pbtxt").backend == "tensorrtllm")
        return d.filename().string();
    } catch (const Error&) {
      // Reported when the model itself is read.
    }
  }
  return {};
}

}  // namespace

std::vector<RepositoryModel> scan_model_repository(const fs::path& repo) {
  std::error_code ec;
  if (!fs::is_directory(repo, ec))
    throw Error(fmt::format("--model-repository {}: not a directory", repo.string()));
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(repo))
    if (entry.is_directory() && !entry.path().filename().string().starts_with(".")) dirs.push_back(entry.path());
  if (dirs.empty()) throw Error(fmt::format("--model-repository {}: holds no model directories", repo.string()));
  std::sort(dirs.begin(), dirs.end());

  std::vector<RepositoryModel> out;
  std::set<std::string> pipeline;
  if (const std::string engine = find_tensorrt_llm(dirs); !engine.empty()) {
    pipeline.insert(engine);
    for (const auto& d : dirs) {
      const std::string n = d.filename().string();
      if (n == "ensemble" || n == "preprocessing" || n == "postprocessing" || n == "tensorrt_llm_bls")
        pipeline.insert(n);
    }
    out.push_back(tensorrt_llm_pipeline(repo, engine, pipeline));
  }
  for (const auto& d : dirs)
    if (!pipeline.count(d.filename().string())) out.push_back(vllm_model(d));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace halo::serve
