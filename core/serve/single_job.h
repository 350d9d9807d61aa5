#pragma once
// One prompt, one choice, answered over HTTP: the sink of the KServe v2 and
// SageMaker frontends. It leaves the wire format to a subclass; admission,
// tracking, disconnects and the pump are the ServingCore's.
#include <memory>
#include <string>
#include <vector>

#include "serve/frontend_context.h"

namespace halo::serve {

class SingleJob : public HttpSink {
 public:
  // The request, set by the frontend before start_single.
  std::shared_ptr<const ServedModel> model;
  std::string id;
  std::string prompt;  // the text (as sent)
  std::vector<int32_t> prompt_ids;
  engine::RequestOptions options;  // n must be 1

  void on_start(Generation& g) override;
  void on_output(Generation& g, size_t choice, const engine::StreamEvent& ev,
                 size_t first_token) override;
  void on_error(Generation& g) override;

 protected:
  // The generation (from on_start on) and its one choice's output so far.
  const Generation& gen() const { return *gen_; }
  const ChoiceOutput& output() const { return gen_->choices().front(); }

  // Streaming: the response head; the output of one event (`first_token`
  // indexes output().tokens at the event's first new token); the failure
  // (gen().error()); the end of a stream that did not fail.
  virtual void write_begin(Responder& res) = 0;
  virtual void write_event(std::string& out, const engine::StreamEvent& ev, size_t first_token) = 0;
  virtual void write_error(std::string& out) = 0;
  virtual void write_end(std::string& out) = 0;
  // Not streaming: the answer.
  virtual HttpResponse response() = 0;

 private:
  void finish(Generation& g) final;
  const Generation* gen_ = nullptr;
  bool error_written_ = false;
};

// Validates and starts `job` (its model, id, prompt_ids and options set) on
// `res`: 400 unless it asks for one sequence.
void start_single(const FrontendContext& ctx, const std::shared_ptr<SingleJob>& job,
                  const std::shared_ptr<Responder>& res);

}  // namespace halo::serve
