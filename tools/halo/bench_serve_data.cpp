#include "bench_serve_data.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/error.h"

namespace halo::tools {
namespace {

std::string read_file(const std::string& path, const char* what) {
  if (path.empty()) throw Error(fmt::format("--dataset-name {} needs --dataset-path FILE", what));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("--dataset-path {}: cannot open", path));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Text that encodes to exactly `len` tokens (without special tokens) where the
// tokenizer allows: random ids decode to text that re-encodes differently, so
// the ids are re-drawn from that encoding a few times.
std::string random_text(const text::Tokenizer& tok, const std::vector<int32_t>& ordinary, int len,
                        std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, ordinary.size() - 1);
  auto draw = [&](std::vector<int32_t>& ids, size_t n) {
    while (ids.size() < n) ids.push_back(ordinary[pick(rng)]);
  };
  std::vector<int32_t> ids;
  draw(ids, len);
  std::string text = tok.decode(ids);
  for (int round = 0; round < 4; ++round) {
    std::vector<int32_t> again = tok.encode(text, false);
    if (static_cast<int>(again.size()) == len) break;
    if (static_cast<int>(again.size()) > len) again.resize(len);
    draw(again, len);
    text = tok.decode(again);
  }
  return text;
}

int prompt_tokens(const text::Tokenizer& tok, const std::string& text) {
  return static_cast<int>(tok.encode(text, true).size());
}

std::vector<BenchPrompt> random_prompts(const DatasetOptions& o, const text::Tokenizer& tok) {
  std::mt19937_64 rng(o.seed);
  auto len = [&](int base) {
    int lo = std::max(1, static_cast<int>(base * (1.0 - o.random_range_ratio)));
    int hi = std::max(lo, static_cast<int>(base * (1.0 + o.random_range_ratio)));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  // Ids that stand for text: no special, added or byte-fallback tokens.
  std::vector<int32_t> ordinary;
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (!tok.is_added_token(id) && !tok.is_special(id) && !tok.is_byte_fallback_token(id))
      ordinary.push_back(id);
  if (ordinary.empty())
    throw Error("the tokenizer has no ordinary tokens to make random prompts from");
  std::vector<BenchPrompt> out(o.num_prompts);
  for (auto& p : out) {
    const int in = len(o.random_input_len);
    p.output_len = len(o.random_output_len);
    p.text = random_text(tok, ordinary, in, rng);
    p.prompt_len = prompt_tokens(tok, p.text);
  }
  return out;
}

// ShareGPT: [{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...},
// ...]}, ...]. Like vLLM: conversations shuffled by the seed; pairs with a prompt or reply under 4
// tokens, a prompt over 1024 or both over 2048 are left out.
std::vector<BenchPrompt> sharegpt_prompts(const DatasetOptions& o, const text::Tokenizer& tok) {
  auto doc = nlohmann::json::parse(read_file(o.path, "sharegpt"), nullptr, false);
  if (doc.is_discarded() || !doc.is_array())
    throw Error(
        fmt::format("--dataset-path {}: a ShareGPT file is a JSON list of conversations", o.path));
  std::vector<size_t> order(doc.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 rng(o.seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<BenchPrompt> out;
  for (size_t i : order) {
    if (static_cast<int>(out.size()) == o.num_prompts) break;
    const auto& entry = doc[i];
    if (!entry.is_object() || !entry.contains("conversations")) continue;
    const auto& c = entry["conversations"];
    if (!c.is_array() || c.size() < 2 || !c[0].is_object() || !c[1].is_object()) continue;
    // ShareGPT's turns say "value"; some copies say "content".
    auto turn = [](const nlohmann::json& t) -> const nlohmann::json* {
      for (const char* key : {"value", "content"})
        if (auto it = t.find(key); it != t.end() && it->is_string()) return &*it;
      return nullptr;
    };
    const nlohmann::json* q = turn(c[0]);
    const nlohmann::json* a = turn(c[1]);
    if (!q || !a) continue;
    BenchPrompt p;
    p.text = q->get<std::string>();
    p.prompt_len = prompt_tokens(tok, p.text);
    p.output_len =
        o.output_len > 0
            ? o.output_len
            : static_cast<int>(tok.encode(a->get_ref<const std::string&>(), false).size());
    if (p.prompt_len < 4 || (o.output_len <= 0 && p.output_len < 4)) continue;
    if (p.prompt_len > 1024 || p.prompt_len + p.output_len > 2048) continue;
    out.push_back(std::move(p));
  }
  if (out.empty())
    throw Error(fmt::format("--dataset-path {}: no usable ShareGPT conversations", o.path));
  return out;
}

// One prompt per line; a line that is a JSON object takes its "prompt" (and "output_len").
std::vector<BenchPrompt> file_prompts(const DatasetOptions& o, const text::Tokenizer& tok) {
  std::istringstream lines(read_file(o.path, "prompts"));
  std::vector<BenchPrompt> out;
  std::string line;
  for (int n = 1; std::getline(lines, line) && static_cast<int>(out.size()) < o.num_prompts; ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    BenchPrompt p;
    p.output_len = o.output_len > 0 ? o.output_len : 128;
    p.text = line;
    if (line.front() == '{') {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
        throw Error(fmt::format("{}:{}: a JSON line needs a string \"prompt\"", o.path, n));
      p.text = j["prompt"].get<std::string>();
      if (auto it = j.find("output_len");
          it != j.end() && it->is_number_integer() && o.output_len <= 0)
        p.output_len = std::max(1, it->get<int>());
    }
    p.prompt_len = prompt_tokens(tok, p.text);
    out.push_back(std::move(p));
  }
  if (out.empty()) throw Error(fmt::format("--dataset-path {}: no prompts", o.path));
  return out;
}

}  // namespace

std::vector<BenchPrompt> make_bench_prompts(const DatasetOptions& o, const text::Tokenizer& tok) {
  if (o.num_prompts < 1) throw Error("--num-prompts must be at least 1");
  std::vector<BenchPrompt> out;
  if (o.name == "random") return random_prompts(o, tok);
  if (o.name == "sharegpt")
    out = sharegpt_prompts(o, tok);
  else if (o.name == "prompts")
    out = file_prompts(o, tok);
  else
    throw Error(
        fmt::format("--dataset-name {}: unknown; choose random, sharegpt or prompts", o.name));
  // A file with fewer prompts than asked for is used again from its start.
  if (static_cast<int>(out.size()) < o.num_prompts) {
    spdlog::info("bench serve: {} has {} usable prompts; they repeat to make {}", o.path,
                 out.size(), o.num_prompts);
    const size_t have = out.size();
    for (size_t i = 0; static_cast<int>(out.size()) < o.num_prompts; ++i)
      out.push_back(out[i % have]);
  }
  return out;
}

}  // namespace halo::tools
