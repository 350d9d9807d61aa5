#pragma once

#include <cstdint>
#include <string>

namespace halo::cpu {

struct HostInfo {
  std::string model_name;  // /proc/cpuinfo "model name", "cpu" if unknown
  std::string vendor;      // "Intel", "AMD", raw vendor_id, or "unknown"
  uint64_t memory_total = 0;
  uint64_t memory_available = 0;  // MemAvailable
};

HostInfo host_info();
uint64_t memory_available();
int online_cpus();  // CPUs this process may run on, at least 1

}  // namespace halo::cpu
