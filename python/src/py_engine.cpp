#include "py_engine.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <unordered_map>

#include "cli.h"
#include "commands.h"
#include "common/error.h"
#include "common/json_depth.h"
#include "serve/api_common.h"
#include "serve/engine_args.h"
#include "serve/model_loading.h"
#include "serve/serving_config.h"
#include "serve/tool_messages.h"
#include "text/jinja/chat_template.h"

namespace halo::python {

namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ------------------------------------------------------------ settings
// One (name, value) of LLM(...) as the setting layer of a served model: a
// vLLM argument through the table every frontend uses (engine_args.h), else
// a halo setting key. "" when it has no effect in halo.
serve::Setting to_setting(const std::string& name, const std::string& value,
                          const std::string& source) {
  const std::string where = fmt::format("{} argument {}", source, name);
  std::string key = name;
  std::replace(key.begin(), key.end(), '_', '-');
  if (const serve::VllmArg* arg = serve::find_vllm_arg(name))
    key = serve::vllm_arg_key(*arg, value, where);
  return {key, value, where};
}

serve::ModelSettings model_settings(
    const std::string& model, const std::vector<std::pair<std::string, std::string>>& settings,
    const std::string& source) {
  serve::ModelSettings s;
  s.dir = model.empty() ? tools::default_model_dir() : std::filesystem::path(model);
  s.name = model.empty() ? "pkgchat-5m" : model;
  s.origin["model"] = source + " argument model";
  serve::SettingLayer layer;
  for (const auto& [name, value] : settings) {
    serve::Setting st = to_setting(name, value, source);
    if (!st.key.empty()) layer.push_back(std::move(st));
  }
  serve::apply_layer(s, layer);
  return s;
}

// ------------------------------------------------------------ events as dicts
py::dict logprob_dict(const text::Tokenizer& tok, const engine::TokenLogprob& lp) {
  py::list top;
  for (const auto& [id, v] : lp.top) top.append(py::make_tuple(id, v, serve::token_text(tok, id)));
  py::dict d;
  d["token"] = lp.token;
  d["logprob"] = lp.logprob;
  d["decoded"] = serve::token_text(tok, lp.token);
  d["top"] = top;
  return d;
}

py::object logprobs_list(const text::Tokenizer& tok, const std::vector<engine::TokenLogprob>& lps,
                         bool wanted) {
  if (!wanted) return py::none();
  py::list out;
  for (const auto& lp : lps) out.append(logprob_dict(tok, lp));
  return out;
}

// vLLM's stop_reason: the stop token id as an int, the stop string as a str,
// None when EOS or the length ended the choice.
py::object stop_reason_object(const std::string& reason, const engine::RequestOptions& o) {
  if (reason.empty()) return py::none();
  int32_t id = 0;
  const auto [end, ec] = std::from_chars(reason.data(), reason.data() + reason.size(), id);
  const bool is_id = ec == std::errc() && end == reason.data() + reason.size() &&
                     std::find(o.sampling.stop_token_ids.begin(), o.sampling.stop_token_ids.end(),
                               id) != o.sampling.stop_token_ids.end() &&
                     std::find(o.stop.begin(), o.stop.end(), reason) == o.stop.end();
  if (is_id) return py::int_(id);
  return py::str(reason);
}

py::object finish_reason(engine::FinishReason r) {
  const char* name = serve::finish_name(r);
  if (name == nullptr) return py::none();
  return py::str(name);
}

// One choice's output: an event's new part, or everything at the end.
struct ChoiceAcc {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<engine::TokenLogprob> logprobs;
  engine::FinishReason finish = engine::FinishReason::kNone;
  std::string stop_reason, error;
  std::optional<double> cumulative_logprob;  // beam search results only
  std::vector<float> embedding;              // pooling requests (LLM.embed)
  bool finished = false;

  void add(const engine::StreamEvent& ev) {
    token_ids.insert(token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    text += ev.text;
    logprobs.insert(logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (ev.finished) finished = true, finish = ev.finish_reason, stop_reason = ev.stop_reason;
    if (!ev.error.empty()) error = ev.error;
    if (ev.cumulative_logprob) cumulative_logprob = ev.cumulative_logprob;
    if (!ev.embedding.empty()) embedding = ev.embedding;
  }
  py::dict to_dict(size_t index, const text::Tokenizer& tok,
                   const engine::RequestOptions& o) const {
    py::dict d;
    d["index"] = index;
    d["token_ids"] = token_ids;
    d["text"] = text;
    d["logprobs"] = logprobs_list(tok, logprobs, o.sampling.logprobs >= 0);
    d["finish_reason"] = finish_reason(finish);
    d["stop_reason"] = stop_reason_object(stop_reason, o);
    d["finished"] = finished;
    d["error"] = error;
    if (cumulative_logprob) d["cumulative_logprob"] = *cumulative_logprob;
    if (!embedding.empty()) d["embedding"] = embedding;
    return d;
  }
};

py::object prompt_logprobs_list(const text::Tokenizer& tok,
                                const std::vector<engine::TokenLogprob>& lps,
                                const engine::RequestOptions& o) {
  if (o.sampling.prompt_logprobs < 0) return py::none();
  py::list out;
  out.append(py::none());  // the first prompt token has none, as in vLLM
  for (const auto& lp : lps) out.append(logprob_dict(tok, lp));
  return out;
}

// Takes every event waiting on `s` (never blocks); false once it has ended.
template <typename F>
bool drain(engine::RequestStream& s, F&& on_event) {
  engine::StreamEvent ev;
  for (;;) {
    switch (s.next(ev, std::chrono::milliseconds(0))) {
      case engine::RequestStream::Poll::kEvent:
        on_event(ev);
        break;
      case engine::RequestStream::Poll::kTimeout:
        return true;
      case engine::RequestStream::Poll::kEnd:
        return false;
    }
  }
}

// LLM.embed's {"embed": true, "normalize"?, "dimensions"?}: a pooling request
// as the model pools (loaded with task="embed").
engine::RequestOptions pooling_options(serve::Fields& f, const serve::ServedModel& m) {
  if (!m.pooling)
    throw serve::ApiError(400, "the model was not loaded for embeddings: LLM(model, task=\"embed\")");
  engine::RequestOptions o;
  o.sampling.max_tokens = 1;
  o.sampling.pooling = *m.pooling;
  if (auto n = f.boolean("normalize")) o.sampling.pooling.normalize = *n;
  if (auto d = f.integer("dimensions", 1, 1 << 20)) o.sampling.pooling.dimensions = static_cast<int>(*d);
  f.log_unknown("PoolingParams");
  return o;
}

// vLLM's LoRARequest ({"lora_name", "lora_path"}): the adapter, loaded under
// its name the first time a request names it; null when the body has none.
std::shared_ptr<const engine::LoraRequest> lora_of(serve::Fields& f, const serve::ServedModel& m) {
  const serve::json* lr = f.get("lora_request");
  if (lr == nullptr || lr->is_null()) return nullptr;
  if (!m.loras)
    throw serve::ApiError(400, "lora_request: LoRA is not enabled (LLM(..., enable_lora=True))");
  const std::string name = lr->value("lora_name", std::string());
  const std::string path = lr->value("lora_path", std::string());
  if (name.empty() || path.empty())
    throw serve::ApiError(400, "lora_request needs lora_name and lora_path");
  if (!m.loras->has(name)) m.loras->load(name, path);
  return m.lora(name);
}

// What the caller sent, parsed as vLLM's /generate body: the HTTP API's checks and messages.
engine::RequestOptions parse_params(const std::string& params_json, size_t prompt_len,
                                    const serve::ServedModel& m) {
  serve::json body = serve::parse_request_json(params_json, 16, "the sampling parameters");
  if (!body.is_object())
    throw serve::ApiError(400, "the sampling parameters must be a JSON object");
  serve::Fields f(body);
  auto lora = lora_of(f, m);
  engine::RequestOptions options;
  if (f.boolean("embed").value_or(false)) {
    options = pooling_options(f, m);
  } else {
    serve::SamplingRequest sreq = serve::parse_sampling(f, serve::Endpoint::kGenerate, m.defaults);
    serve::settle_max_tokens(sreq, serve::Endpoint::kGenerate, static_cast<int>(prompt_len),
                             m.max_model_len, m.defaults.generation);
    f.log_unknown("SamplingParams");
    options = sreq.options;
  }
  options.sampling.lora = std::move(lora);
  return options;
}

}  // namespace

// ------------------------------------------------------------ PyStream
PyStream::PyStream(std::shared_ptr<engine::RequestStream> stream,
                   std::shared_ptr<const serve::ServedModel> model, engine::RequestOptions options)
    : stream_(std::move(stream)), model_(std::move(model)), options_(std::move(options)) {}

py::list PyStream::poll() {
  py::list out;
  if (ended_) return out;
  ended_ = !drain(*stream_, [&](const engine::StreamEvent& ev) {
    ChoiceAcc one;
    one.add(ev);
    one.finished = ev.finished;
    out.append(one.to_dict(static_cast<size_t>(ev.index), model_->tokenizer(), options_));
  });
  return out;
}

py::object PyStream::prompt_logprobs() const {
  return prompt_logprobs_list(model_->tokenizer(), stream_->prompt_logprobs(), options_);
}

// ------------------------------------------------------------ PyEngine
PyEngine::PyEngine(const std::string& model,
                   const std::vector<std::pair<std::string, std::string>>& settings,
                   const std::string& source) {
  serve::ModelSettings s;
  try {
    s = model_settings(model, settings, source);
  } catch (const Error& e) {
    throw py::value_error(e.what());
  }
  device_ = s.engine.device;
  try {
    model_ = serve::load_model(s, {});
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());
  }
}

std::string PyEngine::render_chat(const std::string& messages_json, bool add_generation_prompt,
                                  const std::string* chat_template, const std::string* tools_json,
                                  const std::string* kwargs_json,
                                  bool continue_final_message) const {
  try {
    text::ChatRenderRequest rr;
    rr.messages = nlohmann::ordered_json::parse(messages_json);
    // Tool history as the server prepares it (and vLLM's LLM.chat): arguments
    // as objects, an assistant content of None beside tool_calls as "".
    serve::prepare_tool_messages(rr.messages, kDefaultMaxJsonDepth);
    if (tools_json != nullptr) rr.tools = nlohmann::ordered_json::parse(*tools_json);
    if (kwargs_json != nullptr)
      rr.chat_template_kwargs = nlohmann::ordered_json::parse(*kwargs_json);
    rr.add_generation_prompt = add_generation_prompt;
    rr.continue_final_message = continue_final_message;
    rr.bos_token = model_->bos;
    rr.eos_token = model_->eos;
    if (chat_template != nullptr) return text::ChatTemplate(*chat_template).render(rr);
    if (!model_->chat_template) throw Error("the model has no chat template: pass chat_template=");
    return model_->chat_template->render(rr);
  } catch (const std::exception& e) {
    throw py::value_error(e.what());
  }
}

std::vector<int32_t> PyEngine::chat_prompt_ids(const std::string& rendered,
                                               bool add_special_tokens) const {
  return model_->tokenizer().encode(
      rendered, add_special_tokens && !text::starts_with_bos(rendered, model_->bos));
}

std::shared_ptr<PyStream> PyEngine::start(const std::string& request_id,
                                          std::vector<int32_t> prompt_ids,
                                          const std::string& params_json,
                                          const std::shared_ptr<ReadyQueue>& ready) {
  engine::RequestOptions options;
  std::shared_ptr<engine::RequestStream> stream;
  try {
    options = parse_params(params_json, prompt_ids.size(), *model_);
    stream = model_->engine->add_request(request_id, std::move(prompt_ids), options);
  } catch (const std::exception& e) {
    throw py::value_error(e.what());
  }
  stream->set_listener([ready, request_id] { ready->mark(request_id); });
  return std::make_shared<PyStream>(std::move(stream), model_, std::move(options));
}

std::shared_ptr<PyStream> PyEngine::add_request(const std::string& request_id,
                                                std::vector<int32_t> prompt_ids,
                                                const std::string& params_json) {
  return start(request_id, std::move(prompt_ids), params_json, ready_);
}

py::list PyEngine::generate(
    const std::vector<std::tuple<std::string, std::vector<int32_t>, std::string>>& requests,
    const py::object& progress) {
  struct Req {
    std::shared_ptr<PyStream> stream;
    std::vector<ChoiceAcc> choices;
    double arrival = 0, first_token = 0, finished = 0;
    bool ended = false;
  };
  auto ready = std::make_shared<ReadyQueue>();
  std::vector<Req> reqs(requests.size());
  std::unordered_map<std::string, size_t> index;
  auto abort_open = [&] {
    for (const auto& r : reqs)
      if (r.stream && !r.ended) abort(r.stream->request_id());
  };
  try {
    for (size_t i = 0; i < requests.size(); ++i) {
      const auto& [id, ids, params] = requests[i];
      reqs[i].arrival = wall_seconds();
      reqs[i].stream = start(id, ids, params, ready);
      reqs[i].choices.resize(static_cast<size_t>(reqs[i].stream->options().n));
      index[id] = i;
    }
  } catch (...) {
    abort_open();
    throw;
  }
  size_t done = 0;
  uint64_t generated = 0;
  const auto t0 = std::chrono::steady_clock::now();
  // Drained at most every kDrainInterval: a wake-up per engine step would take
  // CPU from the engine's own threads (the events wait in their streams).
  constexpr auto kDrainInterval = std::chrono::milliseconds(20);
  auto last_drain = std::chrono::steady_clock::now() - kDrainInterval;
  while (done < reqs.size()) {
    {
      py::gil_scoped_release nogil;
      std::this_thread::sleep_until(last_drain + kDrainInterval);
      ready->wait(std::chrono::milliseconds(100));
      last_drain = std::chrono::steady_clock::now();
    }
    if (PyErr_CheckSignals() != 0) {  // Ctrl-C: nothing keeps running
      abort_open();
      throw py::error_already_set();
    }
    const size_t done_before = done;
    for (const std::string& id : ready->take()) {
      Req& r = reqs[index.at(id)];
      if (r.ended) continue;
      r.ended = !drain(r.stream->stream(), [&](const engine::StreamEvent& ev) {
        if (r.first_token == 0 && !ev.token_ids.empty()) r.first_token = wall_seconds();
        generated += ev.token_ids.size();
        r.choices.at(static_cast<size_t>(ev.index)).add(ev);
      });
      if (r.ended) r.finished = wall_seconds(), ++done;
    }
    if (done != done_before && !progress.is_none())
      progress(done, reqs.size(), generated,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  py::list out;
  for (const Req& r : reqs) {
    const auto& tok = model_->tokenizer();
    const auto& o = r.stream->options();
    py::list choices;
    std::string error;
    for (size_t k = 0; k < r.choices.size(); ++k) {
      choices.append(r.choices[k].to_dict(k, tok, o));
      if (error.empty()) error = r.choices[k].error;
    }
    py::dict d;
    d["request_id"] = r.stream->request_id();
    d["prompt_token_ids"] = r.stream->prompt_ids();
    d["outputs"] = choices;
    d["prompt_logprobs"] = r.stream->prompt_logprobs();
    d["num_cached_tokens"] = r.stream->num_cached_tokens();
    d["error"] = error;
    d["arrival_time"] = r.arrival;
    d["first_token_time"] = r.first_token == 0 ? py::object(py::none()) : py::float_(r.first_token);
    d["finished_time"] = r.finished;
    out.append(d);
  }
  return out;
}

py::dict PyEngine::metrics() const {
  const engine::EngineMetrics m = model_->engine->metrics();
  py::dict d;
  d["num_running"] = m.num_running;
  d["num_waiting"] = m.num_waiting;
  d["kv_cache_usage"] = m.kv_cache_usage;
  d["prompt_tokens"] = m.prompt_tokens;
  d["generation_tokens"] = m.generation_tokens;
  d["num_preemptions"] = m.num_preemptions;
  d["prefix_cache_queries"] = m.prefix_cache_queries;
  d["prefix_cache_hits"] = m.prefix_cache_hits;
  d["request_success"] = m.request_success;
  return d;
}

}  // namespace halo::python
