#include "engine/scheduler.h"

#include <algorithm>

namespace halo::engine {

Scheduler::Scheduler(const SchedulerConfig& config, KvBlockManager& blocks)
    : config_(config), blocks_(blocks) {}

void Scheduler::insert_waiting(std::shared_ptr<Sequence> seq) {
  auto before = [&](const std::shared_ptr<Sequence>& other) {
    return seq->priority < other->priority ||
           (seq->priority == other->priority && seq->arrival < other->arrival);
  };
  waiting_.insert(std::find_if(waiting_.begin(), waiting_.end(), before), std::move(seq));
}

void Scheduler::add(std::shared_ptr<Sequence> seq) {
  seq->status = SequenceStatus::kWaiting;
  insert_waiting(std::move(seq));
}

void Scheduler::preempt(std::shared_ptr<Sequence> seq) {
  blocks_.free(*seq);
  seq->num_computed_tokens = 0;  // recompute: prompt and output are prefilled again
  seq->num_preemptions++;
  seq->status = SequenceStatus::kWaiting;
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  waiting_.push_front(std::move(seq));  // first in line once blocks free up
}

bool Scheduler::kind_allowed(const StepKinds& kinds, bool prefill) const {
  if (config_.mixed_batch) return true;
  return prefill ? !kinds.prefill && !kinds.decode : !kinds.prefill;
}

void Scheduler::admit_waiting(SchedulerOutput& out, int& budget, StepKinds& kinds) {
  // New work joins only when nobody had to give up blocks this step.
  while (out.num_preempted == 0 && !waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    auto seq = waiting_.front();
    int remaining = seq->num_tokens() - seq->num_computed_tokens;
    int n = std::min(remaining, budget);
    if (n < remaining && !config_.chunked_prefill) break;
    if (!kind_allowed(kinds, remaining > 1)) break;
    int hit = seq->block_table.empty() ? blocks_.attach_cached_prefix(*seq) : 0;
    if (hit > 0) {
      remaining = seq->num_tokens() - seq->num_computed_tokens;
      n = std::min(remaining, budget);
    }
    if (!blocks_.allocate_slots(*seq, seq->num_computed_tokens + n)) {
      blocks_.free(*seq);  // hand back any cached prefix; it stays cached
      seq->num_computed_tokens = 0;
      break;
    }
    if (blocks_.prefix_caching()) blocks_.record_prefix_query(seq->num_tokens(), hit);
    waiting_.pop_front();
    seq->status = SequenceStatus::kRunning;
    running_.push_back(seq);
    out.scheduled.push_back({seq.get(), n});
    out.num_batched_tokens += n;
    budget -= n;
    (remaining > 1 ? kinds.prefill : kinds.decode) = true;
  }
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;
  StepKinds kinds;
  // A device that cannot mix prefill and decode (static-shape NPUs) runs a
  // waiting prompt first whenever a slot is free, as vllm-rbln does;
  // otherwise a new request would wait for every running one to finish.
  if (!config_.mixed_batch) {
    admit_waiting(out, budget, kinds);
    if (!out.empty()) return out;
  }

  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    auto seq = running_[i];
    int remaining = seq->num_tokens() - seq->num_computed_tokens;
    int n = std::min(remaining, budget);
    if (n < remaining && !config_.chunked_prefill) continue;
    bool prefill = remaining > 1;
    if (!kind_allowed(kinds, prefill)) continue;
    bool self_preempted = false;
    while (!blocks_.allocate_slots(*seq, seq->num_computed_tokens + n)) {
      auto victim = running_.back();
      preempt(victim);
      out.num_preempted++;
      if (victim == seq) { self_preempted = true; break; }
    }
    if (self_preempted) break;
    out.scheduled.push_back({seq.get(), n});
    out.num_batched_tokens += n;
    budget -= n;
    (prefill ? kinds.prefill : kinds.decode) = true;
  }
  admit_waiting(out, budget, kinds);
  return out;
}

void Scheduler::remove_finished() {
  auto done = [](const std::shared_ptr<Sequence>& s) { return s->finished(); };
  for (auto& s : running_)
    if (done(s)) blocks_.free(*s);
  running_.erase(std::remove_if(running_.begin(), running_.end(), done), running_.end());
}

bool Scheduler::abort(const std::string& request_id, FinishReason reason) {
  auto match = [&](const std::shared_ptr<Sequence>& s) { return s->request_id == request_id; };
  auto finish = [reason](Sequence& s) {
    s.status = SequenceStatus::kFinished;
    s.finish_reason = reason;
  };
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), match); it != waiting_.end()) {
    finish(**it);
    blocks_.free(**it);
    waiting_.erase(it);
    return true;
  }
  if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
    finish(**it);
    blocks_.free(**it);
    running_.erase(it);
    return true;
  }
  return false;
}

}  // namespace halo::engine
