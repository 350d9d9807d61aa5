#include "model/weight_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "common/half.h"

namespace halo::model {

size_t element_bytes(DLDataType t) { return (static_cast<size_t>(t.bits) * t.lanes + 7) / 8; }

float float_element(const void* data, DLDataType t, int64_t i) {
  if (t.bits == 32) {
    float f;
    std::memcpy(&f, static_cast<const std::byte*>(data) + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, static_cast<const std::byte*>(data) + i * 2, 2);
  return t.code == kDLBfloat ? bf16_to_float(h) : fp16_to_float(h);
}

namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

DLTensor dl(const void* data, uint64_t offset, DLDataType dtype, std::vector<int64_t>& shape) {
  DLTensor t{};
  t.data = const_cast<void*>(data);  // read-only for plugins; DLTensor has no const
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = dtype;
  t.shape = shape.data();
  t.strides = nullptr;
  t.byte_offset = offset;
  return t;
}

}  // namespace

struct WeightStore::Entry {
  std::string name;
  bool quantized = false;
  // plain
  std::vector<int64_t> shape;
  DLTensor tensor{};
  // quantized: values, scales, offsets
  std::vector<int64_t> value_shape, scale_shape;
  DLTensor values{}, scales{}, offsets{};
  QuantizedView q;
};

WeightStore::WeightStore() = default;
WeightStore::WeightStore(WeightStore&&) noexcept = default;
WeightStore& WeightStore::operator=(WeightStore&&) noexcept = default;
WeightStore::~WeightStore() = default;

std::byte* WeightStore::allocate(size_t bytes, std::string_view what) {
  const size_t n = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  std::shared_ptr<std::byte> mem(static_cast<std::byte*>(std::aligned_alloc(64, n)),
                                 [](std::byte* p) { std::free(p); });
  if (!mem) throw Error(fmt::format("cannot allocate {} bytes for {}", bytes, what));
  std::memset(mem.get(), 0, n);
  kept_.push_back(mem);
  return mem.get();
}

void WeightStore::keep(std::shared_ptr<const void> owner) { kept_.push_back(std::move(owner)); }

namespace {
template <class Entries>
auto find_entry(Entries& entries, std::string_view name) {
  return std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e->name == name; });
}
}  // namespace

void WeightStore::add(std::string name, TensorView t) {
  auto it = find_entry(entries_, name);
  if (it == entries_.end()) it = entries_.insert(entries_.end(), std::make_unique<Entry>());
  Entry& e = **it;
  e = Entry{};
  e.name = std::move(name);
  e.shape = std::move(t.shape);
  e.tensor = dl(t.data, t.byte_offset, t.dtype, e.shape);
  rebuild();
}

void WeightStore::add_quantized(std::string name, const QuantizedView& q) {
  if (q.type != HALO_QUANT_INT8 && q.type != HALO_QUANT_UINT4)
    throw Error(fmt::format("weight '{}': quantized type {} is not int8 or uint4", name, q.type));
  if (q.group_size <= 0 || q.cols % q.group_size != 0)
    throw Error(fmt::format("weight '{}': group size {} does not divide its {} columns", name,
                            q.group_size, q.cols));
  auto it = find_entry(entries_, name);
  if (it == entries_.end()) it = entries_.insert(entries_.end(), std::make_unique<Entry>());
  Entry& e = **it;
  e = Entry{};
  e.name = std::move(name);
  e.quantized = true;
  e.q = q;
  const bool nibbles = q.type == HALO_QUANT_UINT4;
  e.value_shape = {q.rows, nibbles ? q.cols / 2 : q.cols};
  e.scale_shape = {q.rows, q.cols / q.group_size};
  e.values = dl(q.values, 0, nibbles ? DLDataType{kDLUInt, 8, 1} : DLDataType{kDLInt, 8, 1},
                e.value_shape);
  e.scales = dl(q.scales, 0, q.scale_dtype, e.scale_shape);
  if (q.offsets) e.offsets = dl(q.offsets, 0, q.scale_dtype, e.scale_shape);
  rebuild();
}

void WeightStore::remove(std::string_view name) {
  auto it = find_entry(entries_, name);
  if (it == entries_.end()) return;
  entries_.erase(it);
  rebuild();
}

void WeightStore::rebuild() {
  named_.clear();
  quant_.clear();
  for (const auto& e : entries_) {
    if (!e->quantized) {
      named_.push_back({e->name.c_str(), &e->tensor});
      continue;
    }
    halo_quantized_tensor t{};
    t.name = e->name.c_str();
    t.type = e->q.type;
    t.group_size = e->q.group_size;
    t.rows = e->q.rows;
    t.cols = e->q.cols;
    t.values = &e->values;
    t.scales = &e->scales;
    t.offsets = e->q.offsets ? &e->offsets : nullptr;
    quant_.push_back(t);
  }
}

const DLTensor* WeightStore::find(std::string_view name) const {
  auto it = find_entry(entries_, name);
  return it == entries_.end() || (*it)->quantized ? nullptr : &(*it)->tensor;
}

const halo_quantized_tensor* WeightStore::find_quantized(std::string_view name) const {
  for (const auto& t : quant_)
    if (name == t.name) return &t;
  return nullptr;
}

uint64_t WeightStore::bytes() const {
  uint64_t total = 0;
  for (const auto& e : entries_) {
    if (!e->quantized) {
      total += static_cast<uint64_t>(numel(e->shape)) * element_bytes(e->tensor.dtype);
      continue;
    }
    total += static_cast<uint64_t>(numel(e->value_shape));
    const uint64_t scale_bytes = static_cast<uint64_t>(numel(e->scale_shape)) * element_bytes(e->q.scale_dtype);
    total += scale_bytes * (e->q.offsets ? 2 : 1);
  }
  return total;
}

uint64_t WeightStore::quantized_elements() const {
  uint64_t n = 0;
  for (const auto& e : entries_)
    if (e->quantized) n += static_cast<uint64_t>(e->q.rows * e->q.cols);
  return n;
}

}  // namespace halo::model
