#include "engine/model_runner.h"

#include <algorithm>

namespace halo::engine {

ModelRunner::ModelRunner(device::KvCache& kv_cache, int vocab_size)
    : kv_cache_(kv_cache), vocab_(vocab_size), block_size_(kv_cache.block_size()) {}

void ModelRunner::execute(const SchedulerOutput& step) {
  const auto& sched = step.scheduled;
  in_.token_ids.clear();
  in_.positions.clear();
  in_.slot_mapping.clear();
  in_.query_start.assign(1, 0);
  in_.context_lens.clear();
  in_.logits_indices.clear();
  row_of_.assign(sched.size(), -1);
  prompt_rows_.assign(sched.size(), {});
  size_t max_blocks = 1;
  for (const auto& s : sched) max_blocks = std::max(max_blocks, s.seq->block_table.size());
  in_.block_tables.assign(sched.size() * max_blocks, -1);

  for (size_t i = 0; i < sched.size(); ++i) {
    const Sequence& seq = *sched[i].seq;
    int start = seq.num_computed_tokens;
    int end = start + sched[i].num_tokens;
    for (int pos = start; pos < end; ++pos) {
      in_.token_ids.push_back(seq.token_at(pos));
      in_.positions.push_back(pos);
      in_.slot_mapping.push_back(int64_t(seq.block_table[pos / block_size_]) * block_size_ + pos % block_size_);
    }
    if (seq.params.prompt_logprobs >= 0) {
      int last = std::min(end, static_cast<int>(seq.prompt_ids.size()) - 1);  // rows predicting a prompt token
      auto& pr = prompt_rows_[i];
      pr.first_row = static_cast<int>(in_.logits_indices.size());
      pr.first_position = start;
      for (int pos = start; pos < last; ++pos) {
        in_.logits_indices.push_back(in_.query_start.back() + (pos - start));
        pr.count++;
      }
    }
    in_.query_start.push_back(static_cast<int32_t>(in_.token_ids.size()));
    in_.context_lens.push_back(end);
    std::copy(seq.block_table.begin(), seq.block_table.end(), in_.block_tables.begin() + i * max_blocks);
    if (end == seq.num_tokens()) {  // caught up: the next token is sampled from this row
      row_of_[i] = static_cast<int>(in_.logits_indices.size());
      in_.logits_indices.push_back(static_cast<int32_t>(in_.token_ids.size()) - 1);
    }
  }

  in_.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
  kv_cache_.execute(in_, vocab_, logits_);
}

}  // namespace halo::engine
