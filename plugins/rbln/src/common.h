// Shared pieces of the rbln plugin: errors (C++ exceptions inside, halo_error
// at the ABI boundary), the driver session over the Level Zero API of the
// simulated device, and the compiled-model manifest helpers.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "halo/device_abi.h"
#include "halo/plugin_support/errors.h"
#include "halo/plugin_support/options.h"
#include "rbln_sim/ze_rbln_ext.h"

namespace halo::rbln {

using namespace halo::plugin;  // PluginError, cat, fail, invalid, guarded, check_args

// 0.2: int8 matrices; 0.3: verify programs (--num-speculative-tokens). A model
// of an older minor version loads as it is (no verify programs).
inline constexpr const char* kCompilerVersion = "halo-rbln 0.3.0";
inline constexpr int kCompilerMajor = 0;
inline constexpr const char* kFormat = "halo-compiled-model/1";

// Throws a PluginError for a failed driver call, with the driver's message.
void ze_check(ze_result_t r, const char* what);

// Options: device_open and prepare get one list from the core, so each takes
// the other's keys unread (kDeviceKeys, kPrepareKeys); compile has its own.
inline constexpr std::string_view kDeviceKeys[] = {"threads", "profile", "command_timeout_ms"};
inline constexpr std::string_view kPrepareKeys[] = {"tensor_parallel_size"};

// The process-wide driver session: the simulated driver configured with the
// device profile, its chips and one context.
struct Driver {
  ze_driver_handle_t driver = nullptr;
  ze_context_handle_t context = nullptr;
  std::vector<ze_device_handle_t> chips;
  ze_rbln_sim_properties_t props{};
  std::string profile;  // path given to the simulator
};
// Opens (or reuses) the session; `profile` empty: HALO_RBLN_PROFILE, else the
// installed/in-tree configs/rbln-atom.yaml. Thread-safe.
Driver& driver(const std::string& profile = "", uint32_t host_threads = 0);

// The model description graphs are built from, from a spec.
struct ModelDims {
  ze_rbln_decoder_desc_t desc{};
  std::vector<double> inv_freq;
};
ModelDims model_dims(const halo_model_spec& s, uint32_t weight_dtype);
nlohmann::json spec_to_json(const halo_model_spec& s);

// The matrices rbln can store as int8 (weight-only): the ABI name (a layer
// weight's suffix), the chip-file and manifest name, the quant_mask bit.
struct QuantSlot {
  const char* abi;
  const char* chip;
  uint32_t bit;
};
inline constexpr QuantSlot kQuantSlots[] = {
    {HALO_WEIGHT_Q_PROJ, "q", 1u << ZE_RBLN_L_Q},
    {HALO_WEIGHT_K_PROJ, "k", 1u << ZE_RBLN_L_K},
    {HALO_WEIGHT_V_PROJ, "v", 1u << ZE_RBLN_L_V},
    {HALO_WEIGHT_O_PROJ, "o", 1u << ZE_RBLN_L_O},
    {HALO_WEIGHT_GATE_PROJ, "gate", 1u << ZE_RBLN_L_GATE},
    {HALO_WEIGHT_UP_PROJ, "up", 1u << ZE_RBLN_L_UP},
    {HALO_WEIGHT_DOWN_PROJ, "down", 1u << ZE_RBLN_L_DOWN},
    {HALO_WEIGHT_LM_HEAD, "lm_head", ZE_RBLN_QUANT_LM_HEAD},
};
// The name of a quantized matrix's scales in a chip file.
inline std::string scales_name(const std::string& slot) { return slot + ".scales"; }

}  // namespace halo::rbln
