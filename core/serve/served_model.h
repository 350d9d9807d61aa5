#pragma once
// One model the server answers for: its engine (own LLMEngine, own KV
// budget), tokenizer, chat template, the names requests route by, and the
// facts the frontends need (limits, sampling defaults).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "serve/api_common.h"
#include "text/jinja/chat_template.h"

namespace halo::serve {

struct ServedModel {
  std::vector<std::string> names;  // what `model` may say; the first is used in responses and metrics
  std::string root;                // the model directory ("root" in /v1/models)
  std::string version = "1";       // KServe model version (the repository's version directory)
  int max_batch_size = 0;          // config.pbtxt's, informational (0: not given)
  std::shared_ptr<engine::AsyncEngine> engine;
  std::optional<text::ChatTemplate> chat_template;
  SamplingDefaults defaults;
  int max_model_len = 0;
  int vocab_size = 0;
  int block_size = 0;
  int num_blocks = 0;
  int max_num_seqs = 0;
  std::string bos, eos;
  // Chat output parsing: "" for none (serving_config.h, ModelSettings).
  std::string tool_parser;       // tool calls, for requests with tools and tool_choice auto
  std::string reasoning_parser;  // <think> text into reasoning_content
  // Served for embeddings too (--task embed): how its hidden states are pooled.
  std::optional<engine::PoolingParams> pooling;
  // LoRA adapters served over it (--enable-lora), named like models; null without.
  std::shared_ptr<engine::LoraRegistry> loras;

  const std::string& name() const { return names.front(); }
  const text::Tokenizer& tokenizer() const { return engine->tokenizer(); }
  bool answers_to(const std::string& n) const;  // one of its names or one of its adapters'
  // The adapter `n` selects; nullptr for the model's own names (the base).
  // Throws halo::Error when the adapter's files cannot be read again.
  std::shared_ptr<const engine::LoraRequest> lora(const std::string& n) const;
  // The adapter a request names in `field` (LMI's adapter field, TensorRT-LLM's
  // lora_task_id as `id`): ApiError 400 naming the field when there is none.
  std::shared_ptr<const engine::LoraRequest> named_lora(const std::string& n,
                                                        const char* field) const;
  std::shared_ptr<const engine::LoraRequest> lora_by_id(int64_t id, const char* field) const;

  // Reads the limits and defaults off a running engine. `names` must not be empty.
  static std::shared_ptr<ServedModel> make(std::vector<std::string> names, std::string root,
                                           std::shared_ptr<engine::AsyncEngine> engine,
                                           std::optional<text::ChatTemplate> chat_template);
};

}  // namespace halo::serve
