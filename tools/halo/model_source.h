#pragma once
// Where a command's model and tokenizer come from, and vLLM's arguments that
// halo accepts on every command that runs a model.
//
//   MODEL            a directory or a Hugging Face id (org/name), resolved
//                    from the Hugging Face cache or downloaded into it
//                    (model/hf_hub.h); empty: the embedded model
//   --revision R     branch, tag or commit of a Hub id (default main)
//   --download-dir D the Hugging Face cache to use (default: HF_HUB_CACHE...)
//   --hf-token T     token for gated or private repos (default: HF_TOKEN)
//   --tokenizer T    tokenizer directory or Hub id (default: the model's)
//   --compiled-model-dir D   load this compiled model instead of MODEL
#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>

#include "model/hf_hub.h"

namespace halo::tools {

struct ModelSource {
  std::string tokenizer;
  std::string compiled_model_dir;
  model::HubOptions hub;
};

// --revision, --download-dir, --hf-token: how a Hub id is found.
void add_hub_options(CLI::App& cmd, model::HubOptions& hub);
// The hub options plus --tokenizer and --compiled-model-dir.
void add_model_source_options(CLI::App& cmd, ModelSource& source);

// Registers every vLLM argument (serve/engine_args.h) that `cmd` has no
// option of its own for, in a help group of their own: one halo has no use
// for is accepted with an info line, one it cannot honour fails the parse
// with the reason. Call after the command's own options.
void add_vllm_compat_options(CLI::App& cmd);

// The directory to load: --compiled-model-dir, else MODEL resolved (a
// directory, or a Hub id from the cache or downloaded), else the embedded
// model.
std::filesystem::path resolve_model_dir(const std::string& model, const ModelSource& source);

// The directory to read tokenizer.json and tokenizer_config.json from.
std::filesystem::path resolve_tokenizer_dir(const std::filesystem::path& model_dir,
                                            const ModelSource& source);

}  // namespace halo::tools
