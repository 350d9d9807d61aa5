// Scheduler overhead on a null device: the cost of one scheduling step (plus
// the bookkeeping the engine does after it) with N running sequences, so that
// the host side of a step can be compared with device step times.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "engine/block_hash.h"
#include "engine/scheduler.h"

using namespace halo::engine;

namespace {

void BM_ScheduleDecodeStep(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const bool prefix_caching = state.range(1) != 0;
  const int block_size = 16;
  KvBlockManager blocks(n * 64, block_size, prefix_caching);
  Scheduler sched({.max_num_seqs = n, .max_num_batched_tokens = 8192, .max_model_len = 1024}, blocks);
  std::vector<std::shared_ptr<Sequence>> seqs;
  for (int i = 0; i < n; ++i) {
    auto s = std::make_shared<Sequence>();
    s->request_id = std::to_string(i);
    s->arrival = i;
    for (int t = 0; t < 100; ++t) s->prompt_ids.push_back((i * 131 + t) % 32000);
    s->params.max_tokens = 1 << 30;
    seqs.push_back(s);
    sched.add(s);
  }
  // Prefill everything once so every later step is a decode of all n.
  auto apply = [&](const SchedulerOutput& out) {
    for (auto& s : out.scheduled) {
      s.seq->num_computed_tokens += s.num_tokens;
      blocks.cache_full_blocks(*s.seq);
      if (s.seq->num_computed_tokens == s.seq->num_tokens()) s.seq->output_ids.push_back(7);
    }
  };
  while (sched.num_waiting() > 0) apply(sched.schedule());
  for (auto _ : state) {
    auto out = sched.schedule();
    benchmark::DoNotOptimize(out.scheduled.data());
    apply(out);
    if (seqs[0]->num_tokens() > 900) {  // keep sequences inside max_model_len
      state.PauseTiming();
      for (auto& s : seqs) s->output_ids.resize(1);
      for (auto& s : seqs) s->num_computed_tokens = s->num_tokens() - 1;
      state.ResumeTiming();
    }
  }
  state.counters["seqs"] = n;
}

// Registering a 2,048-token prompt's 128 full blocks in the prefix cache:
// mode 0 without prefix caching (the baseline), 1 with it (hashing every
// block: engine/block_hash.h's chain), 2 with KV cache events recorded too
// (--kv-events-config). Each prompt is new, so the pool evicts as it fills.
void BM_RegisterPromptBlocks(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  const int block_size = 16, tokens = 2048;
  KvBlockManager blocks(1024, block_size, mode >= 1, block_hash_root("", "bench"));
  if (mode == 2) blocks.enable_events();
  int32_t round = 0;
  for (auto _ : state) {
    Sequence s;
    s.prompt_ids.resize(tokens);
    for (int t = 0; t < tokens; ++t) s.prompt_ids[t] = (round * 7919 + t) % 32000;
    ++round;
    blocks.allocate_slots(s, tokens);
    s.num_computed_tokens = tokens;
    blocks.cache_full_blocks(s);
    blocks.free(s);
    benchmark::DoNotOptimize(blocks.take_events());
  }
  state.SetItemsProcessed(state.iterations() * tokens / block_size);  // blocks
}

}  // namespace

BENCHMARK(BM_RegisterPromptBlocks)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ScheduleDecodeStep)->ArgsProduct({{1, 16, 64, 256}, {0, 1}})->Unit(benchmark::kMicrosecond);
