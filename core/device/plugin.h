#pragma once
// The C++ face of the device ABI: loading a plugin library and RAII owners for
// what it creates. Every halo_error* a plugin returns becomes a DeviceError
// here, so the rest of the core works with exceptions and never sees the C
// calling conventions.
//
// Lifetimes: every object keeps a shared_ptr to the Plugin it came from, so a
// library is unloaded only after the last object it made is destroyed.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "halo/device_abi.h"

namespace halo::device {

// An error a plugin reported: its status code and message.
class DeviceError : public Error {
 public:
  DeviceError(halo_status_code code, const std::string& message) : Error(message), code_(code) {}
  halo_status_code code() const { return code_; }

 private:
  halo_status_code code_;
};

const char* status_name(halo_status_code code);

// Device facts in C++ form (copied out of halo_device_properties).
struct DeviceInfo {
  int index = 0;
  halo_device_kind kind = HALO_DEVICE_KIND_OTHER;
  std::string name;
  std::string vendor;
  uint64_t memory_bytes = 0;
  uint64_t memory_free_bytes = 0;
  int num_chips = 1;
  uint32_t capabilities = 0;
  int max_batch_size = 0;
  int required_block_size = 0;
  int max_model_len = 0;
  uint32_t kv_cache_dtypes = 0;  // HALO_DTYPE_BIT set (v1.3); 0: not said
  uint32_t compute_dtypes = 0;   // what the option "dtype" takes (v1.3); 0: no such option
  uint32_t quant_types = 0;      // HALO_DTYPE_BIT(halo_quant_type) prepare accepts (v1.4); 0: none
};
std::string kind_name(halo_device_kind kind);

// ABI v1.1 device counters (device_get_stats), e.g. a simulator's clock.
struct DeviceStats {
  uint64_t steps = 0;
  uint64_t tokens = 0;
  double device_seconds = 0, compute_seconds = 0, memory_seconds = 0, link_seconds = 0;
  std::vector<uint64_t> chip_memory_used, chip_memory_capacity;  // one per chip
};
std::string capability_names(uint32_t capabilities);

class Plugin : public std::enable_shared_from_this<Plugin> {
 public:
  // Loads `libhalo_plugin_<name>.so` from the search path, or the file itself
  // when `name_or_path` contains a '/' or ends in ".so". Throws Error naming
  // the file and, for an ABI mismatch, both versions.
  static std::shared_ptr<Plugin> load(const std::string& name_or_path);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const halo_plugin_api& api() const { return *api_; }
  const std::string& name() const { return name_; }
  const std::filesystem::path& path() const { return path_; }
  std::string version_string() const;

  int device_count() const;
  DeviceInfo device_info(int index) const;

  // ABI v1.1 entries; has_*() is false for a v1.0 plugin or a NULL entry.
  bool has_compile() const;
  bool has_device_stats() const;
  // Cumulative counters of device `index`; nullopt when the plugin has none.
  std::optional<DeviceStats> device_stats(int index) const;

  // Throws DeviceError (and destroys the error object) when `error` is set.
  void check(halo_error* error, const char* what) const;

 private:
  struct Library;
  Plugin() = default;
  std::unique_ptr<Library> library_;
  const halo_plugin_api* api_ = nullptr;
  std::string name_;
  std::filesystem::path path_;
};

// Directories searched for plugins, in order: each entry of HALO_PLUGIN_PATH
// (colon separated), then <dir of the halo binary>/../lib/halo/plugins.
std::vector<std::filesystem::path> plugin_search_path();

// Every plugin library file found on the search path (first wins per name).
struct PluginFile {
  std::string name;
  std::filesystem::path path;
};
std::vector<PluginFile> find_plugin_files();

// Throws an Error unless the device runs every quantized type in `quantized`
// (the message names the types the model has, an example weight, and what the
// device accepts). Also used before compile.
void check_quantized_supported(const Plugin& plugin, const DeviceInfo& info,
                               std::span<const halo_quantized_tensor> quantized);

// Options handed to plugins as key/value strings.
using Options = std::vector<std::pair<std::string, std::string>>;

// ABI v1.3 device_measure_peak: a device's dense matmul peak.
struct MeasuredPeak {
  double flops_per_s = 0;
  std::string method;  // how the plugin got it
};

class Device {
 public:
  Device(std::shared_ptr<Plugin> plugin, int index, const Options& options = {});
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  halo_device* handle() const { return handle_; }
  Plugin& plugin() const { return *plugin_; }
  const std::shared_ptr<Plugin>& plugin_ptr() const { return plugin_; }
  const DeviceInfo& info() const { return info_; }
  // ABI v1.5: execute can return the rows lm_head takes (HALO_CAP_HIDDEN_STATES).
  bool has_hidden_states() const;
  // ABI v1.6: LoRA adapter slots (HALO_CAP_LORA and a lora_slot_set entry).
  bool has_lora() const;

  // The matmul peak in `compute_dtype` (HALO_COMPUTE_DTYPE_*), taking about
  // `budget_seconds`; nullopt when the plugin has no device_measure_peak.
  // Throws DeviceError when the plugin fails (UNIMPLEMENTED for a type it
  // cannot measure). Same thread rules as the device's other calls.
  std::optional<MeasuredPeak> measure_peak(int32_t compute_dtype, double budget_seconds) const;

 private:
  std::shared_ptr<Plugin> plugin_;
  halo_device* handle_ = nullptr;
  DeviceInfo info_;
};

class Executable {
 public:
  // `limits` goes in as proposed and comes back as agreed. The weights' memory
  // must outlive this object (the ABI lets a plugin use it in place).
  // Quantized weights (ABI v1.4) go only to a device that lists their types;
  // otherwise this throws an Error naming the model's types and the device's.
  Executable(std::shared_ptr<Device> device, const halo_model_spec& spec,
             const std::vector<halo_named_tensor>& weights, halo_limits& limits,
             const Options& options = {}, std::span<const halo_quantized_tensor> quantized = {});
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  halo_executable* handle() const { return handle_; }
  Device& device() const { return *device_; }
  const halo_limits& limits() const { return limits_; }
  // ABI v1.6: fills LoRA slot `slot` (weights named "{projection}.lora_a" /
  // ".lora_b", scale folded into B), or empties it (no weights). The plugin
  // copies them. Same thread rules as execute.
  void set_lora_slot(int32_t slot, const std::vector<halo_named_tensor>& weights);

 private:
  std::shared_ptr<Device> device_;
  halo_executable* handle_ = nullptr;
  halo_limits limits_{};
};

// The flat host inputs of one execute() step, as halo_execute_args takes
// them, and the one way to build them (the engine's runner and halo bench
// both do): begin(), then add_sequence() per sequence, request_logits() for
// the rows whose logits are wanted. The owner reuses the memory step after step.
struct StepInputs {
  std::vector<int32_t> token_ids, positions, query_start, context_lens, block_tables,
      logits_indices;
  std::vector<int64_t> slot_mapping;
  std::vector<int32_t> lora_slots;  // [num_seqs]: -1 = the base model (ABI v1.6)
  int32_t max_blocks_per_seq = 0;   // block_tables is [num_seqs, max_blocks_per_seq]

  // Starts a step of `num_seqs` sequences with block tables of at most
  // `max_blocks` entries (the rest of each row is -1).
  void begin(size_t num_seqs, int32_t max_blocks) {
    token_ids.clear();
    positions.clear();
    slot_mapping.clear();
    query_start.assign(1, 0);
    context_lens.clear();
    logits_indices.clear();
    lora_slots.clear();
    max_blocks_per_seq = max_blocks;
    block_tables.assign(num_seqs * static_cast<size_t>(max_blocks), -1);
  }
  // Appends the next sequence: its tokens at positions [start, start + count)
  // (token_at(pos) gives each id, written to slots through `blocks`), its
  // context length start + count and its block table. Returns the step row of
  // its first new token.
  template <class TokenAt>
  int32_t add_sequence(TokenAt&& token_at, int start, int count, const std::vector<int32_t>& blocks,
                       int block_size) {
    const auto first = static_cast<int32_t>(token_ids.size());
    const size_t seq = query_start.size() - 1;
    for (int pos = start; pos < start + count; ++pos) {
      token_ids.push_back(token_at(pos));
      positions.push_back(pos);
      slot_mapping.push_back(int64_t{blocks[static_cast<size_t>(pos / block_size)]} * block_size +
                             pos % block_size);
    }
    query_start.push_back(static_cast<int32_t>(token_ids.size()));
    context_lens.push_back(start + count);
    lora_slots.push_back(-1);
    std::copy(blocks.begin(), blocks.end(),
              block_tables.begin() +
                  static_cast<std::ptrdiff_t>(seq * static_cast<size_t>(max_blocks_per_seq)));
    return first;
  }
  // Runs the sequence added last with LoRA slot `slot`.
  void set_lora_slot(int32_t slot) { lora_slots.back() = slot; }
  // Asks for the logits of step row `row`; returns their row in the output.
  int32_t request_logits(int32_t row) {
    logits_indices.push_back(row);
    return static_cast<int32_t>(logits_indices.size()) - 1;
  }
};

class KvCache {
 public:
  KvCache(std::shared_ptr<Executable> executable, int num_blocks, int block_size);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  halo_kv_cache* handle() const { return handle_; }
  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  void copy_blocks(const std::vector<int32_t>& src, const std::vector<int32_t>& dst);
  // Runs one step on this cache's executable (num_seqs = query_start.size() - 1)
  // and writes one fp32 row of `vocab` logits per logits index into `logits`,
  // grown as needed. With `hidden` (ABI v1.5, a device with
  // HALO_CAP_HIDDEN_STATES, else an Error), also the `hidden->size` wide rows
  // lm_head took for the same indices, into hidden->rows.
  struct HiddenStates {
    int64_t size = 0;
    std::vector<float> rows;
  };
  void execute(const StepInputs& in, int64_t vocab, std::vector<float>& logits,
               HiddenStates* hidden = nullptr);

 private:
  std::shared_ptr<Executable> executable_;
  halo_kv_cache* handle_ = nullptr;
  int num_blocks_ = 0;
  int block_size_ = 0;
};

}  // namespace halo::device
