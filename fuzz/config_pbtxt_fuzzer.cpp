// A model repository's config.pbtxt (Triton / TensorRT-LLM, protobuf text):
// read_config_pbtxt on a fixed scratch file, its parameters mapped with
// tensorrt_llm_layer and applied; then the same file scanned as
// REPO/m/config.pbtxt by scan_model_repository (the server's start-up path).
#include "fuzz_util.h"
#include "serve/model_repository.h"
#include "serve/serving_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  static const bool version_dir = [] {  // REPO/m/1/model.json, so that the scan serves m
    halo::fuzz::write_scratch("repo/m/1/model.json", R"({"model": "/nonexistent", "max_num_seqs": 2})");
    return true;
  }();
  (void)version_dir;
  const auto path = halo::fuzz::write_scratch("repo/m/config.pbtxt", data, size);
  halo::fuzz::guarded([&] {
    auto config = halo::serve::read_config_pbtxt(path);
    auto layer = halo::serve::tensorrt_llm_layer(config);
    halo::serve::ModelSettings s;
    s.name = "m";
    for (const auto& setting : layer) halo::fuzz::guarded([&] { halo::serve::apply_setting(s, setting); });
    for (const auto& p : config.parameters) (void)halo::serve::is_template_placeholder(p.value);
  });
  halo::fuzz::guarded([&] {
    for (const auto& m : halo::serve::scan_model_repository(halo::fuzz::scratch_dir() / "repo")) (void)m;
  });
  return 0;
}
