// --speculative-config's JSON (a flag, a --config file, model.json's
// speculative_config, vLLM's engine argument): parsed or refused with a
// halo::Error; what parses prints as canonical JSON that parses back to the
// same config.
#include <cstdlib>
#include <string>

#include "engine/spec_decode/speculative_config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  const std::string text(reinterpret_cast<const char*>(data), size);
  halo::fuzz::guarded([&] {
    const auto config = halo::engine::spec::parse_speculative_config(text);
    const auto again = halo::engine::spec::parse_speculative_config(config.to_json());
    auto canonical = config;
    canonical.ignored.clear();  // to_json leaves out the keys that have no effect
    if (!(again == canonical)) std::abort();
  });
  return 0;
}
