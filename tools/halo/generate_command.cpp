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
  std::string output = "text";
  engine::EngineConfig engine;
};

std::vector<int32_t> parse_ids(const std::string& s) {
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
      throw Error(fmt::format("--prompt-ids '{}': '{}' is not an integer token id", s, item));
    }
  }
  if (ids.empty()) throw Error(fmt::format("--prompt-ids '{}' holds no ids", s));
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

void run_generate(const GenerateOptions& o) {
  fs::path dir = o.model_dir.empty() ? default_model_dir() : fs::path(o.model_dir);
  auto t0 = std::chrono::steady_clock::now();
  auto model = std::make_shared<model::LoadedModel>(model::LoadedModel::load(dir));
  auto tokenizer = text::Tokenizer::from_model_dir(dir);
  spdlog::info("model {} ({}, {} layers, {:.1f} MB of weights) loaded in {:.2f} s", dir.string(),
               model->config().architecture(), model->config().spec.num_layers, model->weight_bytes() / 1e6,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  // Prompts in the order given: --prompt, then --prompt-ids, then the file.
  std::vector<Prompt> prompts;
  std::vector<std::pair<std::string, std::vector<int32_t>>> raw;
  for (const auto& p : o.prompts) raw.push_back({p, {}});
  for (const auto& p : o.prompt_ids) raw.push_back({"", parse_ids(p)});
  if (!o.prompts_file.empty())
    for (auto& p : read_prompts_file(o.prompts_file)) raw.push_back(std::move(p));
  if (raw.empty()) throw Error("no prompts: give --prompt, --prompt-ids or --prompts-file");
  std::unique_ptr<text::ChatTemplate> chat;
  if (o.chat) chat = std::make_unique<text::ChatTemplate>(text::ChatTemplate::from_tokenizer_config(dir / "tokenizer_config.json"));
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

  // Sampling: flags, else the model's generation_config.json, else vLLM's defaults.
  const auto& gen = model->config().generation;
  engine::SamplingParams sp;
  bool do_sample = gen.do_sample.value_or(true);
  sp.temperature = o.temperature.value_or(do_sample ? gen.temperature.value_or(1.0f) : 0.0f);
  sp.top_p = o.top_p.value_or(gen.top_p.value_or(1.0f));
  sp.top_k = o.top_k.value_or(gen.top_k.value_or(0));
  sp.min_p = o.min_p.value_or(0.0f);
  sp.repetition_penalty = o.repetition_penalty.value_or(gen.repetition_penalty.value_or(1.0f));
  sp.max_tokens = o.max_tokens.value_or(gen.max_new_tokens.value_or(16));
  sp.min_tokens = o.min_tokens;
  sp.ignore_eos = o.ignore_eos;

  engine::LLMEngine eng(o.engine, model);
  for (size_t i = 0; i < prompts.size(); ++i) {
    // Each request draws from its own generator seeded from --seed and its order.
    eng.add_request(std::to_string(i), prompts[i].ids, sp);
  }
  std::vector<std::shared_ptr<const engine::Sequence>> done(prompts.size());
  ProgressBar bar(prompts.size());
  size_t finished = 0;
  auto t1 = std::chrono::steady_clock::now();
  while (eng.has_unfinished()) {
    for (auto& out : eng.step()) {
      if (!out.finished) continue;
      done[std::stoul(out.request_id)] = out.seq;
      ++finished;
      bar.update(finished, eng.stats().generation_tokens,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  auto st = eng.stats();
  spdlog::info("{} prompts: {} prompt tokens, {} generated tokens in {:.2f} s ({:.1f} tok/s), {} steps, {} preemptions",
               prompts.size(), st.prompt_tokens, st.generation_tokens, secs,
               secs > 0 ? st.generation_tokens / secs : 0.0, st.steps, st.num_preemptions);

  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& seq = *done[i];
    std::string text = tokenizer.decode(seq.output_ids, o.skip_special_tokens);
    if (o.output == "json") {
      nlohmann::ordered_json j;
      if (!prompts[i].text.empty()) j["prompt"] = prompts[i].text;
      j["prompt_token_ids"] = seq.prompt_ids;
      j["token_ids"] = seq.output_ids;
      j["text"] = text;
      j["finish_reason"] = engine::finish_reason_name(seq.finish_reason);
      std::fputs((j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n").c_str(), stdout);
    } else {
      if (prompts.size() > 1) std::fputs(fmt::format("--- prompt {} ---\n", i).c_str(), stdout);
      std::fputs((text + "\n").c_str(), stdout);
    }
  }
  std::fflush(stdout);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand("generate", "Offline generation for one or many prompts, run as one batch");
  cmd->add_option("model", o->model_dir, "Hugging Face model directory (default: the embedded pkgchat-5m)");
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
  cmd->add_option("--output", o->output, "text or json (one JSON object per prompt per line)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  add_engine_options(*cmd, o->engine);
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace halo::tools
