#include "engine/model_runner.h"

#include <algorithm>

#include "common/error.h"

namespace halo::engine {

ModelRunner::ModelRunner(device::KvCache& kv_cache, int vocab_size)
    : kv_cache_(kv_cache), vocab_(vocab_size), block_size_(kv_cache.block_size()) {}

void ModelRunner::execute(const SchedulerOutput& step) {
  const auto& sched = step.scheduled;
  sample_rows_.assign(sched.size(), {});
  prompt_rows_.assign(sched.size(), {});
  size_t max_blocks = 1;
  for (const auto& s : sched) max_blocks = std::max(max_blocks, s.seq->block_table.size());
  in_.begin(sched.size(), static_cast<int32_t>(max_blocks));
  ++steps_;

  for (size_t i = 0; i < sched.size(); ++i) {
    const Sequence& seq = *sched[i].seq;
    const int start = seq.num_computed_tokens;
    const int end = start + sched[i].num_tokens;
    const int32_t first = in_.add_sequence([&](int pos) { return seq.input_token_at(pos); }, start,
                                           sched[i].num_tokens, seq.block_table, block_size_);
    if (seq.params.lora) {
      if (!lora_)
        throw Error("a request names a LoRA adapter but LoRA is not enabled (--enable-lora)");
      in_.set_lora_slot(lora_->acquire(*seq.params.lora, steps_));
    }
    if (seq.params.prompt_logprobs >= 0 || seq.params.pooling.every_position()) {
      // Rows predicting a prompt token (their hidden states: the positions a
      // pooling request takes in before the last).
      const int last = std::min(end, static_cast<int>(seq.prompt_ids.size()) - 1);
      auto& pr = prompt_rows_[i];
      pr.first_row = static_cast<int>(in_.logits_indices.size());
      pr.first_position = start;
      for (int pos = start; pos < last; ++pos, ++pr.count)
        in_.request_logits(first + (pos - start));
    }
    const int spec = sched[i].num_spec;
    if (end == seq.num_tokens() + spec) {  // caught up: the next token(s) are sampled from these rows
      auto& sr = sample_rows_[i];
      sr.count = 1 + spec;
      const int32_t last = static_cast<int32_t>(in_.token_ids.size()) - 1;
      for (int32_t r = last - spec; r <= last; ++r) {
        const int row = in_.request_logits(r);
        if (r == last - spec) sr.first_row = row;
      }
    }
  }
  kv_cache_.execute(in_, vocab_, logits_, hidden_ ? &*hidden_ : nullptr);
}

void ModelRunner::request_hidden_states(int64_t hidden_size) {
  if (hidden_) return;
  hidden_.emplace();
  hidden_->size = hidden_size;
}

}  // namespace halo::engine
