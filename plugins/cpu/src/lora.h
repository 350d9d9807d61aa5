// LoRA adapter slots of the CPU plugin (ABI v1.6): slot storage and the
// delta a slot adds to a projection's output.
//
// A slot holds, per layer and projection, fp32 A [rank, in] and B^T
// [rank, out] (B transposed at load, so the delta is `rank` axpys over
// contiguous output columns). execute groups the step's tokens by slot
// (begin_step); after a projection's base GEMM, apply() adds, for every group
// with an adapter on that projection,
//
//     Y[rows, col:col+out] += (X[rows] A^T) B^T
//
// in two parallel_fors: XA = X A^T (one task per group and chunk of rows,
// A read once per chunk), then the B^T axpys (one task per group and chunk of
// output columns, B read once per chunk). Every row is computed on its own
// with a fixed order of operations (dot_f32, then axpy_f32 over j = 0..rank-1),
// so a row's result does not depend on the other rows of the step.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "halo/device_abi.h"
#include "halo/kernels/thread_pool.h"
#include "halo/plugin_support/validate.h"

namespace halo::cpu {

// The most slots prepare agrees to (a proposal above it is answered with it).
inline constexpr int32_t kMaxLoras = 64;

class LoraSlots {
 public:
  // prepare: the agreed slots and rank, and the model's shapes.
  void configure(int32_t max_loras, int32_t max_rank, const plugin::LoraModel& m);
  int32_t max_loras() const { return static_cast<int32_t>(slots_.size()); }
  int32_t max_rank() const { return max_rank_; }
  // lora_slot_set: validates everything, then replaces the slot (or empties
  // it, num_weights = 0). A refused call leaves the slot as it was.
  void set(const halo_lora_slot_args* args);

  // execute: groups the step's tokens by the filled slot of their sequence;
  // false when no token runs an adapter (apply is then a no-op).
  bool begin_step(const halo_execute_args& a);
  // After a projection's base GEMM: adds the deltas of the projections
  // `projs` ((LoraProj, first output column in y) each, e.g. q|k|v fused)
  // for the grouped rows. x: [T, in] rows ldx apart; y: [T, *] rows ldy apart.
  void apply(kernels::ThreadPool& pool, size_t layer,
             std::initializer_list<std::pair<int, size_t>> projs, const float* x, size_t ldx,
             float* y, size_t ldy);

 private:
  struct Proj {
    int32_t rank = 0;       // 0: no adapter on this projection
    std::vector<float> a;   // [rank, in]
    std::vector<float> bt;  // [rank, out]
  };
  using Slot = std::vector<std::array<Proj, plugin::kNumLoraProj>>;  // [layers]
  std::vector<std::unique_ptr<Slot>> slots_;                         // null: empty
  int32_t max_rank_ = 0;
  plugin::LoraModel model_;

  // The current step's groups: slot and rows [begin, end) of rows_.
  struct Group {
    const Slot* slot;
    size_t begin, end;
  };
  std::vector<Group> groups_;
  std::vector<int32_t> rows_;  // flat token indices, by group
  // Work items of apply and the XA rows ([projs][rows_][max_rank_]).
  struct Item {
    uint32_t p, g;        // index into projs, group
    uint32_t begin, end;  // rows (phase 1) or output columns (phase 2)
  };
  std::vector<Item> items_;
  std::vector<float> xa_;
};

}  // namespace halo::cpu
