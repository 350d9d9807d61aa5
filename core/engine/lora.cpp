#include "engine/lora.h"

#include <fmt/format.h>

#include "common/error.h"

namespace halo::engine {

LoraUpload lora_upload(const model::LoraAdapter& adapter) {
  LoraUpload u;
  const size_t n = adapter.weights.size();
  // Reserve everything first: the tensors point into these vectors.
  u.names.reserve(2 * n);
  u.shapes.reserve(2 * n);
  u.dl.reserve(2 * n);
  u.scaled_b.reserve(n);
  auto add = [&](std::string name, const float* data, int64_t rows, int64_t cols) {
    u.names.push_back(std::move(name));
    u.shapes.push_back({rows, cols});
    DLTensor t{};
    t.data = const_cast<float*>(data);  // DLPack has no const; the plugin only reads
    t.device = {kDLCPU, 0};
    t.ndim = 2;
    t.dtype = {kDLFloat, 32, 1};
    t.shape = u.shapes.back().data();
    u.dl.push_back(t);
  };
  for (const model::LoraWeight& w : adapter.weights) {
    auto& b = u.scaled_b.emplace_back(w.b);
    for (float& v : b) v *= w.scale;
    add(w.canonical + HALO_LORA_A_SUFFIX, w.a.data(), w.rank, w.in);
    add(w.canonical + HALO_LORA_B_SUFFIX, b.data(), w.out, w.rank);
  }
  for (size_t i = 0; i < u.dl.size(); ++i) u.tensors.push_back({u.names[i].c_str(), &u.dl[i]});
  return u;
}

LoraSlots::LoraSlots(device::Executable& executable, int num_slots)
    : executable_(executable), slots_(static_cast<size_t>(num_slots)) {}

int32_t LoraSlots::acquire(const LoraRequest& lora, uint64_t step) {
  Slot* victim = nullptr;
  for (Slot& s : slots_) {
    if (s.id == lora.id) {
      s.last_step = step;
      return static_cast<int32_t>(&s - slots_.data());
    }
    if (s.last_step == step && s.id >= 0) continue;  // in use this step
    if (!victim || s.id < 0 || (victim->id >= 0 && s.last_step < victim->last_step)) victim = &s;
  }
  if (!victim)
    throw Error(
        fmt::format("LoRA adapter '{}': all {} adapter slots are in use this step (--max-loras)",
                    lora.name, slots_.size()));
  const auto slot = static_cast<int32_t>(victim - slots_.data());
  victim->id = -1;  // a failed upload leaves the slot as the plugin left it: unknown
  executable_.set_lora_slot(slot, lora_upload(*lora.adapter).tensors);
  victim->id = lora.id;
  victim->last_step = step;
  ++uploads_;
  return slot;
}

}  // namespace halo::engine
