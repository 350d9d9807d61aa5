// The host side of a cuda step: which CUDA graph (if any) it replays, and the
// packed inputs the kernels read (one pinned host buffer, sent with one copy
// per GPU). Plain host code without CUDA, so tests/cuda calls it on machines
// without a GPU or toolkit (tests/cuda/verify_emulated_test.cpp).
//
// Graphs. A step replays a captured graph when every sequence has 1 <= q <=
// K + 1 query tokens (K = the agreed halo_limits.num_speculative_tokens) and
// the padded batch fits max_graph_batch rows. The key is (B, Q):
//  - Q = 1 when every q is 1 (decode): the graphs that existed before
//    speculative decoding, unchanged; B = 1, 2, 4, ... up to max_graph_batch.
//  - Q = K + 1 otherwise (verify, possibly mixed with plain decodes and short
//    chunks): every sequence is padded to K + 1 rows, B = 1, 2, 4, ... up to
//    max_graph_batch / (K + 1). Only these two values of Q exist: a KV cache
//    has at most 2 (1 + ceil(log2 max_graph_batch)) graphs, 18 at the most.
// A graph's rows are uniform tiles: sequence s owns packed rows [s Q, s Q + Q);
// row j < q_s is its j-th query token, the rest are padding. Every row is one
// item of DecodeAttnKernel attending to [0, its own sequence index] (the
// kernel of one-token decode, so a verify row's attention is computed exactly
// as the decode step at that position would compute it). Padding is clean:
// a padding row writes no KV (slot -1), attends to nothing (context 0: the
// kernel writes zeros) and its logits are never copied out; every other
// kernel is row-wise, so a padding row cannot change a real row. Padding to
// K + 1 (rather than graphs per q) costs rows a graph computes for nothing,
// which a weight-bound small batch (where speculation runs) barely notices.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "halo/device_abi.h"

namespace halo::cuda {

// Offsets (bytes) of the packed step inputs: one pinned host buffer, one copy.
// v1.6: lora_tiles tiles of LoRA rows (slot, start, count) and the lora_rows
// packed row ids they list (plan_lora below); none when no row has an adapter.
struct Layout {
  int T = 0, S = 0, mb = 0, L = 0, items = 0, tiles = 0, lora_tiles = 0, lora_rows = 0;
  size_t slots = 0, tok = 0, pos = 0, bt = 0, lidx = 0, it_tok = 0, it_ctx = 0, it_row = 0;
  size_t t_tok0 = 0, t_nq = 0, t_c0 = 0, t_row = 0;
  size_t l_slot = 0, l_start = 0, l_count = 0, l_rows = 0, bytes = 0;
};

inline Layout make_layout(int T, int S, int mb, int L, int items, int tiles, int lora_tiles = 0,
                          int lora_rows = 0) {
  Layout y;
  y.T = T, y.S = S, y.mb = mb, y.L = L, y.items = items, y.tiles = tiles;
  y.lora_tiles = lora_tiles, y.lora_rows = lora_rows;
  size_t o = 0;
  auto take = [&](size_t n, size_t es) {
    const size_t at = o;
    o += (n * es + 15) / 16 * 16;
    return at;
  };
  y.slots = take(static_cast<size_t>(T), 8);
  y.tok = take(static_cast<size_t>(T), 4);
  y.pos = take(static_cast<size_t>(T), 4);
  y.bt = take(static_cast<size_t>(S) * static_cast<size_t>(mb), 4);
  y.lidx = take(static_cast<size_t>(L), 4);
  y.it_tok = take(static_cast<size_t>(items), 4);
  y.it_ctx = take(static_cast<size_t>(items), 4);
  y.it_row = take(static_cast<size_t>(items), 4);
  y.t_tok0 = take(static_cast<size_t>(tiles), 4);
  y.t_nq = take(static_cast<size_t>(tiles), 4);
  y.t_c0 = take(static_cast<size_t>(tiles), 4);
  y.t_row = take(static_cast<size_t>(tiles), 4);
  y.l_slot = take(static_cast<size_t>(lora_tiles), 4);
  y.l_start = take(static_cast<size_t>(lora_tiles), 4);
  y.l_count = take(static_cast<size_t>(lora_tiles), 4);
  y.l_rows = take(static_cast<size_t>(lora_rows), 4);
  y.bytes = o;
  return y;
}

template <class P>
P* at(char* base, size_t off) {
  return reinterpret_cast<P*>(base + off);
}
template <class P>
const P* at(const char* base, size_t off) {
  return reinterpret_cast<const P*>(base + off);
}

// ------------------------------------------------------------ v1.6: LoRA
//
// A sequence runs its LoRA slot when the caller's struct has lora_slots, the
// array is given, the slot is >= 0 and lora_slot_set filled it (filled[slot]);
// otherwise (-1, or an empty slot) it runs the base model. The step's LoRA
// rows are grouped by slot (ascending; sequences in the caller's order within
// a slot) and cut into tiles of at most tile_rows rows of one slot: the
// grouped shrink/expand kernels (kernels/lora.cuh) read each adapter once per
// tile, however the slots' sequences are interleaved in the batch.

inline const int32_t* lora_slots_of(const halo_execute_args* a) {
  if (a->struct_size < offsetof(halo_execute_args, lora_slots) + sizeof(a->lora_slots))
    return nullptr;
  return a->lora_slots;
}

// The slot sequence s runs with, -1 for the base model.
inline int lora_slot_of(const halo_execute_args* a, int s, const uint8_t* filled, int max_loras) {
  const int32_t* ls = lora_slots_of(a);
  if (ls == nullptr || filled == nullptr) return -1;
  const int slot = ls[s];
  return slot >= 0 && slot < max_loras && filled[slot] ? slot : -1;
}

inline bool any_lora(const halo_execute_args* a, const uint8_t* filled, int max_loras) {
  for (int s = 0; s < a->num_seqs; ++s)
    if (lora_slot_of(a, s, filled, max_loras) >= 0) return true;
  return false;
}

struct LoraPlan {
  std::vector<int32_t> slot, start, count;  // per tile
  std::vector<int32_t> rows;                // packed row ids, grouped by slot
};

// row_of(s, j): the packed row of sequence s's j-th query token.
template <class RowOf>
LoraPlan plan_lora(const halo_execute_args* a, const uint8_t* filled, int max_loras, int tile_rows,
                   RowOf row_of) {
  LoraPlan p;
  std::vector<std::pair<int, int>> seqs;  // (slot, sequence)
  for (int s = 0; s < a->num_seqs; ++s)
    if (const int slot = lora_slot_of(a, s, filled, max_loras); slot >= 0)
      seqs.emplace_back(slot, s);
  std::stable_sort(seqs.begin(), seqs.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  for (size_t i = 0; i < seqs.size();) {
    const int slot = seqs[i].first;
    const size_t first = p.rows.size();
    for (; i < seqs.size() && seqs[i].first == slot; ++i) {
      const int s = seqs[i].second, q = a->query_start[s + 1] - a->query_start[s];
      for (int j = 0; j < q; ++j) p.rows.push_back(row_of(s, j));
    }
    for (size_t r = first; r < p.rows.size(); r += static_cast<size_t>(tile_rows)) {
      p.slot.push_back(slot), p.start.push_back(static_cast<int32_t>(r));
      p.count.push_back(static_cast<int32_t>(std::min(p.rows.size() - r, size_t(tile_rows))));
    }
  }
  return p;
}

// The most tiles `rows` LoRA rows of at most `seqs` sequences make: a tile
// is full except the last of each slot.
inline int lora_tile_cap(int rows, int seqs, int max_loras, int tile_rows) {
  return (rows + tile_rows - 1) / tile_rows + std::min(seqs, max_loras);
}

// Writes plan p into the layout's LoRA arrays; tiles past p's are unused (slot -1).
inline void pack_lora(const LoraPlan& p, const Layout& y, char* h) {
  for (int i = 0; i < y.lora_tiles; ++i) {
    const bool used = static_cast<size_t>(i) < p.slot.size();
    at<int32_t>(h, y.l_slot)[i] = used ? p.slot[size_t(i)] : -1;
    at<int32_t>(h, y.l_start)[i] = used ? p.start[size_t(i)] : 0;
    at<int32_t>(h, y.l_count)[i] = used ? p.count[size_t(i)] : 0;
  }
  if (!p.rows.empty()) std::memcpy(h + y.l_rows, p.rows.data(), p.rows.size() * 4);
}

// -------------------------------------------------------------- graphs

inline int padded_batch(int s, int max_graph) {
  int b = 1;
  while (b < s) b *= 2;
  return std::min(b, max_graph);
}

// An eager step's work items: decode items (one query each) and prefill
// tiles (up to q_tile queries each), as the attention kernels take them.
struct StepItems {
  std::vector<int32_t> it_tok, it_ctx, it_row, t_tok0, t_nq, t_c0, t_row;
};

inline StepItems collect_items(const halo_execute_args* a, int q_tile) {
  StepItems w;
  for (int s = 0; s < a->num_seqs; ++s) {
    const int b = a->query_start[s], q = a->query_start[s + 1] - b, ctx = a->context_lens[s];
    if (q == 1) {
      w.it_tok.push_back(b), w.it_ctx.push_back(ctx), w.it_row.push_back(s);
    } else {
      for (int i = 0; i < q; i += q_tile) {
        w.t_tok0.push_back(b + i), w.t_nq.push_back(std::min(q_tile, q - i));
        w.t_c0.push_back(ctx - q + i), w.t_row.push_back(s);
      }
    }
  }
  return w;
}

// The eager step's LoRA plan: packed rows are the caller's flat rows.
inline LoraPlan eager_lora(const halo_execute_args* a, const uint8_t* filled, int max_loras,
                           int tile_rows) {
  return plan_lora(a, filled, max_loras, tile_rows,
                   [a](int s, int j) { return a->query_start[s] + j; });
}

inline Layout eager_layout(const halo_execute_args* a, const StepItems& w,
                           const LoraPlan* lora = nullptr) {
  return make_layout(a->num_tokens, a->num_seqs, a->max_blocks_per_seq, a->num_logits,
                     static_cast<int>(w.it_tok.size()), static_cast<int>(w.t_tok0.size()),
                     lora ? static_cast<int>(lora->slot.size()) : 0,
                     lora ? static_cast<int>(lora->rows.size()) : 0);
}

// What may run as a graph: graphs on (device option cuda_graphs, one GPU),
// the most rows a graph may have (min(max_num_seqs, the logits chunk,
// max_num_batched_tokens): every step buffer and the decode scratch hold that
// many rows), and the agreed K; v1.6: the executable's LoRA slots and which
// of them are filled.
struct GraphConfig {
  bool enabled = false;
  int max_graph_batch = 0;
  int spec_tokens = 0;
  const uint8_t* lora_filled = nullptr;
  int max_loras = 0;
};

// A graph's key: B padded sequences of q rows each; B = 0: no graph (eager).
// lora: the graph runs the LoRA kernels (some sequence has a filled slot);
// steps of the base model alone replay graphs without them. The adapters'
// weights are read through a table at run time, so filling a slot does not
// invalidate a graph.
struct GraphShape {
  int B = 0, q = 0;
  bool lora = false;
  int rows() const { return B * q; }
  explicit operator bool() const { return B > 0; }
  bool operator<(const GraphShape& o) const {
    return B != o.B ? B < o.B : q != o.q ? q < o.q : lora < o.lora;
  }
  bool operator==(const GraphShape& o) const { return B == o.B && q == o.q && lora == o.lora; }
};

inline GraphShape graph_shape(const halo_execute_args* a, const GraphConfig& c) {
  if (!c.enabled) return {};
  int qmax = 0;
  for (int s = 0; s < a->num_seqs; ++s) {
    const int q = a->query_start[s + 1] - a->query_start[s];
    if (q < 1) return {};  // a sequence with no query token: eager
    qmax = std::max(qmax, q);
  }
  const int Q = qmax == 1 ? 1 : qmax <= c.spec_tokens + 1 ? c.spec_tokens + 1 : 0;
  if (Q == 0) return {};
  const int cap = c.max_graph_batch / Q;
  if (a->num_seqs > cap) return {};
  const GraphShape g{padded_batch(a->num_seqs, cap), Q, any_lora(a, c.lora_filled, c.max_loras)};
  if (a->num_logits > g.rows()) return {};  // more logits rows (repeats) than the graph computes
  return g;
}

// The graph's layout of the packed inputs (a function of the key and the
// executable alone, so a replay finds its inputs where the capture put them).
// A LoRA graph has room for the most tiles its rows can make.
inline Layout graph_layout(const GraphShape& g, int mb_cap, int max_loras = 0,
                           int lora_tile_rows = 1) {
  const int lt = g.lora ? lora_tile_cap(g.rows(), g.B, max_loras, lora_tile_rows) : 0;
  return make_layout(g.rows(), g.B, mb_cap, g.rows(), g.rows(), 0, lt, g.lora ? g.rows() : 0);
}

// The packed row of the caller's flat token t in graph g.
inline int graph_row(const halo_execute_args* a, const GraphShape& g, int t) {
  const int32_t* qs = a->query_start;
  const int s = static_cast<int>(std::upper_bound(qs, qs + a->num_seqs + 1, t) - qs) - 1;
  return s * g.q + (t - qs[s]);
}

// Packs a graph step (graph_shape(a) == g) into h at y = graph_layout(g, mb):
// uniform tiles of g.q rows per sequence (see the top of this file); logits
// rows in the caller's order, then row 0 for the rows nobody reads; the
// LoRA tiles of its real rows when the layout has room for them.
inline void pack_graph_inputs(const halo_execute_args* a, int block_size, const GraphShape& g,
                              const Layout& y, char* h, const uint8_t* lora_filled = nullptr,
                              int max_loras = 0, int lora_tile_rows = 1) {
  std::memset(h, 0, y.bytes);
  const int S = a->num_seqs, L = a->num_logits;
  for (int s = 0; s < g.B; ++s) {
    const int q = s < S ? a->query_start[s + 1] - a->query_start[s] : 0;
    const int ctx = s < S ? a->context_lens[s] : 0;
    if (s < S)
      std::memcpy(at<int32_t>(h, y.bt) + static_cast<size_t>(s) * y.mb,
                  a->block_tables + static_cast<size_t>(s) * a->max_blocks_per_seq,
                  static_cast<size_t>((ctx + block_size - 1) / block_size) * 4);
    for (int j = 0; j < g.q; ++j) {
      const int r = s * g.q + j, t = j < q ? a->query_start[s] + j : -1;
      at<int64_t>(h, y.slots)[r] = t >= 0 ? a->slot_mapping[t] : -1;
      at<int32_t>(h, y.tok)[r] = t >= 0 ? a->token_ids[t] : 0;
      at<int32_t>(h, y.pos)[r] = t >= 0 ? a->positions[t] : 0;
      at<int32_t>(h, y.it_tok)[r] = r;
      at<int32_t>(h, y.it_ctx)[r] = t >= 0 ? ctx - q + j + 1 : 0;  // [0, own index]; padding: none
      at<int32_t>(h, y.it_row)[r] = s;
    }
  }
  for (int i = 0; i < g.rows(); ++i)
    at<int32_t>(h, y.lidx)[i] = i < L ? graph_row(a, g, a->logits_indices[i]) : 0;
  if (y.lora_tiles > 0)
    pack_lora(plan_lora(a, lora_filled, max_loras, lora_tile_rows,
                        [&g](int s, int j) { return s * g.q + j; }),
              y, h);
}

// Packs an eager step into h at y = eager_layout(a, w, lora): the caller's
// rows as they are, its block tables and logits rows, the work items w, the
// LoRA tiles.
inline void pack_eager_inputs(const halo_execute_args* a, const StepItems& w, const Layout& y,
                              char* h, const LoraPlan* lora = nullptr) {
  const size_t T = static_cast<size_t>(a->num_tokens), L = static_cast<size_t>(a->num_logits);
  std::memset(h, 0, y.bytes);
  std::memcpy(at<int64_t>(h, y.slots), a->slot_mapping, T * 8);
  std::memcpy(at<int32_t>(h, y.tok), a->token_ids, T * 4);
  std::memcpy(at<int32_t>(h, y.pos), a->positions, T * 4);
  std::memcpy(at<int32_t>(h, y.bt), a->block_tables,
              static_cast<size_t>(a->num_seqs) * a->max_blocks_per_seq * 4);
  if (L > 0) std::memcpy(at<int32_t>(h, y.lidx), a->logits_indices, L * 4);
  auto put = [&](size_t off, const std::vector<int32_t>& v) {
    if (!v.empty()) std::memcpy(h + off, v.data(), v.size() * 4);
  };
  put(y.it_tok, w.it_tok), put(y.it_ctx, w.it_ctx), put(y.it_row, w.it_row);
  put(y.t_tok0, w.t_tok0), put(y.t_nq, w.t_nq), put(y.t_c0, w.t_c0), put(y.t_row, w.t_row);
  if (lora && y.lora_tiles > 0) pack_lora(*lora, y, h);
}

}  // namespace halo::cuda
