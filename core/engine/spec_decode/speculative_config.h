#pragma once
// --speculative-config: vLLM's SpeculativeConfig JSON as halo accepts it. halo speculates with
// prompt lookup ("ngram") or a smaller draft model ("draft_model"); every other vLLM method, and
// every vLLM field that would change what the engine does, is refused with an Error naming it.
// Fields that only steer how vLLM loads or runs the draft are accepted and listed in `ignored`.
// Matches vllm/config/speculative.py: method inference, the prompt_lookup_min/max defaults, the
// bounds of disable_by_batch_size. JSON null is the same as leaving a key out (vLLM's None).
//
// Threads: pure functions on values; call from any thread.
#include <string>
#include <string_view>
#include <vector>

namespace halo::engine::spec {

inline constexpr int kMaxSpeculativeTokens = 16;

struct SpeculativeConfig {
  enum class Method { kNgram, kDraftModel };
  Method method = Method::kNgram;
  int num_speculative_tokens = 0;  // k, 1..kMaxSpeculativeTokens
  // ngram only (0 with draft_model). Neither given: 5 and 5; one given: the other takes its
  // value (vLLM's defaults). 1 <= min <= max.
  int prompt_lookup_min = 0, prompt_lookup_max = 0;
  std::string model;              // draft_model only: the draft's directory or Hugging Face id
  std::string revision;           // draft_model only: the Hub revision of `model` ("" = main)
  int disable_by_batch_size = 0;  // 0 = unset (the engine picks); else >= 2: no speculation
                                  // while this many sequences run
  // Keys accepted but without effect in halo, sorted, for the caller to log.
  std::vector<std::string> ignored;

  // The effective config as canonical JSON (sorted keys, no `ignored`): parses back to itself.
  std::string to_json() const;
  bool operator==(const SpeculativeConfig&) const = default;
};

// "ngram" or "draft_model".
const char* method_name(SpeculativeConfig::Method method);

// Parses the JSON text of --speculative-config. Throws halo::Error naming the key and the
// value or type expected.
SpeculativeConfig parse_speculative_config(std::string_view json_text);

}  // namespace halo::engine::spec
