// Host side of quantized weights in prepare: a projection as prepare received
// it, and the stacking of fused / sharded parts into the bytes one GPU gets
// (values, scales and offsets as given, sliced by rows and by whole groups of
// columns). No CUDA here, so tests/cuda checks it with the emulated kernels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "halo/plugin_support/errors.h"
#include "halo/plugin_support/validate.h"
#include "kernels/quant_matmul.cuh"

namespace halo::cuda {

using plugin::fail;
using plugin::Matrix;
using plugin::QuantMatrix;

// The quant types prepare accepts (halo_device_properties.quant_types).
constexpr uint32_t kQuantTypes = HALO_DTYPE_BIT(HALO_QUANT_INT8) | HALO_DTYPE_BIT(HALO_QUANT_UINT4);

// A projection as prepare received it: plain (m) or quantized (q.type set).
struct HostProj {
  std::string name;
  Matrix m;
  QuantMatrix q;
  bool quantized() const { return q.type != HALO_QUANT_NONE; }
};

// Rows [r0, r1) x columns [c0, c1) of a projection: one part of a fused or
// sharded matrix on one GPU.
struct Part {
  const HostProj* p;
  int64_t cols;  // of the whole matrix
  int64_t r0, r1, c0, c1;
};

// The raw bytes of a quantized matrix for one GPU.
struct QuantHost {
  std::vector<uint8_t> values, scales, offsets;
};

// Appends the quantized part's values, scales and offsets (raw bytes) to the
// three buffers. Columns must fall on group boundaries (a TP shard of o/down).
inline void append_quant(const Part& pt, int tp, std::vector<uint8_t>& v, std::vector<uint8_t>& s,
                         std::vector<uint8_t>& o) {
  const QuantMatrix& q = pt.p->q;
  const int64_t g = q.group;
  if (pt.c0 % g != 0 || pt.c1 % g != 0)
    fail(HALO_STATUS_UNIMPLEMENTED, "prepare: tensor_parallel_size=", tp,
         " would split quantized weight '", pt.p->name, "' inside a group: its shard is columns [",
         pt.c0, ", ", pt.c1, ") of ", q.cols, " with group_size ", g);
  const size_t vb = q.type == HALO_QUANT_UINT4 ? 2 : 1;  // elements per byte
  const size_t es = kernels::dtype_size(q.scale_dtype);
  const size_t vrow = static_cast<size_t>(q.cols) / vb, srow = static_cast<size_t>(q.cols / g) * es;
  const size_t v0 = static_cast<size_t>(pt.c0) / vb, vn = static_cast<size_t>(pt.c1 - pt.c0) / vb;
  const size_t s0 = static_cast<size_t>(pt.c0 / g) * es,
               sn = static_cast<size_t>((pt.c1 - pt.c0) / g) * es;
  for (int64_t r = pt.r0; r < pt.r1; ++r) {
    const size_t ri = static_cast<size_t>(r);
    v.insert(v.end(), static_cast<const uint8_t*>(q.values) + ri * vrow + v0,
             static_cast<const uint8_t*>(q.values) + ri * vrow + v0 + vn);
    const auto* sc = static_cast<const uint8_t*>(q.scales) + ri * srow + s0;
    s.insert(s.end(), sc, sc + sn);
    if (!q.offsets) continue;
    const auto* of = static_cast<const uint8_t*>(q.offsets) + ri * srow + s0;
    o.insert(o.end(), of, of + sn);
  }
}

// The parts of one fused matrix must agree on how they are quantized.
inline void check_fusable(const std::vector<Part>& parts) {
  const HostProj& a = *parts[0].p;
  for (const Part& pt : parts) {
    const HostProj& b = *pt.p;
    const bool same =
        a.quantized() == b.quantized() &&
        (!a.quantized() || (a.q.type == b.q.type && a.q.group == b.q.group &&
                            a.q.scale_dtype == b.q.scale_dtype &&
                            (a.q.offsets == nullptr) == (b.q.offsets == nullptr)));
    if (!same)
      fail(HALO_STATUS_UNIMPLEMENTED, "prepare: weight '", b.name, "' is fused on the GPU with '",
           a.name,
           "' and must be given like it (both plain, or quantized with the same type, "
           "group_size, scale dtype and offsets or none)");
  }
}

inline k::QuantWeight quant_view(const QuantMatrix& q) {
  k::QuantWeight w;
  w.scale_dtype = q.scale_dtype == kernels::DType::F16    ? k::kScaleF16
                  : q.scale_dtype == kernels::DType::BF16 ? k::kScaleBf16
                                                          : k::kScaleF32;
  w.group = q.group;
  return w;
}

// The quantized matrix made of `parts` stacked by rows (each a row and
// column range of its weight: fused q/k/v or gate/up, TP shards), as bytes.
inline QuantHost gather_quant(const std::vector<Part>& parts, int tp) {
  check_fusable(parts);
  QuantHost h;
  for (const Part& pt : parts) append_quant(pt, tp, h.values, h.scales, h.offsets);
  return h;
}

}  // namespace halo::cuda
