#pragma once
// One request's generation, independent of any wire format: P prompts with n
// choices each, as the engine produces them. A frontend (OpenAI, vLLM,
// KServe v2, SageMaker, or an in-process caller) builds a Generation with a
// GenerationSink, hands it to ServingCore::start, and formats what the sink
// is told.
//
// Threads: the sink's calls come from the StreamPump thread, one at a time
// per generation (on_start from the thread that calls ServingCore::start,
// before any other). cancel() and abort_for_shutdown() may be called from any
// thread. Lifetime: the core keeps the generation alive until on_finish
// returns; the generation owns its sink.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "serve/served_model.h"
#include "serve/stream_pump.h"

namespace halo::serve {

struct Prompt {
  std::string text;        // what the prompt came from ("" for token-id prompts)
  bool from_text = false;  // false: sent as token ids
  std::vector<int32_t> ids;
};

// The output of one choice so far.
struct ChoiceOutput {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprob> logprobs;  // when options.sampling.logprobs >= 0
  engine::FinishReason finish_reason = engine::FinishReason::kNone;
  std::string stop_reason;  // the stop string or token id that ended it
  std::vector<float> embedding;  // a pooling request's result, once finished
};

class Generation;

// What a frontend does with a generation's output.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // Admitted and queued; no output yet (the response head goes here).
  virtual void on_start(Generation&) {}
  // New output of choice `choice` (prompt * n + index): `ev` is already
  // appended to g.choices()[choice] (text included), its tokens from
  // `first_token` on.
  virtual void on_output(Generation& g, size_t choice, const engine::StreamEvent& ev,
                         size_t first_token) = 0;
  // The generation failed (g.error(), g.error_status()); no on_output follows.
  virtual void on_error(Generation& g) = 0;
  // After each batch of on_output calls (to write what was buffered).
  virtual void on_batch_end(Generation&) {}
  // Every prompt's stream ended (finished, failed or cancelled): the last
  // call. It must not throw.
  virtual void on_finish(Generation& g) = 0;
};

class Generation : public StreamConsumer {
 public:
  Generation(std::shared_ptr<const ServedModel> model, std::string id, std::vector<Prompt> prompts,
             engine::RequestOptions options, std::shared_ptr<GenerationSink> sink);

  const ServedModel& model() const { return *model_; }
  const std::shared_ptr<const ServedModel>& model_ptr() const { return model_; }
  const std::string& id() const { return id_; }
  const std::vector<Prompt>& prompts() const { return prompts_; }
  const engine::RequestOptions& options() const { return options_; }
  int n() const { return options_.n; }
  // prompts().size() * n() choices, prompt-major.
  const std::vector<ChoiceOutput>& choices() const { return choices_; }
  // The prompt's text as the response repeats it (decoded for token-id prompts).
  std::string prompt_text(size_t prompt) const;
  // vLLM's prompt logprobs of one prompt (once its stream has them).
  std::vector<engine::TokenLogprob> prompt_logprobs(size_t prompt) const;
  int64_t prompt_tokens() const;
  int64_t completion_tokens() const;

  // The first failure: an engine error (500) or the server's shutdown (503).
  const std::string& error() const { return error_; }
  int error_status() const { return error_status_; }
  bool failed() const { return !error_.empty(); }
  // The caller went away: the engine stops, the sink hears only on_finish.
  void cancel();
  bool cancelled() const { return cancelled_.load(); }
  // The server is shutting down: the engine stops, the sink hears on_error (503).
  void abort_for_shutdown();

  // StreamConsumer (pump thread).
  void on_events(size_t prompt, std::vector<engine::StreamEvent>& events) override;
  void on_end(size_t prompt) override;

 private:
  friend class ServingCore;
  void mark_started(size_t prompt);
  void abort_engine();
  void record_error(const engine::StreamEvent& ev);

  std::shared_ptr<const ServedModel> model_;
  std::string id_;
  std::vector<Prompt> prompts_;
  engine::RequestOptions options_;
  std::shared_ptr<GenerationSink> sink_;
  std::vector<ChoiceOutput> choices_;

  // Set by ServingCore::start.
  std::vector<std::string> engine_ids_;
  std::vector<std::shared_ptr<engine::RequestStream>> streams_;
  std::function<void(int64_t prompt_tokens)>
      on_started_;                 // a prompt's first output: leaves admission
  std::function<void()> on_done_;  // no longer tracked

  std::vector<bool> started_, ended_;
  size_t num_ended_ = 0;
  std::string error_;
  int error_status_ = 0;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> shutdown_{false};
};

}  // namespace halo::serve
