#include "model/gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "model/ggml_blocks.h"

namespace halo::model {

namespace {

constexpr uint64_t kMaxKeyBytes = 65535;  // the format's limit
constexpr uint64_t kMaxNameBytes = 1024;  // ggml's is 63; generous
constexpr uint32_t kMaxDims = 4;          // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;         // arrays of arrays of ...
constexpr uint64_t kMaxElements = uint64_t{1} << 50;

struct TypeInfo {
  GgufValueType type;
  std::string_view name;
  uint64_t min_bytes;  // the fewest bytes one value of the type takes
};

constexpr TypeInfo kValueTypes[] = {
    {GgufValueType::kUint8, "uint8", 1},     {GgufValueType::kInt8, "int8", 1},
    {GgufValueType::kUint16, "uint16", 2},   {GgufValueType::kInt16, "int16", 2},
    {GgufValueType::kUint32, "uint32", 4},   {GgufValueType::kInt32, "int32", 4},
    {GgufValueType::kFloat32, "float32", 4}, {GgufValueType::kBool, "bool", 1},
    {GgufValueType::kString, "string", 8},   {GgufValueType::kArray, "array", 12},
    {GgufValueType::kUint64, "uint64", 8},   {GgufValueType::kInt64, "int64", 8},
    {GgufValueType::kFloat64, "float64", 8},
};

const TypeInfo* value_type(uint32_t t) {
  for (const auto& v : kValueTypes)
    if (static_cast<uint32_t>(v.type) == t) return &v;
  return nullptr;
}

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string_view gguf_value_type_name(GgufValueType t) {
  const TypeInfo* v = value_type(static_cast<uint32_t>(t));
  return v ? v->name : "unknown";
}

int64_t GgufTensor::rows() const {
  int64_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

std::vector<int64_t> GgufTensor::shape() const { return {dims.rbegin(), dims.rend()}; }

// Little-endian reads over the mapped bytes; every read is checked against
// the end of the file, and errors say where and what was being read.
class GgufCursor {
 public:
  GgufCursor(const std::byte* data, uint64_t size, std::string file)
      : data_(data), size_(size), file_(std::move(file)) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const std::string& file() const { return file_; }

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw Error(fmt::format("{}: {}: {} (at byte {} of {})", file_, where, what, pos_, size_));
  }

  template <class T>
  T read(const std::string& where) {
    if (left() < sizeof(T)) fail(where, fmt::format("{} bytes needed, the file ends", sizeof(T)));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string string(const std::string& where, uint64_t max_len) {
    const auto len = read<uint64_t>(where);
    if (len > left())
      fail(where, fmt::format("string of {} bytes goes beyond the end of the file", len));
    if (len > max_len)
      fail(where, fmt::format("string of {} bytes is longer than the {} allowed", len, max_len));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

  // A count of items that each take at least `min_bytes`: refused when the
  // rest of the file cannot hold them (so nothing is sized from it).
  uint64_t count(const std::string& where, uint64_t min_bytes) {
    const auto n = read<uint64_t>(where);
    if (n > left() / min_bytes)
      fail(where, fmt::format("count {} cannot fit in the {} bytes left (at least {} bytes each)",
                              n, left(), min_bytes));
    return n;
  }

 private:
  const std::byte* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string file_;
};

namespace {

using Cursor = GgufCursor;
nlohmann::json read_value(Cursor& c, GgufValueType t, const std::string& where, int depth);

nlohmann::json read_array(Cursor& c, const std::string& where, int depth) {
  if (depth >= kMaxArrayDepth)
    c.fail(where, fmt::format("arrays nested deeper than {}", kMaxArrayDepth));
  const auto elem = c.read<uint32_t>(where + " (array element type)");
  const TypeInfo* info = value_type(elem);
  if (info == nullptr) c.fail(where, fmt::format("unknown array element type {}", elem));
  const uint64_t n = c.count(where + " (array length)", info->min_bytes);
  nlohmann::json arr = nlohmann::json::array();
  arr.get_ref<nlohmann::json::array_t&>().reserve(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) arr.push_back(read_value(c, info->type, where, depth + 1));
  return arr;
}

nlohmann::json read_value(Cursor& c, GgufValueType t, const std::string& where, int depth) {
  switch (t) {
    case GgufValueType::kUint8:
      return c.read<uint8_t>(where);
    case GgufValueType::kInt8:
      return c.read<int8_t>(where);
    case GgufValueType::kUint16:
      return c.read<uint16_t>(where);
    case GgufValueType::kInt16:
      return c.read<int16_t>(where);
    case GgufValueType::kUint32:
      return c.read<uint32_t>(where);
    case GgufValueType::kInt32:
      return c.read<int32_t>(where);
    case GgufValueType::kUint64:
      return c.read<uint64_t>(where);
    case GgufValueType::kInt64:
      return c.read<int64_t>(where);
    case GgufValueType::kFloat32:
      return c.read<float>(where);
    case GgufValueType::kFloat64:
      return c.read<double>(where);
    case GgufValueType::kBool: {
      const auto b = c.read<uint8_t>(where);
      if (b > 1) c.fail(where, fmt::format("bool value {} is neither 0 nor 1", b));
      return b == 1;
    }
    case GgufValueType::kString:
      return c.string(where, std::numeric_limits<uint64_t>::max());
    case GgufValueType::kArray:
      return read_array(c, where, depth);
  }
  c.fail(where, fmt::format("unknown value type {}", static_cast<uint32_t>(t)));
}

// Element count of `dims` times the bytes per element of `type`, or nothing
// on overflow.
std::optional<uint64_t> tensor_bytes(const std::vector<int64_t>& dims, const GgmlBlock& blk) {
  uint64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) {
    const auto d = static_cast<uint64_t>(dims[i]);
    if (rows > kMaxElements / d) return std::nullopt;
    rows *= d;
  }
  const auto row = static_cast<uint64_t>(dims[0] / blk.elems * blk.bytes);
  if (static_cast<uint64_t>(dims[0]) > kMaxElements || (rows != 0 && row > kMaxElements / rows))
    return std::nullopt;
  return rows * row;
}

}  // namespace

GgufFile::GgufFile(const std::filesystem::path& path) : file_(path) {
  GgufCursor c(file_.data(), file_.size(), path.string());
  uint64_t tensor_count = 0, kv_count = 0;
  parse_header(c, tensor_count, kv_count);
  parse_metadata(c, kv_count);
  parse_tensor_infos(c, tensor_count);
  const uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_start > file_.size())
    c.fail("data section",
           fmt::format("starts at byte {}, beyond the end of the file", data_start));
  place_tensors(data_start);
}

void GgufFile::parse_header(GgufCursor& c, uint64_t& tensor_count, uint64_t& kv_count) {
  if (file_.size() < 4 || std::memcmp(file_.data(), "GGUF", 4) != 0)
    c.fail("header", "not a GGUF file (the first 4 bytes are not \"GGUF\")");
  c.read<uint32_t>("magic");
  version_ = c.read<uint32_t>("header version");
  if (version_ == 1)
    c.fail("header", "GGUF version 1 is not supported (only 2 and 3; convert the file again)");
  if (version_ == 0x02000000u || version_ == 0x03000000u)
    c.fail("header", "big-endian GGUF files are not supported");
  if (version_ != 2 && version_ != 3)
    c.fail("header", fmt::format("unsupported GGUF version {} (2 or 3)", version_));
  tensor_count = c.read<uint64_t>("header tensor count");
  kv_count = c.read<uint64_t>("header metadata count");
  // A key/value pair takes at least 13 bytes, a tensor info at least 32.
  if (kv_count > c.left() / 13)
    c.fail("header",
           fmt::format("metadata count {} cannot fit in the {} bytes left", kv_count, c.left()));
  if (tensor_count > c.left() / 32)
    c.fail("header",
           fmt::format("tensor count {} cannot fit in the {} bytes left", tensor_count, c.left()));
}

void GgufFile::parse_metadata(GgufCursor& c, uint64_t kv_count) {
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string key = c.string(fmt::format("metadata key #{}", i), kMaxKeyBytes);
    const std::string where = fmt::format("metadata key '{}'", key);
    const auto raw = c.read<uint32_t>(where + " (value type)");
    const TypeInfo* info = value_type(raw);
    if (info == nullptr) c.fail(where, fmt::format("unknown value type {}", raw));
    if (types_.count(key) != 0) c.fail(where, "duplicate key");
    metadata_[key] = read_value(c, info->type, where, 0);
    types_.emplace(key, info->type);
  }
  if (auto a = types_.find("general.alignment"); a != types_.end()) {
    const nlohmann::json& v = metadata_["general.alignment"];
    if (!is_integer(a->second) || !v.is_number_unsigned() || v.get<uint64_t>() == 0 ||
        !std::has_single_bit(v.get<uint64_t>()) || v.get<uint64_t>() > (uint64_t{1} << 30))
      c.fail("metadata key 'general.alignment'",
             fmt::format("{} is not a power of two up to 2^30", v.dump()));
    alignment_ = v.get<uint64_t>();
  }
}

void GgufFile::parse_tensor_infos(GgufCursor& c, uint64_t tensor_count) {
  tensors_.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor t;
    t.name = c.string(fmt::format("tensor #{} name", i), kMaxNameBytes);
    const std::string where = fmt::format("tensor '{}'", t.name);
    if (by_name_.count(t.name) != 0) c.fail(where, "duplicate tensor name");
    const auto n_dims = c.read<uint32_t>(where + " (n_dims)");
    if (n_dims == 0 || n_dims > kMaxDims)
      c.fail(where, fmt::format("n_dims={} is not 1..{}", n_dims, kMaxDims));
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = c.read<uint64_t>(where + " (dims)");
      if (dim == 0 || dim > kMaxElements) c.fail(where, fmt::format("dimension {} is {}", d, dim));
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    t.type = c.read<uint32_t>(where + " (type)");
    const std::optional<GgmlBlock> blk = ggml_block(t.type);
    if (!blk) c.fail(where, fmt::format("unknown ggml type {}", t.type));
    if (t.dims[0] % blk->elems != 0)
      c.fail(where, fmt::format("row length {} is not a multiple of {}'s block of {} elements",
                                t.dims[0], ggml_type_name(t.type), blk->elems));
    const std::optional<uint64_t> bytes = tensor_bytes(t.dims, *blk);
    if (!bytes) c.fail(where, "size overflows");
    t.nbytes = *bytes;
    t.offset = c.read<uint64_t>(where + " (offset)");
    if (t.offset % alignment_ != 0)
      c.fail(where,
             fmt::format("offset {} is not a multiple of the alignment {}", t.offset, alignment_));
    by_name_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
}

// Turns data-section offsets into file offsets, each tensor inside the file
// and no two overlapping.
void GgufFile::place_tensors(uint64_t data_start) {
  const std::string fname = path().string();
  const uint64_t data_size = data_start <= file_.size() ? file_.size() - data_start : 0;
  std::vector<GgufTensor*> order;
  for (GgufTensor& t : tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      throw Error(fmt::format(
          "{}: tensor '{}' ({}, {} bytes at data offset {}) goes beyond the end of the file "
          "(data section of {} bytes; file truncated?)",
          fname, t.name, ggml_type_name(t.type), t.nbytes, t.offset, data_size));
    t.offset += data_start;
    t.data = file_.data() + t.offset;
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i]->offset < order[i - 1]->offset + order[i - 1]->nbytes)
      throw Error(fmt::format("{}: tensor '{}' overlaps tensor '{}'", fname, order[i]->name,
                              order[i - 1]->name));
  }
}

std::optional<GgufValueType> GgufFile::type_of(std::string_view key) const {
  auto it = types_.find(key);
  if (it == types_.end()) return std::nullopt;
  return it->second;
}

void GgufFile::wrong_type(std::string_view key, std::string_view expected) const {
  throw Error(fmt::format("{}: metadata key '{}' is {}, expected {}", path().string(), key,
                          gguf_value_type_name(*type_of(key)), expected));
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const auto t = type_of(key);
  if (!t) return std::nullopt;
  if (*t != GgufValueType::kString) wrong_type(key, "a string");
  return metadata_.find(key)->get<std::string>();
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const auto t = type_of(key);
  if (!t) return std::nullopt;
  if (!is_integer(*t)) wrong_type(key, "an integer");
  const nlohmann::json& v = *metadata_.find(key);
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw Error(
        fmt::format("{}: metadata key '{}' = {} is out of range", path().string(), key, v.dump()));
  return v.get<int64_t>();
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const auto t = type_of(key);
  if (!t) return std::nullopt;
  if (*t != GgufValueType::kFloat32 && *t != GgufValueType::kFloat64 && !is_integer(*t))
    wrong_type(key, "a number");
  return metadata_.find(key)->get<double>();
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const auto t = type_of(key);
  if (!t) return std::nullopt;
  if (*t != GgufValueType::kBool) wrong_type(key, "a bool");
  return metadata_.find(key)->get<bool>();
}

const GgufTensor* GgufFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace halo::model
