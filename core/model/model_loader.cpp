#include "model/model_loader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "common/error.h"
#include "common/file_text.h"
#include "model/checkpoint_quant.h"
#include "model/gguf_model.h"
#include "model/quantize.h"
#include "model/safetensors.h"
#include "model/weight_map.h"

namespace halo::model {

namespace {

DLDataType dl_dtype(SafetensorsDType t) {
  switch (t) {
    case SafetensorsDType::kF32: return {kDLFloat, 32, 1};
    case SafetensorsDType::kF16: return {kDLFloat, 16, 1};
    case SafetensorsDType::kBF16: return {kDLBfloat, 16, 1};
    default: break;
  }
  return {kDLFloat, 0, 0};
}

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// The NaN/Inf scan reads this many bytes from the start of each tensor: enough
// to catch a tensor that is NaN throughout (a broken conversion or a diverged
// checkpoint), while reading ~0.1% of a multi-GB model instead of all of it.
constexpr size_t kScanBytes = 64 * 1024;

bool non_finite(const std::byte* p, SafetensorsDType t) {
  if (t == SafetensorsDType::kF32) {
    uint32_t x;
    std::memcpy(&x, p, 4);
    return (x & 0x7f800000u) == 0x7f800000u;
  }
  uint16_t x;
  std::memcpy(&x, p, 2);
  return t == SafetensorsDType::kBF16 ? (x & 0x7f80u) == 0x7f80u : (x & 0x7c00u) == 0x7c00u;
}

// Warns (does not refuse: such a file is well-formed) when the scanned prefix
// of a weight holds NaN or Inf values.
void warn_non_finite(const SafetensorsFile& file, const TensorInfo& info, const std::byte* data) {
  const size_t item = dtype_size(info.dtype);
  const size_t n = std::min<uint64_t>(info.nbytes, kScanBytes) / item;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += non_finite(data + i * item, info.dtype) ? 1 : 0;
  if (bad > 0)
    spdlog::warn("{}: tensor '{}' holds NaN or Inf values ({} of the first {} elements checked); the model's output "
                 "will be garbage",
                 file.path().string(), info.name, bad, n);
}

}  // namespace

struct LoadedModel::Impl {
  ModelConfig config;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::shared_ptr<const GgufFile> gguf;  // a GGUF model: its file (the store keeps it mapped)
  WeightStore store;  // the tensors, over the files' mappings or owned copies
};

LoadedModel::LoadedModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LoadedModel::LoadedModel(LoadedModel&&) noexcept = default;
LoadedModel& LoadedModel::operator=(LoadedModel&&) noexcept = default;
LoadedModel::~LoadedModel() = default;

const ModelConfig& LoadedModel::config() const { return impl_->config; }
std::span<const halo_named_tensor> LoadedModel::weights() const { return impl_->store.plain(); }
std::span<const halo_quantized_tensor> LoadedModel::quantized_weights() const {
  return impl_->store.quantized();
}
uint64_t LoadedModel::weight_bytes() const { return impl_->store.bytes(); }
const WeightStore& LoadedModel::store() const { return impl_->store; }
WeightStore& LoadedModel::mutable_store() { return impl_->store; }
ModelConfig& LoadedModel::mutable_config() { return impl_->config; }

const DLTensor* LoadedModel::find(std::string_view canonical_name) const {
  return impl_->store.find(canonical_name);
}

bool LoadedModel::is_compiled() const { return impl_->config.is_compiled(); }

std::vector<std::filesystem::path> LoadedModel::files() const {
  std::vector<std::filesystem::path> out;
  for (const auto& f : impl_->files) out.push_back(f->path());
  if (impl_->gguf) out.push_back(impl_->gguf->path());
  return out;
}

const nlohmann::json* LoadedModel::gguf_metadata() const {
  return impl_->gguf ? &impl_->gguf->metadata_json() : nullptr;
}

namespace {

// Every layer needs tensors of its own: a config asking for more layers than
// the weights hold tensors is refused before anything is sized by it.
void check_layer_count(const ModelConfig& cfg, size_t tensors, const std::filesystem::path& config,
                       const std::filesystem::path& weights) {
  if (static_cast<size_t>(cfg.spec.num_layers) > tensors)
    throw Error(fmt::format("{}: num_hidden_layers={} but {} holds only {} tensors", config.string(),
                            cfg.spec.num_layers, weights.string(), tensors));
}

// A tensor's bytes, aligned to its element size as the plugin ABI requires.
// safetensors allows any header length, so the data section (and every
// tensor in it) can start at an odd offset of the page-aligned mapping; such
// a tensor is copied once to aligned memory (a warning says so).
const std::byte* tensor_bytes(const SafetensorsFile& file, const TensorInfo& info, WeightStore& store) {
  const std::byte* p = file.tensor_data(info);
  const size_t item = dtype_size(info.dtype);
  if (reinterpret_cast<uintptr_t>(p) % item != 0) {
    spdlog::warn("{}: tensor '{}' is not {}-byte aligned in the file (header length not a multiple of 8); copying its "
                 "{} bytes to aligned memory",
                 file.path().string(), info.name, item, info.nbytes);
    std::byte* copy = store.allocate(info.nbytes, fmt::format("{}: tensor '{}'", file.path().string(), info.name));
    std::memcpy(copy, p, info.nbytes);
    p = copy;
  }
  if (is_weight_dtype(info.dtype)) warn_non_finite(file, info, p);
  return p;
}

nlohmann::json read_config_json(const std::filesystem::path& path) {
  // malformed: already refused by load_model_config
  return nlohmann::json::parse(read_file_text(path), nullptr, false);
}

// The target device of a compiled model directory (a manifest.json of
// format halo-compiled-model/...), or nothing for a Hugging Face directory.
std::optional<std::string> compiled_target(const std::filesystem::path& model_dir) {
  const std::filesystem::path manifest_path = model_dir / "manifest.json";
  if (!std::filesystem::exists(manifest_path)) return std::nullopt;
  nlohmann::json manifest = nlohmann::json::parse(read_file_text(manifest_path), nullptr, false);
  if (!manifest.is_object() || manifest.value("format", "").rfind("halo-compiled-model/", 0) != 0)
    return std::nullopt;
  if (!manifest.contains("target") || !manifest["target"].is_string())
    throw Error(
        fmt::format("{}: compiled model manifest has no \"target\"", manifest_path.string()));
  return manifest["target"].get<std::string>();
}

// model.safetensors.index.json's weight_map: HF tensor name -> shard file name.
std::map<std::string, std::string, std::less<>> read_weight_map(
    const std::filesystem::path& index_path) {
  std::map<std::string, std::string, std::less<>> weight_map;
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_file_text(index_path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: malformed JSON: {}", index_path.string(), e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(fmt::format("{}: missing 'weight_map' object", index_path.string()));
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string())
      throw Error(fmt::format("{}: weight_map['{}']={} is not a file name", index_path.string(),
                              name, file.dump()));
    weight_map.emplace(name, file.get<std::string>());
  }
  return weight_map;
}

// The canonical weight `w` as the plugin will see it, over `data`, the bytes
// of file tensor `info`.
TensorView view_of(const WeightSource& w, const TensorInfo& info, const std::byte* data) {
  int64_t row_elems = 1;
  for (size_t d = 1; d < w.shape.size(); ++d) row_elems *= w.shape[d];
  return TensorView{data, static_cast<uint64_t>(w.row_begin * row_elems) * dtype_size(info.dtype),
                    dl_dtype(info.dtype), w.shape};
}

// The safetensors files of a model directory (one file, or the shards an
// index names, each opened on first use) and each tensor's bytes as the
// plugin will see them (fused tensors are shared by several weights: checked
// and copied once). Opened files go to `files`, copies to `store`.
class TensorFiles {
 public:
  TensorFiles(const std::filesystem::path& dir, std::vector<std::unique_ptr<SafetensorsFile>>& files,
              WeightStore& store)
      : dir_(dir), single_(dir / "model.safetensors"), index_(dir / "model.safetensors.index.json"),
        files_(files), store_(store) {
    sharded_ = !std::filesystem::exists(single_);
    if (!sharded_) {
      files_.push_back(std::make_unique<SafetensorsFile>(single_));
      return;
    }
    if (!std::filesystem::exists(index_))
      throw Error(fmt::format("{}: no weights: neither model.safetensors nor model.safetensors.index.json exists",
                              dir.string()));
    weight_map_ = read_weight_map(index_);
  }

  // The file that holds weight `w` (an Error naming it when none does).
  const SafetensorsFile& file_for(const WeightSource& w) {
    if (!sharded_) return *files_.front();
    auto it = weight_map_.find(w.hf_name);
    if (it == weight_map_.end())
      throw Error(fmt::format("{}: missing tensor '{}' (for {}, expected shape {}): not in weight_map",
                              index_.string(), w.hf_name, w.canonical, shape_str(w.hf_shape)));
    return open_shard(it->second, w.hf_name);
  }

  const std::byte* bytes_of(const SafetensorsFile& file, const TensorInfo& info) {
    auto [it, fresh] = resolved_.emplace(&info, nullptr);
    if (fresh) it->second = tensor_bytes(file, info, store_);
    return it->second;
  }

  // Any tensor by name, or nothing (the parts of quantized projections).
  FoundTensor lookup(const std::string& hf_name) {
    const SafetensorsFile* file = sharded_ ? nullptr : files_.front().get();
    if (sharded_) {
      auto it = weight_map_.find(hf_name);
      if (it == weight_map_.end()) return {};
      file = &open_shard(it->second, hf_name);
    }
    const TensorInfo* info = file->find(hf_name);
    if (!info) return {};
    return {file, info, bytes_of(*file, *info)};
  }

  size_t tensor_count() const { return sharded_ ? weight_map_.size() : files_.front()->tensors().size(); }
  const std::filesystem::path& source() const { return sharded_ ? index_ : single_; }

 private:
  const SafetensorsFile& open_shard(const std::string& name, const std::string& hf_name) {
    auto open = shard_by_name_.find(name);
    if (open != shard_by_name_.end()) return *open->second;
    const std::filesystem::path shard_path = dir_ / name;
    if (!std::filesystem::exists(shard_path))
      throw Error(fmt::format("{}: shard '{}' (holding tensor '{}') not found at {}", index_.string(), name,
                              hf_name, shard_path.string()));
    files_.push_back(std::make_unique<SafetensorsFile>(shard_path));
    shard_by_name_.emplace(name, files_.back().get());
    return *files_.back();
  }

  std::filesystem::path dir_, single_, index_;
  std::vector<std::unique_ptr<SafetensorsFile>>& files_;
  WeightStore& store_;
  bool sharded_ = false;
  std::map<std::string, std::string, std::less<>> weight_map_;  // HF name -> shard file name
  std::map<std::string, SafetensorsFile*, std::less<>> shard_by_name_;
  std::map<const TensorInfo*, const std::byte*> resolved_;
};

}  // namespace

LoadedModel LoadedModel::load(const std::filesystem::path& model_dir) {
  auto impl = std::make_unique<Impl>();
  if (std::optional<std::filesystem::path> gguf = find_gguf(model_dir)) {
    impl->gguf = std::make_shared<const GgufFile>(*gguf);
    impl->config = gguf_model_config(*impl->gguf);
    load_gguf_weights(impl->gguf, impl->config, impl->store);
    spdlog::debug("{}: {} plain and {} quantized weights, {} bytes", gguf->string(),
                  impl->store.plain().size(), impl->store.quantized().size(), impl->store.bytes());
    return LoadedModel(std::move(impl));
  }
  impl->config = load_model_config(model_dir);
  const ModelConfig& cfg = impl->config;

  // A compiled model directory: the plugin reads its own files.
  if (std::optional<std::string> target = compiled_target(model_dir)) {
    impl->config.set_compiled(std::filesystem::absolute(model_dir).lexically_normal().string(),
                              *target);
    spdlog::debug("{}: compiled model for device '{}'", model_dir.string(), cfg.compiled_target());
    return LoadedModel(std::move(impl));
  }

  TensorFiles files(model_dir, impl->files, impl->store);
  const TensorLookup lookup = [&](const std::string& hf_name) { return files.lookup(hf_name); };
  const CheckpointQuantization checkpoint_quant = parse_checkpoint_quantization(
      read_config_json(model_dir / "config.json"), (model_dir / "config.json").string());

  check_layer_count(cfg, files.tensor_count(), model_dir / "config.json", files.source());
  const std::vector<WeightSource> expected = expected_weights(cfg);
  for (const WeightSource& w : expected) {
    if (load_quantized_projection(checkpoint_quant, w, lookup, impl->store)) continue;
    const SafetensorsFile& file = files.file_for(w);
    const std::string fname = file.path().string();
    const TensorInfo* info = file.find(w.hf_name);
    if (info == nullptr)
      throw Error(fmt::format("{}: missing tensor '{}' (for {}, expected shape {})", fname, w.hf_name, w.canonical,
                              shape_str(w.hf_shape)));
    if (!is_weight_dtype(info->dtype))
      throw Error(fmt::format("{}: tensor '{}' has dtype {}; weights must be F32, BF16 or F16", fname, w.hf_name,
                              dtype_name(info->dtype)));
    if (info->shape != w.hf_shape)
      throw Error(fmt::format("{}: tensor '{}' has shape {}, expected {} (for {})", fname, w.hf_name,
                              shape_str(info->shape), shape_str(w.hf_shape), w.canonical));

    impl->store.add(w.canonical, view_of(w, *info, files.bytes_of(file, *info)));
  }
  spdlog::debug("{}: {} weights, {} bytes from {} file(s)", model_dir.string(), impl->store.plain().size(),
                impl->store.bytes(), impl->files.size());
  return LoadedModel(std::move(impl));
}

ModelConfig load_config(const std::filesystem::path& model_path) {
  if (std::optional<std::filesystem::path> gguf = find_gguf(model_path)) return gguf_model_config(GgufFile(*gguf));
  return load_model_config(model_path);
}

LoadedModel LoadedModel::load(const std::filesystem::path& model_dir, const LoadOptions& options) {
  LoadedModel model = load(model_dir);
  quantize_model(model, QuantizationOptions{options.quantization, options.quantization_group_size});
  return model;
}

}  // namespace halo::model
