// Internals of the simulated ATOM-class NPU driver: the device profile, the
// cost model and the driver objects behind the Level Zero handles.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "rbln_sim/ze_rbln_ext.h"

namespace rbln::sim {

struct Faults {
  int64_t chip_fail_at_step = 0;  // 1-based graph execution that loses a chip (0: never)
  int32_t chip_fail_index = -1;   // which chip (-1: the last chip of that graph)
  int64_t alloc_fail = 0;         // 1-based device allocation that fails (0: never)
  int64_t hang_at_step = 0;       // 1-based graph execution that never completes (0: never)
};

// Every number of the cost model; see configs/rbln-atom.yaml and docs/rbln.md.
struct Profile {
  std::string name = "ATOM (simulated)";
  std::string path;  // where it was read from ("" = built-in defaults)
  int chips = 4;
  uint64_t memory_per_chip = 16ull << 30;
  uint64_t reserved_per_chip = 288ull << 20;
  double peak_flops = 32e12;
  double compute_efficiency = 0.7;
  double dram_bandwidth = 256e9;
  double dram_efficiency = 0.85;
  double sram_bytes = 64.0 * (1 << 20);
  bool rsd = true;
  double link_bandwidth = 64e9;
  double link_latency = 2e-6;
  double launch_overhead = 20e-6;
  double activation_bytes = 2;
  double kv_bytes = 4;  // the simulator keeps KV in fp32 (see docs/rbln.md)
  int prefill_chunk_size = 128;
  int command_timeout_ms = 5000;
  Faults faults;

  uint64_t usable_per_chip() const { return memory_per_chip > reserved_per_chip ? memory_per_chip - reserved_per_chip : 0; }
};

// Reads a YAML profile; throws std::runtime_error naming the file and key.
Profile load_profile(const std::string& path);
// Parses "k=v,k=v" fault specs into `f`; throws std::runtime_error.
void parse_faults(const std::string& spec, Faults& f);

// Cost of one graph execution on the most loaded chip.
ze_rbln_cost_t estimate(const Profile& p, const ze_rbln_graph_desc_t& desc, const int32_t* ctx_lens,
                        uint32_t num_logits);

}  // namespace rbln::sim
