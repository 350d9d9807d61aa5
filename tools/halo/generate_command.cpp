// `halo generate`: offline batch generation, like vLLM's LLM.generate. All
// prompts are queued at once and run as one continuously batched workload.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/error.h"
#include "engine/async_engine.h"
#include "model_source.h"
#include "serve/tokenizer_files.h"
#include "text/jinja/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace halo::tools {
namespace fs = std::filesystem;
namespace {

struct GenerateOptions {
  std::string model_dir;
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_ids;
  std::string prompts_file;
  bool chat = false;
  std::optional<int> max_tokens;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  int min_tokens = 0;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  int n = 1;
  std::vector<std::string> stop;
  std::string stop_token_ids;
  std::optional<int> logprobs;
  int beam_width = 0;
  float length_penalty = 1.0f;
  std::string early_stopping = "false";
  bool n_given = false;
  std::string output = "text";
  engine::EngineConfig engine;
  ModelSource source;
};

std::vector<int32_t> parse_ids(const std::string& s, const char* flag) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long v = std::stol(item, &used);
      if (used != item.size() && item.find_first_not_of(" ", used) != std::string::npos) throw std::invalid_argument("");
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw Error(fmt::format("{} '{}': '{}' is not an integer token id", flag, s, item));
    }
  }
  if (ids.empty()) throw Error(fmt::format("{} '{}' holds no ids", flag, s));
  return ids;
}

struct Prompt {
  std::string text;  // empty for id prompts
  std::vector<int32_t> ids;
};

// Prompts file: one prompt per line; a line that is a JSON object may give
// {"prompt": "..."} or {"prompt_token_ids": [...]}.
std::vector<std::pair<std::string, std::vector<int32_t>>> read_prompts_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("--prompts-file {}: cannot open", path));
  std::vector<std::pair<std::string, std::vector<int32_t>>> out;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    if (line.front() == '{') {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        throw Error(fmt::format("{}:{}: line starts with '{{' but is not a JSON object", path, lineno));
      if (j.contains("prompt_token_ids")) {
        out.push_back({"", j["prompt_token_ids"].get<std::vector<int32_t>>()});
      } else if (j.contains("prompt") && j["prompt"].is_string()) {
        out.push_back({j["prompt"].get<std::string>(), {}});
      } else {
        throw Error(fmt::format("{}:{}: JSON line needs \"prompt\" or \"prompt_token_ids\"", path, lineno));
      }
    } else {
      out.push_back({line, {}});
    }
  }
  return out;
}

class ProgressBar {
 public:
  explicit ProgressBar(size_t total) : total_(total), enabled_(total > 1 && isatty(fileno(stderr))) {}
  void update(size_t done, uint64_t tokens, double seconds) {
    if (!enabled_) return;
    int width = 30, filled = static_cast<int>(width * done / total_);
    std::fprintf(stderr, "\rProcessed prompts: %zu/%zu [%s%s] %.1f tok/s", done, total_,
                 std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                 seconds > 0 ? tokens / seconds : 0.0);
    if (done == total_) std::fputc('\n', stderr);
  }

 private:
  size_t total_;
  bool enabled_;
};

// Sampling: flags, else the model's generation_config.json, else vLLM's defaults.
engine::RequestOptions request_options(const GenerateOptions& o, const model::GenerationDefaults& gen) {
  engine::RequestOptions r;
  auto& sp = r.sampling;
  bool do_sample = gen.do_sample.value_or(true);
  sp.temperature = o.temperature.value_or(do_sample ? gen.temperature.value_or(1.0f) : 0.0f);
  sp.top_p = o.top_p.value_or(gen.top_p.value_or(1.0f));
  sp.top_k = o.top_k.value_or(gen.top_k.value_or(0));
  sp.min_p = o.min_p.value_or(0.0f);
  sp.repetition_penalty = o.repetition_penalty.value_or(gen.repetition_penalty.value_or(1.0f));
  sp.max_tokens = o.max_tokens.value_or(gen.max_new_tokens.value_or(16));
  sp.min_tokens = o.min_tokens;
  sp.ignore_eos = o.ignore_eos;
  if (!o.stop_token_ids.empty()) sp.stop_token_ids = parse_ids(o.stop_token_ids, "--stop-token-ids");
  if (o.logprobs) sp.logprobs = *o.logprobs;
  r.stop = o.stop;
  r.skip_special_tokens = o.skip_special_tokens;
  r.n = o.n;
  if (o.beam_width > 0) {
    r.beam.width = o.beam_width;
    r.beam.length_penalty = o.length_penalty;
    r.beam.early_stopping = *engine::parse_early_stopping(o.early_stopping);
    if (!o.temperature) sp.temperature = 0.0f;  // beam search is deterministic
    if (!o.n_given) r.n = o.beam_width;         // every beam's result, best first
  }
  return r;
}

nlohmann::ordered_json logprobs_json(const std::vector<engine::TokenLogprob>& lps, const text::Tokenizer& tok) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& lp : lps) {
    nlohmann::ordered_json top = nlohmann::ordered_json::object();
    for (const auto& [id, v] : lp.top) top[std::to_string(id)] = v;
    out.push_back({{"token_id", lp.token}, {"token", tok.id_to_token(lp.token)}, {"logprob", lp.logprob}, {"top", top}});
  }
  return out;
}

void print_result(size_t i, const Prompt& prompt, const engine::RequestResult& r, const GenerateOptions& o,
                  const text::Tokenizer& tok, size_t num_prompts) {
  if (o.output == "json") {
    auto choice_json = [&](size_t k) {
      const auto& c = r.choices[k];
      nlohmann::ordered_json j;
      j["index"] = k;
      j["token_ids"] = c.token_ids;
      j["text"] = c.text;
      j["finish_reason"] = engine::finish_reason_name(c.finish_reason);
      if (!c.stop_reason.empty()) j["stop_reason"] = c.stop_reason;
      if (c.cumulative_logprob) j["cumulative_logprob"] = *c.cumulative_logprob;
      if (c.beam_score) j["beam_score"] = *c.beam_score;
      if (o.logprobs) j["logprobs"] = logprobs_json(c.logprobs, tok);
      return j;
    };
    nlohmann::ordered_json j;
    if (!prompt.text.empty()) j["prompt"] = prompt.text;
    j["prompt_token_ids"] = r.prompt_ids;
    // The first choice at the top level (as before n existed), every choice in outputs.
    const nlohmann::ordered_json first = choice_json(0);
    for (const auto& [k, v] : first.items())
      if (k != "index") j[k] = v;
    if (r.choices.size() > 1 || o.beam_width > 0) {
      j["outputs"] = nlohmann::ordered_json::array();
      for (size_t k = 0; k < r.choices.size(); ++k) j["outputs"].push_back(choice_json(k));
    }
    std::fputs((j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n").c_str(), stdout);
    return;
  }
  const bool several = r.choices.size() > 1;
  for (size_t k = 0; k < r.choices.size(); ++k) {
    if (num_prompts > 1 || several)
      std::fputs((several ? fmt::format("--- prompt {} choice {} ---\n", i, k)
                          : fmt::format("--- prompt {} ---\n", i))
                     .c_str(),
                 stdout);
    std::fputs((r.choices[k].text + "\n").c_str(), stdout);
  }
}

std::vector<Prompt> build_prompts(const GenerateOptions& o, const fs::path& tokenizer_dir, const text::Tokenizer& tokenizer) {
  // Prompts in the order given: --prompt, then --prompt-ids, then the file.
  std::vector<std::pair<std::string, std::vector<int32_t>>> raw;
  for (const auto& p : o.prompts) raw.push_back({p, {}});
  for (const auto& p : o.prompt_ids) raw.push_back({"", parse_ids(p, "--prompt-ids")});
  if (!o.prompts_file.empty())
    for (auto& p : read_prompts_file(o.prompts_file)) raw.push_back(std::move(p));
  if (raw.empty()) throw Error("no prompts: give --prompt, --prompt-ids or --prompts-file");
  std::unique_ptr<text::ChatTemplate> chat;
  if (o.chat)
    chat = std::make_unique<text::ChatTemplate>(
        serve::load_chat_template(tokenizer_dir));
  std::vector<Prompt> prompts;
  for (auto& [txt, ids] : raw) {
    Prompt p{txt, ids};
    if (p.ids.empty()) {
      std::string rendered = txt;
      bool add_special = true;
      if (chat) {
        text::ChatRenderRequest req;
        req.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", txt}}});
        req.bos_token = tokenizer.bos_token();
        req.eos_token = tokenizer.eos_token();
        rendered = chat->render(req);
        // The template already wrote BOS: do not add a second one.
        add_special = tokenizer.bos_token().empty() || !rendered.starts_with(tokenizer.bos_token());
      }
      p.ids = tokenizer.encode(rendered, add_special);
    }
    prompts.push_back(std::move(p));
  }
  return prompts;
}

void run_generate(const GenerateOptions& o) {
  const fs::path dir = resolve_model_dir(o.model_dir, o.source);
  const fs::path tokenizer_dir = resolve_tokenizer_dir(dir, o.source);
  auto t0 = std::chrono::steady_clock::now();
  auto model = std::make_shared<model::LoadedModel>(
      model::LoadedModel::load(dir, engine::load_options(o.engine)));
  auto tokenizer = serve::load_tokenizer(tokenizer_dir);
  spdlog::info("model {} ({}, {} layers, {:.1f} MB of weights) loaded in {:.2f} s", dir.string(),
               model->config().architecture(), model->config().spec.num_layers, model->weight_bytes() / 1e6,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  const std::vector<Prompt> prompts = build_prompts(o, tokenizer_dir, tokenizer);
  const engine::RequestOptions options = request_options(o, model->config().generation);
  options.sampling.validate();
  std::vector<std::pair<std::vector<int32_t>, engine::RequestOptions>> batch;
  for (const auto& p : prompts) batch.push_back({p.ids, options});

  // Each request draws from its own generator seeded from --seed and its order.
  engine::AsyncEngine eng(o.engine, model, tokenizer);
  ProgressBar bar(prompts.size());
  size_t finished = 0;
  auto t1 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(); };
  auto results = eng.generate(batch, [&](size_t) {
    bar.update(++finished, eng.metrics().generation_tokens, seconds());
  });
  const double secs = seconds();
  const auto m = eng.metrics();
  spdlog::info("{} prompts: {} prompt tokens, {} generated tokens in {:.2f} s ({:.1f} tok/s), {} preemptions",
               prompts.size(), m.prompt_tokens, m.generation_tokens, secs,
               secs > 0 ? m.generation_tokens / secs : 0.0, m.num_preemptions);
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].error.empty()) throw Error(fmt::format("prompt {}: {}", i, results[i].error));
    print_result(i, prompts[i], results[i], o, tokenizer, prompts.size());
  }
  std::fflush(stdout);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand("generate", "Offline generation for one or many prompts, run as one batch");
  cmd->add_option("model", o->model_dir,
                  "Hugging Face model directory or id (org/name) (default: the embedded pkgchat-5m)");
  cmd->add_option("--prompt", o->prompts, "A text prompt; repeat for more");
  cmd->add_option("--prompt-ids", o->prompt_ids, "A prompt as comma-separated token ids; repeat for more");
  cmd->add_option("--prompts-file", o->prompts_file,
                  "One prompt per line (or JSON lines with \"prompt\" or \"prompt_token_ids\")");
  cmd->add_flag("--chat", o->chat, "Wrap each text prompt as a user message in the model's chat template");
  cmd->add_option("--max-tokens", o->max_tokens, "Most tokens to generate (default: generation_config's max_new_tokens, else 16)");
  cmd->add_option("--min-tokens", o->min_tokens, "Tokens to generate before EOS may end a sequence");
  cmd->add_option("--temperature", o->temperature, "0 = greedy (default: generation_config, else 1.0)");
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling mass (default: generation_config, else 1.0)");
  cmd->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0 or -1: off)");
  cmd->add_option("--min-p", o->min_p, "Drop tokens less likely than min-p times the most likely");
  cmd->add_option("--repetition-penalty", o->repetition_penalty, "Penalty for tokens already seen (1.0: off)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past the model's end-of-sequence ids");
  cmd->add_flag("!--no-skip-special-tokens", o->skip_special_tokens, "Keep special tokens in the output text");
  cmd->add_option("--n", o->n, "Completions per prompt")->check(CLI::Range(1, 128))->capture_default_str();
  cmd->add_option("--stop", o->stop, "A string that ends generation (not included in the text); repeat for more");
  cmd->add_option("--stop-token-ids", o->stop_token_ids, "Comma-separated token ids that end generation");
  cmd->add_option("--logprobs", o->logprobs,
                  "Log probability of each generated token plus the N most likely (json output: \"logprobs\")")
      ->check(CLI::Range(0, 20));
  cmd->add_option(
         "--beam-width", o->beam_width,
         "Beam search of this width instead of sampling (returns --n results, default all of "
         "them, best first; --temperature defaults to 0)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--length-penalty", o->length_penalty,
                  "Beam search: a hypothesis scores cumulative logprob / length^P")
      ->capture_default_str();
  cmd->add_option(
         "--early-stopping", o->early_stopping,
         "Beam search: true (stop at width hypotheses), false or never (Hugging Face's rules)")
      ->check(CLI::IsMember({"true", "false", "never"}))
      ->capture_default_str();
  cmd->add_option("--output", o->output, "text or json (one JSON object per prompt per line)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  add_engine_options(*cmd, o->engine);
  add_model_source_options(*cmd, o->source);
  add_vllm_compat_options(*cmd);
  cmd->callback([o, cmd] {
    o->n_given = cmd->get_option("--n")->count() > 0;
    run_generate(*o);
  });
}

}  // namespace halo::tools
