#pragma once
// Read-only, memory-mapped safetensors files.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
//  "__metadata__": {..}}, then the data; offsets are relative to the data.
// The header is validated when the file is opened (offsets inside the data
// section, byte size = dtype size x shape, no two tensors overlapping): every
// error names the file and, where there is one, the tensor. The header length
// need not be a multiple of 8, so tensor data may be unaligned in the mapping
// (the model loader copies such tensors to aligned memory).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace halo::model {

// A whole file mapped read-only. Non-copyable, movable; unmaps on destruction.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void reset() noexcept;
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  // what munmap gets (null for an empty file)
};

// Element types a safetensors header may name. Only F32, BF16 and F16 are
// accepted as weights; the others are parsed so the file can be validated.
enum class SafetensorsDType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kU16, kU32, kU64, kBool, kF8E4M3, kF8E5M2 };

std::string_view dtype_name(SafetensorsDType t);
size_t dtype_size(SafetensorsDType t);
bool is_weight_dtype(SafetensorsDType t);  // F32, BF16, F16

struct TensorInfo {
  std::string name;
  SafetensorsDType dtype;
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;  // from the start of the file
  uint64_t nbytes = 0;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. Throws halo::Error.
  explicit SafetensorsFile(const std::filesystem::path& path);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  const std::filesystem::path& path() const { return file_.path(); }
  const std::map<std::string, TensorInfo, std::less<>>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorInfo* find(std::string_view name) const;
  // Pointer to the first byte of a tensor's data.
  const std::byte* tensor_data(const TensorInfo& info) const { return file_.data() + info.data_offset; }
  const std::byte* file_data() const { return file_.data(); }
  size_t file_size() const { return file_.size(); }

 private:
  void check_no_overlap(const std::string& fname) const;

  MappedFile file_;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace halo::model
