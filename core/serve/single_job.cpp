#include "serve/single_job.h"

#include <spdlog/spdlog.h>

namespace halo::serve {

void SingleJob::on_events(size_t, std::vector<engine::StreamEvent>& events) {
  if (!started_) {
    started_ = true;
    if (on_started_) on_started_();
  }
  std::string out;
  for (auto& ev : events) {
    const size_t first_token = tokens.size();
    tokens.insert(tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    logprobs.insert(logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    text += ev.text;
    if (ev.finished) {
      finish_reason = ev.finish_reason;
      stop_reason = ev.stop_reason;
    }
    if (error.empty()) {
      if (!ev.error.empty()) {
        error = ev.error;
        error_status = 500;
      } else if (ev.finish_reason == engine::FinishReason::kAbort && shutdown_) {
        error = "the server is shutting down";
        error_status = 503;
      }
    }
    if (!stream || client_gone_) continue;
    if (!error.empty()) {
      if (!error_written_) {
        error_written_ = true;
        write_error(out);
      }
      continue;
    }
    write_event(out, ev, first_token);
  }
  if (!out.empty()) res_->write(std::move(out));
}

void SingleJob::on_end(size_t) {
  if (ended_) return;
  ended_ = true;
  if (!started_) {
    started_ = true;
    if (on_started_) on_started_();
  }
  finish();
}

void SingleJob::finish() {
  try {
    if (!client_gone_) {
      if (stream) {
        std::string out;
        if (error.empty()) write_end(out);
        else if (!error_written_) write_error(out);
        if (!out.empty()) res_->write(std::move(out));
        res_->end_stream();
      } else if (!error.empty()) {
        res_->send(error_response(error_status ? error_status : 500, error));
      } else {
        res_->send(response());
      }
    }
  } catch (const std::exception& e) {
    spdlog::error("{}: building the response failed: {}", id, e.what());
    if (stream) res_->end_stream();
    else res_->send(error_response(500, std::string("building the response failed: ") + e.what()));
  }
  if (on_done_) on_done_();
}

void SingleJob::abort_for_shutdown() {
  shutdown_ = true;
  model->engine->abort(id);
}

}  // namespace halo::serve
