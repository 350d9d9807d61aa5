#pragma once
// The device-neutral engine: owns the device objects, the KV block pool, the
// scheduler and the sampler, and advances every live request by one step per
// step() call. Token level only: text is the caller's business.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "device/plugin.h"
#include "engine/beam_search.h"
#include "engine/engine_config.h"
#include "engine/kv_block_manager.h"
#include "engine/lora_registry.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/spec_decode/draft_proposer.h"
#include "engine/spec_decode/proposer.h"
#include "engine/spec_decode/rejection_sampler.h"
#include "engine/spec_decode/speculative_config.h"
#include "model/model_loader.h"

namespace halo::engine {

struct RequestOutput {
  std::string request_id;
  // Tokens this step added, in order: one, or several after a verify of
  // proposed tokens (speculative decoding); none when only finishing.
  std::vector<int32_t> new_token_ids;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::shared_ptr<const Sequence> seq;  // full state, read-only
  // A beam search's result, when it finishes: the hypotheses, best first
  // (new_token_ids is then empty).
  std::vector<BeamHypothesis> beams;
};

struct EngineStats {
  size_t num_waiting = 0;
  size_t num_running = 0;
  float kv_cache_usage = 0.0f;
  uint64_t num_preemptions = 0;
  uint64_t prefix_cache_queries = 0;  // tokens looked up
  uint64_t prefix_cache_hits = 0;     // tokens found
  uint64_t prompt_tokens = 0;         // computed prompt tokens, including recomputation
  uint64_t generation_tokens = 0;
  uint64_t steps = 0;
  int last_step_tokens = 0;     // tokens computed in the last step
  uint64_t batched_tokens = 0;  // tokens computed over all steps
  uint64_t batched_seqs = 0;    // sequences scheduled over all steps
  double step_seconds = 0;      // time spent in device steps
  // Speculative decoding, as vLLM counts it: sequences verified with
  // proposals, proposals verified, proposals accepted, and accepted per
  // position (index j: proposals j accepted; size num_speculative_tokens).
  uint64_t spec_num_drafts = 0;
  uint64_t spec_num_draft_tokens = 0;
  uint64_t spec_num_accepted_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_pos;
};

class LLMEngine {
 public:
  LLMEngine(const EngineConfig& config, std::shared_ptr<const model::LoadedModel> model);
  ~LLMEngine();
  LLMEngine(const LLMEngine&) = delete;
  LLMEngine& operator=(const LLMEngine&) = delete;

  // Queues a request. Throws halo::Error for an empty prompt, an id outside the
  // vocabulary, a prompt that does not fit max_model_len or bad parameters.
  void add_request(const std::string& request_id, std::vector<int32_t> prompt_ids,
                   SamplingParams params, int priority = 0);
  // Queues one sequence per id, all on the same prompt (a request's n /
  // best_of choices), checked as add_request does: all are queued or none.
  // The prompt is prefilled once, by the first (the leader); the others are
  // forked from its KV blocks once it is computed and each recomputes only the
  // last prompt token, so each samples as an independent request would.
  void add_request_group(const std::vector<std::string>& request_ids,
                         const std::vector<int32_t>& prompt_ids, std::vector<SamplingParams> params,
                         int priority = 0);
  // Queues a beam search (beam.width >= 1 beams, at most max_num_seqs) on
  // `params`' max_tokens, stop ids and ignore_eos; its sampling fields are
  // not used. Checked as add_request. One RequestOutput reports it, when it
  // ends, with the hypotheses in `beams`.
  void add_beam_request(const std::string& request_id, std::vector<int32_t> prompt_ids,
                        SamplingParams params, const BeamParams& beam, int priority = 0);
  // Ends a request wherever it is and frees its blocks at once (also used to
  // end a request on a stop string, with reason kStop). False if unknown.
  bool abort_request(const std::string& request_id, FinishReason reason = FinishReason::kAbort);
  bool has_unfinished() const { return scheduler_->has_unfinished(); }

  // Checks a request as add_request would, without queuing it. Safe to call
  // from any thread (reads only what construction fixed).
  void validate_request(const std::vector<int32_t>& prompt_ids, const SamplingParams& params) const;
  // Throws when beam search is impossible on this engine (speculative decoding is on).
  void check_beam_allowed() const;

  // One scheduling iteration and one device step. Returns an output for every
  // sequence that produced a token or finished.
  std::vector<RequestOutput> step();

  const halo_limits& limits() const { return limits_; }
  int num_kv_blocks() const { return blocks_->num_blocks(); }
  int max_model_len() const { return limits_.max_model_len; }
  const model::LoadedModel& model() const { return *model_; }
  const device::DeviceInfo& device_info() const { return device_->info(); }
  // LoRA adapters by name (thread-safe); null unless config.enable_lora.
  const std::shared_ptr<LoraRegistry>& loras() const { return loras_; }
  EngineStats stats() const;
  // The prefix cache's events since the last call (config.enable_kv_cache_events).
  std::vector<KvCacheEvent> take_kv_events();

  // Speculative decoding: the configuration in use, if any.
  const std::optional<spec::SpeculativeConfig>& speculative_config() const { return spec_; }
  // Replaces the proposer (benchmarks and tests: a ReplayProposer), turning
  // speculation on with `num_speculative_tokens` if it was off.
  void set_proposer(std::unique_ptr<spec::Proposer> proposer, int num_speculative_tokens);
  // Tests only: verify with a deliberately wrong rule.
  void set_accept_rule_for_test(spec::AcceptRule rule) { accept_rule_ = rule; }

 private:
  void read_step(const SchedulerOutput& sched, size_t i, StepResult& result);
  void read_prompt_logprobs(const Sequence& seq, size_t i, StepResult& result);
  void read_pooling(const Sequence& seq, size_t i, StepResult& result);
  // Throws `who` + "which plugin X does not return" without HALO_CAP_HIDDEN_STATES.
  void check_hidden_states(const char* who) const;
  void check_lora_device() const;                  // throws, naming why, without HALO_CAP_LORA
  void check_lora(const LoraRequest& lora) const;  // enabled, rank within --max-lora-rank
  void verify(const ScheduledSequence& s, int first_row, StepResult& result);
  void propose();
  void check_verify_limit(int num_speculative_tokens) const;
  void install_proposer(std::unique_ptr<spec::Proposer> proposer);
  void start_speculation(spec::SpeculativeConfig sc, std::unique_ptr<spec::DraftModelProposer> draft);
  std::unique_ptr<spec::DraftModelProposer> load_draft(const spec::SpeculativeConfig& sc,
                                                       const device::Options& options);
  bool guide_allows(const SamplingParams& p, GuideCursor c, size_t index, int32_t token) const;
  RequestOutput beam_output(BeamGroup& g);
  void mask_row(const SamplingParams& p, size_t output_len, GuideCursor c, std::span<float> logits) const;
  void apply_guide(const SamplingParams& p, GuideCursor c, size_t output_len, std::span<float> logits) const;
  void check_new_ids(const std::vector<std::string>& request_ids) const;
  std::shared_ptr<Sequence> make_sequence(const std::string& request_id,
                                          const std::vector<int32_t>& prompt_ids,
                                          SamplingParams params, int priority);

  EngineConfig config_;
  std::shared_ptr<const model::LoadedModel> model_;
  std::shared_ptr<device::Plugin> plugin_;
  std::shared_ptr<device::Device> device_;
  std::shared_ptr<device::Executable> executable_;
  std::unique_ptr<device::KvCache> kv_cache_;
  halo_limits limits_{};
  std::unique_ptr<KvBlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  std::shared_ptr<LoraRegistry> loras_;  // set with config.enable_lora
  Sampler sampler_;
  std::optional<spec::SpeculativeConfig> spec_;
  std::unique_ptr<spec::Proposer> proposer_;
  spec::AcceptRule accept_rule_ = spec::AcceptRule::kLossless;
  static constexpr int kDefaultSpecDisableBatch = 4;  // docs/speculative.md: verify cost by batch
  int spec_disable_batch_ = 0;       // no proposals with this many sequences running
  std::vector<spec::ProposeRequest> propose_batch_;  // scratch
  std::vector<int32_t> history_, accepted_;    // scratch: verify
  std::vector<float> work_;                    // scratch: a verify row being processed
  std::vector<int32_t> eos_ids_;
  std::unordered_map<std::string, std::shared_ptr<Sequence>> live_;
  uint64_t next_arrival_ = 0;
  EngineStats stats_;
};

}  // namespace halo::engine
