#pragma once
// Iteration-level scheduler (continuous batching). Each step it decides which
// sequences run and how many of their tokens, within --max-num-seqs and
// --max-num-batched-tokens: running sequences first (decodes and unfinished
// prefill chunks), then waiting ones in priority/FCFS order. A long prompt is
// split into chunks when the device allows it. When blocks run out the newest
// running sequence is preempted (its blocks freed, recomputed later), so every
// request eventually finishes and nothing deadlocks.
//
// Groups (n / best_of): the followers of a group wait outside both queues,
// holding no blocks, until their leader has computed the shared prompt; then
// each is forked from the leader (copy-on-write, see KvBlockManager::fork)
// straight into the running queue, or, when that is impossible, joins the
// waiting queue as an ordinary request. Only waiting sequences hold no blocks.
//
// Beam search (a sequence with `beam` set): every live beam of a group
// computes its next-token candidates; when all have them the group takes one
// BeamSearch step: a beam chosen once continues in place, one chosen again is
// forked (its blocks shared copy-on-write; it recomputes its last token), one
// not chosen ends. A beam waiting for its siblings has nothing to compute and
// is not scheduled. The group ends as one request (the engine reports it).
//
// Speculative decoding: a running sequence with one token left to compute and
// proposals in spec_ids is scheduled as a verify, its last token and the
// proposals in one step. Proposals only take the token budget left after
// every running sequence's own token and the waiting prompts, they never
// cost a preemption, and a verify counts as a decode for devices that cannot
// mix prefill and decode. update_from_step() appends the accepted tokens one
// by one (a stop may end the sequence among them), counts only their KV as
// computed and gives back whole blocks past the end at once: rejected slots
// are never registered with the prefix cache and are overwritten later.
//
// Ownership: the scheduler is the one writer of a queued Sequence's state
// (status, num_computed_tokens, output tokens, finish reason; its blocks
// through KvBlockManager), and update_from_step() is where a step's results
// enter it. The engine creates sequences, reads them, lets the sampler
// advance their random generator and sets spec_ids between steps (the
// scheduler drops them on preemption and after each step); nothing else
// writes them.
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "engine/beam_search.h"
#include "engine/kv_block_manager.h"
#include "engine/sequence.h"

namespace halo::engine {

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int max_model_len = 2048;
  std::vector<int32_t> eos_token_ids{};  // end a sequence (unless params.ignore_eos)
  bool chunked_prefill = true;  // a prompt may span several steps
  bool mixed_batch = true;      // prefill and decode in one step
  // LoRA: running sequences use at most this many adapters (the device's
  // slots), so every step fits; a waiting request of another adapter waits
  // while later ones of adapters already running go ahead. 0 = no limit.
  int max_loras = 0;
};

struct ScheduledSequence {
  Sequence* seq;
  int num_tokens;    // new tokens computed this step, starting at seq->num_computed_tokens
  int num_spec = 0;  // of which the last are seq->spec_ids[0, num_spec): a verify step
};

// What one step computed for a scheduled sequence (index-aligned with
// SchedulerOutput::scheduled).
struct StepResult {
  std::vector<TokenLogprob> prompt_logprobs;  // new prompt logprobs, in position order
  // The tokens the step chose, in order: none before the end of the prompt,
  // else one, or after a verify the accepted proposals and one more.
  std::vector<TokenLogprob> tokens;
  bool sampled() const { return !tokens.empty(); }
  // A pooling request: its pooled state after this step and, once the
  // prompt is computed, its embedding (the sequence then finishes).
  std::optional<PoolState> pool;
  std::vector<float> embedding;
};

struct SchedulerOutput {
  std::vector<ScheduledSequence> scheduled;
  int num_batched_tokens = 0;
  int num_preempted = 0;
  bool empty() const { return scheduled.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvBlockManager& blocks);

  void add(std::shared_ptr<Sequence> seq);
  // Queues `leader` as add() does and holds `followers` (same prompt) for it.
  void add_group(std::shared_ptr<Sequence> leader,
                 std::vector<std::shared_ptr<Sequence>> followers);
  SchedulerOutput schedule();
  // Applies a step's results: counts the computed tokens (registering full
  // blocks with the prefix cache), appends prompt logprobs and sampled tokens,
  // ends sequences on a stop id, end-of-sequence, max_tokens or max_model_len,
  // forks held followers and frees the finished. Returns the block copies the
  // caller must issue before the next step.
  KvBlockManager::BlockCopies update_from_step(const SchedulerOutput& step,
                                               std::vector<StepResult>& results);
  // After a step's tokens are counted and before remove_finished(): forks every
  // held follower whose leader has computed the prompt. A follower finding no
  // free block or seat falls back to waiting. Returns the block copies the
  // caller must issue before the next step.
  KvBlockManager::BlockCopies fork_followers();
  // Drops finished sequences from the running queue and frees their blocks.
  void remove_finished();
  // Finishes a sequence wherever it is and frees its blocks. False if unknown.
  // An aborted leader's held followers fall back to waiting.
  bool abort(const std::string& request_id, FinishReason reason = FinishReason::kAbort);

  size_t num_waiting() const { return waiting_.size() + held_.size(); }  // held followers wait too
  size_t num_running() const { return running_.size(); }
  // The running sequences, admission order (the engine proposes for them).
  const std::vector<std::shared_ptr<Sequence>>& running() const { return running_; }
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty() || !held_.empty(); }
  const SchedulerConfig& config() const { return config_; }

 private:
  struct StepKinds {
    bool prefill = false;
    bool decode = false;
  };
  bool kind_allowed(const StepKinds& kinds, bool prefill) const;
  void admit_waiting(SchedulerOutput& out, int& budget, StepKinds& kinds);
  bool lora_fits(const Sequence& seq) const;  // config_.max_loras allows it to run now
  void schedule_proposals(SchedulerOutput& out, int& budget);
  void append_tokens(Sequence& seq, std::vector<TokenLogprob>& tokens);
  void apply_pooling(Sequence& seq, int num_tokens, StepResult& r);
  void preempt(std::shared_ptr<Sequence> seq);
  void insert_waiting(std::shared_ptr<Sequence> seq);
  struct Held {
    std::shared_ptr<Sequence> leader, follower;
  };
  bool try_fork(const Held& held, KvBlockManager::BlockCopies& copies);
  // Beam search (see above).
  void record_beam_offer(Sequence& seq, TokenLogprob offer);
  void advance_beams(BeamGroup& g, KvBlockManager::BlockCopies& copies);
  std::shared_ptr<Sequence> fork_beam(const std::shared_ptr<Sequence>& parent,
                                      KvBlockManager::BlockCopies& copies);
  void end_beam(const std::shared_ptr<Sequence>& seq);
  int busy_seats() const;
  void release_followers(const Sequence& leader);
  void check_stop(Sequence& seq) const;

  SchedulerConfig config_;
  KvBlockManager& blocks_;
  std::deque<std::shared_ptr<Sequence>> waiting_;
  std::vector<std::shared_ptr<Sequence>> running_;  // admission order: back = newest
  std::vector<Held> held_;  // followers whose leader has not computed the prompt yet
  // Beams ended by the last update, kept alive until the next schedule(): the
  // engine still reads the step's SchedulerOutput, whose pointers name them.
  std::vector<std::shared_ptr<Sequence>> retired_;
};

}  // namespace halo::engine
