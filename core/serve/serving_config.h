#pragma once
// The settings of one served model, resolved from explicit layers. Each layer
// is a list of (key, value, source) with keys named as halo's long flags
// ("max-num-seqs"); layers are applied in order, so a later one wins:
//
//   model defaults < environment (SageMaker mode) < the model's file
//   (serving.properties, or model.json in a repository) < --config YAML
//   < command line
//
// An unknown key or a bad value is an Error naming its source
// ("dir/serving.properties:3", "environment OPTION_DTYPE", "model.json:4").
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "model/hf_hub.h"

namespace halo::serve {

struct Setting {
  std::string key;     // halo long flag name without dashes
  std::string value;
  std::string source;  // where it came from, for messages
};
using SettingLayer = std::vector<Setting>;

// An adapter given at start (--lora-modules name=path).
struct LoraModule {
  std::string name, path;  // path: a directory or a Hugging Face id
};
// --lora-modules' value: name=path items separated by spaces or commas, or
// vLLM's JSON ({"name": ..., "path": ...} or a list of them). Throws
// halo::Error naming the bad item.
std::vector<LoraModule> parse_lora_modules(const std::string& value);

struct ModelSettings {
  std::string name;                         // the served name
  std::vector<std::string> extra_names;     // more names it answers to
  std::filesystem::path dir;                // model directory (HF, or compiled) or Hub id
  std::string tokenizer;                    // directory or Hub id of another tokenizer ("": the model's)
  model::HubOptions hub;                    // revision, download dir, token for Hub ids
  std::filesystem::path compiled_model_dir; // set: load this instead of dir
  std::string version = "1";                // KServe version
  int max_batch_size = 0;                   // config.pbtxt, informational
  engine::EngineConfig engine;
  std::string dtype = "auto";
  int tensor_parallel_size = 1;             // 0: every chip of the device ("max")
  std::string rolling_batch = "auto";
  // Chat output parsing (vLLM's flags): tool calls out of the text when a
  // request has tools ("" parser: the one the chat template implies), and
  // <think> reasoning into reasoning_content ("": none).
  bool enable_auto_tool_choice = true;
  std::string tool_call_parser;
  std::string reasoning_parser;
  // Embeddings (vLLM's --task embed): also serve /v1/embeddings, pooled as
  // pooler_config says (serve/pooling_config.h; "": the model's own).
  std::string task = "generate";
  std::string pooler_config;
  // LoRA adapters registered at start (engine.enable_lora turns LoRA on).
  std::vector<LoraModule> lora_modules;
  std::map<std::string, std::string> origin;  // key -> source of the value in effect

  std::filesystem::path load_dir() const { return compiled_model_dir.empty() ? dir : compiled_model_dir; }
};

// Every key apply_setting knows, in display order.
const std::vector<std::string>& setting_keys();

// Sets one key (Error "<source>: <key>=<value>: <why>" when unknown or bad).
void apply_setting(ModelSettings& s, const Setting& setting);
void apply_layer(ModelSettings& s, const SettingLayer& layer);

// LMI's option name (option.x / OPTION_X, lower case, without the prefix) as
// a halo key; "" for a known option halo ignores; throws for an unknown one
// or for a value halo refuses (vLLM's arguments: serve/engine_args.h).
std::string lmi_option_key(const std::string& option, const std::string& value, const std::string& source);

// SageMaker / LMI environment: HF_MODEL_ID (a directory or a Hub id),
// TENSOR_PARALLEL_DEGREE and OPTION_* (OPTION_X is option.x).
SettingLayer sagemaker_env_layer(const std::map<std::string, std::string>& env);
std::map<std::string, std::string> process_environment();

// serving.properties: `option.x=value` lines (`engine=`, and the DJL worker
// keys, are accepted and ignored); '#' comments. option.model_id is resolved
// relative to the file's directory. Source "FILE:LINE".
SettingLayer serving_properties_layer(const std::filesystem::path& file);

// The resolved settings, one "key = value  (source)" per line.
std::string describe(const ModelSettings& s);

// "auto", float16, bfloat16 or float32 (half, fp16, bf16, float, fp32 accepted).
std::string canonical_dtype(const std::string& d);

// Bytes with an optional K/M/G/T suffix (powers of 1024; "GiB", "GB" alike).
uint64_t parse_bytes(const std::string& text);

}  // namespace halo::serve
