// serving.properties (SageMaker / DJL LMI) as the serving-configuration layers
// read it: written to a fixed scratch path, read into a setting layer and
// applied onto a model's settings (every key and value checked), then described.
#include "fuzz_util.h"
#include "serve/serving_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  const auto path = halo::fuzz::write_scratch("model/serving.properties", data, size);
  halo::fuzz::guarded([&] {
    auto layer = halo::serve::serving_properties_layer(path);
    halo::serve::ModelSettings s;
    s.name = "m";
    s.dir = path.parent_path();
    for (const auto& setting : layer) halo::fuzz::guarded([&] { halo::serve::apply_setting(s, setting); });
    (void)halo::serve::describe(s);
  });
  return 0;
}
