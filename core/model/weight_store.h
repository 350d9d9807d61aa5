#pragma once
// What a LoadedModel hands to a plugin, by canonical name: plain tensors
// (DLTensors over memory-mapped files or memory the store owns) and, since
// ABI v1.4, quantized tensors (halo_quantized_tensor). The store owns every
// name, shape and DLTensor it hands out, and whatever memory it was given to
// keep; addresses stay valid until the store is destroyed (the store itself
// may be moved). Not thread-safe while being filled; const use is.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <halo/device_abi.h>

namespace halo::model {

// One dense tensor as the store records it.
struct TensorView {
  const void* data = nullptr;   // base pointer
  uint64_t byte_offset = 0;     // where the tensor starts from data
  DLDataType dtype{};
  std::vector<int64_t> shape;
};

// One quantized matrix [rows, cols] in ABI v1.4's layout (device_abi.h).
struct QuantizedView {
  int32_t type = HALO_QUANT_NONE;  // halo_quant_type
  int32_t group_size = 0;
  int64_t rows = 0, cols = 0;
  const void* values = nullptr;  // int8 [rows, cols] or uint8 [rows, cols / 2]
  const void* scales = nullptr;  // [rows, cols / group_size] of scale_dtype
  const void* offsets = nullptr; // same shape and dtype, or null
  DLDataType scale_dtype{kDLFloat, 32, 1};
};

class WeightStore {
 public:
  WeightStore();
  WeightStore(WeightStore&&) noexcept;
  WeightStore& operator=(WeightStore&&) noexcept;
  ~WeightStore();

  // `bytes` of memory the store owns, 64-byte aligned and zeroed; `what`
  // names it in the error thrown when it cannot be had.
  std::byte* allocate(size_t bytes, std::string_view what);
  // Keeps `owner` (a mapped file, a buffer) alive as long as the store.
  void keep(std::shared_ptr<const void> owner);

  // Adds or replaces a weight. A name lives in one of the two lists: adding
  // it as one kind removes it from the other.
  void add(std::string name, TensorView t);
  void add_quantized(std::string name, const QuantizedView& q);
  // Removes a weight of either kind (no-op when absent).
  void remove(std::string_view name);

  // Canonical order is the order of first addition (a replaced weight keeps
  // its place). The spans stay valid until the next add/remove.
  std::span<const halo_named_tensor> plain() const { return named_; }
  std::span<const halo_quantized_tensor> quantized() const { return quant_; }
  const DLTensor* find(std::string_view name) const;
  const halo_quantized_tensor* find_quantized(std::string_view name) const;

  // Bytes a device reads for all weights: plain tensors' elements plus the
  // quantized tensors' values, scales and offsets.
  uint64_t bytes() const;
  // How many elements of the model are stored quantized, and their bytes:
  // for logs and the bench roofline.
  uint64_t quantized_elements() const;

 private:
  struct Entry;
  void rebuild();
  std::vector<std::unique_ptr<Entry>> entries_;  // stable addresses
  std::vector<halo_named_tensor> named_;
  std::vector<halo_quantized_tensor> quant_;
  std::vector<std::shared_ptr<const void>> kept_;
};

// Bytes of one element of a dense dtype (fp32/bf16/fp16/int8/uint8...).
size_t element_bytes(DLDataType t);

// Element i of an fp32, bf16 or fp16 array as float (weights read for
// quantization, quantized tensors' scales and offsets).
float float_element(const void* data, DLDataType t, int64_t i);

}  // namespace halo::model
