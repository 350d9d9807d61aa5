#pragma once
// ggml tensor types as GGUF files store them, and their conversion to the
// quantized layout of ABI v1.4 (device_abi.h, halo_quantized_tensor).
//
// A ggml matrix is stored row by row; a row of `cols` elements is cols /
// block_elems blocks of block_bytes each. The supported types and what each
// becomes (bit-exact: dequantizing the ABI layout with its formula
// scales * q + offsets gives the same fp32 values as dequantizing the block):
//
//   F32, F16, BF16  plain tensors, no conversion
//   Q8_0   32 elements: fp16 d, int8 q[32]; w = d * q
//          -> INT8, group 32, fp16 scales d, no offsets
//   Q4_0   32 elements: fp16 d, 16 bytes; element j is the low nibble of byte
//          j, element j + 16 its high nibble; w = d * (q - 8)
//          -> UINT4, group 32, scales d, offsets -8 d (fp16; fp32 when a
//             -8 d overflows fp16)
//   Q4_K   256 elements: fp16 d, fp16 dmin, 12 bytes of packed 6-bit scales
//          and mins (8 of each), 128 bytes of nibbles; sub-block s of 32
//          has w = d * sc[s] * q - dmin * m[s]
//          -> UINT4, group 32, fp32 scales d * sc, offsets -dmin * m
//   Q5_K   as Q4_K plus 32 bytes of fifth bits (q in 0..31)
//          -> INT8, group 32, fp32 scales d * sc, offsets -dmin * m
//   Q6_K   256 elements: 128 bytes low nibbles, 64 bytes high 2-bit pairs,
//          int8 scales[16], fp16 d; sub-block s of 16 has
//          w = d * scales[s] * (q - 32)
//          -> INT8 (q - 32), group 16, fp32 scales d * scales[s]
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "model/weight_store.h"

namespace halo::model {

// ggml_type values (ggml.h); only the types halo reads are named.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// Block geometry of a ggml type: `elems` elements take `bytes` bytes.
struct GgmlBlock {
  int64_t elems = 0;
  int64_t bytes = 0;
};

// The geometry of every type a GGUF file may hold (also those halo cannot
// convert, so that such a file is still parsed and its tensors sized), or
// nothing for a type number ggml does not define.
std::optional<GgmlBlock> ggml_block(uint32_t type);
// "Q4_K", "IQ2_XS", ... or "type 99".
std::string ggml_type_name(uint32_t type);

bool ggml_is_plain(uint32_t type);      // F32, F16, BF16
bool ggml_is_supported(uint32_t type);  // plain or one of the five quantized types
// "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K" for messages.
std::string_view ggml_supported_types();

// Bytes of one row of `cols` elements (cols a multiple of the block size).
int64_t ggml_row_bytes(uint32_t type, int64_t cols);

// Dequantizes one row of `cols` elements of a supported type to fp32, the
// way ggml does.
void ggml_dequantize_row(uint32_t type, const std::byte* row, int64_t cols, float* out);

// Converts the rows `row_order` of a ggml matrix of a supported quantized
// type (rows of `cols` elements starting at `data`) into one ABI quantized
// matrix whose row r is source row row_order[r]. Memory comes from `store`;
// `what` names the tensor in errors.
QuantizedView ggml_to_abi(uint32_t type, const std::byte* data, int64_t cols,
                          std::span<const int64_t> row_order, WeightStore& store,
                          std::string_view what);

// Element `row` of an ABI quantized matrix dequantized by the ABI's formula
// w = scales * q + offsets, in fp32 (for tests and for embeddings).
void abi_dequantize_row(const QuantizedView& q, int64_t row, float* out);

}  // namespace halo::model
