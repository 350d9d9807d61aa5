#pragma once
// The guided decoding fields of a request, onto RequestOptions::guided_regex:
// vLLM's guided_regex, guided_choice and guided_json, OpenAI's response_format
// (json_object, json_schema). At most one may be given. guided_grammar and
// the other structured-output fields are refused (400 naming them).
// Pure; any thread.
#include "engine/async_engine.h"
#include "serve/api_common.h"

namespace halo::serve {

void parse_guided(Fields& f, engine::RequestOptions& o);

}  // namespace halo::serve
