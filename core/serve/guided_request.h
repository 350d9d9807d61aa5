#pragma once
// The guided decoding fields of a request, onto RequestOptions::guided_regex
// or guided_grammar: vLLM's guided_regex, guided_choice, guided_json and
// guided_grammar (GBNF), vLLM's newer structured_outputs object, OpenAI's
// response_format (json_object, json_schema). At most one may be given (400
// naming both); guided_whitespace_pattern is refused.
// Pure; any thread.
#include "engine/async_engine.h"
#include "serve/api_common.h"

namespace halo::serve {

void parse_guided(Fields& f, engine::RequestOptions& o);

// TensorRT-LLM's inputs (KServe v2 / Triton): guided_decoding_guide_type
// json, json_schema, regex or ebnf_grammar (GBNF) with guided_decoding_guide.
void parse_trtllm_guided(Fields& f, engine::RequestOptions& o);

// A 400 naming both when the output is already constrained and `what` would
// constrain it too.
void check_unconstrained(const engine::RequestOptions& o, const std::string& what);
// Sets the output constraint; a 400 naming both when one is already set.
void set_guided_regex(engine::RequestOptions& o, std::string regex, const std::string& what);
// A JSON schema (an object, or JSON text) as the regex guided decoding takes;
// a 400 naming `field` when it cannot be compiled.
std::string guided_schema_regex(const json& schema, const std::string& field);

}  // namespace halo::serve
