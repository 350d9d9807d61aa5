#include "serve/triton_request.h"

#include <fmt/format.h>

#include <limits>
#include <span>

#include "serve/frontend_context.h"
#include "serve/guided_request.h"

namespace halo::serve {
namespace {

// The vLLM backend's and TensorRT-LLM's names for the OpenAI/vLLM sampling fields.
std::string canonical_key(const std::string& k) {
  if (k == "random_seed") return "seed";
  if (k == "stop_words") return "stop";
  if (k == "min_length") return "min_tokens";
  if (k == "runtime_top_k") return "top_k";
  if (k == "runtime_top_p") return "top_p";
  if (k == "len_penalty") return "length_penalty";
  if (k == "streaming") return "stream";
  return k;
}

// TensorRT-LLM's word lists (bad_words, stop_words, embedding_bias_words):
// a string or a list of strings, where an empty string is no word. The
// field is dropped when no word is left, so that "" and [""] mean "none".
void drop_empty_words(json& params, const std::string& key) {
  auto it = params.find(key);
  if (it == params.end()) return;
  if (it->is_string()) {
    if (it->get_ref<const std::string&>().empty()) params.erase(it);
    return;
  }
  if (!it->is_array()) return;  // parse_sampling names the wrong type
  json words = json::array();
  for (const auto& w : *it)
    if (!w.is_string() || !w.get_ref<const std::string&>().empty()) words.push_back(w);
  if (words.empty())
    params.erase(it);
  else
    *it = std::move(words);
}

bool empty_value(const json& v) {
  if (v.is_null()) return true;
  if (v.is_array() || v.is_object() || v.is_string()) return v.empty();
  return false;
}

// TensorRT-LLM ensemble / BLS inputs halo cannot honour: refused when they ask for something.
void reject_trtllm_inputs(Fields& f) {
  static const std::vector<std::pair<const char*, const char*>> refused = {
      {"embedding_bias_words", "the sampler has no per-token bias"},
      {"embedding_bias_weights", "the sampler has no per-token bias"},
      {"lora_weights",
       "adapters are not sent with requests: load them with --lora-modules or POST "
       "/v1/load_lora_adapter and name one by lora_task_id (its lora_int_id) or as the model"},
      {"lora_config",
       "adapters are not sent with requests: load them with --lora-modules or POST "
       "/v1/load_lora_adapter and name one by lora_task_id (its lora_int_id) or as the model"},
      {"prompt_embedding_table", "prompt tuning tables are not supported"},
      {"decoder_text_input", "encoder-decoder models are not supported"},
      {"image_input", "halo serves text models"},
      {"image_bytes_input", "halo serves text models"},
      {"image_url_input", "halo serves text models"},
      {"video_bytes_input", "halo serves text models"},
  };
  for (const auto& [name, why] : refused) {
    f.touch(name);
    const json* v = f.get(name);
    if (v && !empty_value(*v))
      throw ApiError(400, fmt::format("'{}' is not supported by halo: {}", name, why), name);
  }
  for (const char* k : {"return_context_logits", "return_generation_logits"})
    if (f.boolean(k).value_or(false))
      throw ApiError(400, fmt::format("'{}': halo does not return logits (false is accepted)", k),
                     k);
  if (f.boolean("return_perf_metrics").value_or(false))
    throw ApiError(400,
                   "'return_perf_metrics': halo reports performance in /metrics, not per request",
                   "return_perf_metrics");
  if (auto n = f.integer("num_return_sequences", 1, 1 << 20); n && *n != 1)
    throw ApiError(400,
                   "'num_return_sequences' other than 1 is not supported on generate (use "
                   "/v1/completions 'n')",
                   "num_return_sequences");
  f.integer("beam_width", 1, 1);  // above 1 it became use_beam_search (trtllm_beam_width)
  // No effect on the output: padding, speculative decoding, Triton's sequence batching.
  f.integer("pad_id", 0, std::numeric_limits<int32_t>::max());
  for (const char* k :
       {"num_draft_tokens", "use_draft_logits", "prompt_vocab_size", "prompt_table_extra_id",
        "max_queue_delay_microseconds", "sequence_id", "sequence_start", "sequence_end"})
    f.touch(k);
}

// TensorRT-LLM's beam_width W > 1: vLLM's beam search of width W returning
// its best beam (the job answers one sequence).
void trtllm_beam_width(json& params) {
  auto bw = params.find("beam_width");
  if (bw == params.end() || !bw->is_number_integer() || bw->get<int64_t>() <= 1) return;
  params["use_beam_search"] = true;
  params["best_of"] = *bw;
  params.erase(bw);
}

// TensorRT-LLM's top_k 0 and top_p 0 both mean "off", and both off means
// greedy; halo's top_p must be in (0, 1].
void trtllm_sampling_zeros(json& params) {
  auto p = params.find("top_p");
  if (p == params.end() || !p->is_number() || p->get<double>() != 0.0) return;
  params.erase(p);
  auto k = params.find("top_k");
  if (k != params.end() && k->is_number() && k->get<double>() == 0.0 &&
      !params.contains("temperature"))
    params["temperature"] = 0;
}

void merge_into(json& params, const json& from, const char* where) {
  if (!from.is_object()) throw ApiError(400, fmt::format("'{}' must be a JSON object", where));
  for (auto it = from.begin(); it != from.end(); ++it) params[canonical_key(it.key())] = it.value();
}

// Triton sends scalars of input tensors as one-element lists; take them as scalars.
json unwrap(const json& v) { return v.is_array() && v.size() == 1 && !v[0].is_array() ? v[0] : v; }

}  // namespace

std::string TritonRequest::output_text(const ChoiceOutput& out) const {
  if (!end_id || out.tokens.empty() || out.tokens.back() != *end_id ||
      out.stop_reason != std::to_string(*end_id))
    return out.text;
  return model->tokenizer().decode(
      std::span<const int32_t>(out.tokens.data(), out.tokens.size() - 1),
      options.skip_special_tokens);
}

std::string TritonRequest::event_text(const ChoiceOutput& out,
                                      const engine::StreamEvent& ev) const {
  if (!ev.finished || !end_id) return ev.text;
  const std::string sent = out.text.substr(0, out.text.size() - ev.text.size()),
                    all = output_text(out);
  return all.starts_with(sent) ? all.substr(sent.size()) : ev.text;
}

std::vector<double> TritonRequest::log_probs(const ChoiceOutput& out, size_t first,
                                             double& cum) const {
  std::vector<double> lp;
  cum = 0;
  for (size_t i = 0; i < out.logprobs.size(); ++i) {
    cum += out.logprobs[i].logprob;
    if (i >= first) lp.push_back(out.logprobs[i].logprob);
  }
  return lp;
}

// long: one pass over every field of the two model styles, in the order they apply
TritonRequest parse_triton_request(const FrontendContext& ctx, const std::string& model_name,
                                   const json& body, bool stream_default, bool stream_allowed,
                                   const char* stream_hint) {
  TritonRequest r;
  r.model = ctx.core().find_model(&model_name);
  const ServedModel& m = *r.model;

  // Inputs: top-level fields (Triton's input tensors), then `parameters`,
  // then `sampling_parameters` (the vLLM backend's JSON string) win.
  json params = json::object();
  json text_input;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    if (k == "text_input")
      text_input = unwrap(it.value());
    else if (k == "parameters" || k == "sampling_parameters" || k == "id" || k == "model")
      continue;
    else
      params[canonical_key(k)] = unwrap(it.value());
  }
  if (auto it = body.find("parameters"); it != body.end() && !it->is_null())
    merge_into(params, *it, "parameters");
  if (auto it = body.find("sampling_parameters"); it != body.end() && !it->is_null()) {
    json sp = unwrap(*it);
    if (sp.is_string())
      sp = parse_request_json(sp.get<std::string>(), ctx.core().limits().max_json_depth,
                              "'sampling_parameters'");
    merge_into(params, sp, "sampling_parameters");
  }
  if (!text_input.is_string())
    throw ApiError(400, "'text_input' (a string) is required", "text_input");
  r.prompt = text_input.get<std::string>();
  for (const char* k : {"bad_words", "stop", "embedding_bias_words"}) drop_empty_words(params, k);
  if (auto w = params.find("embedding_bias_weights");
      w != params.end() && w->is_array() && w->empty())
    params.erase(w);
  trtllm_sampling_zeros(params);
  trtllm_beam_width(params);

  Fields f(params);
  r.stream = f.boolean("stream").value_or(stream_default);
  if (r.stream && !stream_allowed)
    throw ApiError(400, fmt::format("'stream': true needs {}", stream_hint), "stream");
  r.exclude_input = f.boolean("exclude_input_in_output").value_or(false);
  r.want_finish_reason = f.boolean("return_finish_reason").value_or(false);
  r.want_input_tokens = f.boolean("return_num_input_tokens").value_or(false);
  r.want_output_tokens = f.boolean("return_num_output_tokens").value_or(false);
  r.want_log_probs = f.boolean("return_log_probs").value_or(false);
  r.want_cumulative_logprob = f.boolean("return_cumulative_logprob").value_or(false);
  reject_trtllm_inputs(f);
  if (auto v = f.integer("sequence_id", 0, std::numeric_limits<int64_t>::max()))
    r.sequence["sequence_id"] = *v;
  for (const char* k : {"sequence_start", "sequence_end"})
    if (auto v = f.boolean(k)) r.sequence[k] = *v;
  // TensorRT-LLM's end_id: generation also ends at this token.
  std::optional<int64_t> end_id = f.integer("end_id", 0, std::numeric_limits<int32_t>::max());
  if (end_id && *end_id >= m.defaults.vocab_size)
    throw ApiError(400,
                   fmt::format("'end_id' {} is outside the vocabulary [0, {})", *end_id,
                               m.defaults.vocab_size),
                   "end_id");
  SamplingRequest sreq;
  f.touch("stream");
  sreq = parse_sampling(f, Endpoint::kGenerate, m.defaults);
  parse_trtllm_guided(f, sreq.options);
  r.options = sreq.options;
  // The adapter: the route's model name, or TensorRT-LLM's lora_task_id (its id).
  r.options.sampling.lora = m.lora(model_name);
  if (auto id = f.integer("lora_task_id", 1, std::numeric_limits<int64_t>::max())) {
    auto by_id = m.lora_by_id(*id, "lora_task_id");
    if (r.options.sampling.lora && r.options.sampling.lora->id != by_id->id)
      throw ApiError(
          400,
          fmt::format("'lora_task_id' {} is not the adapter '{}' the route names", *id, model_name),
          "lora_task_id");
    r.options.sampling.lora = std::move(by_id);
  }
  if (end_id) {
    r.end_id = static_cast<int32_t>(*end_id);
    r.options.sampling.stop_token_ids.push_back(*r.end_id);
  }
  if ((r.want_log_probs || r.want_cumulative_logprob) && r.options.sampling.logprobs < 0)
    r.options.sampling.logprobs = 0;
  if (r.options.n != 1 || r.options.best_of > 1)
    throw ApiError(400, "this endpoint returns one sequence: 'n' and 'best_of' must be 1", "n");
  ctx.core().check_prompt_bytes(m, r.prompt.size(), "text_input");
  r.prompt_ids = m.tokenizer().encode(r.prompt, true);
  if (r.prompt_ids.empty()) throw ApiError(400, "'text_input' is empty", "text_input");
  settle_max_tokens(sreq, Endpoint::kGenerate, static_cast<int>(r.prompt_ids.size()),
                    m.max_model_len, m.defaults.generation);
  r.options.sampling.max_tokens = sreq.options.sampling.max_tokens;
  f.log_unknown("generate");
  return r;
}

}  // namespace halo::serve
