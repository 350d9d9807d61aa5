// config.json and generation_config.json of a model directory. The input is
// config.json, optionally followed by a NUL byte and generation_config.json;
// both are written into a fixed scratch model directory and read with
// load_model_config (the files), then parsed again from JSON with
// parse_model_config, and its quantization_config with
// parse_checkpoint_quantization.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "model/checkpoint_quant.h"
#include "model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nul = in.find('\0');
  std::string_view config = in.substr(0, nul);
  const auto dir = halo::fuzz::scratch_dir() / "model";
  halo::fuzz::write_scratch("model/config.json", config);
  std::error_code ec;
  std::filesystem::remove(dir / "generation_config.json", ec);
  std::string_view generation;
  if (nul != std::string_view::npos) {
    generation = in.substr(nul + 1);
    halo::fuzz::write_scratch("model/generation_config.json", generation);
  }
  halo::fuzz::guarded([&] { (void)halo::model::load_model_config(dir); });
  halo::fuzz::guarded([&] {
    auto c = nlohmann::json::parse(config);
    nlohmann::json g;
    if (nul != std::string_view::npos) g = nlohmann::json::parse(generation);
    (void)halo::model::parse_model_config(c, nul != std::string_view::npos ? &g : nullptr, "config.json");
  });
  halo::fuzz::guarded([&] {
    (void)halo::model::parse_checkpoint_quantization(nlohmann::json::parse(config), "config.json");
  });
  return 0;
}
