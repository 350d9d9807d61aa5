#include "serve/kserve_frontend.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "serve/api_common.h"
#include "serve/single_job.h"
#include "serve/triton_request.h"

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

class KServeJob : public SingleJob {
 public:
  TritonRequest req;
  std::string model_name, model_version;

 protected:
  // Triton's generate answers with the sequence fields too (TensorRT-LLM's quick start shows them).
  ojson head() const {
    ojson j{{"model_name", model_name}, {"model_version", model_version}};
    j.update(req.sequence);
    return j;
  }
  void add_extras(ojson& j) const {
    if (req.want_finish_reason) j["finish_reason"] = finish_name(output().finish_reason) ? ojson(finish_name(output().finish_reason)) : ojson(nullptr);
    if (req.want_input_tokens) j["num_input_tokens"] = prompt_ids.size();
    if (req.want_output_tokens) j["num_output_tokens"] = output().tokens.size();
  }
  void add_log_probs(ojson& j, size_t first) const {
    if (!req.want_log_probs && !req.want_cumulative_logprob) return;
    double cum = 0;
    std::vector<double> lp = req.log_probs(output(), first, cum);
    if (req.want_cumulative_logprob) j["cumulative_logprob"] = cum;
    if (!req.want_log_probs) return;
    j["cum_log_probs"] = cum;
    j["output_log_probs"] = lp;
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
    j["text_output"] = req.event_text(output(), ev);
    add_log_probs(j, first_token);
    if (ev.finished) add_extras(j);
    sse(out, j);
  }
  void write_error(std::string& out) override { sse(out, ojson{{"error", gen().error()}}); }
  void write_end(std::string&) override {}
  HttpResponse response() override {
    ojson j = head();
    j["text_output"] = req.exclude_input ? req.output_text(output()) : prompt + req.output_text(output());
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
  try {
    job->req = parse_triton_request(ctx_, name, body, stream_route, stream_route, "the generate_stream endpoint");
  } catch (const ApiError& e) {
    throw ApiError(e.status(), e.what());  // Triton's error shape has no param
  }
  job->model = job->req.model;
  job->model_name = name;
  job->model_version = version;
  job->prompt = job->req.prompt;
  job->prompt_ids = job->req.prompt_ids;
  job->options = job->req.options;
  job->stream = job->req.stream;
  job->id = request_id();
  start_single(ctx_, job, res);
}

}  // namespace halo::serve
