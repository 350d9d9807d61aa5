// A model repository's model.json (vLLM engine arguments, as the vLLM backend
// of Triton takes them): model_json_layer on a fixed scratch file, applied
// onto a model's settings.
#include "fuzz_util.h"
#include "serve/model_repository.h"
#include "serve/serving_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  const auto path = halo::fuzz::write_scratch("repo/m/1/model.json", data, size);
  halo::fuzz::guarded([&] {
    auto layer = halo::serve::model_json_layer(path);
    halo::serve::ModelSettings s;
    s.name = "m";
    for (const auto& setting : layer) halo::fuzz::guarded([&] { halo::serve::apply_setting(s, setting); });
    (void)halo::serve::describe(s);
  });
  return 0;
}
