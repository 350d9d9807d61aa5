// What decides an embedding model's pooling, and the `input` of
// /v1/embeddings: the first byte picks the reader, the rest is its text.
//   0: --pooler-config's JSON (a flag, model.json, vLLM's engine argument);
//   1: a sentence-transformers modules.json, then "\0", then its Pooling
//      module's config.json;
//   2: the `input` field as JSON (parse_prompts, shared with /v1/completions'
//      `prompt`).
// Each parses or is refused with a halo::Error (an ApiError for `input`).
#include <string>

#include "engine/pooling.h"
#include "fuzz_util.h"
#include "serve/pooling_config.h"
#include "serve/prompt_input.h"

using namespace halo::serve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  halo::fuzz::guarded([&] {
    switch (data[0] % 3) {
      case 0:
        if (auto p = parse_pooler_config(text)) (void)halo::engine::pooling_type_name(p->type);
        break;
      case 1: {
        const size_t cut = text.find('\0');
        const std::string modules = text.substr(0, cut);
        const std::string config = cut == std::string::npos ? "" : text.substr(cut + 1);
        (void)sentence_transformers_pooling_dir(modules);
        (void)parse_sentence_transformers(modules, config);
        break;
      }
      default: {
        const json input = parse_request_json(text, 128, "input");
        for (const auto& p : parse_prompts(input, "input", 32000))
          for (int32_t id : p.ids)
            if (id < 0 || id >= 32000) std::abort();  // parse_token_ids promised the range
      }
    }
  });
  return 0;
}
