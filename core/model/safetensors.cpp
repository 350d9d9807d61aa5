#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace halo::model {

namespace {

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

struct DTypeEntry {
  std::string_view name;
  SafetensorsDType type;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {"F64", SafetensorsDType::kF64, 8},       {"F32", SafetensorsDType::kF32, 4},
    {"F16", SafetensorsDType::kF16, 2},       {"BF16", SafetensorsDType::kBF16, 2},
    {"I64", SafetensorsDType::kI64, 8},       {"I32", SafetensorsDType::kI32, 4},
    {"I16", SafetensorsDType::kI16, 2},       {"I8", SafetensorsDType::kI8, 1},
    {"U8", SafetensorsDType::kU8, 1},         {"U16", SafetensorsDType::kU16, 2},
    {"U32", SafetensorsDType::kU32, 4},       {"U64", SafetensorsDType::kU64, 8},
    {"BOOL", SafetensorsDType::kBool, 1},     {"F8_E4M3", SafetensorsDType::kF8E4M3, 1},
    {"F8_E5M2", SafetensorsDType::kF8E5M2, 1},
};

}  // namespace

// ------------------------------------------------------------------ MappedFile

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));  // a FIFO must not block the open
  if (fd.get() < 0) throw Error(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw Error(fmt::format("{}: cannot stat: {}", path.string(), std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(fmt::format("{}: not a regular file", path.string()));
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;  // mmap of length 0 fails; an empty file has no data
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) throw Error(fmt::format("{}: mmap of {} bytes failed: {}", path.string(), size_, std::strerror(errno)));
  map_ = p;
  data_ = static_cast<const std::byte*>(p);
}

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_), map_(other.map_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.map_ = nullptr;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    map_ = other.map_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.map_ = nullptr;
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (map_ != nullptr) ::munmap(map_, size_);
  map_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

// ------------------------------------------------------------------ dtypes

std::string_view dtype_name(SafetensorsDType t) {
  for (const auto& e : kDTypes)
    if (e.type == t) return e.name;
  return "?";
}

size_t dtype_size(SafetensorsDType t) {
  for (const auto& e : kDTypes)
    if (e.type == t) return e.size;
  return 0;
}

bool is_weight_dtype(SafetensorsDType t) {
  return t == SafetensorsDType::kF32 || t == SafetensorsDType::kBF16 || t == SafetensorsDType::kF16;
}

// ------------------------------------------------------------------ SafetensorsFile

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : file_(path) {
  const std::string fname = path.string();
  const size_t size = file_.size();
  if (size < 8)
    throw Error(fmt::format("{}: file of {} bytes is too small for a safetensors header length (8 bytes)", fname, size));
  uint64_t header_len = 0;
  const auto* b = reinterpret_cast<const unsigned char*>(file_.data());
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | b[i];
  if (header_len > size - 8)
    throw Error(fmt::format("{}: header length {} goes beyond the end of the file ({} bytes)", fname, header_len, size));
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(file_.data()) + 8,
                                   reinterpret_cast<const char*>(file_.data()) + data_start);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: malformed header JSON ({} bytes): {}", fname, header_len, e.what()));
  }
  if (!header.is_object()) throw Error(fmt::format("{}: header JSON is not an object", fname));

  for (const auto& item : header.items()) {
    // Named copies, not structured bindings: lambdas below capture them (clang < 16 refuses that).
    const std::string& name = item.key();
    const auto& entry = item.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) throw Error(fmt::format("{}: __metadata__ is not an object", fname));
      for (const auto& [k, v] : entry.items()) metadata_[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    auto bad = [&](const std::string& what) {
      return Error(fmt::format("{}: tensor '{}': {}", fname, name, what));
    };
    if (!entry.is_object()) throw bad(fmt::format("entry {} is not an object", entry.dump()));
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) throw bad("missing or non-string 'dtype'");
    if (!entry.contains("shape") || !entry["shape"].is_array()) throw bad("missing or non-list 'shape'");
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
      throw bad("missing 'data_offsets' [begin, end]");

    TensorInfo info;
    info.name = name;
    const std::string dt = entry["dtype"].get<std::string>();
    bool known = false;
    for (const auto& e : kDTypes) {
      if (e.name == dt) {
        info.dtype = e.type;
        known = true;
      }
    }
    if (!known) throw bad(fmt::format("unknown dtype '{}'", dt));

    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        throw bad(fmt::format("shape {} has a non-integer or negative dimension", entry["shape"].dump()));
      const auto dim = static_cast<uint64_t>(d.get<int64_t>());
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / dim) overflow = true;
      numel *= dim;
      info.shape.push_back(d.get<int64_t>());
    }
    if (overflow) throw bad(fmt::format("shape {} is too large", entry["shape"].dump()));

    const auto& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw bad(fmt::format("data_offsets {} are not non-negative integers", off.dump()));
    const uint64_t begin = off[0].get<uint64_t>();
    const uint64_t end = off[1].get<uint64_t>();
    if (begin > end) throw bad(fmt::format("data_offsets {} have begin after end", off.dump()));
    if (end > data_size)
      throw bad(fmt::format("data_offsets {} go beyond the data section ({} bytes; file truncated?)", off.dump(),
                            data_size));
    const uint64_t expected = numel * dtype_size(info.dtype);
    if (end - begin != expected)
      throw bad(fmt::format("data_offsets {} span {} bytes but shape {} of {} needs {}", off.dump(), end - begin,
                            entry["shape"].dump(), dt, expected));
    info.data_offset = data_start + begin;
    info.nbytes = end - begin;
    tensors_.emplace(name, std::move(info));
  }
  check_no_overlap(fname);
}

// Two tensors sharing bytes would alias (a write through one plugin view
// changes the other) and is never what a writer meant: refuse the file.
void SafetensorsFile::check_no_overlap(const std::string& fname) const {
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_)
    if (info.nbytes > 0) by_offset.push_back(&info);  // empty tensors occupy nothing
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->data_offset < b->data_offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    const TensorInfo& cur = *by_offset[i];
    if (cur.data_offset < prev.data_offset + prev.nbytes)
      throw Error(fmt::format("{}: tensor '{}' (file bytes {}..{}) overlaps tensor '{}' (file bytes {}..{})", fname,
                              cur.name, cur.data_offset, cur.data_offset + cur.nbytes, prev.name, prev.data_offset,
                              prev.data_offset + prev.nbytes));
  }
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace halo::model
