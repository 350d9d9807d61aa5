#include "serve/generation.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace halo::serve {

Generation::Generation(std::shared_ptr<const ServedModel> model, std::string id,
                       std::vector<Prompt> prompts, engine::RequestOptions options,
                       std::shared_ptr<GenerationSink> sink)
    : model_(std::move(model)),
      id_(std::move(id)),
      prompts_(std::move(prompts)),
      options_(std::move(options)),
      sink_(std::move(sink)),
      choices_(prompts_.size() * static_cast<size_t>(std::max(1, options_.n))),
      started_(prompts_.size(), false),
      ended_(prompts_.size(), false) {}

std::string Generation::prompt_text(size_t prompt) const {
  const auto& p = prompts_.at(prompt);
  if (p.from_text) return p.text;
  return model_->tokenizer().decode(p.ids, options_.skip_special_tokens);
}

std::vector<engine::TokenLogprob> Generation::prompt_logprobs(size_t prompt) const {
  return prompt < streams_.size() ? streams_[prompt]->prompt_logprobs()
                                  : std::vector<engine::TokenLogprob>{};
}

int64_t Generation::prompt_tokens() const {
  int64_t t = 0;
  for (const auto& p : prompts_) t += static_cast<int64_t>(p.ids.size());
  return t;
}

int64_t Generation::completion_tokens() const {
  int64_t t = 0;
  for (const auto& c : choices_) t += static_cast<int64_t>(c.tokens.size());
  return t;
}

void Generation::abort_engine() {
  for (const auto& eid : engine_ids_) model_->engine->abort(eid);
}

void Generation::cancel() {
  if (cancelled_.exchange(true)) return;
  spdlog::info("{}: client disconnected, aborting", id_);
  abort_engine();
}

void Generation::abort_for_shutdown() {
  shutdown_ = true;
  abort_engine();
}

void Generation::mark_started(size_t prompt) {
  if (started_[prompt]) return;
  started_[prompt] = true;
  if (on_started_) on_started_(static_cast<int64_t>(prompts_[prompt].ids.size()));
}

// An engine error, or an abort while the server shuts down, fails the whole
// generation; an abort because the caller left (cancel) is not a failure.
void Generation::record_error(const engine::StreamEvent& ev) {
  if (!error_.empty()) return;
  if (!ev.error.empty()) {
    error_ = ev.error;
    error_status_ = 500;
  } else if (ev.finish_reason == engine::FinishReason::kAbort && shutdown_) {
    error_ = "the server is shutting down";
    error_status_ = 503;
  }
}

void Generation::on_events(size_t prompt, std::vector<engine::StreamEvent>& events) {
  mark_started(prompt);
  const size_t n = static_cast<size_t>(std::max(1, options_.n));
  bool wrote = false;
  for (auto& ev : events) {
    const size_t index = prompt * n + static_cast<size_t>(ev.index);
    ChoiceOutput& c = choices_.at(index);
    const size_t first_token = c.tokens.size();
    c.tokens.insert(c.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    c.text += ev.text;
    if (ev.finished) {
      c.finish_reason = ev.finish_reason;
      c.stop_reason = ev.stop_reason;
      c.embedding = std::move(ev.embedding);
    }
    const bool had_error = failed();
    record_error(ev);
    if (cancelled_ || had_error) continue;
    if (failed()) {
      sink_->on_error(*this);
      wrote = true;
      continue;
    }
    sink_->on_output(*this, index, ev, first_token);
    wrote = true;
  }
  if (wrote && !cancelled_) sink_->on_batch_end(*this);
}

void Generation::on_end(size_t prompt) {
  mark_started(prompt);
  if (ended_[prompt]) return;
  ended_[prompt] = true;
  if (++num_ended_ < prompts_.size()) return;
  sink_->on_finish(*this);  // a sink answers its own failures (HttpSink)
  if (on_done_) on_done_();
}

}  // namespace halo::serve
