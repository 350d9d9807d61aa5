#pragma once
// The prompt fields of the OpenAI API (`prompt` of /v1/completions, `input`
// of /v1/embeddings): a string, a list of strings, a list of token ids or a
// list of token-id lists; anything else is a 400 naming the field.
#include <cstdint>
#include <optional>
#include <vector>

#include "serve/api_common.h"
#include "serve/generation.h"

namespace halo::serve {

// Token ids of `param`, each in [0, vocab) (400 otherwise).
std::vector<int32_t> parse_token_ids(const json& arr, const char* param, int vocab);

// One Prompt per prompt of `value` (at most 1024), not yet tokenized: text
// prompts have from_text set and no ids, token-id prompts their ids.
std::vector<Prompt> parse_prompts(const json& value, const char* param, int vocab);

// vLLM's truncate_prompt_tokens: keep the last k ids (k < 0: max_model_len);
// a k past max_model_len is a 400. Nothing happens without k.
void truncate_prompt(std::vector<int32_t>& ids, std::optional<int> k, int max_model_len);

}  // namespace halo::serve
