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
#include <filesystem>
#include <string>
#include <vector>

#include "serve/serving_config.h"

namespace halo::serve {

struct RepositoryModel {
  std::string name;
  std::string version;
  std::filesystem::path model_json;
  int max_batch_size = 0;
  SettingLayer settings;  // from model.json, sources "FILE:LINE"
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

// The top-level `name`, `max_batch_size` and `backend` of a config.pbtxt.
struct PbtxtConfig {
  std::string name, backend;
  int max_batch_size = 0;
};
PbtxtConfig read_config_pbtxt(const std::filesystem::path& file);

}  // namespace halo::serve
