#pragma once
// What the engine tests of this directory share: the CPU plugin of the build
// and the embedded demo model, loaded once per test binary.
#include <filesystem>
#include <memory>
#include <string>

#include "model/model_loader.h"

namespace halo::test_support {

inline const std::string kCpuPlugin = std::string(HALO_PLUGIN_DIR) + "/libhalo_plugin_cpu.so";

inline std::shared_ptr<const model::LoadedModel> demo_model() {
  static auto m = std::make_shared<const model::LoadedModel>(
      model::LoadedModel::load(std::filesystem::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m"));
  return m;
}

}  // namespace halo::test_support
