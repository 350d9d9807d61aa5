#pragma once
// A Triton-style model repository, as Triton's vLLM backend lays it out:
//
//   DIR/<name>/config.pbtxt          optional; `name` (must match <name>),
//                                    `max_batch_size`, `backend` are read
//   DIR/<name>/<version>/model.json  engine arguments as the vLLM backend
//                                    reads them; the highest numeric version
//                                    directory holding a model.json is served
//
// model.json's `model` (and `compiled_model_dir`) may be relative: they are
// resolved against the directory holding that model.json.
//
// A repository written for TensorRT-LLM's backend (`ensemble`,
// `preprocessing`, `tensorrt_llm`, `postprocessing`, `tensorrt_llm_bls`; the
// `tensorrt_llm` model has `backend: "tensorrtllm"`) is one pipeline: halo
// serves it as one model named `ensemble` (else `tensorrt_llm_bls`, else
// `tensorrt_llm`) that also answers to the other two names. Its settings come
// from tensorrt_llm/config.pbtxt's `parameters` (tensorrt_llm_layer); its
// weights from tensorrt_llm/<version>/model.json's `model` if there is one,
// else from the Hugging Face checkpoint `tokenizer_dir` names (halo cannot
// run TensorRT engines). `preprocessing`/`postprocessing` are not served on
// their own: halo tokenizes with the checkpoint's tokenizer.
#include <filesystem>
#include <string>
#include <vector>

#include "serve/serving_config.h"

namespace halo::serve {

struct RepositoryModel {
  std::string name;
  std::vector<std::string> aliases;  // more names it answers to (TensorRT-LLM: tensorrt_llm_bls, tensorrt_llm)
  std::string version;
  std::filesystem::path model_json;  // empty when the settings come from config.pbtxt alone
  int max_batch_size = 0;
  SettingLayer settings;  // from config.pbtxt / model.json, sources "FILE:LINE key 'x'"
  std::string error;      // set: this model cannot be served (the others can)
};

// Every model directory of `repo`, sorted by name. Throws only when `repo`
// itself cannot be read or holds no model.
std::vector<RepositoryModel> scan_model_repository(const std::filesystem::path& repo);

// model.json as a setting layer: vLLM engine-argument names mapped to halo's
// (max_num_seqs -> max-num-seqs, gpu_memory_utilization ->
// device-memory-utilization, ...). Unknown keys and values of the wrong type
// are Errors naming the file, line and key.
SettingLayer model_json_layer(const std::filesystem::path& file);

// One `parameters { key: "k" value: { string_value: "v" } }` entry.
struct PbtxtParameter {
  std::string key, value;
  int line = 0;  // of the value
};

// What halo reads of a config.pbtxt. A `${...}` template placeholder left
// outside a parameter's string_value (Triton itself cannot parse those) is an
// Error naming the file, line and key.
struct PbtxtConfig {
  std::filesystem::path file;
  std::string name, backend;  // backend: `backend`, else `platform`
  std::string platform;
  int max_batch_size = 0;
  bool decoupled = false;     // model_transaction_policy { decoupled }
  std::vector<PbtxtParameter> parameters;
};
PbtxtConfig read_config_pbtxt(const std::filesystem::path& file);

// True for a value still holding a `${name}` placeholder of a template.
bool is_template_placeholder(const std::string& value);

// tensorrt_llm/config.pbtxt's parameters as a setting layer:
// kv_cache_free_gpu_mem_fraction -> device-memory-utilization,
// enable_kv_cache_reuse -> enable-prefix-caching, max_tokens_in_paged_kv_cache
// -> max-kv-tokens, enable_chunked_context -> enable-chunked-prefill,
// gpu_device_ids (one id) -> device-index. Parameters without meaning in halo
// are logged and ignored; those asking for what halo cannot do (beam width >
// 1, beam_search decoding), unknown keys, and unfilled mandatory placeholders
// (gpt_model_path, gpt_model_type) are Errors "FILE:LINE key 'x': why".
// tokenizer_dir is left to the caller.
SettingLayer tensorrt_llm_layer(const PbtxtConfig& config);

}  // namespace halo::serve
