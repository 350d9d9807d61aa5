#include "serve/kserve_frontend.h"

#include <limits>
#include <optional>
#include <span>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "serve/api_common.h"
#include "serve/guided_request.h"
#include "serve/single_job.h"

namespace halo::serve {
namespace {

HttpResponse triton_error(int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.body = dump(ojson{{"error", message}});
  return r;
}

HttpResponse triton_api_error(const ApiError& e) { return triton_error(e.status(), e.what()); }

HttpResponse json_ok(const ojson& body) {
  HttpResponse r;
  r.body = dump(body);
  return r;
}

std::vector<std::string> split_path(const std::string& p) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    if (j > i) parts.push_back(p.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

std::string request_id() { return random_id("kserve-"); }

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
  if (words.empty()) params.erase(it);
  else *it = std::move(words);
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
      {"lora_task_id", "halo serves no LoRA adapters"},
      {"lora_weights", "halo serves no LoRA adapters"},
      {"lora_config", "halo serves no LoRA adapters"},
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
    if (v && !empty_value(*v)) throw ApiError(400, fmt::format("'{}' is not supported by halo: {}", name, why), name);
  }
  for (const char* k : {"return_context_logits", "return_generation_logits"})
    if (f.boolean(k).value_or(false))
      throw ApiError(400, fmt::format("'{}': halo does not return logits (false is accepted)", k), k);
  if (f.boolean("return_perf_metrics").value_or(false))
    throw ApiError(400, "'return_perf_metrics': halo reports performance in /metrics, not per request",
                   "return_perf_metrics");
  if (auto n = f.integer("num_return_sequences", 1, 1 << 20); n && *n != 1)
    throw ApiError(400, "'num_return_sequences' other than 1 is not supported on generate (use /v1/completions 'n')",
                   "num_return_sequences");
  f.integer("beam_width", 1, 1);  // above 1 it became use_beam_search (trtllm_beam_width)
  // No effect on the output: padding, speculative decoding, Triton's sequence batching.
  f.integer("pad_id", 0, std::numeric_limits<int32_t>::max());
  for (const char* k : {"num_draft_tokens", "use_draft_logits", "prompt_vocab_size", "prompt_table_extra_id",
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
  if (k != params.end() && k->is_number() && k->get<double>() == 0.0 && !params.contains("temperature"))
    params["temperature"] = 0;
}

void merge_into(json& params, const json& from, const char* where) {
  if (!from.is_object()) throw ApiError(400, fmt::format("'{}' must be a JSON object", where));
  for (auto it = from.begin(); it != from.end(); ++it) params[canonical_key(it.key())] = it.value();
}

// Triton sends scalars of input tensors as one-element lists; take them as scalars.
json unwrap(const json& v) { return v.is_array() && v.size() == 1 && !v[0].is_array() ? v[0] : v; }

class KServeJob : public SingleJob {
 public:
  std::string model_name, model_version;
  bool exclude_input = false;
  bool want_finish_reason = false, want_input_tokens = false, want_output_tokens = false;
  bool want_log_probs = false;  // TensorRT-LLM's return_log_probs
  std::optional<int32_t> end_id;  // TensorRT-LLM's: ends the output and, unlike stop_token_ids, is not part of it
  ojson sequence = {{"sequence_end", false}, {"sequence_id", 0}, {"sequence_start", false}};

 protected:
  // Triton's generate answers with the sequence fields too (TensorRT-LLM's quick start shows them).
  ojson head() const {
    ojson j{{"model_name", model_name}, {"model_version", model_version}};
    j.update(sequence);
    return j;
  }
  void add_extras(ojson& j) const {
    if (want_finish_reason) j["finish_reason"] = finish_name(output().finish_reason) ? ojson(finish_name(output().finish_reason)) : ojson(nullptr);
    if (want_input_tokens) j["num_input_tokens"] = prompt_ids.size();
    if (want_output_tokens) j["num_output_tokens"] = output().tokens.size();
  }
  // The whole output text, without the end_id token when that ended it.
  std::string output_text() const {
    if (!end_id || output().tokens.empty() || output().tokens.back() != *end_id || output().stop_reason != std::to_string(*end_id)) return output().text;
    return model->tokenizer().decode(std::span<const int32_t>(output().tokens.data(), output().tokens.size() - 1),
                                     options.skip_special_tokens);
  }
  // TensorRT-LLM's output_log_probs (one per token of this output) and
  // cum_log_probs (their sum over the whole output so far).
  void add_log_probs(ojson& j, size_t first) const {
    if (!want_log_probs) return;
    ojson lp = ojson::array();
    double cum = 0;
    for (size_t i = 0; i < output().logprobs.size(); ++i) {
      cum += output().logprobs[i].logprob;
      if (i >= first) lp.push_back(output().logprobs[i].logprob);
    }
    j["cum_log_probs"] = cum;
    j["output_log_probs"] = std::move(lp);
  }
  static void sse(std::string& out, const ojson& j) {
    out += "data: ";
    out += dump(j);
    out += "\n\n";
  }
  void write_begin(Responder& res) override {
    res.begin_stream(200, "text/event-stream", {{"X-Accel-Buffering", "no"}});
  }
  void write_event(std::string& out, const engine::StreamEvent& ev, size_t first_token) override {
    if (ev.text.empty() && !ev.finished) return;
    ojson j = head();
    j["text_output"] = ev.text;
    if (ev.finished && end_id) {  // the last piece, less the end token's text
      const std::string sent = output().text.substr(0, output().text.size() - ev.text.size()), all = output_text();
      if (all.starts_with(sent)) j["text_output"] = all.substr(sent.size());
    }
    add_log_probs(j, first_token);
    if (ev.finished) add_extras(j);
    sse(out, j);
  }
  void write_error(std::string& out) override { sse(out, ojson{{"error", gen().error()}}); }
  void write_end(std::string&) override {}
  HttpResponse response() override {
    ojson j = head();
    j["text_output"] = exclude_input ? output_text() : prompt + output_text();
    add_log_probs(j, 0);
    add_extras(j);
    return json_ok(j);
  }
  HttpResponse error_response(int status, const std::string& message) override {
    return triton_error(status, message);
  }
};

}  // namespace

void KServeFrontend::handle(HttpRequest&& req, const std::shared_ptr<Responder>& responder) {
  const std::string what = fmt::format("{} {} {}", req.remote, req.method, req.path);  // route may move req
  HttpResponse resp;
  bool deferred = false;
  try {
    resp = route(req, responder, deferred);
  } catch (...) {
    resp = error_http_response(std::current_exception(), triton_api_error);
  }
  if (!deferred) {
    if (resp.status >= 400) spdlog::debug("{} -> {} {}", what, resp.status, resp.body);
    responder->send(std::move(resp));
  }
}

HttpResponse KServeFrontend::route(HttpRequest& req, const std::shared_ptr<Responder>& res, bool& deferred) {
  const auto parts = split_path(req.path);  // parts[0] == "v2"
  const std::string& m = req.method;
  auto only = [&](const char* method) {
    if (m != method) {
      ApiError e(405, fmt::format("method {} is not allowed on {}; use {}", m, req.path, method));
      e.headers.push_back({"Allow", method});
      throw e;
    }
  };
  if (parts.size() == 3 && parts[1] == "health") {
    only("GET");
    if (parts[2] == "live") return HttpResponse{200, "application/json", "", {}};
    if (parts[2] == "ready")
      return ctx_.core().ready() ? HttpResponse{200, "application/json", "", {}} : triton_error(503, "not ready");
  }
  if (parts.size() == 1) {
    only("GET");
    return json_ok(ojson{{"name", "halo"}, {"version", version_}, {"extensions", ojson::array({"generate"})}});
  }
  ctx_.check_auth(req);
  if (parts.size() == 3 && parts[1] == "repository" && parts[2] == "index") {
    only("POST");
    ojson list = ojson::array();
    for (const auto& sm : ctx_.core().served_models())
      list.push_back(ojson{{"name", sm->name()}, {"version", sm->version}, {"state", "READY"}});
    for (const auto& r : ctx_.core().refused_models())
      list.push_back(ojson{{"name", r.name}, {"state", "UNAVAILABLE"}, {"reason", r.reason}});
    return json_ok(list);
  }
  if (parts.size() < 3 || parts[1] != "models") throw ApiError(404, fmt::format("Not Found: {} {}", m, req.path));
  const std::string& name = parts[2];
  size_t i = 3;
  std::string version;
  if (parts.size() >= 5 && parts[3] == "versions") {
    version = parts[4];
    i = 5;
  }
  const std::string action = i < parts.size() ? parts[i] : "";
  if (i + 1 < parts.size() || (!action.empty() && action != "ready" && action != "config" && action != "generate" &&
                               action != "generate_stream" && action != "infer"))
    throw ApiError(404, fmt::format("Not Found: {} {}", m, req.path));
  std::shared_ptr<const ServedModel> model;
  try {
    model = ctx_.core().find_model(&name);
  } catch (const ApiError& e) {
    if (action == "ready" && e.status() == 404) return triton_error(400, e.what());
    throw;
  }
  if (!version.empty() && version != model->version)
    throw ApiError(404, fmt::format("model '{}' has no version {} (it serves version {})", name, version,
                                    model->version));
  if (action.empty()) {
    only("GET");
    auto tensor = [](const char* n, const char* type, int dim) {
      return ojson{{"name", n}, {"datatype", type}, {"shape", ojson::array({dim})}};
    };
    return json_ok(ojson{{"name", model->name()},
                         {"versions", ojson::array({model->version})},
                         {"platform", "halo"},
                         {"inputs", ojson::array({tensor("text_input", "BYTES", 1), tensor("stream", "BOOL", 1),
                                                  tensor("sampling_parameters", "BYTES", 1),
                                                  tensor("exclude_input_in_output", "BOOL", 1)})},
                         {"outputs", ojson::array({tensor("text_output", "BYTES", -1)})}});
  }
  if (action == "ready") {
    only("GET");
    return model->engine->healthy() ? HttpResponse{200, "application/json", "", {}}
                                    : triton_error(503, "the engine failed (see the server log)");
  }
  if (action == "config") {
    only("GET");
    return json_ok(ojson{{"name", model->name()},
                         {"backend", "halo"},
                         {"max_batch_size", model->max_batch_size},
                         {"parameters", {{"max_model_len", model->max_model_len},
                                         {"max_num_seqs", model->max_num_seqs},
                                         {"block_size", model->block_size},
                                         {"num_kv_blocks", model->num_blocks}}}});
  }
  only("POST");
  if (action == "infer")
    throw ApiError(400, "halo serves the KServe generate extension: POST .../generate or .../generate_stream with "
                        "{\"text_input\": ...}; tensor inference (/infer) is not supported");
  if (ctx_.core().draining()) throw ApiError(503, "the server is shutting down");
  // Parsed and tokenized off the I/O thread.
  auto owned = std::make_shared<HttpRequest>(std::move(req));
  ctx_.preprocess(res, triton_api_error,
                   [this, owned, name, version = model->version, stream = action == "generate_stream", res] {
                     generate(*owned, name, version, stream, res);
                   });
  deferred = true;
  return {};
}

void KServeFrontend::generate(const HttpRequest& req, const std::string& name, const std::string& version,
                              bool stream_route, const std::shared_ptr<Responder>& res) {
  json body = ctx_.parse_request(req);
  auto job = std::make_shared<KServeJob>();
  job->model = ctx_.core().find_model(&name);
  const ServedModel& m = *job->model;
  job->model_name = name;
  job->model_version = version;

  // Inputs: top-level fields (Triton's input tensors), then `parameters`,
  // then `sampling_parameters` (the vLLM backend's JSON string) win.
  json params = json::object();
  json text_input;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    if (k == "text_input") text_input = unwrap(it.value());
    else if (k == "parameters" || k == "sampling_parameters" || k == "id" || k == "model") continue;
    else params[canonical_key(k)] = unwrap(it.value());
  }
  if (auto it = body.find("parameters"); it != body.end() && !it->is_null()) merge_into(params, *it, "parameters");
  if (auto it = body.find("sampling_parameters"); it != body.end() && !it->is_null()) {
    json sp = unwrap(*it);
    if (sp.is_string())
      sp = parse_request_json(sp.get<std::string>(), ctx_.core().limits().max_json_depth, "'sampling_parameters'");
    merge_into(params, sp, "sampling_parameters");
  }
  if (!text_input.is_string()) throw ApiError(400, "'text_input' (a string) is required");
  job->prompt = text_input.get<std::string>();
  for (const char* k : {"bad_words", "stop", "embedding_bias_words"}) drop_empty_words(params, k);
  if (auto w = params.find("embedding_bias_weights"); w != params.end() && w->is_array() && w->empty())
    params.erase(w);
  trtllm_sampling_zeros(params);
  trtllm_beam_width(params);

  Fields f(params);
  job->stream = f.boolean("stream").value_or(stream_route);
  if (job->stream && !stream_route)
    throw ApiError(400, "'stream': true needs the generate_stream endpoint");
  job->exclude_input = f.boolean("exclude_input_in_output").value_or(false);
  job->want_finish_reason = f.boolean("return_finish_reason").value_or(false);
  job->want_input_tokens = f.boolean("return_num_input_tokens").value_or(false);
  job->want_output_tokens = f.boolean("return_num_output_tokens").value_or(false);
  job->want_log_probs = f.boolean("return_log_probs").value_or(false);
  reject_trtllm_inputs(f);
  if (auto v = f.integer("sequence_id", 0, std::numeric_limits<int64_t>::max())) job->sequence["sequence_id"] = *v;
  for (const char* k : {"sequence_start", "sequence_end"})
    if (auto v = f.boolean(k)) job->sequence[k] = *v;
  // TensorRT-LLM's end_id: generation also ends at this token.
  std::optional<int64_t> end_id = f.integer("end_id", 0, std::numeric_limits<int32_t>::max());
  if (end_id && *end_id >= m.defaults.vocab_size)
    throw ApiError(400, fmt::format("'end_id' {} is outside the vocabulary [0, {})", *end_id, m.defaults.vocab_size),
                   "end_id");
  SamplingRequest sreq;
  try {
    f.touch("stream");
    sreq = parse_sampling(f, Endpoint::kGenerate, m.defaults);
    parse_trtllm_guided(f, sreq.options);
  } catch (const ApiError& e) {
    throw ApiError(e.status(), e.what());
  }
  job->options = sreq.options;
  if (end_id) {
    job->end_id = static_cast<int32_t>(*end_id);
    job->options.sampling.stop_token_ids.push_back(*job->end_id);
  }
  if (job->want_log_probs && job->options.sampling.logprobs < 0) job->options.sampling.logprobs = 0;
  ctx_.core().check_prompt_bytes(m, job->prompt.size(), "text_input");
  job->prompt_ids = m.tokenizer().encode(job->prompt, true);
  if (job->prompt_ids.empty()) throw ApiError(400, "'text_input' is empty");
  settle_max_tokens(sreq, Endpoint::kGenerate, static_cast<int>(job->prompt_ids.size()),
                    m.max_model_len, m.defaults.generation);
  job->options.sampling.max_tokens = sreq.options.sampling.max_tokens;
  job->id = request_id();
  f.log_unknown(req.path);
  start_single(ctx_, job, res);
}

}  // namespace halo::serve
