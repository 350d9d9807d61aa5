#pragma once
// Turns a scheduler decision into one device step: the flat token ids,
// positions, slot mapping, query starts, context lengths and block tables of
// halo_execute_args, and fp32 logits for the sequences that sample this step.
// Host buffers are reused across steps (no per-step allocation once warm).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "device/plugin.h"
#include "engine/lora.h"
#include "engine/scheduler.h"

namespace halo::engine {

class ModelRunner {
 public:
  // Runs steps on kv_cache and the executable it was created for.
  ModelRunner(device::KvCache& kv_cache, int vocab_size);

  // Runs the step. Afterwards, for scheduled[i], sample_rows(i) are the
  // logits rows it samples from: none for a prefill chunk that does not reach
  // the end of its tokens, one at the end, and 1 + num_spec for a verify (row
  // j predicts the token after proposal j; row 0 the one after its own last).
  void execute(const SchedulerOutput& step);
  struct SampleRows {
    int first_row = 0;
    int count = 0;
  };
  const SampleRows& sample_rows(size_t i) const { return sample_rows_[i]; }

  // For sequences that asked for prompt logprobs or pool every position: the logits rows of the
  // prompt positions computed this step that predict another prompt token.
  // Row k predicts the prompt token at first_position + k + 1.
  struct PromptRows {
    int first_row = 0;
    int count = 0;
    int first_position = 0;
  };
  const PromptRows& prompt_rows(size_t i) const { return prompt_rows_[i]; }
  float* logits_at(int row) { return &logits_[row * vocab_]; }

  // ABI v1.5: from now on each step also returns, for every logits row, the
  // `hidden_size` wide row lm_head took (for a proposer reading the target's
  // hidden states, or a pooling request); hidden_at(row) is nullptr until
  // asked. Asking again changes nothing.
  void request_hidden_states(int64_t hidden_size);
  // LoRA (ABI v1.6): from now on a sequence with params.lora runs with its
  // adapter in one of `slots`.
  void enable_lora(std::unique_ptr<LoraSlots> slots) { lora_ = std::move(slots); }
  const LoraSlots* lora_slots() const { return lora_.get(); }
  const float* hidden_at(int row) const {
    return hidden_ ? &hidden_->rows[static_cast<size_t>(row * hidden_->size)] : nullptr;
  }

 private:
  device::KvCache& kv_cache_;
  int64_t vocab_;
  int block_size_;
  device::StepInputs in_;
  std::vector<SampleRows> sample_rows_;
  std::vector<PromptRows> prompt_rows_;
  std::vector<float> logits_;
  std::optional<device::KvCache::HiddenStates> hidden_;
  std::unique_ptr<LoraSlots> lora_;
  uint64_t steps_ = 0;
};

}  // namespace halo::engine
