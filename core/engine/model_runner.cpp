#include "engine/model_runner.h"

#include <algorithm>

namespace halo::engine {

ModelRunner::ModelRunner(device::Executable& executable, device::KvCache& kv_cache, int vocab_size)
    : executable_(executable), kv_cache_(kv_cache), vocab_(vocab_size), block_size_(kv_cache.block_size()) {}

void ModelRunner::execute(const SchedulerOutput& step) {
  const auto& sched = step.scheduled;
  token_ids_.clear();
  positions_.clear();
  slot_mapping_.clear();
  query_start_.assign(1, 0);
  context_lens_.clear();
  logits_indices_.clear();
  row_of_.assign(sched.size(), -1);
  prompt_rows_.assign(sched.size(), {});
  size_t max_blocks = 1;
  for (const auto& s : sched) max_blocks = std::max(max_blocks, s.seq->block_table.size());
  block_tables_.assign(sched.size() * max_blocks, -1);

  for (size_t i = 0; i < sched.size(); ++i) {
    const Sequence& seq = *sched[i].seq;
    int start = seq.num_computed_tokens;
    int end = start + sched[i].num_tokens;
    for (int pos = start; pos < end; ++pos) {
      token_ids_.push_back(seq.token_at(pos));
      positions_.push_back(pos);
      slot_mapping_.push_back(int64_t(seq.block_table[pos / block_size_]) * block_size_ + pos % block_size_);
    }
    if (seq.params.prompt_logprobs >= 0) {
      int last = std::min(end, static_cast<int>(seq.prompt_ids.size()) - 1);  // rows predicting a prompt token
      auto& pr = prompt_rows_[i];
      pr.first_row = static_cast<int>(logits_indices_.size());
      pr.first_position = start;
      for (int pos = start; pos < last; ++pos) {
        logits_indices_.push_back(query_start_.back() + (pos - start));
        pr.count++;
      }
    }
    query_start_.push_back(static_cast<int32_t>(token_ids_.size()));
    context_lens_.push_back(end);
    std::copy(seq.block_table.begin(), seq.block_table.end(), block_tables_.begin() + i * max_blocks);
    if (end == seq.num_tokens()) {  // caught up: the next token is sampled from this row
      row_of_[i] = static_cast<int>(logits_indices_.size());
      logits_indices_.push_back(static_cast<int32_t>(token_ids_.size()) - 1);
    }
  }

  size_t need = logits_indices_.size() * vocab_;
  if (logits_.size() < need) logits_.resize(need);
  int64_t shape[2] = {static_cast<int64_t>(logits_indices_.size()), vocab_};
  DLTensor logits{};
  logits.data = logits_.data();
  logits.device = {kDLCPU, 0};
  logits.ndim = 2;
  logits.dtype = {kDLFloat, 32, 1};
  logits.shape = shape;

  halo_execute_args args{};
  args.struct_size = sizeof(args);
  args.executable = executable_.handle();
  args.kv_cache = kv_cache_.handle();
  args.num_tokens = static_cast<int32_t>(token_ids_.size());
  args.token_ids = token_ids_.data();
  args.positions = positions_.data();
  args.slot_mapping = slot_mapping_.data();
  args.num_seqs = static_cast<int32_t>(sched.size());
  args.query_start = query_start_.data();
  args.context_lens = context_lens_.data();
  args.block_tables = block_tables_.data();
  args.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
  args.num_logits = static_cast<int32_t>(logits_indices_.size());
  args.logits_indices = logits_indices_.data();
  args.logits = &logits;
  auto& plugin = executable_.device().plugin();
  plugin.check(plugin.api().execute(&args), "execute");
}

}  // namespace halo::engine
