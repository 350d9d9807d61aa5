// A request body as each frontend reads its sampling parameters:
//   OpenAI /v1/completions and /v1/chat/completions, vLLM /generate: the body
//     itself (parse_json_object -> Fields -> parse_sampling -> resolve_max_tokens);
//   KServe v2 generate: the body's `parameters` object and its
//     `sampling_parameters` (an object or a JSON string);
//   SageMaker /invocations: the body's `parameters` object.
// The frontends' own field mapping (kserve_frontend.cpp, sagemaker_frontend.cpp)
// lives in member functions that need an OpenAIServer with a loaded engine,
// so this target fuzzes the shared parsers they call, which are pure.
#include "fuzz_util.h"
#include "serve/api_common.h"

using namespace halo::serve;

namespace {

SamplingDefaults defaults(uint8_t variant) {
  SamplingDefaults d;
  d.vocab_size = 32000;
  if (variant & 1) {  // a model with a generation_config.json
    d.generation.do_sample = (variant & 2) != 0;
    d.generation.temperature = 0.6f;
    d.generation.top_p = 0.9f;
    d.generation.top_k = 20;
    d.generation.repetition_penalty = 1.1f;
    d.generation.max_new_tokens = 256;
  }
  return d;
}

// parse_json_object(body) or, with the request limits, parse_json_object(body,
// max_depth): whichever api_common.h has (128: RequestLimits' default depth).
template <class S>
json parse_body(const S& body) {
  if constexpr (requires(const S& b) { parse_json_object(b, 128); }) {
    return parse_json_object(body, 128);
  } else {
    return parse_json_object(body);
  }
}

void sample(const json& object, Endpoint ep, const SamplingDefaults& d) {
  halo::fuzz::guarded([&] {
    Fields f(object);
    SamplingRequest r = parse_sampling(f, ep, d);
    for (int prompt_len : {1, 100, 2047})
      halo::fuzz::guarded([&] { (void)resolve_max_tokens(r, ep, prompt_len, 2048, d.generation); });
    f.log_unknown("/fuzz");
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  const std::string body(reinterpret_cast<const char*>(data), size);
  halo::fuzz::guarded([&] {
    json j = parse_body(body);
    const SamplingDefaults d = defaults(size ? data[0] : 0);
    for (Endpoint ep : {Endpoint::kCompletions, Endpoint::kChat, Endpoint::kGenerate}) sample(j, ep, d);
    for (const char* key : {"parameters", "sampling_parameters"}) {
      auto it = j.find(key);
      if (it == j.end()) continue;
      json p = *it;
      if (p.is_string()) {  // KServe: sampling_parameters as a JSON string
        try {
          p = json::parse(p.get<std::string>());
        } catch (const json::exception&) {
          continue;
        }
      }
      if (p.is_object()) sample(p, Endpoint::kGenerate, d);
    }
    (void)dump(ojson::parse(body));  // the answer echoes request strings (invalid UTF-8 replaced)
    (void)error_object(400, body.substr(0, 64), "x");
  });
  return 0;
}
