#pragma once
// Loading the models a server serves, one after the other, each with its own
// AsyncEngine and KV budget. Before a model is loaded its memory is checked
// against what is left of its device: weights (the bytes of its safetensors
// files) + its KV budget (from its flags, the way the engine sizes it) must
// fit in the device's free memory minus what the models already loaded on
// that device need. A model that does not fit, or fails to load, is refused
// with the numbers (logged, and listed by the server) and the others keep
// serving.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "device/plugin.h"
#include "model/hf_config.h"
#include "serve/kv_event_publisher.h"
#include "serve/serving_core.h"
#include "serve/serving_config.h"

namespace halo::serve {

struct MemoryEstimate {
  uint64_t weights = 0;
  uint64_t kv = 0;
  uint64_t kv_bytes_per_token = 0;
  std::string kv_source;  // which setting sized the KV cache
  uint64_t total() const { return weights + kv; }
};

// Bytes of one KV element before the plugin says (prepare): the
// --kv-cache-dtype asked, else from the types the device declares
// (DeviceInfo::kv_cache_dtypes): 16-bit for a 16-bit checkpoint when it has
// one, else fp32 when it has it; 2 when it declares none.
uint64_t kv_element_bytes(const model::ModelConfig& config, uint32_t device_kv_dtypes,
                          const std::string& kv_cache_dtype);
// KV bytes per token as the device plugins lay the cache out: 2 (K and V) x
// layers x kv heads x head_dim x element bytes.
uint64_t kv_bytes_per_token(const model::ModelConfig& config, uint64_t element_bytes);

// Bytes of the weight files (*.safetensors) in `dir`.
uint64_t weight_file_bytes(const std::filesystem::path& dir);

// A speculative_config draft model's weights and KV bytes per token (zero
// without one, or when it is a Hub id not in the cache yet).
struct DraftFootprint {
  uint64_t weights = 0;
  uint64_t kv_bytes_per_token = 0;
};
DraftFootprint draft_footprint(const ModelSettings& s, uint32_t device_kv_dtypes);

// What the model will take, given `left` bytes free on its device, its
// speculative_config draft included.
MemoryEstimate estimate_memory(const ModelSettings& s, const model::ModelConfig& config, uint64_t weights,
                               uint64_t left, uint32_t device_kv_dtypes);

// Free memory per device ("cpu:0"), claimed model by model.
class MemoryPlan {
 public:
  // Claims `need` on `device`, whose free memory is `free_bytes` (read once per
  // device). Returns "" when it fits, else why not (with the numbers).
  std::string claim(const std::string& model, const std::string& device, uint64_t free_bytes,
                    const MemoryEstimate& need);
  uint64_t left(const std::string& device, uint64_t free_bytes) const;

 private:
  struct Claimed {
    uint64_t bytes = 0;
    std::vector<std::string> models;
  };
  std::map<std::string, Claimed> claimed_;
};

std::string human_bytes(uint64_t bytes);

struct LoadOptions {
  std::string chat_template;  // file or inline template for every model ("": tokenizer_config.json's)
  // Where every model publishes its KV cache events (null: nowhere); the
  // models must have prefix caching on (enable_for_kv_events).
  std::shared_ptr<KvEventPublisher> kv_events;
  std::string prefix_hash_seed;  // engine/block_hash.h's seed (env PYTHONHASHSEED, as vLLM)
};

// Turns prefix caching on, as KV cache events describe the prefix cache;
// --check-config shows --kv-events-config as the setting's source.
void enable_for_kv_events(ModelSettings& s);

// Loads `models` into `core` in order (add_model / refuse_model) and
// returns how many are served. Never throws for one model's failure.
size_t load_models(const std::vector<ModelSettings>& models, ServingCore& core, const LoadOptions& options);

// One model loaded as load_models loads each (device, dtype, tensor
// parallelism and memory checked), for an in-process caller (the Python
// API). Throws halo::Error naming what was wrong.
std::shared_ptr<ServedModel> load_model(const ModelSettings& s, const LoadOptions& options);

// What loading `s` would refuse before any device is opened: a model that
// is not there (a Hub id not yet in the cache is not refused: loading
// downloads it), a config.json that does not parse, a dtype the device
// cannot run. "" when none; else the reason naming the setting's source.
// For --check-config.
std::string check_settings(const ModelSettings& s);

// --dtype on `device` (of plugin `plugin`): `auto`; a dtype the device's
// option "dtype" takes (DeviceInfo::compute_dtypes; returned, to be passed as
// that option); or the checkpoint's own dtype. Anything else is an Error
// naming what the device takes. Returns the option value or "".
std::string check_dtype(const std::string& requested, const model::ModelConfig& config,
                        const device::DeviceInfo& device, const std::string& plugin);

}  // namespace halo::serve
