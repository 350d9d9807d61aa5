#pragma once
// How a model served with `--task embed` pools its hidden states, from (the
// first that says): --pooler-config (vLLM's JSON, {"pooling_type": "MEAN",
// "normalize": false}), the model directory's sentence-transformers files
// (modules.json and its Pooling module's config.json; a Normalize module
// turns normalisation on), else last-token pooling, normalised (vLLM's
// default for decoder models).
//
// Every reader throws halo::Error naming the file or flag and what was wrong:
// pooling modes and modules halo does not apply (max, weighted mean, Dense,
// include_prompt false) are refused, never ignored.
#include <filesystem>
#include <optional>
#include <string>

#include "engine/pooling.h"

namespace halo::serve {

// --pooler-config's JSON: pooling_type (LAST, MEAN, CLS), normalize; "" gives
// nothing. Unknown keys are refused.
std::optional<engine::PoolingParams> parse_pooler_config(const std::string& json_text);

// modules.json (its text) and, for its Pooling module, the text of that
// module's config.json (`pooling_config`; read by the caller from the path
// sentence_transformers_pooling_dir names).
engine::PoolingParams parse_sentence_transformers(const std::string& modules_json,
                                                  const std::string& pooling_config);
// The Pooling module's directory named in modules.json ("" for none).
std::string sentence_transformers_pooling_dir(const std::string& modules_json);

// The pooling of the model in `dir` (see above).
engine::PoolingParams resolve_pooling(const std::string& pooler_config,
                                      const std::filesystem::path& dir);

}  // namespace halo::serve
