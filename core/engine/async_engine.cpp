#include "engine/async_engine.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "text/detokenizer/incremental_detokenizer.h"
#include "text/detokenizer/stop_checker.h"

namespace halo::engine {

using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------ RequestStream

RequestStream::RequestStream(std::string request_id, std::vector<int32_t> prompt_ids, int n)
    : request_id_(std::move(request_id)), prompt_ids_(std::move(prompt_ids)), open_choices_(n) {}

void RequestStream::push(StreamEvent event) {
  std::function<void()> listener;
  {
    std::lock_guard lk(mu_);
    if (event.finished) open_choices_--;
    events_.push_back(std::move(event));
    listener = listener_;
  }
  cv_.notify_all();
  if (listener) listener();
}

void RequestStream::set_listener(std::function<void()> listener) {
  bool waiting = false;
  {
    std::lock_guard lk(mu_);
    listener_ = listener;
    waiting = !events_.empty();
  }
  if (waiting && listener) listener();
}

RequestStream::Poll RequestStream::next(StreamEvent& event, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty() || open_choices_ <= 0; })) return Poll::kTimeout;
  if (events_.empty()) return Poll::kEnd;
  event = std::move(events_.front());
  events_.pop_front();
  return Poll::kEvent;
}

std::vector<TokenLogprob> RequestStream::prompt_logprobs() const {
  std::lock_guard lk(mu_);
  return prompt_logprobs_;
}

int RequestStream::num_cached_prompt_tokens() const {
  std::lock_guard lk(mu_);
  return cached_prompt_tokens_;
}

// ------------------------------------------------------------ AsyncEngine

struct AsyncEngine::Choice {
  std::string seq_id;
  std::unique_ptr<text::IncrementalDetokenizer> detok;
  std::unique_ptr<text::StopChecker> stop;
  bool done = false;
  double cumulative_logprob = 0;
  StreamEvent buffered;  // best_of > n: everything, released when all are done
  Clock::time_point last_token{};
};

struct AsyncEngine::Request {
  std::string id;
  std::vector<int32_t> prompt;
  RequestOptions opts;
  std::shared_ptr<RequestStream> stream;
  std::vector<Choice> choices;  // best_of of them
  int open = 0;
  bool buffer_all = false;
  bool first_token_seen = false;
  Clock::time_point arrival;
};

AsyncEngine::AsyncEngine(const EngineConfig& config, std::shared_ptr<const model::LoadedModel> model,
                         text::Tokenizer tokenizer)
    : engine_(std::make_unique<LLMEngine>(config, std::move(model))),
      tokenizer_(std::move(tokenizer)),
      last_log_(Clock::now()) {
  metrics_.spec_accepted_per_pos = engine_->stats().spec_accepted_per_pos;  // zeros: the counters exist from the start
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestStream> AsyncEngine::add_request(const std::string& request_id,
                                                        std::vector<int32_t> prompt_ids,
                                                        const RequestOptions& options) {
  engine_->validate_request(prompt_ids, options.sampling);
  if (options.beam.width > 0) check_beam_options(options);
  // A beam search is one engine request whatever n is.
  int best_of = options.beam.width > 0 ? options.n
                : options.best_of > 0  ? options.best_of
                                       : options.n;
  if (options.n < 1) throw Error(fmt::format("n must be at least 1, got {}", options.n));
  if (best_of < options.n) throw Error(fmt::format("best_of={} must be at least n={}", best_of, options.n));
  if (best_of > 64) throw Error(fmt::format("best_of (or n) must be at most 64, got {}", best_of));
  for (const auto& s : options.stop)
    if (s.empty()) throw Error("stop strings must not be empty");

  auto req = std::make_shared<Request>();
  req->id = request_id;
  req->prompt = prompt_ids;
  req->opts = options;
  if (options.guided()) {
    if (options.beam.width > 0) throw Error("guided decoding is not supported with beam search");
    if (!options.guided_regex.empty() && !options.guided_grammar.empty())
      throw Error("a regex and a grammar cannot both constrain the output");
    const bool grammar = !options.guided_grammar.empty();
    const std::string what = !options.guided_what.empty() ? options.guided_what
                             : grammar                    ? "guided_grammar"
                                                          : "guided_regex";
    req->opts.sampling.guide =
        grammar ? guides_.get(text::guided::ConstraintKind::kGrammar, options.guided_grammar, what)
                : guides_.get(text::guided::ConstraintKind::kRegex, options.guided_regex, what);
    check_min_tokens_fit(req->opts.sampling, what);
  }
  req->arrival = Clock::now();
  req->buffer_all = best_of > options.n;
  req->stream = std::make_shared<RequestStream>(request_id, std::move(prompt_ids), options.n);
  text::DetokenizerOptions dopts;
  dopts.skip_special_tokens = options.skip_special_tokens;
  dopts.spaces_between_special_tokens = options.spaces_between_special_tokens;
  req->choices.resize(best_of);
  for (auto& c : req->choices) {
    c.detok = std::make_unique<text::IncrementalDetokenizer>(tokenizer_, dopts, req->prompt);
    c.stop = std::make_unique<text::StopChecker>(options.stop, options.include_stop_str_in_output);
  }
  {
    std::lock_guard lk(mu_);
    commands_.push_back({req, {}});
  }
  cv_.notify_all();
  return req->stream;
}

// min_tokens beyond the longest text of the constraint cannot be honoured
// without leaving it: refused, naming both (every token adds at least one
// byte). With a reasoning gate the reasoning's tokens count too: not checked.
void AsyncEngine::check_min_tokens_fit(const SamplingParams& s, const std::string& what) {
  if (s.min_tokens <= 0 || s.guide_gate.active()) return;
  const auto most = s.guide->max_text_bytes();
  if (most && static_cast<size_t>(s.min_tokens) > *most)
    throw FieldError("min_tokens",
                     fmt::format("min_tokens={} is more than {} allows: its longest text is {} "
                                 "byte{}, and every token adds at least one",
                                 s.min_tokens, what, *most, *most == 1 ? "" : "s"));
}

void AsyncEngine::check_beam_options(const RequestOptions& o) const {
  const auto& b = o.beam;
  engine_->check_beam_allowed();
  if (o.n > b.width)
    throw Error(fmt::format("beam search returns at most its width: n={} exceeds the beam width {}",
                            o.n, b.width));
  if (b.width > engine_->limits().max_num_seqs)
    throw Error(fmt::format("beam width {} exceeds max_num_seqs={}", b.width,
                            engine_->limits().max_num_seqs));
  if (!o.stop.empty())
    throw Error("stop strings are not supported with beam search (stop_token_ids are)");
  if (o.sampling.logprobs >= 0 || o.sampling.prompt_logprobs >= 0)
    throw Error(
        "logprobs are not supported with beam search (each result carries its cumulative logprob)");
  if (o.sampling.min_tokens > 0) throw Error("min_tokens is not supported with beam search");
  if (o.sampling.temperature > 0.0f)
    throw Error(fmt::format("beam search is deterministic: temperature must be 0, got {}",
                            o.sampling.temperature));
}

void AsyncEngine::abort(const std::string& request_id) {
  {
    std::lock_guard lk(mu_);
    commands_.push_back({nullptr, request_id});
  }
  cv_.notify_all();
}

void AsyncEngine::fail_request(const Request& req, const std::string& message) {
  StreamEvent ev;
  ev.finished = true;
  ev.finish_reason = FinishReason::kAbort;
  ev.error = message;
  for (int i = 0; i < req.opts.n; ++i) {
    ev.index = i;
    req.stream->push(ev);
  }
}

void AsyncEngine::handle_add(const std::shared_ptr<Request>& req) {
  if (requests_.count(req->id)) {
    fail_request(*req, fmt::format("request id {} is already in use", req->id));
    return;
  }
  uint64_t tag = next_seq_tag_++;
  if (req->opts.beam.width > 0) {
    const std::string id = req->choices[0].seq_id = fmt::format("{}#beam", tag);
    try {
      engine_->add_beam_request(id, req->prompt, req->opts.sampling, req->opts.beam,
                                req->opts.priority);
    } catch (const std::exception& e) {
      fail_request(*req, e.what());
      return;
    }
    requests_[req->id] = req;
    by_seq_[id] = {req, 0};
    req->open = static_cast<int>(req->choices.size());
    return;
  }
  std::vector<std::string> ids;
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < req->choices.size(); ++i) {
    ids.push_back(req->choices[i].seq_id = fmt::format("{}#{}", tag, i));
    SamplingParams p = req->opts.sampling;
    // Choices of one request must differ: each gets its own seed.
    if (p.seed) p.seed = *p.seed + i;
    // best_of ranks by cumulative logprob, which needs the sampled logprobs.
    if (req->buffer_all && p.logprobs < 0) p.logprobs = 0;
    params.push_back(std::move(p));
  }
  try {
    // One group: the prompt is prefilled once and shared by every choice.
    engine_->add_request_group(ids, req->prompt, std::move(params), req->opts.priority);
  } catch (const std::exception& e) {
    fail_request(*req, e.what());
    return;
  }
  requests_[req->id] = req;
  for (size_t i = 0; i < ids.size(); ++i) by_seq_[ids[i]] = {req, static_cast<int>(i)};
  req->open = static_cast<int>(ids.size());
}

void AsyncEngine::handle_abort(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  auto req = it->second;
  for (auto& c : req->choices) {
    if (c.done) continue;
    engine_->abort_request(c.seq_id);
    StreamEvent ev;
    ev.finished = true;
    ev.finish_reason = FinishReason::kAbort;
    finish_choice(*req, c, std::move(ev));
  }
}

void AsyncEngine::finish_choice(Request& req, Choice& c, StreamEvent ev) {
  c.done = true;
  by_seq_.erase(c.seq_id);
  req.open--;
  const auto now = Clock::now();
  {
    std::lock_guard lk(metrics_mu_);
    std::string reason = ev.error.empty() ? finish_reason_name(ev.finish_reason) : "error";
    metrics_.request_success[reason]++;
    if (req.open == 0) {
      metrics_.e2e_request_latency_seconds.observe(std::chrono::duration<double>(now - req.arrival).count());
      metrics_.request_prompt_tokens.observe(double(req.prompt.size()));
    }
  }
  if (req.buffer_all) {
    auto& b = c.buffered;
    b.token_ids.insert(b.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    b.text += ev.text;
    b.logprobs.insert(b.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    b.finished = true;
    b.finish_reason = ev.finish_reason;
    b.stop_reason = ev.stop_reason;
    if (!ev.error.empty()) b.error = ev.error;
    if (req.open == 0) {
      // Release the n best of best_of, ranked by cumulative logprob.
      std::vector<size_t> order(req.choices.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return req.choices[a].cumulative_logprob > req.choices[b].cumulative_logprob;
      });
      for (int k = 0; k < req.opts.n; ++k) {
        StreamEvent out = std::move(req.choices[order[k]].buffered);
        out.index = k;
        if (req.opts.sampling.logprobs < 0) out.logprobs.clear();  // asked only for ranking
        req.stream->push(std::move(out));
      }
    }
  } else {
    req.stream->push(std::move(ev));
  }
  if (req.open == 0) requests_.erase(req.id);
}

void AsyncEngine::process(const RequestOutput& out) {
  auto it = by_seq_.find(out.request_id);
  if (it == by_seq_.end()) return;
  auto req = it->second.first;
  if (req->opts.beam.width > 0) return process_beams(*req, out);
  Choice& c = req->choices[it->second.second];
  const Sequence& seq = *out.seq;
  const auto now = Clock::now();
  {
    std::lock_guard lk(metrics_mu_);
    if (!req->first_token_seen) {
      metrics_.time_to_first_token_seconds.observe(std::chrono::duration<double>(now - req->arrival).count());
      if (seq.first_scheduled != Clock::time_point{})
        metrics_.request_queue_time_seconds.observe(
            std::chrono::duration<double>(seq.first_scheduled - req->arrival).count());
    }
    if (c.last_token != Clock::time_point{})
      metrics_.inter_token_latency_seconds.observe(std::chrono::duration<double>(now - c.last_token).count());
  }
  c.last_token = now;
  if (!req->first_token_seen) {
    req->first_token_seen = true;
    std::lock_guard lk(req->stream->mu_);
    req->stream->prompt_logprobs_ = seq.prompt_logprobs;
  }

  StreamEvent ev;
  ev.index = it->second.second;
  // Token by token: a verify adds several, and a stop string may end among them.
  const size_t first_lp = seq.output_logprobs.size() - out.new_token_ids.size();
  const bool want_lp = req->opts.sampling.logprobs >= 0 || req->buffer_all;
  for (size_t k = 0; k < out.new_token_ids.size() && !c.stop->stopped(); ++k) {
    const TokenLogprob& lp = seq.output_logprobs[first_lp + k];
    ev.token_ids.push_back(out.new_token_ids[k]);
    c.cumulative_logprob += lp.logprob;
    if (want_lp) ev.logprobs.push_back(lp);
    std::string delta = c.detok->add(out.new_token_ids[k]);
    if (out.finished && k + 1 == out.new_token_ids.size()) delta += c.detok->finish();
    ev.text += c.stop->feed(delta);
  }
  if (out.new_token_ids.empty() && out.finished) ev.text += c.stop->feed(c.detok->finish());
  if (c.stop->stopped()) {
    ev.finished = true;
    ev.finish_reason = FinishReason::kStop;
    ev.stop_reason = c.stop->stop_string();
    if (!out.finished) engine_->abort_request(c.seq_id, FinishReason::kStop);
  } else if (out.finished) {
    ev.text += c.stop->finish();
    ev.finished = true;
    ev.finish_reason = out.finish_reason;
    ev.embedding = seq.embedding;
    const auto& ids = seq.params.stop_token_ids;
    if (seq.stop_token >= 0 && std::find(ids.begin(), ids.end(), seq.stop_token) != ids.end())
      ev.stop_reason = std::to_string(seq.stop_token);
  }
  if (ev.finished) {
    {
      std::lock_guard lk(metrics_mu_);
      metrics_.request_generation_tokens.observe(double(seq.output_ids.size()));
    }
    finish_choice(*req, c, std::move(ev));
  } else if (req->buffer_all) {
    auto& b = c.buffered;
    b.token_ids.insert(b.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    b.text += ev.text;
    b.logprobs.insert(b.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
  } else {
    req->stream->push(std::move(ev));
  }
}

// A beam search ends in one output: its n best hypotheses become the choices.
void AsyncEngine::process_beams(Request& req, const RequestOutput& out) {
  if (!out.finished) return;
  {
    std::lock_guard lk(metrics_mu_);
    metrics_.time_to_first_token_seconds.observe(
        std::chrono::duration<double>(Clock::now() - req.arrival).count());
  }
  {
    std::lock_guard lk(req.stream->mu_);
    req.stream->prompt_logprobs_.clear();
  }
  for (size_t k = 0; k < req.choices.size(); ++k) {
    Choice& c = req.choices[k];
    StreamEvent ev;
    ev.index = static_cast<int>(k);
    ev.finished = true;
    if (k < out.beams.size()) {
      const BeamHypothesis& h = out.beams[k];
      ev.token_ids = h.tokens;
      for (int32_t t : h.tokens) ev.text += c.detok->add(t);
      ev.text += c.detok->finish();
      ev.finish_reason = h.finish_reason;
      const auto& ids = req.opts.sampling.stop_token_ids;
      if (h.stop_token >= 0 && std::find(ids.begin(), ids.end(), h.stop_token) != ids.end())
        ev.stop_reason = std::to_string(h.stop_token);
      ev.cumulative_logprob = h.cumulative_logprob;
      ev.beam_score = h.score;
    } else {
      ev.finish_reason = FinishReason::kLength;  // fewer hypotheses than n (a tiny vocabulary)
    }
    finish_choice(req, c, std::move(ev));
  }
}

void AsyncEngine::fail_all(const std::string& message) {
  auto reqs = requests_;
  for (auto& [id, req] : reqs) {
    for (auto& c : req->choices) {
      if (c.done) continue;
      try {
        engine_->abort_request(c.seq_id);
      } catch (const std::exception&) {
      }
      StreamEvent ev;
      ev.finished = true;
      ev.finish_reason = FinishReason::kAbort;
      ev.error = message;
      finish_choice(*req, c, std::move(ev));
    }
  }
  // /metrics must not keep showing the failed requests as running or waiting.
  try {
    refresh_gauges();
  } catch (const std::exception&) {  // the engine's stats may be unreadable after its failure
  }
  if (requests_.empty()) {
    std::lock_guard lk(metrics_mu_);
    metrics_.num_running = 0;
    metrics_.num_waiting = 0;
  }
}

void AsyncEngine::log_stats_if_due() {
  auto now = Clock::now();
  double secs = std::chrono::duration<double>(now - last_log_).count();
  if (secs < 5.0) return;
  auto st = engine_->stats();
  uint64_t dp = st.prompt_tokens - logged_prompt_, dg = st.generation_tokens - logged_generation_;
  uint64_t dsteps = st.steps - logged_steps_, dseqs = st.batched_seqs - logged_seqs_;
  double dsec = st.step_seconds - logged_step_seconds_;
  last_log_ = now;
  logged_prompt_ = st.prompt_tokens;
  logged_generation_ = st.generation_tokens;
  logged_steps_ = st.steps;
  logged_seqs_ = st.batched_seqs;
  logged_step_seconds_ = st.step_seconds;
  if (dp == 0 && dg == 0 && st.num_running == 0 && st.num_waiting == 0) return;
  double hit = st.prefix_cache_queries ? 100.0 * st.prefix_cache_hits / st.prefix_cache_queries : 0.0;
  if (st.spec_num_draft_tokens > 0)
    spdlog::info("speculative decoding: acceptance rate {:.1f}%, mean accepted length {:.2f} (over {} verifies)",
                 100.0 * double(st.spec_num_accepted_tokens) / double(st.spec_num_draft_tokens),
                 1.0 + double(st.spec_num_accepted_tokens) / double(st.spec_num_drafts), st.spec_num_drafts);
  spdlog::info("prompt throughput: {:.1f} tok/s, generation throughput: {:.1f} tok/s, running: {}, waiting: {}, "
               "KV cache usage: {:.1f}%, preemptions: {}, prefix cache hit rate: {:.1f}%, steps: {} "
               "(avg {:.2f} ms, avg batch {:.1f} seqs)",
               dp / secs, dg / secs, st.num_running, st.num_waiting, 100.0 * st.kv_cache_usage, st.num_preemptions,
               hit, dsteps, dsteps ? 1000.0 * dsec / dsteps : 0.0, dsteps ? double(dseqs) / dsteps : 0.0);
}

void AsyncEngine::loop() {
  while (true) {
    std::deque<Command> cmds;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !commands_.empty() || engine_->has_unfinished(); });
      if (stop_) break;
      cmds.swap(commands_);
    }
    for (auto& cmd : cmds) {
      if (cmd.add) handle_add(cmd.add);
      else handle_abort(cmd.abort_id);
    }
    if (!cmds.empty()) refresh_gauges();  // an abort frees blocks before any step
    publish_kv_events();
    if (!engine_->has_unfinished()) continue;
    std::vector<RequestOutput> outs;
    try {
      outs = engine_->step();
    } catch (const std::exception& e) {
      spdlog::error("engine step failed: {}", e.what());
      {
        std::lock_guard lk(metrics_mu_);
        healthy_ = false;
      }
      fail_all(std::string("engine step failed: ") + e.what());
      continue;
    }
    // Counters and gauges before process(): a consumer woken by a step's
    // final event must read metrics that already include that step.
    refresh_gauges();
    auto st = engine_->stats();
    {
      std::lock_guard lk(metrics_mu_);
      metrics_.prompt_tokens = st.prompt_tokens;
      metrics_.generation_tokens = st.generation_tokens;
      metrics_.num_preemptions = st.num_preemptions;
      metrics_.prefix_cache_queries = st.prefix_cache_queries;
      metrics_.prefix_cache_hits = st.prefix_cache_hits;
      metrics_.spec_num_drafts = st.spec_num_drafts;
      metrics_.spec_num_draft_tokens = st.spec_num_draft_tokens;
      metrics_.spec_num_accepted_tokens = st.spec_num_accepted_tokens;
      metrics_.spec_accepted_per_pos = st.spec_accepted_per_pos;
      if (st.last_step_tokens > 0) metrics_.iteration_tokens_total.observe(st.last_step_tokens);
    }
    publish_kv_events();
    for (const auto& out : outs) process(out);
    refresh_gauges();  // after process(): stop strings may have ended requests
    log_stats_if_due();
  }
  fail_all("the engine is shutting down");
}

void AsyncEngine::set_kv_event_sink(KvEventSink sink) {
  std::lock_guard lk(mu_);
  kv_event_sink_ = std::move(sink);
}

void AsyncEngine::publish_kv_events() {
  auto events = engine_->take_kv_events();
  if (events.empty()) return;
  KvEventSink sink;
  {
    std::lock_guard lk(mu_);
    sink = kv_event_sink_;
  }
  if (sink) sink(std::move(events));
}

void AsyncEngine::refresh_gauges() {
  auto st = engine_->stats();
  std::lock_guard lk(metrics_mu_);
  metrics_.num_running = st.num_running;
  metrics_.num_waiting = st.num_waiting;
  metrics_.kv_cache_usage = st.kv_cache_usage;
}

EngineMetrics AsyncEngine::metrics() const {
  std::lock_guard lk(metrics_mu_);
  return metrics_;
}

bool AsyncEngine::healthy() const {
  std::lock_guard lk(metrics_mu_);
  return healthy_;
}

std::vector<RequestResult> AsyncEngine::generate(
    const std::vector<std::pair<std::vector<int32_t>, RequestOptions>>& batch,
    const std::function<void(size_t)>& on_done) {
  static std::atomic<uint64_t> batch_counter{0};
  uint64_t tag = batch_counter++;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<RequestResult> results(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    results[i].prompt_ids = batch[i].first;
    results[i].choices.resize(batch[i].second.n);
    try {
      streams.push_back(add_request(fmt::format("generate-{}-{}", tag, i), batch[i].first, batch[i].second));
    } catch (const std::exception& e) {
      results[i].error = e.what();
      streams.push_back(nullptr);
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!streams[i]) continue;
    StreamEvent ev;
    while (streams[i]->next(ev) == RequestStream::Poll::kEvent) {
      auto& c = results[i].choices.at(ev.index);
      c.token_ids.insert(c.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
      c.text += ev.text;
      c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
      if (ev.finished) {
        c.finish_reason = ev.finish_reason;
        c.stop_reason = ev.stop_reason;
        c.cumulative_logprob = ev.cumulative_logprob;
        c.beam_score = ev.beam_score;
      }
      if (!ev.error.empty()) results[i].error = ev.error;
    }
    results[i].prompt_logprobs = streams[i]->prompt_logprobs();
    if (on_done) on_done(i);
  }
  return results;
}

}  // namespace halo::engine
