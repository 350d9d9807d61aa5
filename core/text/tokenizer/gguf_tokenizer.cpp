// GGUF tokenizer metadata -> Hugging Face tokenizer.json / tokenizer_config.json
// (see tokenizer.h). Written from the GGUF metadata conventions
// (tokenizer.ggml.*) and the tokenizer.json format.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "text/tokenizer/tokenizer.h"

namespace halo::text {

using nlohmann::json;

namespace {

constexpr const char* kWhat = "GGUF tokenizer metadata";
constexpr int kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;
const std::string kSpace = "\u2581";

// Byte-level BPE pre-tokenizer regexes by tokenizer.ggml.pre.
struct PreInfo {
  const char* regex;
  bool ignore_merges;
  bool nfc;       // Qwen's tokenizer.json normalizes to NFC first
  bool clean_up;  // clean_up_tokenization_spaces (Llama 3's tokenizer_config; llama.cpp too)
};
const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::vector<std::pair<std::string, PreInfo>>& known_pres() {
  static const std::vector<std::pair<std::string, PreInfo>> k = {
      {"llama-bpe", {kLlama3Regex, true, false, true}},
      {"llama3", {kLlama3Regex, true, false, true}},
      {"llama-v3", {kLlama3Regex, true, false, true}},
      {"qwen2", {kQwen2Regex, false, true, false}},
  };
  return k;
}

const json* find(const json& md, const char* key) {
  const auto it = md.find(key);
  return it == md.end() || it->is_null() ? nullptr : &*it;
}

std::string md_string(const json& md, const char* key) {
  const json* v = find(md, key);
  if (!v) throw Error(fmt::format("{}: '{}' is missing", kWhat, key));
  if (!v->is_string()) throw Error(fmt::format("{}: '{}' is not a string", kWhat, key));
  return v->get<std::string>();
}

std::optional<bool> md_bool(const json& md, const char* key) {
  const json* v = find(md, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw Error(fmt::format("{}: '{}' is not a boolean", kWhat, key));
  return v->get<bool>();
}

// A token id key: an integer naming one of the n tokens.
std::optional<int32_t> get_id(const json& md, const char* key, std::size_t n) {
  const json* v = find(md, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) throw Error(fmt::format("{}: '{}' is not an integer", kWhat, key));
  const auto id = v->get<int64_t>();
  if (id < 0 || static_cast<uint64_t>(id) >= n)
    throw Error(
        fmt::format("{}: '{}' is {}, not a token id (there are {} tokens)", kWhat, key, id, n));
  return static_cast<int32_t>(id);
}

const json& get_array(const json& md, const char* key) {
  const json* v = find(md, key);
  if (!v) throw Error(fmt::format("{}: '{}' is missing", kWhat, key));
  if (!v->is_array()) throw Error(fmt::format("{}: '{}' is not an array", kWhat, key));
  return *v;
}

struct GgufVocab {
  std::vector<std::string> tokens;
  std::vector<int> types;
};

GgufVocab read_vocab(const json& md) {
  GgufVocab v;
  const json& toks = get_array(md, "tokenizer.ggml.tokens");
  if (toks.empty()) throw Error(fmt::format("{}: 'tokenizer.ggml.tokens' is empty", kWhat));
  v.tokens.reserve(toks.size());
  for (std::size_t i = 0; i < toks.size(); ++i) {
    if (!toks[i].is_string())
      throw Error(fmt::format("{}: 'tokenizer.ggml.tokens' entry {} is not a string", kWhat, i));
    v.tokens.push_back(toks[i].get<std::string>());
  }
  v.types.assign(v.tokens.size(), kNormal);
  if (find(md, "tokenizer.ggml.token_type")) {
    const json& types = get_array(md, "tokenizer.ggml.token_type");
    if (types.size() != v.tokens.size())
      throw Error(fmt::format(
          "{}: 'tokenizer.ggml.token_type' has {} entries but 'tokenizer.ggml.tokens' has {}",
          kWhat, types.size(), v.tokens.size()));
    for (std::size_t i = 0; i < types.size(); ++i) {
      if (!types[i].is_number_integer())
        throw Error(
            fmt::format("{}: 'tokenizer.ggml.token_type' entry {} is not an integer", kWhat, i));
      v.types[i] = types[i].get<int>();
    }
  }
  return v;
}

bool is_added(int type) { return type == kUnknown || type == kControl || type == kUserDefined; }

// model.vocab (every token but the unused ones; the first id wins for a
// repeated string) and added_tokens.
void add_vocab(const GgufVocab& v, json& tj) {
  json vocab = json::object();
  json added = json::array();
  for (std::size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.types[i] == kUnused) continue;
    if (!vocab.contains(v.tokens[i])) vocab[v.tokens[i]] = i;
    if (is_added(v.types[i])) {
      const bool special = v.types[i] != kUserDefined;
      added.push_back({{"id", i},
                       {"content", v.tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", special}});
    }
  }
  tj["added_tokens"] = std::move(added);
  tj["model"]["vocab"] = std::move(vocab);
}

// SentencePiece scores -> BPE merges: every split of a token into two tokens,
// ranked by the token's score (higher first; equal scores in id order), the
// splits of one token ordered by the ids of their left and then right parts.
json merges_from_scores(const GgufVocab& v, const std::vector<double>& scores) {
  std::unordered_map<std::string_view, int32_t> ids;
  for (std::size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.types[i] == kUnused) continue;
    ids.emplace(v.tokens[i], static_cast<int32_t>(i));
  }
  std::vector<int32_t> order(v.tokens.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  json merges = json::array();
  std::vector<std::pair<int32_t, int32_t>> local;
  for (const int32_t id : order) {
    const int type = v.types[id];
    if (type == kUnused || type == kByte) continue;
    const std::string_view t = v.tokens[id];
    local.clear();
    for (std::size_t k = 1; k < t.size(); ++k) {
      if ((static_cast<unsigned char>(t[k]) & 0xC0) == 0x80) continue;  // inside a UTF-8 sequence
      const auto l = ids.find(t.substr(0, k));
      if (l == ids.end()) continue;
      const auto r = ids.find(t.substr(k));
      if (r == ids.end()) continue;
      local.emplace_back(l->second, r->second);
    }
    std::sort(local.begin(), local.end());
    for (const auto& [l, r] : local) merges.push_back(json::array({v.tokens[l], v.tokens[r]}));
  }
  return merges;
}

json llama_spm(const json& md, const GgufVocab& v, json tj) {
  const json& sc = get_array(md, "tokenizer.ggml.scores");
  if (sc.size() != v.tokens.size())
    throw Error(
        fmt::format("{}: 'tokenizer.ggml.scores' has {} entries but 'tokenizer.ggml.tokens' has {}",
                    kWhat, sc.size(), v.tokens.size()));
  std::vector<double> scores(sc.size());
  for (std::size_t i = 0; i < sc.size(); ++i) {
    if (!sc[i].is_number())
      throw Error(fmt::format("{}: 'tokenizer.ggml.scores' entry {} is not a number", kWhat, i));
    scores[i] = sc[i].get<double>();
  }
  const bool add_space = md_bool(md, "tokenizer.ggml.add_space_prefix").value_or(true);
  json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}};
  if (add_space) {
    tj["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", kSpace}}, replace})}};
  } else {
    tj["normalizer"] = replace;
  }
  tj["pre_tokenizer"] = nullptr;
  std::optional<int32_t> unk = get_id(md, "tokenizer.ggml.unknown_token_id", v.tokens.size());
  if (!unk) {
    const auto it = std::find(v.types.begin(), v.types.end(), kUnknown);
    if (it != v.types.end()) unk = static_cast<int32_t>(it - v.types.begin());
  }
  json& m = tj["model"];
  m["type"] = "BPE";
  m["unk_token"] = unk ? json(v.tokens[*unk]) : json(nullptr);
  m["fuse_unk"] = true;
  m["byte_fallback"] = true;
  m["ignore_merges"] = false;
  m["merges"] = merges_from_scores(v, scores);
  json decoders =
      json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}});
  if (add_space)
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  tj["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(decoders)}};
  return tj;
}

json gpt2_bpe(const json& md, json tj) {
  const std::string pre = md_string(md, "tokenizer.ggml.pre");
  const auto& pres = known_pres();
  const auto it =
      std::find_if(pres.begin(), pres.end(), [&](const auto& p) { return p.first == pre; });
  if (it == pres.end()) {
    std::string names;
    for (const auto& p : pres) names += (names.empty() ? "" : ", ") + p.first;
    throw Error(
        fmt::format("{}: 'tokenizer.ggml.pre' is '{}', which halo does not know (known: {})", kWhat,
                    pre, names));
  }
  const PreInfo& info = it->second;
  const json& mg = get_array(md, "tokenizer.ggml.merges");
  json merges = json::array();
  for (std::size_t i = 0; i < mg.size(); ++i) {
    if (!mg[i].is_string() || mg[i].get_ref<const std::string&>().find(' ') == std::string::npos)
      throw Error(
          fmt::format("{}: 'tokenizer.ggml.merges' entry {} is not a string \"A B\"", kWhat, i));
    merges.push_back(mg[i]);
  }
  tj["normalizer"] = info.nfc ? json{{"type", "NFC"}} : json(nullptr);
  tj["pre_tokenizer"] = {{"type", "Sequence"},
                         {"pretokenizers", json::array({{{"type", "Split"},
                                                         {"pattern", {{"Regex", info.regex}}},
                                                         {"behavior", "Isolated"},
                                                         {"invert", false}},
                                                        {{"type", "ByteLevel"},
                                                         {"add_prefix_space", false},
                                                         {"trim_offsets", false},
                                                         {"use_regex", false}}})}};
  json& m = tj["model"];
  m["type"] = "BPE";
  m["unk_token"] = nullptr;
  m["fuse_unk"] = false;
  m["byte_fallback"] = false;
  m["ignore_merges"] = info.ignore_merges;
  m["merges"] = std::move(merges);
  tj["decoder"] = {{"type", "ByteLevel"},
                   {"add_prefix_space", false},
                   {"trim_offsets", false},
                   {"use_regex", false}};
  return tj;
}

struct Specials {
  std::optional<int32_t> bos, eos;
  bool add_bos = false, add_eos = false;
};

Specials specials(const json& md, const GgufVocab& v, const std::string& model) {
  Specials s;
  s.bos = get_id(md, "tokenizer.ggml.bos_token_id", v.tokens.size());
  s.eos = get_id(md, "tokenizer.ggml.eos_token_id", v.tokens.size());
  // llama.cpp's defaults when the keys are absent.
  const bool default_bos =
      model == "llama" || (find(md, "tokenizer.ggml.pre") && md["tokenizer.ggml.pre"].is_string() &&
                           md["tokenizer.ggml.pre"].get<std::string>().starts_with("llama"));
  s.add_bos = md_bool(md, "tokenizer.ggml.add_bos_token").value_or(default_bos);
  s.add_eos = md_bool(md, "tokenizer.ggml.add_eos_token").value_or(false);
  if (s.add_bos && !s.bos)
    throw Error(fmt::format(
        "{}: 'tokenizer.ggml.add_bos_token' is set but 'tokenizer.ggml.bos_token_id' is missing",
        kWhat));
  if (s.add_eos && !s.eos)
    throw Error(fmt::format(
        "{}: 'tokenizer.ggml.add_eos_token' is set but 'tokenizer.ggml.eos_token_id' is missing",
        kWhat));
  return s;
}

void check_object(const json& md) {
  if (!md.is_object()) throw Error(fmt::format("{}: not a JSON object", kWhat));
}

}  // namespace

json tokenizer_json_from_gguf(const json& md) {
  check_object(md);
  const std::string model = md_string(md, "tokenizer.ggml.model");
  if (model != "llama" && model != "gpt2")
    throw Error(fmt::format(
        "{}: 'tokenizer.ggml.model' is '{}', which halo does not support (supported: llama, gpt2)",
        kWhat, model));
  const GgufVocab v = read_vocab(md);
  json tj = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  add_vocab(v, tj);
  tj = model == "llama" ? llama_spm(md, v, std::move(tj)) : gpt2_bpe(md, std::move(tj));

  const Specials s = specials(md, v, model);
  json single = json::array();
  json special_tokens = json::object();
  auto add_special = [&](int32_t id) {
    const std::string& t = v.tokens[id];
    single.push_back({{"SpecialToken", {{"id", t}, {"type_id", 0}}}});
    special_tokens[t] = {{"id", t}, {"ids", json::array({id})}, {"tokens", json::array({t})}};
  };
  if (s.add_bos) add_special(*s.bos);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (s.add_eos) add_special(*s.eos);
  if (s.add_bos || s.add_eos) {
    tj["post_processor"] = {{"type", "TemplateProcessing"},
                            {"single", single},
                            {"pair", single},
                            {"special_tokens", special_tokens}};
  } else {
    tj["post_processor"] = nullptr;
  }
  return tj;
}

json tokenizer_config_from_gguf(const json& md) {
  check_object(md);
  const std::string model = md_string(md, "tokenizer.ggml.model");
  const GgufVocab v = read_vocab(md);
  const Specials s = specials(md, v, model);
  json c = json::object();
  auto token = [&](const char* key, const char* name) {
    if (const auto id = get_id(md, key, v.tokens.size())) c[name] = v.tokens[*id];
  };
  token("tokenizer.ggml.bos_token_id", "bos_token");
  token("tokenizer.ggml.eos_token_id", "eos_token");
  token("tokenizer.ggml.unknown_token_id", "unk_token");
  token("tokenizer.ggml.padding_token_id", "pad_token");
  c["add_bos_token"] = s.add_bos;
  c["add_eos_token"] = s.add_eos;
  bool clean_up = false;
  if (model == "gpt2") {
    const std::string pre = md_string(md, "tokenizer.ggml.pre");
    for (const auto& [name, info] : known_pres())
      if (name == pre) clean_up = info.clean_up;
  }
  c["clean_up_tokenization_spaces"] = clean_up;
  if (const json* t = find(md, "tokenizer.chat_template")) {
    if (!t->is_string())
      throw Error(fmt::format("{}: 'tokenizer.chat_template' is not a string", kWhat));
    c["chat_template"] = *t;
  }
  return c;
}

Tokenizer Tokenizer::from_gguf_metadata(const json& metadata, const std::string& source_name) {
  return from_json(tokenizer_json_from_gguf(metadata), tokenizer_config_from_gguf(metadata),
                   source_name);
}

}  // namespace halo::text
