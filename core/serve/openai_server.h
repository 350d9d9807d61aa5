#pragma once
// The OpenAI-compatible API (as vLLM serves it), a codec over the
// ServingCore: /v1/models, /v1/completions, /v1/chat/completions (+ /render),
// Anthropic's /v1/messages (messages_api.h), OpenAI's /v1/responses
// (responses_api.h), vLLM's /generate, /tokenize, /detokenize, /health, /ping, /version,
// /metrics.
//
// Several models may be served at once (a model repository, --model given
// more than once): requests route by their `model` field (none: the first
// model).
//
// The I/O thread that receives a request only routes it: requests with a
// body are parsed, rendered, tokenized and validated on the core's
// preprocessing pool (so one expensive request cannot stall other
// connections or /health), then started as a Generation whose OpenAIJob sink
// writes the response. Threads: handle() may run on any I/O thread.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "serve/api_common.h"
#include "serve/frontend_context.h"
#include "serve/generation.h"
#include "serve/chat_shape.h"
#include "serve/http_server.h"
#include "serve/response_store.h"
#include "serve/served_model.h"
#include "serve/tool_choice.h"

namespace halo::serve {

struct ApiConfig {
  std::string version = "0.0.0";  // /version
  // POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's
  // VLLM_ALLOW_RUNTIME_LORA_UPDATING): off unless set.
  bool allow_runtime_lora_updating = false;
};

class OpenAIJob;

class OpenAIServer {
 public:
  OpenAIServer(const FrontendContext& ctx, ApiConfig config);
  OpenAIServer(const OpenAIServer&) = delete;
  OpenAIServer& operator=(const OpenAIServer&) = delete;

  // The HTTP handler.
  void handle(HttpRequest&& request, const std::shared_ptr<Responder>& responder);

 private:
  using Model = ServedModel;

  HttpResponse route(HttpRequest& req, const std::shared_ptr<Responder>& responder, bool& deferred);
  void handle_body(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  std::shared_ptr<const Model> request_model(const json& body) const;  // by its "model" field
  // The name a response reports: the LoRA adapter the body's "model" names, else m.name().
  static std::string served_name(const json& body, const Model& m);
  std::shared_ptr<const Model> lora_target(const json& body) const;
  HttpResponse load_lora_adapter(const HttpRequest& req);
  HttpResponse unload_lora_adapter(const HttpRequest& req);

  HttpResponse models();
  HttpResponse model(const std::string& id);  // GET /v1/models/{id}
  HttpResponse health();
  HttpResponse metrics();
  HttpResponse tokenize(const HttpRequest& req);
  HttpResponse detokenize(const HttpRequest& req);
  HttpResponse chat_render(const HttpRequest& req);
  void completions(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  void chat(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  // POST /v1/embeddings (embeddings_api.h).
  void embeddings(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  // Anthropic's POST /v1/messages: the request as a chat (messages_api.h), answered in Anthropic's shape.
  void messages(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  // OpenAI's POST /v1/responses: the request as a chat (responses_api.h), answered as a response.
  void responses(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  // GET (or, with `erase`, DELETE) /v1/responses/{id}.
  HttpResponse stored_response(const std::string& id, bool erase);
  // Makes the shape of a chat answered in another API's shape, from its id and the model's name.
  using ShapeFactory = std::function<std::unique_ptr<ChatShape>(std::string id, std::string model)>;
  // A chat request (`text`: its JSON text, `body`: parsed), answered as a chat
  // completion (no `shape`) or in the shape `shape` makes; ids start with `id_prefix`.
  void run_chat(std::string_view text, json body, const char* id_prefix, const ShapeFactory& shape,
                const std::shared_ptr<Responder>& res);
  void generate(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  void start(const std::shared_ptr<OpenAIJob>& job, std::shared_ptr<const ServedModel> model,
             std::vector<Prompt> prompts, const std::shared_ptr<Responder>& res);

  // The chat prompt; `tool_choice` (optional) receives the request's tool_choice.
  // `body` is the request's text: messages and tools reach the template in its key order.
  std::string render_chat(const Model& m, Fields& f, std::string_view body, bool& add_special_default,
                          std::string* echo_prefix, ToolChoice* tool_choice = nullptr) const;

  const FrontendContext& ctx_;
  ApiConfig config_;
  const int64_t created_;
  const std::shared_ptr<ResponseStore> responses_;  // shared with the jobs that store into it
};

}  // namespace halo::serve
