#pragma once
// A draft model as proposer: a smaller model with the target's tokenizer, on
// the same device, whose KV lives in its own cache indexed by the target's
// block tables (one block id is valid in both, so prefix caching, forks,
// preemption and trimming need nothing more). It mirrors every target step
// (after_step), so its KV always holds what the target's holds; to propose
// it runs up to k one-token steps from each sequence's last token, writing
// scratch KV past the end that the next mirror overwrites (in free blocks
// only while one per proposing sequence stays free for the scheduler). Greedy requests
// get the draft's argmax; sampled ones a draw from its distribution (same
// temperature, top-k, top-p and min-p; no penalties) with the request's
// generator, which rejection sampling then corrects. Engine thread only.
#include <memory>
#include <unordered_map>
#include <vector>

#include "device/plugin.h"
#include "engine/kv_block_manager.h"
#include "engine/model_runner.h"
#include "engine/spec_decode/proposer.h"
#include "model/model_loader.h"

namespace halo::engine::spec {

class DraftModelProposer : public Proposer {
 public:
  // Prepares the draft on `device` with the target's agreed limits (block
  // size, lengths, batch); throws an Error naming a mismatch (vocabulary,
  // context, a device answer that differs).
  DraftModelProposer(std::shared_ptr<device::Device> device,
                     std::shared_ptr<const model::LoadedModel> draft, int target_vocab,
                     const halo_limits& target, const device::Options& options);
  ~DraftModelProposer() override;

  uint64_t kv_bytes_per_block() const { return limits_.kv_bytes_per_block; }
  // What the device agreed for the draft; its kv_memory_available counts the
  // memory both models' weights take.
  const halo_limits& limits() const { return limits_; }
  // Allocates the draft's KV: as many blocks as the target's pool.
  void attach(KvBlockManager& blocks);

  void propose(std::span<const ProposeRequest> batch) override;
  std::span<const TokenDist> proposal_dists(const Sequence& seq) const override;
  void after_step(const SchedulerOutput& step, const ModelRunner& target) override;
  void copy_blocks(const std::vector<int32_t>& src, const std::vector<int32_t>& dst) override;

 private:
  struct Active {
    Sequence* seq;
    int k;
  };
  int reserve_slots(Sequence& seq, int max_k, int keep_free);
  void draft_step(std::vector<Active>& active, int t);

  std::shared_ptr<const model::LoadedModel> model_;
  std::shared_ptr<device::Executable> executable_;
  halo_limits limits_{};
  int vocab_;
  KvBlockManager* blocks_ = nullptr;
  std::unique_ptr<device::KvCache> cache_;
  std::unique_ptr<ModelRunner> mirror_;
  device::StepInputs in_;
  std::vector<float> logits_;
  Sampler sampler_;
  std::unordered_map<const Sequence*, std::vector<TokenDist>> dists_;  // this step's proposals' q
};

}  // namespace halo::engine::spec
