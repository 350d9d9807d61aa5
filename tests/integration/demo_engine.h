#pragma once
// What the engine tests of this directory share: the CPU plugin of the build
// and the embedded demo model, loaded once per test binary, and greedy
// sampling parameters.
#include <filesystem>
#include <memory>
#include <string>

#include "engine/sampling_params.h"
#include "model/model_loader.h"

namespace halo::test_support {

inline const std::string kCpuPlugin = std::string(HALO_PLUGIN_DIR) + "/libhalo_plugin_cpu.so";

inline std::shared_ptr<const model::LoadedModel> demo_model() {
  static auto m = std::make_shared<const model::LoadedModel>(
      model::LoadedModel::load(std::filesystem::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m"));
  return m;
}

// Greedy decoding of exactly `max_tokens` tokens.
inline engine::SamplingParams greedy(int max_tokens) {
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

}  // namespace halo::test_support
