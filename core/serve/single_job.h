#pragma once
// One prompt, one choice: the generation job of the KServe v2 and SageMaker
// frontends. It collects the output and leaves the wire format to a
// subclass; admission, tracking for shutdown, disconnects and the stream pump
// are the OpenAIServer's (OpenAIServer::start_single), shared with the
// OpenAI endpoints.
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "serve/http_server.h"
#include "serve/served_model.h"
#include "serve/stream_pump.h"

namespace halo::serve {

// Every request generating, as the server tracks it for shutdown.
class TrackedJob {
 public:
  virtual ~TrackedJob() = default;
  // Ends the request now; its client gets a "shutting down" error.
  virtual void abort_for_shutdown() = 0;
};

class SingleJob : public StreamConsumer, public TrackedJob {
 public:
  // Set by the frontend before OpenAIServer::start_single.
  std::shared_ptr<const ServedModel> model;
  std::string id;
  std::string prompt;               // the text (as sent)
  std::vector<int32_t> prompt_ids;
  engine::RequestOptions options;   // n must be 1
  bool stream = false;

  // The output so far (pump thread).
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprob> logprobs;  // when options.sampling.logprobs >= 0
  engine::FinishReason finish_reason = engine::FinishReason::kNone;
  std::string stop_reason;  // the stop string or token id that ended it
  std::string error;        // set: the request failed
  int error_status = 0;     // 500 (engine) or 503 (shutdown)

  void on_events(size_t stream_index, std::vector<engine::StreamEvent>& events) override;
  void on_end(size_t stream_index) override;
  void abort_for_shutdown() override;

 protected:
  // Streaming: the response head; the output of one event (`first_token`
  // indexes `tokens` at the event's first new token); the failure (`error`,
  // `error_status` set); the end of a stream that did not fail.
  virtual void write_begin(Responder& res) = 0;
  virtual void write_event(std::string& out, const engine::StreamEvent& ev, size_t first_token) = 0;
  virtual void write_error(std::string& out) = 0;
  virtual void write_end(std::string& out) = 0;
  // Not streaming: the answer, or the failure.
  virtual HttpResponse response() = 0;
  virtual HttpResponse error_response(int status, const std::string& message) = 0;

 private:
  friend class OpenAIServer;
  void finish();

  std::shared_ptr<Responder> res_;
  std::shared_ptr<engine::RequestStream> stream_;
  std::function<void()> on_started_;  // first output: leaves the admission queue
  std::function<void()> on_done_;     // no longer tracked
  std::atomic<bool> client_gone_{false};
  std::atomic<bool> shutdown_{false};
  bool started_ = false, error_written_ = false, ended_ = false;
};

}  // namespace halo::serve
