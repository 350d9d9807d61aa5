#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "text/guided/token_mask.h"

namespace halo::engine {

namespace {

// The time a sequence first ran (its queueing time ends there).
void stamp_first_scheduled(SchedulerOutput& out) {
  const auto now = std::chrono::steady_clock::now();
  for (auto& s : out.scheduled)
    if (s.seq->first_scheduled == std::chrono::steady_clock::time_point{}) s.seq->first_scheduled = now;
}

}  // namespace

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

void Scheduler::add_group(std::shared_ptr<Sequence> leader,
                          std::vector<std::shared_ptr<Sequence>> followers) {
  for (auto& f : followers) {
    f->status = SequenceStatus::kWaiting;
    held_.push_back({leader, std::move(f)});
  }
  add(std::move(leader));
}

int Scheduler::busy_seats() const {
  return static_cast<int>(std::count_if(running_.begin(), running_.end(),
                                        [](const auto& s) { return !s->finished(); }));
}

bool Scheduler::try_fork(const Held& held, KvBlockManager::BlockCopies& copies) {
  if (busy_seats() >= config_.max_num_seqs) return false;
  int prompt_len = static_cast<int>(held.follower->prompt_ids.size());
  if (!blocks_.fork(*held.leader, *held.follower, prompt_len, copies)) return false;
  held.follower->status = SequenceStatus::kRunning;
  running_.push_back(held.follower);  // newest: the first to give way under pressure
  return true;
}

KvBlockManager::BlockCopies Scheduler::fork_followers() {
  KvBlockManager::BlockCopies copies;
  std::vector<Held> still;
  for (auto& h : held_) {
    const Sequence& leader = *h.leader;
    bool computed = leader.num_computed_tokens >= static_cast<int>(leader.prompt_ids.size()) &&
                    !leader.block_table.empty();
    if (!computed && !leader.finished()) {
      still.push_back(std::move(h));  // the leader is still on its prompt (or preempted)
    } else if (!computed || !try_fork(h, copies)) {
      insert_waiting(std::move(h.follower));  // falls back to an ordinary request
    }
  }
  held_ = std::move(still);
  return copies;
}

void Scheduler::release_followers(const Sequence& leader) {
  auto mine = [&](const Held& h) { return h.leader.get() == &leader; };
  for (auto& h : held_)
    if (mine(h)) insert_waiting(h.follower);
  held_.erase(std::remove_if(held_.begin(), held_.end(), mine), held_.end());
}

void Scheduler::preempt(std::shared_ptr<Sequence> seq) {
  blocks_.free(*seq);
  seq->spec_ids.clear();
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

bool Scheduler::lora_fits(const Sequence& seq) const {
  if (seq.lora_id == 0 || config_.max_loras <= 0) return true;
  std::vector<int64_t> used;
  for (const auto& r : running_) {
    if (r->lora_id == seq.lora_id) return true;
    if (r->lora_id != 0 && std::find(used.begin(), used.end(), r->lora_id) == used.end())
      used.push_back(r->lora_id);
  }
  return static_cast<int>(used.size()) < config_.max_loras;
}

void Scheduler::admit_waiting(SchedulerOutput& out, int& budget, StepKinds& kinds) {
  // New work joins only when nobody had to give up blocks this step.
  size_t next = 0;  // waiting_[0, next) wait for an adapter slot
  while (out.num_preempted == 0 && next < waiting_.size() && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    auto seq = waiting_[next];
    if (!lora_fits(*seq)) {
      ++next;
      continue;
    }
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
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(next));
    seq->status = SequenceStatus::kRunning;
    running_.push_back(seq);
    out.scheduled.push_back({seq.get(), n});
    out.num_batched_tokens += n;
    budget -= n;
    (remaining > 1 ? kinds.prefill : kinds.decode) = true;
  }
}

SchedulerOutput Scheduler::schedule() {
  retired_.clear();
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;
  StepKinds kinds;
  // A device that cannot mix prefill and decode (static-shape NPUs) runs a
  // waiting prompt first whenever a slot is free, as vllm-rbln does;
  // otherwise a new request would wait for every running one to finish.
  if (!config_.mixed_batch) {
    admit_waiting(out, budget, kinds);
    if (!out.empty()) {
      stamp_first_scheduled(out);
      return out;
    }
  }

  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    auto seq = running_[i];
    int remaining = seq->num_tokens() - seq->num_computed_tokens;
    if (remaining == 0) continue;  // a beam waiting for its siblings' candidates
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
  schedule_proposals(out, budget);
  stamp_first_scheduled(out);
  return out;
}

// Turns decodes with proposals into verifies, with the budget nobody else
// wanted, and only into slots that are free (never preempting anyone).
void Scheduler::schedule_proposals(SchedulerOutput& out, int& budget) {
  for (auto& s : out.scheduled) {
    Sequence& seq = *s.seq;
    if (budget <= 0) break;
    if (seq.spec_ids.empty() || s.num_tokens != 1 || seq.num_computed_tokens + 1 != seq.num_tokens()) continue;
    int m = std::min({static_cast<int>(seq.spec_ids.size()), budget,
                      config_.max_model_len - seq.num_tokens()});
    if (m <= 0) continue;
    if (!blocks_.allocate_slots(seq, seq.num_tokens() + m)) {
      const int held = static_cast<int>(seq.block_table.size()) * blocks_.block_size();
      m = std::min(m, held - seq.num_tokens());  // what the blocks it holds can take
      if (m <= 0) continue;
    }
    s.num_tokens += m;
    s.num_spec = m;
    out.num_batched_tokens += m;
    budget -= m;
  }
}

void Scheduler::check_stop(Sequence& seq) const {
  const SamplingParams& p = seq.params;
  const int32_t token = seq.output_ids.back();
  const auto has = [token](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  // Stop ids and end-of-sequence are masked by the sampler until min_tokens exist.
  if (has(p.stop_token_ids) || (!p.ignore_eos && has(config_.eos_token_ids))) {
    seq.finish_reason = FinishReason::kStop;
    seq.stop_token = token;
  } else if (static_cast<int>(seq.output_ids.size()) >= p.max_tokens ||
             seq.num_tokens() >= config_.max_model_len) {
    seq.finish_reason = FinishReason::kLength;
  }
  if (seq.finish_reason != FinishReason::kNone) seq.status = SequenceStatus::kFinished;
}

// Appends a step's tokens one by one, each checked for a stop: one may end
// the sequence before the rest (a verify's accepted proposals).
void Scheduler::append_tokens(Sequence& seq, std::vector<TokenLogprob>& tokens) {
  for (auto& t : tokens) {
    if (seq.params.guide) seq.guide = advance_guide(seq.params, seq.guide, seq.output_ids.size(), t.token);
    seq.output_ids.push_back(t.token);
    seq.output_logprobs.push_back(std::move(t));
    check_stop(seq);
    if (seq.finished()) break;
  }
}

// A pooling request's step: its KV as any prefill's, and at the end of the
// prompt its embedding, which finishes it (it never decodes).
void Scheduler::apply_pooling(Sequence& seq, int num_tokens, StepResult& r) {
  seq.pool = std::move(*r.pool);
  seq.num_computed_tokens += num_tokens;
  blocks_.cache_full_blocks(seq);
  if (r.embedding.empty()) return;
  seq.embedding = std::move(r.embedding);
  seq.finish_reason = FinishReason::kStop;
  seq.status = SequenceStatus::kFinished;
}

KvBlockManager::BlockCopies Scheduler::update_from_step(const SchedulerOutput& step,
                                                        std::vector<StepResult>& results) {
  std::vector<std::shared_ptr<BeamGroup>> beam_groups;  // those with a beam in this step
  for (size_t i = 0; i < step.scheduled.size(); ++i) {
    const ScheduledSequence& s = step.scheduled[i];
    Sequence& seq = *s.seq;
    StepResult& r = results.at(i);
    for (auto& lp : r.prompt_logprobs) seq.prompt_logprobs.push_back(std::move(lp));
    if (seq.beam && r.sampled()) {
      seq.num_computed_tokens += s.num_tokens;
      blocks_.cache_full_blocks(seq);
      if (std::find(beam_groups.begin(), beam_groups.end(), seq.beam) == beam_groups.end())
        beam_groups.push_back(seq.beam);
      record_beam_offer(seq, std::move(r.tokens.front()));
      continue;
    }
    if (r.pool) {
      apply_pooling(seq, s.num_tokens, r);
      continue;
    }
    append_tokens(seq, r.tokens);
    // A verify computed the last token and every proposal; the rejected ones'
    // KV is past the end and does not count (the final token never has KV yet).
    seq.num_computed_tokens += s.num_tokens;
    if (s.num_spec > 0) seq.num_computed_tokens = std::min(seq.num_computed_tokens, seq.num_tokens() - 1);
    blocks_.cache_full_blocks(seq);  // after the append: it hashes the tokens it registers
    if (s.num_spec > 0 && !seq.finished()) blocks_.trim(seq, seq.num_tokens());
    seq.spec_ids.clear();
  }
  // Followers fork from the blocks of a leader that may finish in this very step.
  KvBlockManager::BlockCopies copies = fork_followers();
  for (auto& g : beam_groups) {
    const bool all = std::all_of(g->offers.begin(), g->offers.end(),
                                 [](const auto& o) { return o.has_value(); });
    if (all) advance_beams(*g, copies);
  }
  remove_finished();
  return copies;
}

// ------------------------------------------------------------ beam search

void Scheduler::record_beam_offer(Sequence& seq, TokenLogprob offer) {
  BeamGroup& g = *seq.beam;
  for (size_t i = 0; i < g.beams.size(); ++i)
    if (g.beams[i].lock().get() == &seq) g.offers[i] = std::move(offer);
}

std::shared_ptr<Sequence> Scheduler::fork_beam(const std::shared_ptr<Sequence>& parent,
                                               KvBlockManager::BlockCopies& copies) {
  auto child = std::make_shared<Sequence>();
  child->request_id = parent->request_id;
  child->arrival = parent->arrival;
  child->priority = parent->priority;
  child->prompt_ids = parent->prompt_ids;
  child->output_ids = parent->output_ids;
  child->output_logprobs = parent->output_logprobs;
  child->params = parent->params;
  child->rng = parent->rng;
  child->first_scheduled = parent->first_scheduled;
  child->beam = parent->beam;
  // Share the parent's computed blocks (the child recomputes the parent's
  // last token into its own copy of the last block, then its new token),
  // else start over from the prompt like a preempted sequence.
  const bool computed =
      !parent->block_table.empty() && parent->num_computed_tokens == parent->num_tokens();
  if (computed && busy_seats() < config_.max_num_seqs &&
      blocks_.fork(*parent, *child, parent->num_tokens(), copies)) {
    child->status = SequenceStatus::kRunning;
    running_.push_back(child);
  } else {
    child->status = SequenceStatus::kWaiting;
    waiting_.push_front(child);
  }
  return child;
}

void Scheduler::end_beam(const std::shared_ptr<Sequence>& seq) {
  retired_.push_back(seq);
  seq->status = SequenceStatus::kFinished;
  seq->finish_reason = FinishReason::kAbort;  // never reported: the group's result is
  auto it = std::find(waiting_.begin(), waiting_.end(), seq);
  if (it != waiting_.end()) {
    waiting_.erase(it);
    blocks_.free(*seq);
  }  // a running one is freed by remove_finished()
}

void Scheduler::advance_beams(BeamGroup& g, KvBlockManager::BlockCopies& copies) {
  std::vector<std::shared_ptr<Sequence>> old;
  std::vector<BeamSearch::Candidates> offers;
  std::vector<double> old_cum;
  for (size_t i = 0; i < g.beams.size(); ++i) {
    old.push_back(g.beams[i].lock());
    offers.push_back(g.offers[i]->top);
    old_cum.push_back(g.search.live()[i].cum);
  }
  const std::vector<int> parents = g.search.step(offers);
  // A beam chosen once continues in place; chosen again it is forked first
  // (before any parent takes its new token).
  std::vector<std::shared_ptr<Sequence>> next(parents.size());
  std::vector<bool> used(old.size(), false);
  for (size_t j = 0; j < parents.size(); ++j) {
    const auto p = static_cast<size_t>(parents[j]);
    next[j] = used[p] ? fork_beam(old[p], copies) : old[p];
    used[p] = true;
  }
  for (size_t j = 0; j < parents.size(); ++j) {
    const auto& b = g.search.live()[j];
    const double lp = b.cum - old_cum[static_cast<size_t>(parents[j])];
    next[j]->output_ids.push_back(b.tokens.back());
    next[j]->output_logprobs.push_back({b.tokens.back(), static_cast<float>(lp), {}});
  }
  for (size_t i = 0; i < old.size(); ++i)
    if (!used[i]) end_beam(old[i]);
  // The context is full: what is live ends by length.
  if (!next.empty() && next.front()->num_tokens() >= config_.max_model_len) {
    g.search.finish_live();
    for (const auto& s : next) end_beam(s);
    next.clear();
  }
  g.beams.assign(next.begin(), next.end());
  g.offers.assign(next.size(), std::nullopt);
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
  auto end_in = [&](auto& queue) {
    auto it = std::find_if(queue.begin(), queue.end(), match);
    if (it == queue.end()) return false;
    auto seq = *it;
    queue.erase(it);
    finish(*seq);
    blocks_.free(*seq);
    release_followers(*seq);
    return true;
  };
  bool found = false;
  while (end_in(waiting_) || end_in(running_)) found = true;  // every beam of a beam search
  if (found) return true;
  auto held =
      std::find_if(held_.begin(), held_.end(), [&](const Held& h) { return match(h.follower); });
  if (held == held_.end()) return false;
  finish(*held->follower);
  held_.erase(held);
  return true;
}

}  // namespace halo::engine
