#pragma once
// A Triton generate request, whatever carries it: the KServe v2 HTTP generate
// extension's JSON body, or the gRPC ModelInferRequest's tensors turned into
// the same JSON (grpc/infer_tensors.h). Both model styles users have are read:
// the vLLM backend's (text_input, stream, sampling_parameters as a JSON string,
// exclude_input_in_output, return_finish_reason, return_num_*_tokens) and the
// TensorRT-LLM ensemble's (max_tokens, bad_words, stop_words, end_id, pad_id,
// temperature, top_k, top_p, random_seed, beam_width, return_log_probs, ...).
// One place decides what each field means; the frontends only format.
//
// Pure functions and a plain value; any thread.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "serve/api_common.h"
#include "serve/generation.h"

namespace halo::serve {

class FrontendContext;

struct TritonRequest {
  std::shared_ptr<const ServedModel> model;
  std::string prompt;  // text_input as sent
  std::vector<int32_t> prompt_ids;
  engine::RequestOptions options;  // n == 1; max_tokens settled
  bool stream = false;
  bool exclude_input = false;
  bool want_finish_reason = false, want_input_tokens = false, want_output_tokens = false;
  bool want_log_probs = false;           // TensorRT-LLM's return_log_probs
  bool want_cumulative_logprob = false;  // the vLLM backend's return_cumulative_logprob
  // TensorRT-LLM's end_id: ends the output and, unlike stop_token_ids, is not part of it.
  std::optional<int32_t> end_id;
  ojson sequence = {{"sequence_end", false}, {"sequence_id", 0}, {"sequence_start", false}};

  // The whole output text, without the end_id token when that ended it.
  std::string output_text(const ChoiceOutput& out) const;
  // A streamed event's text (the last piece less the end_id token's text).
  std::string event_text(const ChoiceOutput& out, const engine::StreamEvent& ev) const;
  // TensorRT-LLM's output_log_probs (one per token of `out` from `first`)
  // and cum_log_probs (their sum over the whole output so far).
  std::vector<double> log_probs(const ChoiceOutput& out, size_t first, double& cum) const;
};

// Reads `body` (top-level fields are Triton's input tensors, then
// `parameters`, then `sampling_parameters` win) for model `model_name`,
// tokenizes the prompt and settles max_tokens. `stream_default`: stream when
// the request does not say; `stream_allowed`: false refuses stream: true
// (`where` names the route in that message). ApiError (400, 404, 503) for
// what is wrong.
TritonRequest parse_triton_request(const FrontendContext& ctx, const std::string& model_name,
                                   const json& body, bool stream_default, bool stream_allowed,
                                   const char* stream_hint);

}  // namespace halo::serve
