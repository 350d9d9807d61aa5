#pragma once
// LoRA adapters inside the engine.
//
// LoraRequest: the adapter a request runs with, as the serving layer names it.
// It holds the host copy of the weights, so a request in flight keeps its
// adapter alive after the adapter is unloaded from the registry.
//
// LoraSlots: the device's adapter slots (ABI v1.6 lora_slot_set). Each step
// maps the adapters of its sequences to slots; an adapter not in a slot is
// uploaded into an empty one or into the least recently used slot this step
// does not need. The scheduler keeps the adapters of running sequences to at
// most the number of slots, so a step always fits. Engine thread only.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/plugin.h"
#include "model/lora_adapter.h"

namespace halo::engine {

struct LoraRequest {
  std::string name;  // what a client calls it (the OpenAI `model`)
  int64_t id = 0;    // unique per load: a reloaded name is a new adapter
  // Prefix-cache key: the name for its first load, name@load for later ones,
  // so blocks of an unloaded adapter never serve its replacement.
  std::string cache_name;
  std::shared_ptr<const model::LoraAdapter> adapter;
};

// The ABI's named tensors for one adapter (scale folded into B), and the
// memory behind them.
struct LoraUpload {
  std::vector<halo_named_tensor> tensors;
  std::vector<std::string> names;
  std::vector<std::vector<float>> scaled_b;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DLTensor> dl;
};
LoraUpload lora_upload(const model::LoraAdapter& adapter);

class LoraSlots {
 public:
  LoraSlots(device::Executable& executable, int num_slots);
  int num_slots() const { return static_cast<int>(slots_.size()); }
  // The slot of `lora` for step `step` (steps count up), uploading it if
  // needed. Throws halo::Error when every slot holds an adapter of this step.
  int32_t acquire(const LoraRequest& lora, uint64_t step);
  uint64_t uploads() const { return uploads_; }

 private:
  struct Slot {
    int64_t id = -1;  // adapter in it; -1 = empty
    uint64_t last_step = 0;
  };
  device::Executable& executable_;
  std::vector<Slot> slots_;
  uint64_t uploads_ = 0;
};

}  // namespace halo::engine
