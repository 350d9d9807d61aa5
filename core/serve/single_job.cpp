#include "serve/single_job.h"

namespace halo::serve {

void SingleJob::on_start(Generation& g) {
  gen_ = &g;
  if (stream) write_begin(*res);
}

void SingleJob::on_output(Generation&, size_t, const engine::StreamEvent& ev, size_t first_token) {
  if (stream) write_event(out, ev, first_token);
}

void SingleJob::on_error(Generation&) {
  if (!stream || error_written_) return;
  error_written_ = true;
  write_error(out);
}

void SingleJob::finish(Generation& g) {
  if (stream) {
    if (!g.failed())
      write_end(out);
    else if (!error_written_)
      write_error(out);
  } else if (g.failed()) {
    res->send(error_response(g.error_status(), g.error()));
  } else {
    res->send(response());
  }
}

void start_single(const FrontendContext& ctx, const std::shared_ptr<SingleJob>& job,
                  const std::shared_ptr<Responder>& res) {
  if (job->options.n != 1 || job->options.best_of > 1)
    throw ApiError(400, "this endpoint returns one sequence: 'n' and 'best_of' must be 1", "n");
  job->res = res;
  std::vector<Prompt> prompts{{job->prompt, true, job->prompt_ids}};
  ctx.start(
      std::make_shared<Generation>(job->model, job->id, std::move(prompts), job->options, job),
      res);
}

}  // namespace halo::serve
