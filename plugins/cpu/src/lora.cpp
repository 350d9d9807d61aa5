// LoRA slots of the CPU plugin: see lora.h.
#include "lora.h"

#include <algorithm>

#include "halo/kernels/dtype.h"
#include "halo/kernels/kernels.h"

namespace halo::cpu {

namespace {
// Rows of one XA task: A's rows stay in L1 while they meet these x rows.
constexpr size_t kRowChunk = 8;
// Output columns of one B^T task: rank x 256 fp32 of B^T stay in L1/L2.
constexpr size_t kColChunk = 256;
}  // namespace

void LoraSlots::configure(int32_t max_loras, int32_t max_rank, const plugin::LoraModel& m) {
  slots_.clear();
  slots_.resize(static_cast<size_t>(max_loras));
  max_rank_ = max_loras > 0 ? max_rank : 0;
  model_ = m;
}

void LoraSlots::set(const halo_lora_slot_args* args) {
  const std::vector<plugin::LoraWeight> ws =
      plugin::validate_lora_slot(args, model_, max_loras(), max_rank_);
  std::unique_ptr<Slot> slot;
  if (!ws.empty()) {
    slot = std::make_unique<Slot>(static_cast<size_t>(model_.num_layers));
    std::vector<float> b;
    for (const plugin::LoraWeight& w : ws) {
      Proj& p = (*slot)[static_cast<size_t>(w.layer)][static_cast<size_t>(w.proj)];
      const auto r = static_cast<size_t>(w.rank), in = static_cast<size_t>(w.in),
                 out = static_cast<size_t>(w.out);
      p.rank = static_cast<int32_t>(w.rank);
      p.a.resize(r * in);
      kernels::to_f32(w.a, w.a_dtype, p.a.data(), r * in);
      b.resize(out * r);
      kernels::to_f32(w.b, w.b_dtype, b.data(), out * r);
      p.bt.resize(r * out);
      for (size_t o = 0; o < out; ++o)
        for (size_t j = 0; j < r; ++j) p.bt[j * out + o] = b[o * r + j];
    }
  }
  slots_[static_cast<size_t>(args->slot)] = std::move(slot);  // nothing above touched it
}

bool LoraSlots::begin_step(const halo_execute_args& a) {
  groups_.clear();
  rows_.clear();
  const int32_t* slot_of = plugin::lora_slots_in(&a);
  if (slot_of == nullptr || slots_.empty()) return false;
  // Groups in slot order, rows in token order: a pass per used slot.
  for (size_t v = 0; v < slots_.size(); ++v) {
    if (!slots_[v]) continue;
    const size_t begin = rows_.size();
    for (int32_t s = 0; s < a.num_seqs; ++s)
      if (slot_of[s] == static_cast<int32_t>(v))
        for (int32_t t = a.query_start[s]; t < a.query_start[s + 1]; ++t) rows_.push_back(t);
    if (rows_.size() > begin) groups_.push_back({slots_[v].get(), begin, rows_.size()});
  }
  return !groups_.empty();
}

void LoraSlots::apply(kernels::ThreadPool& pool, size_t layer,
                      std::initializer_list<std::pair<int, size_t>> projs, const float* x,
                      size_t ldx, float* y, size_t ldy) {
  if (groups_.empty()) return;
  const auto* pr = projs.begin();
  const size_t R = static_cast<size_t>(max_rank_), nrows = rows_.size();
  auto proj_of = [&](const Item& it) -> const Proj& {
    return (*groups_[it.g].slot)[layer][static_cast<size_t>(pr[it.p].first)];
  };
  // Phase 1: XA[row, j] = x[row] . A[j].
  items_.clear();
  for (uint32_t p = 0; p < projs.size(); ++p)
    for (uint32_t g = 0; g < groups_.size(); ++g) {
      if ((*groups_[g].slot)[layer][static_cast<size_t>(pr[p].first)].rank == 0) continue;
      for (size_t r = groups_[g].begin; r < groups_[g].end; r += kRowChunk)
        items_.push_back({p, g, static_cast<uint32_t>(r),
                          static_cast<uint32_t>(std::min(r + kRowChunk, groups_[g].end))});
    }
  if (items_.empty()) return;
  if (xa_.size() < projs.size() * nrows * R) xa_.resize(projs.size() * nrows * R);
  float* xa = xa_.data();
  pool.parallel_for(items_.size(), [&](size_t i, int) {
    const Item& it = items_[i];
    const Proj& P = proj_of(it);
    const size_t in = static_cast<size_t>(model_.in(pr[it.p].first));
    for (size_t j = 0; j < static_cast<size_t>(P.rank); ++j)
      for (size_t r = it.begin; r < it.end; ++r)
        xa[(it.p * nrows + r) * R + j] =
            kernels::dot_f32(x + static_cast<size_t>(rows_[r]) * ldx, P.a.data() + j * in, in);
  });
  // Phase 2: y[row, col + c] += sum_j XA[row, j] * B^T[j, c], j in order.
  items_.clear();
  for (uint32_t p = 0; p < projs.size(); ++p) {
    const size_t out = static_cast<size_t>(model_.out(pr[p].first));
    for (uint32_t g = 0; g < groups_.size(); ++g) {
      if ((*groups_[g].slot)[layer][static_cast<size_t>(pr[p].first)].rank == 0) continue;
      for (size_t c = 0; c < out; c += kColChunk)
        items_.push_back(
            {p, g, static_cast<uint32_t>(c), static_cast<uint32_t>(std::min(c + kColChunk, out))});
    }
  }
  pool.parallel_for(items_.size(), [&](size_t i, int) {
    const Item& it = items_[i];
    const Proj& P = proj_of(it);
    const size_t out = static_cast<size_t>(model_.out(pr[it.p].first)), col = pr[it.p].second;
    const size_t n = it.end - it.begin;
    for (size_t r = groups_[it.g].begin; r < groups_[it.g].end; ++r) {
      float* yr = y + static_cast<size_t>(rows_[r]) * ldy + col + it.begin;
      const float* xr = xa + (it.p * nrows + r) * R;
      for (size_t j = 0; j < static_cast<size_t>(P.rank); ++j)
        kernels::axpy_f32(yr, xr[j], P.bt.data() + j * out + it.begin, n);
    }
  });
}

}  // namespace halo::cpu
