// A PEFT adapter's adapter_config.json (a LoRA directory given to
// --lora-modules or loaded at run time): parsed or refused with a
// halo::Error; what parses selects modules by its patterns in linear time
// (halo's regex DFA, never backtracking), whatever they say.
#include <string>

#include "fuzz_util.h"
#include "model/lora_adapter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  const std::string text(reinterpret_cast<const char*>(data), size);
  halo::fuzz::guarded([&] {
    const auto c = halo::model::parse_lora_config(text);
    for (const char* m :
         {"model.layers.0.self_attn.q_proj", "model.layers.31.mlp.down_proj", "lm_head", ""}) {
      (void)halo::model::lora_targets(c, m);
      if (halo::model::lora_rank_for(c, m) < 1) std::abort();
      if (!(halo::model::lora_alpha_for(c, m) > 0)) std::abort();
    }
  });
  return 0;
}
