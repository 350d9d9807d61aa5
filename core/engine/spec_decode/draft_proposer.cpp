#include "engine/spec_decode/draft_proposer.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"

namespace halo::engine::spec {

DraftModelProposer::DraftModelProposer(std::shared_ptr<device::Device> device,
                                       std::shared_ptr<const model::LoadedModel> draft,
                                       int target_vocab, const halo_limits& target,
                                       const device::Options& options)
    : model_(std::move(draft)), vocab_(model_->config().spec.vocab_size) {
  const auto& mc = model_->config();
  if (vocab_ != target_vocab)
    throw Error(fmt::format(
        "speculative_config model: the draft's vocabulary has {} tokens, the target's {}; a "
        "draft must share the target's tokenizer",
        vocab_, target_vocab));
  if (mc.max_position_embeddings > 0 && mc.max_position_embeddings < target.max_model_len)
    throw Error(
        fmt::format("speculative_config model: the draft's max_position_embeddings={} is less than "
                    "max_model_len={}",
                    mc.max_position_embeddings, target.max_model_len));
  limits_ = target;
  std::vector<halo_named_tensor> weights(model_->weights().begin(), model_->weights().end());
  try {
    executable_ = std::make_shared<device::Executable>(std::move(device), mc.spec, weights, limits_,
                                                       options, model_->quantized_weights());
  } catch (const Error& e) {
    throw Error(fmt::format("speculative_config model: the device could not prepare the draft: {}", e.what()));
  }
  limits_ = executable_->limits();
  if (limits_.block_size != target.block_size || limits_.max_model_len < target.max_model_len ||
      limits_.max_num_batched_tokens < target.max_num_batched_tokens ||
      limits_.max_num_seqs < target.max_num_seqs)
    throw Error(fmt::format(
        "speculative_config model: the device prepared the draft with block_size={} "
        "max_model_len={} max_num_seqs={} max_num_batched_tokens={}, not the target's {} {} {} {}",
        limits_.block_size, limits_.max_model_len, limits_.max_num_seqs,
        limits_.max_num_batched_tokens, target.block_size, target.max_model_len,
        target.max_num_seqs, target.max_num_batched_tokens));
  // The draft mirrors every target step, verifies included.
  if (limits_.num_speculative_tokens < target.num_speculative_tokens)
    throw Error(fmt::format(
        "speculative_config model: the device verifies {} proposed tokens per sequence with the "
        "draft, {} with the target; compile the draft with --num-speculative-tokens {}",
        limits_.num_speculative_tokens, target.num_speculative_tokens,
        target.num_speculative_tokens));
}

DraftModelProposer::~DraftModelProposer() = default;

void DraftModelProposer::attach(KvBlockManager& blocks) {
  blocks_ = &blocks;
  cache_ = std::make_unique<device::KvCache>(executable_, blocks.num_blocks(), blocks.block_size());
  mirror_ = std::make_unique<ModelRunner>(*cache_, vocab_);
}

void DraftModelProposer::after_step(const SchedulerOutput& step, const ModelRunner&) {
  mirror_->execute(step);
}

void DraftModelProposer::copy_blocks(const std::vector<int32_t>& src,
                                     const std::vector<int32_t>& dst) {
  cache_->copy_blocks(src, dst);
}

std::span<const TokenDist> DraftModelProposer::proposal_dists(const Sequence& seq) const {
  auto it = dists_.find(&seq);
  return it == dists_.end() ? std::span<const TokenDist>() : std::span<const TokenDist>(it->second);
}

// Slots for the draft's scratch KV at positions num_tokens - 1 .. num_tokens
// + k - 2. A free block is taken only while at least `keep_free` others stay
// free (the scheduler's real tokens come first); otherwise fewer proposals,
// in the slots the sequence holds.
int DraftModelProposer::reserve_slots(Sequence& seq, int max_k, int keep_free) {
  const int need = blocks_->blocks_needed(seq.num_tokens() + max_k - 1) -
                   static_cast<int>(seq.block_table.size());
  if (blocks_->num_free_blocks() - std::max(0, need) >= keep_free &&
      blocks_->allocate_slots(seq, seq.num_tokens() + max_k - 1))
    return max_k;
  const int held = static_cast<int>(seq.block_table.size()) * blocks_->block_size();
  return std::min(max_k, held - seq.num_tokens() + 1);
}

void DraftModelProposer::propose(std::span<const ProposeRequest> batch) {
  dists_.clear();
  std::vector<Active> active;
  int rounds = 0;
  for (const auto& r : batch) {
    const int k = reserve_slots(*r.seq, r.max_k, static_cast<int>(batch.size()));
    if (k <= 0) continue;
    active.push_back({r.seq, k});
    rounds = std::max(rounds, k);
  }
  for (int t = 0; t < rounds && !active.empty(); ++t) draft_step(active, t);
}

// Round t: every sequence still proposing feeds its token at position
// num_tokens - 1 + t (its own last token, then its proposals) and draws the next.
void DraftModelProposer::draft_step(std::vector<Active>& active, int t) {
  active.erase(
      std::remove_if(active.begin(), active.end(), [t](const Active& a) { return a.k <= t; }),
      active.end());
  if (active.empty()) return;
  size_t max_blocks = 1;
  for (const auto& a : active) max_blocks = std::max(max_blocks, a.seq->block_table.size());
  in_.begin(active.size(), static_cast<int32_t>(max_blocks));
  for (const auto& a : active) {
    const Sequence& seq = *a.seq;
    const int pos = seq.num_tokens() - 1 + t;
    const int32_t row = in_.add_sequence([&](int p) { return seq.input_token_at(p); }, pos, 1,
                                         seq.block_table, blocks_->block_size());
    in_.request_logits(row);
  }
  cache_->execute(in_, vocab_, logits_);
  for (size_t i = 0; i < active.size(); ++i) {
    Sequence& seq = *active[i].seq;
    SamplingParams p = seq.params;  // the draft's own distribution: no penalties
    p.repetition_penalty = 1.0f;
    p.presence_penalty = p.frequency_penalty = 0.0f;
    std::span<float> row(&logits_[i * static_cast<size_t>(vocab_)], static_cast<size_t>(vocab_));
    const TokenDist& q = sampler_.distribution(row, p, {}, {});
    seq.spec_ids.push_back(Sampler::draw(q, seq.rng));
    if (!q.greedy) dists_[&seq].push_back(q);
  }
}

}  // namespace halo::engine::spec
