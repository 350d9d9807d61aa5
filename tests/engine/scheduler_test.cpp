// Scheduler policy, checked without a device: the test plays the model runner
// (advancing num_computed_tokens and appending a token when a sequence catches up).
#include <gtest/gtest.h>

#include <memory>

#include "engine/scheduler.h"

using namespace halo::engine;

namespace {

std::shared_ptr<Sequence> make_seq(const std::string& id, int prompt_len, int max_tokens, uint64_t arrival,
                                   int priority = 0) {
  auto s = std::make_shared<Sequence>();
  s->request_id = id;
  s->prompt_ids.assign(prompt_len, 7);
  s->params.max_tokens = max_tokens;
  s->arrival = arrival;
  s->priority = priority;
  return s;
}

// Applies a step as the engine would; finishes sequences at max_tokens.
void run_step(Scheduler& sched, const SchedulerOutput& out) {
  for (auto& s : out.scheduled) {
    s.seq->num_computed_tokens += s.num_tokens;
    if (s.seq->num_computed_tokens == s.seq->num_tokens()) {
      s.seq->output_ids.push_back(1);
      if (static_cast<int>(s.seq->output_ids.size()) >= s.seq->params.max_tokens) {
        s.seq->status = SequenceStatus::kFinished;
        s.seq->finish_reason = FinishReason::kLength;
      }
    }
  }
  sched.remove_finished();
}

}  // namespace

TEST(Scheduler, NewRequestsJoinRunningBatchAtNextStep) {
  KvBlockManager blocks(64, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 64}, blocks);
  auto a = make_seq("a", 5, 10, 0);
  sched.add(a);
  auto s1 = sched.schedule();
  ASSERT_EQ(s1.scheduled.size(), 1u);
  EXPECT_EQ(s1.scheduled[0].num_tokens, 5);
  run_step(sched, s1);
  auto b = make_seq("b", 3, 10, 1);
  sched.add(b);
  auto s2 = sched.schedule();
  ASSERT_EQ(s2.scheduled.size(), 2u);  // a decodes, b prefills in the same step
  EXPECT_EQ(s2.scheduled[0].seq, a.get());
  EXPECT_EQ(s2.scheduled[0].num_tokens, 1);
  EXPECT_EQ(s2.scheduled[1].seq, b.get());
  EXPECT_EQ(s2.scheduled[1].num_tokens, 3);
}

TEST(Scheduler, LongPromptIsChunkedAcrossSteps) {
  KvBlockManager blocks(64, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 16, .max_model_len = 128}, blocks);
  auto a = make_seq("a", 40, 2, 0);
  sched.add(a);
  std::vector<int> chunks;
  for (int i = 0; i < 3; ++i) {
    auto out = sched.schedule();
    chunks.push_back(out.scheduled.at(0).num_tokens);
    EXPECT_LE(out.num_batched_tokens, 16);
    run_step(sched, out);
  }
  EXPECT_EQ(chunks, (std::vector<int>{16, 16, 8}));
  EXPECT_EQ(a->output_ids.size(), 1u);  // sampled once the whole prompt was in
}

TEST(Scheduler, WithoutChunkingAPromptWaitsForAWholeBudget) {
  KvBlockManager blocks(64, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 16, .max_model_len = 16,
                   .chunked_prefill = false},
                  blocks);
  sched.add(make_seq("a", 10, 4, 0));
  sched.add(make_seq("b", 10, 4, 1));
  auto out = sched.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);  // b would have to be split: it waits
  EXPECT_EQ(out.scheduled[0].num_tokens, 10);
}

TEST(Scheduler, RespectsMaxNumSeqs) {
  KvBlockManager blocks(64, 4);
  Scheduler sched({.max_num_seqs = 2, .max_num_batched_tokens = 64, .max_model_len = 64}, blocks);
  for (int i = 0; i < 5; ++i) sched.add(make_seq(std::to_string(i), 2, 3, i));
  auto out = sched.schedule();
  EXPECT_EQ(out.scheduled.size(), 2u);
  EXPECT_EQ(sched.num_waiting(), 3u);
}

TEST(Scheduler, PriorityThenArrivalOrder) {
  KvBlockManager blocks(64, 4);
  Scheduler sched({.max_num_seqs = 1, .max_num_batched_tokens = 64, .max_model_len = 64}, blocks);
  sched.add(make_seq("late-urgent", 2, 1, 5, -1));
  sched.add(make_seq("first", 2, 1, 0, 0));
  sched.add(make_seq("second", 2, 1, 1, 0));
  std::vector<std::string> order;
  while (sched.has_unfinished()) {
    auto out = sched.schedule();
    for (auto& s : out.scheduled) order.push_back(s.seq->request_id);
    run_step(sched, out);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"late-urgent", "first", "second"}));
}

TEST(Scheduler, PreemptsNewestWhenBlocksRunOutAndEveryRequestFinishes) {
  // 6 blocks of 4 tokens = 24 tokens, three sequences that each grow to 12.
  KvBlockManager blocks(6, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 16}, blocks);
  std::vector<std::shared_ptr<Sequence>> seqs;
  for (int i = 0; i < 3; ++i) {
    seqs.push_back(make_seq(std::to_string(i), 4, 8, i));
    sched.add(seqs.back());
  }
  int steps = 0, preemptions = 0;
  while (sched.has_unfinished()) {
    auto out = sched.schedule();
    preemptions += out.num_preempted;
    ASSERT_FALSE(out.empty()) << "scheduler stalled with work left (deadlock)";
    run_step(sched, out);
    ASSERT_LT(++steps, 200);
  }
  EXPECT_GT(preemptions, 0);
  for (auto& s : seqs) {
    EXPECT_EQ(s->output_ids.size(), 8u) << s->request_id;
  }
  EXPECT_EQ(blocks.num_free_blocks(), 6);
  // The oldest request is never the victim while younger ones run.
  EXPECT_EQ(seqs[0]->num_preemptions, 0);
}

TEST(Scheduler, WithoutMixedBatchesPrefillAndDecodeRunInSeparateSteps) {
  KvBlockManager blocks(64, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 64,
                   .mixed_batch = false},
                  blocks);
  sched.add(make_seq("a", 4, 5, 0));
  run_step(sched, sched.schedule());
  sched.add(make_seq("b", 4, 5, 1));
  sched.add(make_seq("c", 4, 5, 2));
  for (int i = 0; i < 6; ++i) {
    auto out = sched.schedule();
    int prefills = 0, decodes = 0;
    for (auto& s : out.scheduled) (s.num_tokens > 1 ? prefills : decodes)++;
    EXPECT_TRUE(prefills == 0 || (prefills == 1 && decodes == 0)) << "step " << i;
    run_step(sched, out);
  }
}

TEST(Scheduler, AbortFreesBlocks) {
  KvBlockManager blocks(8, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 32}, blocks);
  auto a = make_seq("a", 9, 4, 0);
  sched.add(a);
  run_step(sched, sched.schedule());
  EXPECT_LT(blocks.num_free_blocks(), 8);
  EXPECT_TRUE(sched.abort("a"));
  EXPECT_EQ(a->finish_reason, FinishReason::kAbort);
  EXPECT_EQ(blocks.num_free_blocks(), 8);
  EXPECT_FALSE(sched.has_unfinished());
  EXPECT_FALSE(sched.abort("a"));
}

TEST(Scheduler, WithoutMixedBatchesAWaitingPromptRunsFirstWhileASlotIsFree) {
  KvBlockManager blocks(64, 4);
  Scheduler sched({.max_num_seqs = 4, .max_num_batched_tokens = 64, .max_model_len = 64, .mixed_batch = false},
                  blocks);
  sched.add(make_seq("a", 4, 50, 0));
  run_step(sched, sched.schedule());  // a prefills
  sched.add(make_seq("b", 4, 50, 1));
  auto out = sched.schedule();  // b's prefill goes before a's next decode
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].seq->request_id, "b");
  run_step(sched, out);
  out = sched.schedule();  // then both decode together
  EXPECT_EQ(out.scheduled.size(), 2u);
}

// ------------------------------------------------------------ groups (n / best_of)

namespace {
// A step as LLMEngine::step() runs it for groups: forks after the tokens
// count, before the finished are dropped.
KvBlockManager::BlockCopies run_group_step(Scheduler& sched, const SchedulerOutput& out) {
  for (auto& s : out.scheduled) {
    s.seq->num_computed_tokens += s.num_tokens;
    if (s.seq->num_computed_tokens == s.seq->num_tokens()) {
      s.seq->output_ids.push_back(1);
      if (static_cast<int>(s.seq->output_ids.size()) >= s.seq->params.max_tokens)
        s.seq->status = SequenceStatus::kFinished;
    }
  }
  auto copies = sched.fork_followers();
  sched.remove_finished();
  return copies;
}
int tokens_of(const SchedulerOutput& out, const std::string& id) {
  for (auto& s : out.scheduled)
    if (s.seq->request_id == id) return s.num_tokens;
  return 0;
}
}  // namespace

TEST(SchedulerGroup, FollowersWaitForTheLeadersPromptThenRunOneToken) {
  KvBlockManager blocks(32, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 6, .max_model_len = 32}, blocks);
  auto lead = make_seq("lead", 10, 3, 0);
  auto f1 = make_seq("f1", 10, 3, 1), f2 = make_seq("f2", 10, 3, 2);
  sched.add_group(lead, {f1, f2});
  EXPECT_EQ(sched.num_waiting(), 3u);
  auto out = sched.schedule();  // a 6-token chunk of the prompt
  EXPECT_EQ(tokens_of(out, "lead"), 6);
  EXPECT_EQ(tokens_of(out, "f1") + tokens_of(out, "f2"), 0);
  EXPECT_TRUE(run_group_step(sched, out).src.empty()) << "forked before the prompt was computed";
  out = sched.schedule();  // the rest of the prompt
  EXPECT_EQ(tokens_of(out, "lead"), 4);
  auto copies = run_group_step(sched, out);
  ASSERT_EQ(copies.src.size(), 2u);
  EXPECT_EQ(copies.src[0], lead->block_table[2]);
  EXPECT_EQ(copies.src[1], lead->block_table[2]);
  EXPECT_EQ(sched.num_running(), 3u);
  EXPECT_EQ(sched.num_waiting(), 0u);
  out = sched.schedule();
  EXPECT_EQ(tokens_of(out, "lead"), 1);
  EXPECT_EQ(tokens_of(out, "f1"), 1) << "a follower recomputes its last prompt token only";
  EXPECT_EQ(tokens_of(out, "f2"), 1);
  while (sched.has_unfinished()) run_group_step(sched, sched.schedule());
  for (auto& s : {lead, f1, f2}) EXPECT_EQ(s->output_ids.size(), 3u) << s->request_id;
  EXPECT_EQ(blocks.num_free_blocks(), 32);
}

TEST(SchedulerGroup, ALeaderFinishingInItsPrefillStepStillSharesItsPrompt) {
  KvBlockManager blocks(32, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 32}, blocks);
  auto lead = make_seq("lead", 10, 1, 0), f = make_seq("f", 10, 1, 1);
  sched.add_group(lead, {f});
  EXPECT_EQ(run_group_step(sched, sched.schedule()).src.size(), 1u);
  EXPECT_TRUE(lead->finished());
  auto out = sched.schedule();
  EXPECT_EQ(tokens_of(out, "f"), 1);
  run_group_step(sched, out);
  EXPECT_FALSE(sched.has_unfinished());
  EXPECT_EQ(blocks.num_free_blocks(), 32);
}

TEST(SchedulerGroup, AbortingTheLeaderFirstLetsFollowersRunAlone) {
  KvBlockManager blocks(32, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 4, .max_model_len = 32}, blocks);
  auto lead = make_seq("lead", 10, 2, 0), f = make_seq("f", 10, 2, 1);
  sched.add_group(lead, {f});
  run_group_step(sched, sched.schedule());  // one chunk only
  EXPECT_TRUE(sched.abort("lead"));
  EXPECT_EQ(sched.num_waiting(), 1u);
  EXPECT_EQ(tokens_of(sched.schedule(), "f"), 4) << "the follower prefills its own prompt";
  while (sched.has_unfinished()) run_group_step(sched, sched.schedule());
  EXPECT_EQ(f->output_ids.size(), 2u);
  EXPECT_EQ(blocks.num_free_blocks(), 32);
}

TEST(SchedulerGroup, AbortingAHeldFollowerEndsItWithoutBlocks) {
  KvBlockManager blocks(32, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 32}, blocks);
  auto lead = make_seq("lead", 10, 2, 0), f = make_seq("f", 10, 2, 1);
  sched.add_group(lead, {f});
  EXPECT_TRUE(sched.abort("f"));
  EXPECT_EQ(f->finish_reason, FinishReason::kAbort);
  EXPECT_EQ(sched.num_waiting(), 1u);
  EXPECT_TRUE(sched.abort("lead"));
  EXPECT_FALSE(sched.has_unfinished());
  EXPECT_EQ(blocks.num_free_blocks(), 32);
}

TEST(SchedulerGroup, NoFreeSeatMakesAFollowerAnOrdinaryWaitingRequest) {
  KvBlockManager blocks(32, 4);
  Scheduler sched({.max_num_seqs = 1, .max_num_batched_tokens = 64, .max_model_len = 32}, blocks);
  auto lead = make_seq("lead", 10, 2, 0), f = make_seq("f", 10, 2, 1);
  sched.add_group(lead, {f});
  EXPECT_TRUE(run_group_step(sched, sched.schedule()).src.empty());
  EXPECT_EQ(sched.num_running(), 1u);
  EXPECT_EQ(sched.num_waiting(), 1u);
  EXPECT_TRUE(f->block_table.empty());
  while (sched.has_unfinished()) run_group_step(sched, sched.schedule());
  EXPECT_EQ(f->output_ids.size(), 2u);
  EXPECT_EQ(blocks.num_free_blocks(), 32);
}

TEST(SchedulerGroup, APreemptedLeaderKeepsItsFollowersHeldUntilItsPromptIsComputed) {
  // 6 blocks of 4 tokens and a 5-token budget: the leader's 14-token prompt is
  // still in chunks when the older request's growth preempts it.
  KvBlockManager blocks(6, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 5, .max_model_len = 24}, blocks);
  auto old = make_seq("old", 8, 9, 0);
  sched.add(old);
  run_group_step(sched, sched.schedule());
  auto lead = make_seq("lead", 14, 2, 1), f = make_seq("f", 14, 2, 2);
  sched.add_group(lead, {f});
  int steps = 0;
  bool forked = false;
  while (sched.has_unfinished()) {
    auto out = sched.schedule();
    ASSERT_FALSE(out.empty()) << "stalled";
    if (!forked) {
      EXPECT_EQ(tokens_of(out, "f"), 0) << "a held follower was scheduled";
      EXPECT_TRUE(f->block_table.empty()) << "a held follower holds blocks";
    }
    if (!run_group_step(sched, out).src.empty()) {
      EXPECT_GT(lead->num_preemptions, 0) << "the pool was meant to preempt the leader mid-prompt";
      forked = true;
    }
    ASSERT_LT(++steps, 200);
  }
  EXPECT_TRUE(forked) << "the follower should fork once the leader recomputed its prompt";
  EXPECT_EQ(f->output_ids.size(), 2u);
  EXPECT_EQ(blocks.num_free_blocks(), 6);
}

// ------------------------------------------------------------ speculative decoding

namespace {
// A running sequence about to decode: prompt computed, one output token.
std::shared_ptr<Sequence> decoding(Scheduler& sched, const std::string& id, int prompt_len, int max_tokens,
                                   uint64_t arrival) {
  auto s = make_seq(id, prompt_len, max_tokens, arrival);
  sched.add(s);
  auto out = sched.schedule();
  std::vector<StepResult> r(out.scheduled.size());
  for (size_t i = 0; i < out.scheduled.size(); ++i)
    if (out.scheduled[i].seq == s.get()) r[i].tokens = {{1, 0.0f, {}}};
  sched.update_from_step(out, r);
  return s;
}

StepResult tokens(std::vector<int32_t> ids) {
  StepResult r;
  for (int32_t t : ids) r.tokens.push_back({t, 0.0f, {}});
  return r;
}
}  // namespace

TEST(SchedulerSpec, AVerifyTakesTheLastTokenAndTheProposals) {
  KvBlockManager blocks(64, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 64}, blocks);
  auto a = decoding(sched, "a", 5, 20, 0);
  a->spec_ids = {11, 12, 13};
  auto out = sched.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].num_tokens, 4);
  EXPECT_EQ(out.scheduled[0].num_spec, 3);
  EXPECT_EQ(out.num_batched_tokens, 4);
  EXPECT_GE(static_cast<int>(a->block_table.size()) * 4, a->num_tokens() + 3);
}

TEST(SchedulerSpec, AcceptedTokensCountAndRejectedSlotsAreGivenBack) {
  KvBlockManager blocks(64, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 64}, blocks);
  auto a = decoding(sched, "a", 7, 20, 0);  // 8 tokens, 7 computed
  const int free_at_decode = blocks.num_free_blocks();
  a->spec_ids = {11, 12, 13, 14, 15, 16};    // reach position 13: blocks 2 and 3
  auto out = sched.schedule();
  EXPECT_LT(blocks.num_free_blocks(), free_at_decode);
  std::vector<StepResult> r = {tokens({11, 40})};  // one accepted, then a correction
  sched.update_from_step(out, r);
  EXPECT_EQ(a->output_ids, (std::vector<int32_t>{1, 11, 40}));
  EXPECT_EQ(a->num_computed_tokens, 9);  // the last token and the accepted proposal
  EXPECT_TRUE(a->spec_ids.empty());
  EXPECT_EQ(a->block_table.size(), 3u);  // 10 tokens: blocks past them went back
  // All accepted: the bonus token follows.
  a->spec_ids = {1, 2};
  out = sched.schedule();
  r = {tokens({1, 2, 3})};
  sched.update_from_step(out, r);
  EXPECT_EQ(a->num_tokens(), 13);
  EXPECT_EQ(a->num_computed_tokens, 12);
}

TEST(SchedulerSpec, AStopAmongTheAcceptedEndsTheSequenceThere) {
  KvBlockManager blocks(64, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 64, .eos_token_ids = {2}},
                  blocks);
  auto a = decoding(sched, "a", 5, 20, 0);
  a->spec_ids = {11, 2, 13};
  auto out = sched.schedule();
  std::vector<StepResult> r = {tokens({11, 2, 13, 14})};
  sched.update_from_step(out, r);
  EXPECT_TRUE(a->finished());
  EXPECT_EQ(a->output_ids, (std::vector<int32_t>{1, 11, 2}));
  EXPECT_EQ(blocks.num_free_blocks(), 64);
  // max_tokens among the accepted.
  auto b = decoding(sched, "b", 5, 3, 1);
  b->spec_ids = {11, 12, 13};
  out = sched.schedule();
  r = {tokens({11, 12, 13, 14})};
  sched.update_from_step(out, r);
  EXPECT_EQ(b->output_ids.size(), 3u);
  EXPECT_EQ(b->finish_reason, FinishReason::kLength);
}

TEST(SchedulerSpec, ProposalsTakeOnlyLeftoverBudgetAndNeverPreempt) {
  KvBlockManager blocks(5, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 10, .max_model_len = 64}, blocks);
  auto a = decoding(sched, "a", 7, 20, 0);  // 2 blocks
  auto b = make_seq("b", 8, 20, 1);        // waiting prompt: 2 blocks, 8 of the 10-token budget
  sched.add(b);
  a->spec_ids = {11, 12, 13, 14, 15, 16};
  auto out = sched.schedule();
  ASSERT_EQ(out.scheduled.size(), 2u);
  EXPECT_EQ(out.scheduled[1].num_tokens, 8);  // the prompt came first
  EXPECT_EQ(out.scheduled[0].num_spec, 1);    // 10 - 1 - 8 left
  EXPECT_EQ(out.num_preempted, 0);
  EXPECT_EQ(blocks.num_free_blocks(), 0);
}

TEST(SchedulerSpec, WithNoFreeBlockProposalsUseOnlyTheSlotsHeld) {
  KvBlockManager blocks(2, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 64}, blocks);
  auto a = decoding(sched, "a", 5, 20, 0);  // 6 tokens in 2 blocks: slots for 2 more
  a->spec_ids = {11, 12, 13, 14};
  auto out = sched.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].num_spec, 2);
  EXPECT_EQ(out.num_preempted, 0);
}

TEST(SchedulerSpec, PreemptionDropsProposals) {
  KvBlockManager blocks(3, 4);
  Scheduler sched({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 64}, blocks);
  auto a = decoding(sched, "a", 4, 20, 0);   // 5 tokens, 2 blocks
  auto b = decoding(sched, "b", 3, 20, 1);   // 4 tokens, 1 block: pool full
  b->spec_ids = {9, 9};
  a->output_ids.push_back(1);  // a needs a third block at its next token ...
  a->output_ids.push_back(1);
  a->output_ids.push_back(1);
  a->output_ids.push_back(1);
  a->num_computed_tokens = a->num_tokens() - 1;
  auto out = sched.schedule();  // ... which preempts b, the newest
  EXPECT_EQ(out.num_preempted, 1);
  EXPECT_TRUE(b->spec_ids.empty());
  EXPECT_EQ(b->status, SequenceStatus::kWaiting);
}

// --max-loras: running sequences use at most that many adapters; a request of
// another adapter waits (later requests of running adapters, or of the base,
// go ahead of it) and runs once an adapter's last sequence finishes.
TEST(Scheduler, RunningSequencesUseAtMostMaxLorasAdapters) {
  KvBlockManager blocks(64, 4);
  Scheduler sched(
      {.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 64, .max_loras = 2},
      blocks);
  auto with = [](std::shared_ptr<Sequence> s, int64_t lora) {
    s->lora_id = lora;
    return s;
  };
  auto a = with(make_seq("a", 3, 2, 0), 1);
  auto b = with(make_seq("b", 3, 5, 1), 2);
  auto c = with(make_seq("c", 3, 5, 2), 3);  // a third adapter: waits
  auto d = with(make_seq("d", 3, 5, 3), 1);  // adapter 1 runs: goes ahead of c
  auto e = make_seq("e", 3, 5, 4);           // the base never waits for a slot
  for (const auto& s : {a, b, c, d, e}) sched.add(s);
  auto s1 = sched.schedule();
  std::vector<std::string> ids;
  for (const auto& s : s1.scheduled) ids.push_back(s.seq->request_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "d", "e"}));
  EXPECT_EQ(c->status, SequenceStatus::kWaiting);
  run_step(sched, s1);
  run_step(sched, sched.schedule());  // a finishes (2 tokens); d still holds adapter 1
  EXPECT_TRUE(a->finished());
  EXPECT_EQ(c->status, SequenceStatus::kWaiting);
  for (int i = 0; i < 8 && c->status == SequenceStatus::kWaiting; ++i)
    run_step(sched, sched.schedule());
  EXPECT_TRUE(d->finished() || b->finished());  // c ran only once an adapter left
  EXPECT_NE(c->status, SequenceStatus::kWaiting);
}
