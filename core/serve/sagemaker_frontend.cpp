#include "serve/sagemaker_frontend.h"

#include <cmath>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "serve/api_common.h"
#include "serve/single_job.h"

namespace halo::serve {
namespace {

// DJL serving's error shape (code, type, message), with "error" as TGI clients read it.
HttpResponse lmi_error(int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.body = dump(ojson{{"code", status},
                      {"type", status >= 500 ? "ServiceUnavailableException" : "BadRequestException"},
                      {"message", message},
                      {"error", message}});
  return r;
}

HttpResponse lmi_api_error(const ApiError& e) { return lmi_error(e.status(), e.what()); }

std::string request_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("invocation-{:016x}", rng());
}

// An error about a field the request named by LMI's name (max_new_tokens
// mapped to max_tokens, ...) names it as the client wrote it.
ApiError lmi_named(const ApiError& e, const json& params) {
  static const std::pair<const char*, const char*> renamed[] = {
      {"max_tokens", "max_new_tokens"}, {"stop", "stop_sequences"}, {"ignore_eos", "ignore_eos_token"}};
  for (const auto& [vllm, lmi] : renamed) {
    if (e.param() != vllm || !params.contains(lmi)) continue;
    std::string msg = e.what();
    const std::string quoted = fmt::format("'{}'", vllm);
    if (size_t at = msg.find(quoted); at != std::string::npos)
      msg.replace(at, quoted.size(), fmt::format("'{}' (vLLM's {})", lmi, vllm));
    ApiError out(e.status(), msg, lmi);
    out.headers = e.headers;
    return out;
  }
  return e;
}

class SageMakerJob : public SingleJob {
 public:
  bool details = false;
  bool return_full_text = false;

 protected:
  // LMI's finish reasons: length, eos_token, stop_sequence (and error).
  std::string finish_name() const {
    switch (output().finish_reason) {
      case engine::FinishReason::kLength: return "length";
      case engine::FinishReason::kStop: {
        const auto& stops = options.stop;
        return std::find(stops.begin(), stops.end(), output().stop_reason) != stops.end() ? "stop_sequence" : "eos_token";
      }
      default: return "abort";
    }
  }
  ojson token_json(size_t i, const std::string& text_piece) const {
    double lp = i < output().logprobs.size() ? finite_logprob(output().logprobs[i].logprob) : 0.0;
    return ojson{{"id", output().tokens[i]}, {"text", text_piece}, {"log_prob", lp}};
  }
  ojson details_json(const std::string& reason) const {
    ojson d{{"finish_reason", reason}, {"generated_tokens", output().tokens.size()}, {"inputs", prompt}};
    if (details) {
      ojson toks = ojson::array();
      for (size_t i = 0; i < output().tokens.size(); ++i) toks.push_back(token_json(i, token_text(model->tokenizer(), output().tokens[i])));
      d["tokens"] = std::move(toks);
    }
    return d;
  }
  std::string generated() const { return return_full_text ? prompt + output().text : output().text; }
  void line(std::string& out, const ojson& j) {
    out += dump(j);
    out += '\n';
  }

  // The newest token line is held back until the next event, so that the
  // last one can carry generated_text and details.
  void write_begin(Responder& res) override { res.begin_stream(200, "application/jsonlines"); }
  void write_event(std::string& out, const engine::StreamEvent& ev, size_t first) override {
    for (size_t i = first; i < output().tokens.size(); ++i) {
      if (pending_) line(out, *pending_);
      pending_ = ojson{{"token", token_json(i, "")}};
    }
    if (!ev.text.empty()) {
      if (!pending_) pending_ = ojson{{"token", {{"id", output().tokens.empty() ? -1 : output().tokens.back()}, {"text", ""}, {"log_prob", 0.0}}}};
      (*pending_)["token"]["text"] = (*pending_)["token"]["text"].get<std::string>() + ev.text;
    }
  }
  void write_end(std::string& out) override {
    ojson last = pending_ ? *pending_ : ojson{{"token", {{"id", output().tokens.empty() ? -1 : output().tokens.back()}, {"text", ""}, {"log_prob", 0.0}}}};
    pending_.reset();
    last["generated_text"] = generated();
    last["details"] = details_json(finish_name());
    line(out, last);
  }
  void write_error(std::string& out) override {
    if (pending_) line(out, *pending_);
    pending_.reset();
    line(out, ojson{{"token", {{"id", -1}, {"text", ""}, {"log_prob", -1.0}, {"special", true}}},
                    {"generated_text", nullptr},
                    {"details", details_json("error")},
                    {"error", gen().error()}});
  }
  HttpResponse response() override {
    ojson j{{"generated_text", generated()}};
    if (details) j["details"] = details_json(finish_name());
    HttpResponse r;
    r.body = dump(j);
    return r;
  }
  HttpResponse error_response(int status, const std::string& message) override { return lmi_error(status, message); }

 private:
  std::optional<ojson> pending_;
};

}  // namespace

void SageMakerFrontend::handle(HttpRequest&& req, const std::shared_ptr<Responder>& responder) {
  const std::string what = fmt::format("{} {} {}", req.remote, req.method, req.path);
  HttpResponse resp;
  try {
    if (req.method != "POST") {
      ApiError e(405, fmt::format("method {} is not allowed on {}; use POST", req.method, req.path));
      e.headers.push_back({"Allow", "POST"});
      throw e;
    }
    ctx_.check_auth(req);
    if (ctx_.core().draining()) throw ApiError(503, "the server is shutting down");
    // Parsed and tokenized off the I/O thread.
    auto owned = std::make_shared<HttpRequest>(std::move(req));
    ctx_.preprocess(responder, lmi_api_error, [this, owned, responder] { invocations(*owned, responder); });
    return;
  } catch (...) {
    resp = error_http_response(std::current_exception(), lmi_api_error);
  }
  spdlog::debug("{} -> {} {}", what, resp.status, resp.body);
  responder->send(std::move(resp));
}

namespace {
// The LoRA adapter an invocation names: SageMaker's adapter header (inference
// components), else LMI's "adapters" field (one name, or a list of one), else
// the target model when that is an adapter.
std::shared_ptr<const engine::LoraRequest> request_adapter(const HttpRequest& req, const json& body,
                                                           const ServedModel& m,
                                                           const std::string& target) {
  std::string name = req.header("x-amzn-sagemaker-adapter-identifier");
  if (name.empty())
    if (auto it = body.find("adapters"); it != body.end() && !it->is_null()) {
      const json& a = it->is_array() && it->size() == 1 ? (*it)[0] : *it;
      if (!a.is_string())
        throw ApiError(400, "'adapters' must be an adapter's name (one input per invocation)",
                       "adapters");
      name = a.get<std::string>();
    }
  if (name.empty()) return m.lora(target);  // the target model may be an adapter
  return m.named_lora(name, "adapters");
}
}  // namespace

void SageMakerFrontend::invocations(const HttpRequest& req, const std::shared_ptr<Responder>& res) {
  json body = ctx_.parse_request(req);
  auto job = std::make_shared<SageMakerJob>();
  std::string target = req.header("x-amzn-sagemaker-target-model");
  if (target.empty())
    if (auto it = body.find("model"); it != body.end() && it->is_string()) target = it->get<std::string>();
  job->model = ctx_.core().find_model(&target);
  const ServedModel& m = *job->model;

  auto inputs = body.find("inputs");
  if (inputs == body.end() || !inputs->is_string())
    throw ApiError(400, "'inputs' (a string) is required; halo answers one input per invocation");
  job->prompt = inputs->get<std::string>();
  json params = json::object();
  if (auto it = body.find("parameters"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) throw ApiError(400, "'parameters' must be a JSON object");
    params = *it;
  }

  // LMI's names -> vLLM's, as LMI's vLLM rolling batch translates them.
  Fields in(params);
  job->stream = body.contains("stream") && body["stream"].is_boolean() ? body["stream"].get<bool>()
                                                                       : in.boolean("stream").value_or(false);
  job->details = in.boolean("details").value_or(false);
  job->return_full_text = in.boolean("return_full_text").value_or(false);
  auto do_sample = in.boolean("do_sample");
  json mapped = json::object();
  for (auto it = params.begin(); it != params.end(); ++it) {
    const std::string& k = it.key();
    if (k == "max_new_tokens") mapped["max_tokens"] = it.value();
    else if (k == "stop_sequences") mapped["stop"] = it.value();
    else if (k == "ignore_eos_token") mapped["ignore_eos"] = it.value();
    else if (k == "details" || k == "return_full_text" || k == "do_sample" || k == "stream") continue;
    else if (k == "decoder_input_details" || k == "top_n_tokens" || k == "num_beams" || k == "typical_p" ||
             k == "watermark" || k == "truncate") {
      if (k == "num_beams" && !it.value().is_number_integer())
        throw ApiError(400, "'num_beams' must be an integer");
      if (k == "num_beams" && it.value().get<int64_t>() > 1) {
        // Beam search of that width, answering with its best beam.
        mapped["use_beam_search"] = true;
        mapped["best_of"] = it.value();
      }
      if (k == "decoder_input_details" && it.value() == true)
        throw ApiError(400, "'decoder_input_details' is not supported by halo");
      continue;
    } else {
      mapped[k] = it.value();
    }
  }
  // do_sample false (LMI's default when no temperature is given) is greedy.
  if ((do_sample && !*do_sample) || (!do_sample && !mapped.contains("temperature"))) mapped["temperature"] = 0.0;
  if (!mapped.contains("max_tokens")) mapped["max_tokens"] = 30;
  Fields f(mapped);
  SamplingRequest sreq;
  try {
    sreq = parse_sampling(f, Endpoint::kGenerate, m.defaults);
  } catch (const ApiError& e) {
    throw lmi_named(e, params);
  }
  job->options = sreq.options;
  job->options.sampling.lora = request_adapter(req, body, m, target);
  // The sampled token's log_prob on every line (a beam search reports none).
  if (job->options.beam.width == 0) job->options.sampling.logprobs = 0;
  ctx_.core().check_prompt_bytes(m, job->prompt.size(), "inputs");
  job->prompt_ids = m.tokenizer().encode(job->prompt, true);
  if (job->prompt_ids.empty()) throw ApiError(400, "'inputs' is empty");
  settle_max_tokens(sreq, Endpoint::kGenerate, static_cast<int>(job->prompt_ids.size()),
                    m.max_model_len, m.defaults.generation);
  job->options.sampling.max_tokens = sreq.options.sampling.max_tokens;
  job->id = request_id();
  f.log_unknown("/invocations");
  start_single(ctx_, job, res);
}

}  // namespace halo::serve
