#pragma once
// The engine as frontends use it: requests from any thread, one engine loop
// thread that owns the LLMEngine, and a stream of events per request (new
// token ids, text deltas after detokenization and stop strings, logprobs,
// finish reasons). n and best_of fan a request out into several sequences,
// queued as one group that prefills the prompt once (LLMEngine::add_request_group).
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/llm_engine.h"
#include "engine/metrics.h"
#include "text/guided/guide_cache.h"
#include "text/tokenizer/tokenizer.h"

namespace halo::engine {

// What a request asks for beyond sampling: text handling and fan-out.
struct RequestOptions {
  SamplingParams sampling;
  std::vector<std::string> stop;            // stop strings
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = false;
  int n = 1;        // choices returned
  int best_of = 0;  // sequences generated (0: n); the n with the best cumulative logprob win
  int priority = 0;  // lower runs first
  // Guided decoding, at most one non-empty: the output must match this regular
  // expression (text/guided/regex_dfa.h; JSON schemas and choices arrive
  // compiled to one) or this GBNF grammar (text/guided/grammar.h);
  // `guided_what` names the constraint in messages ("guided_json", ...).
  std::string guided_regex;
  std::string guided_grammar;
  std::string guided_what;
  bool guided() const { return !guided_regex.empty() || !guided_grammar.empty(); }
  // width > 0: beam search of that width instead of sampling (n <= width
  // results, best first; see beam_search.h). No stop strings or logprobs.
  BeamParams beam;
};

// One event of one choice of a request.
struct StreamEvent {
  int index = 0;                      // which choice (0..n-1)
  std::vector<int32_t> token_ids;     // new token ids
  std::string text;                   // new text
  std::vector<TokenLogprob> logprobs; // one per new token when sampling.logprobs >= 0
  bool finished = false;              // this choice is complete
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;            // the stop string, or the stop token id, that ended it
  std::string error;                  // set: the request failed (finish_reason is kAbort)
  std::vector<float> embedding;       // a pooling request's result, with its finished event
  // Beam search results only: the hypothesis' cumulative logprob and score.
  std::optional<double> cumulative_logprob, beam_score;
};

// Consumer side of one request. Events arrive in order; several choices
// interleave. Thread-safe.
class RequestStream {
 public:
  enum class Poll { kEvent, kTimeout, kEnd };

  RequestStream(std::string request_id, std::vector<int32_t> prompt_ids, int n);
  const std::string& request_id() const { return request_id_; }
  const std::vector<int32_t>& prompt_ids() const { return prompt_ids_; }

  // Waits for the next event (up to `timeout`). kEnd once every choice has
  // finished and all events were taken.
  Poll next(StreamEvent& event, std::chrono::milliseconds timeout = std::chrono::hours(24));

  // Called after each event is queued (on the engine's thread, outside the
  // stream's lock), and at once if events are already waiting, so a consumer
  // that cannot block in next() (an event loop) learns when to poll. It must
  // be quick and must not call into this stream. Set it once, before relying on it.
  void set_listener(std::function<void()> listener);

  // Filled before the first event of a request that asked for them.
  std::vector<TokenLogprob> prompt_logprobs() const;
  int num_cached_prompt_tokens() const;

 private:
  friend class AsyncEngine;
  void push(StreamEvent event);
  std::string request_id_;
  std::vector<int32_t> prompt_ids_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  std::function<void()> listener_;
  int open_choices_;
  std::vector<TokenLogprob> prompt_logprobs_;
  int cached_prompt_tokens_ = 0;
};

// Final result of one choice, for the offline API.
struct ChoiceResult {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;
  std::optional<double> cumulative_logprob, beam_score;  // beam search only
};
struct RequestResult {
  std::vector<int32_t> prompt_ids;
  std::vector<ChoiceResult> choices;
  std::vector<TokenLogprob> prompt_logprobs;
  std::string error;
};

class AsyncEngine {
 public:
  AsyncEngine(const EngineConfig& config, std::shared_ptr<const model::LoadedModel> model,
              text::Tokenizer tokenizer);
  ~AsyncEngine();  // stops the loop; open requests end with an error event
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Validates on the caller's thread (throws halo::Error naming the problem,
  // before any stream exists), then queues the request for the loop.
  std::shared_ptr<RequestStream> add_request(const std::string& request_id, std::vector<int32_t> prompt_ids,
                                             const RequestOptions& options);
  // Ends the request at once, freeing its blocks; its stream gets a finished
  // event with reason kAbort for every open choice. Unknown ids are ignored.
  void abort(const std::string& request_id);

  // Offline: runs every request together and waits for all of them;
  // `on_done(i)`, if given, is called on the caller's thread as result i completes.
  std::vector<RequestResult> generate(const std::vector<std::pair<std::vector<int32_t>, RequestOptions>>& batch,
                                      const std::function<void(size_t)>& on_done = {});

  const text::Tokenizer& tokenizer() const { return tokenizer_; }
  const LLMEngine& engine() const { return *engine_; }  // immutable facts only (limits, model)
  EngineMetrics metrics() const;  // a consistent copy
  bool healthy() const;           // false once the device failed

  // Receives the prefix cache's events (config.enable_kv_cache_events) on
  // the engine's thread, after the step that caused them and before that
  // step's outputs reach their streams. Must not block for long.
  using KvEventSink = std::function<void(std::vector<KvCacheEvent>)>;
  void set_kv_event_sink(KvEventSink sink);

 private:
  struct Choice;
  struct Request;
  struct Command {
    std::shared_ptr<Request> add;
    std::string abort_id;
  };
  void loop();
  void handle_add(const std::shared_ptr<Request>& req);
  // Ends every choice of a request that never reached the engine with `message`.
  void fail_request(const Request& req, const std::string& message);
  void handle_abort(const std::string& request_id);
  void process(const RequestOutput& out);
  void process_beams(Request& req, const RequestOutput& out);
  void check_beam_options(const RequestOptions& options) const;
  static void check_min_tokens_fit(const SamplingParams& sampling, const std::string& what);
  void finish_choice(Request& req, Choice& choice, StreamEvent ev);
  void fail_all(const std::string& message);
  void log_stats_if_due();
  void refresh_gauges();
  void publish_kv_events();

  std::unique_ptr<LLMEngine> engine_;
  text::Tokenizer tokenizer_;
  text::guided::GuideCache guides_{tokenizer_};  // guided decoding's compiled constraints
  std::mutex mu_;  // guards commands_ and stop_
  std::condition_variable cv_;
  std::deque<Command> commands_;
  bool stop_ = false;
  KvEventSink kv_event_sink_;  // guarded by mu_
  // Loop-thread state.
  std::unordered_map<std::string, std::shared_ptr<Request>> requests_;       // by request id
  std::unordered_map<std::string, std::pair<std::shared_ptr<Request>, int>> by_seq_;  // seq id -> (request, choice)
  // Tags the engine's sequence ids; per engine, as each model has its own loop thread.
  uint64_t next_seq_tag_ = 0;
  std::chrono::steady_clock::time_point last_log_;
  uint64_t logged_prompt_ = 0, logged_generation_ = 0, logged_steps_ = 0, logged_seqs_ = 0;
  double logged_step_seconds_ = 0;
  mutable std::mutex metrics_mu_;
  EngineMetrics metrics_;
  bool healthy_ = true;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace halo::engine
