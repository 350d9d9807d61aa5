#pragma once
// Read-only, memory-mapped GGUF files (versions 2 and 3, little-endian), the
// single-file format of llama.cpp / ggml.
//
// Layout: "GGUF", uint32 version, uint64 tensor count, uint64 metadata count;
// the metadata key/value pairs (a string key, a uint32 value type, the value:
// integers of 8..64 bits, float32/64, bool, string = uint64 length + bytes,
// array = uint32 element type + uint64 count + elements, arrays nesting);
// the tensor infos (name, uint32 n_dims, uint64 dims innermost first, uint32
// ggml type, uint64 offset into the data section); padding to the alignment
// (metadata general.alignment, default 32); the data section.
//
// Everything is validated when the file is opened, before anything is sized
// from it: every count, length and offset against the bytes left in the
// file, dims and types against ggml's block geometry, offsets against the
// alignment and each other. Any malformed input throws halo::Error naming
// the file, the key or tensor and what was wrong.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/safetensors.h"  // MappedFile

namespace halo::model {

// gguf_metadata_value_type.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view gguf_value_type_name(GgufValueType t);

class GgufCursor;  // gguf.cpp: bounds-checked reads over the mapping

struct GgufTensor {
  std::string name;
  uint32_t type = 0;          // ggml_type (model/ggml_blocks.h)
  std::vector<int64_t> dims;  // GGUF order: dims[0] (ne[0]) is the row length
  uint64_t offset = 0;        // from the start of the file
  uint64_t nbytes = 0;
  const std::byte* data = nullptr;

  int64_t cols() const { return dims.empty() ? 1 : dims[0]; }
  int64_t rows() const;                // product of dims[1..]
  std::vector<int64_t> shape() const;  // outermost first, as PyTorch writes it
};

class GgufFile {
 public:
  // Maps and validates `path`. Throws halo::Error.
  explicit GgufFile(const std::filesystem::path& path);
  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  const std::filesystem::path& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  // Every metadata key, arrays as JSON arrays (tokenizer.ggml.tokens, ...).
  const nlohmann::json& metadata_json() const { return metadata_; }
  std::optional<GgufValueType> type_of(std::string_view key) const;
  // Typed lookups: nothing when the key is absent, halo::Error naming the key
  // when it holds another type. get_int takes any integer type, get_float
  // float32/64 and integers.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;

  // In file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find(std::string_view name) const;

 private:
  void parse_header(GgufCursor& c, uint64_t& tensor_count, uint64_t& kv_count);
  void parse_metadata(GgufCursor& c, uint64_t kv_count);
  void parse_tensor_infos(GgufCursor& c, uint64_t tensor_count);
  void place_tensors(uint64_t data_start);
  [[noreturn]] void wrong_type(std::string_view key, std::string_view expected) const;

  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  nlohmann::json metadata_ = nlohmann::json::object();
  std::map<std::string, GgufValueType, std::less<>> types_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

}  // namespace halo::model
