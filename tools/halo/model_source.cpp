#include "model_source.h"

#include "commands.h"
#include "serve/engine_args.h"

namespace halo::tools {
namespace fs = std::filesystem;

void add_hub_options(CLI::App& cmd, model::HubOptions& hub) {
  cmd.add_option("--revision", hub.revision,
                 "Branch, tag or commit of a Hugging Face model id (default: main)");
  cmd.add_option(
      "--download-dir", hub.cache_dir,
      "Hugging Face cache to find and download model ids in (default: HF_HUB_CACHE, HF_HOME/hub, "
      "~/.cache/huggingface/hub)");
  cmd.add_option(
      "--hf-token", hub.token,
      "Hugging Face token for gated or private models (default: HF_TOKEN, then the saved token)");
}

void add_model_source_options(CLI::App& cmd, ModelSource& s) {
  add_hub_options(cmd, s.hub);
  cmd.add_option("--tokenizer", s.tokenizer,
                 "Tokenizer directory or Hugging Face id, instead of the model's own");
  cmd.add_option("--compiled-model-dir", s.compiled_model_dir,
                 "A model compiled by `halo compile`, loaded instead of MODEL (as vllm-rbln's "
                 "compiled_model_dir)");
}

void add_vllm_compat_options(CLI::App& cmd) {
  const std::string group = "vLLM arguments accepted for compatibility (docs/serving.md)";
  for (const auto& arg : serve::vllm_args()) {
    if (arg.kind == serve::ArgKind::kSetting)
      continue;  // a real option of its own where it applies
    std::string flag = "--" + arg.name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (cmd.get_option_no_throw(flag) != nullptr) continue;
    const std::string source = "command line " + flag;
    const serve::VllmArg* a = &arg;
    const std::string help =
        (arg.kind == serve::ArgKind::kRefused ? "Refused: " : "No effect: ") + arg.why;
    if (arg.flag) {
      cmd.add_flag_callback(
             flag, [a, source] { serve::vllm_arg_key(*a, "true", source); }, help)
          ->group(group);
    } else {
      cmd.add_option_function<std::string>(
             flag, [a, source](const std::string& v) { serve::vllm_arg_key(*a, v, source); }, help)
          ->group(group);
    }
  }
}

fs::path resolve_model_dir(const std::string& model, const ModelSource& s) {
  if (!s.compiled_model_dir.empty()) return s.compiled_model_dir;
  if (model.empty()) return default_model_dir();
  return model::resolve_model(model, s.hub);
}

fs::path resolve_tokenizer_dir(const fs::path& model_dir, const ModelSource& s) {
  if (s.tokenizer.empty()) return model_dir;
  return model::resolve_model(s.tokenizer, s.hub);
}

}  // namespace halo::tools
