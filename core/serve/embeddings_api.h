#pragma once
// OpenAI's POST /v1/embeddings as vLLM serves it for a model run with
// `--task embed`: `input` as a string, strings, token ids or token-id
// lists; `encoding_format` float or base64 (little-endian float32);
// `dimensions` (the first values, renormalised); vLLM's
// `truncate_prompt_tokens`, `add_special_tokens` and `normalize`. Each input
// is one pooling request of the engine (engine/pooling.h), batched with the
// model's other traffic.
//
// Threads: parse_embeddings runs on the preprocessing pool; the sink's calls
// come from the Generation (generation.h).
#include <memory>
#include <string>
#include <vector>

#include "serve/frontend_context.h"

namespace halo::serve {

struct EmbeddingsRequest {
  std::vector<Prompt> prompts;  // tokenized
  engine::PoolingParams pooling;
  bool base64 = false;
};

// The request's fields (the model already chosen; `f` has touched "model").
// 400 naming the field for anything the model or the API cannot take; 413
// for text past the core's prompt limit.
EmbeddingsRequest parse_embeddings(Fields& f, const ServedModel& m, const ServingCore& core);

// The response's sink: one `data` entry per prompt, in order, and usage.
std::shared_ptr<HttpSink> make_embeddings_sink(std::string model_name, bool base64);

}  // namespace halo::serve
