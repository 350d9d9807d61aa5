#pragma once
// The engine as the Python package sees it (halo._C.Engine): a model loaded
// as `halo serve` loads one, from settings named as vLLM's engine arguments;
// requests whose sampling fields are parsed as vLLM's /generate body parses
// them (the same checks and messages); streams an event loop can wait on
// (ReadyQueue) and an offline batch run with the GIL released.
//
// Threads: the methods are called with the GIL held; generate() releases it
// while it waits. The engine's own loop thread never touches Python.
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/async_engine.h"
#include "ready_queue.h"
#include "serve/served_model.h"

namespace halo::python {

namespace py = pybind11;

// One request's stream with what converting its events needs.
class PyStream {
 public:
  PyStream(std::shared_ptr<engine::RequestStream> stream,
           std::shared_ptr<const serve::ServedModel> model, engine::RequestOptions options);
  const std::string& request_id() const { return stream_->request_id(); }
  const std::vector<int32_t>& prompt_ids() const { return stream_->prompt_ids(); }
  // Every event waiting, as dicts; never blocks.
  py::list poll();
  bool ended() const { return ended_; }
  py::object prompt_logprobs() const;
  int num_cached_tokens() const { return stream_->num_cached_prompt_tokens(); }
  engine::RequestStream& stream() { return *stream_; }
  const engine::RequestOptions& options() const { return options_; }
  const serve::ServedModel& model() const { return *model_; }
  void mark_ended() { ended_ = true; }

 private:
  std::shared_ptr<engine::RequestStream> stream_;
  std::shared_ptr<const serve::ServedModel> model_;
  engine::RequestOptions options_;
  bool ended_ = false;
};

class PyEngine {
 public:
  // `model`: a directory, Hub id or .gguf file ("" for the embedded model);
  // `settings`: (vLLM or halo name, value). ValueError for a bad setting,
  // RuntimeError for a model that cannot load.
  PyEngine(const std::string& model,
           const std::vector<std::pair<std::string, std::string>>& settings,
           const std::string& source);

  const serve::ServedModel& model() const { return *model_; }
  const std::string& device() const { return device_; }

  std::string render_chat(const std::string& messages_json, bool add_generation_prompt,
                          const std::string* chat_template, const std::string* tools_json,
                          const std::string* kwargs_json, bool continue_final_message) const;
  std::vector<int32_t> chat_prompt_ids(const std::string& rendered, bool add_special_tokens) const;

  // Validated (ValueError with the HTTP API's message) and queued.
  std::shared_ptr<PyStream> add_request(const std::string& request_id,
                                        std::vector<int32_t> prompt_ids,
                                        const std::string& params_json);
  void abort(const std::string& request_id) { model_->engine->abort(request_id); }
  int notify_fd() const { return ready_->fd(); }
  std::vector<std::string> take_ready() { return ready_->take(); }

  // Offline: every (id, prompt ids, params) at once; see halo._C.Engine.generate.
  py::list generate(
      const std::vector<std::tuple<std::string, std::vector<int32_t>, std::string>>& requests,
      const py::object& progress);
  py::dict metrics() const;

 private:
  std::shared_ptr<PyStream> start(const std::string& request_id, std::vector<int32_t> prompt_ids,
                                  const std::string& params_json,
                                  const std::shared_ptr<ReadyQueue>& ready);

  std::shared_ptr<const serve::ServedModel> model_;
  std::string device_;
  std::shared_ptr<ReadyQueue> ready_ = std::make_shared<ReadyQueue>();
};

// The tokenizer methods Python scripts call (halo._C.Tokenizer).
void bind_tokenizer(py::module_& m);
// Engine, Stream.
void bind_engine(py::module_& m);

}  // namespace halo::python
