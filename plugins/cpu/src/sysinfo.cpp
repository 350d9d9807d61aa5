#include "sysinfo.h"

#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace halo::cpu {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

uint64_t sysconf_bytes(int name) {
  const long pages = sysconf(name);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

}  // namespace

uint64_t memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream is(line.substr(13));
      uint64_t kb = 0;
      if (is >> kb) return kb * 1024;
    }
  }
  return sysconf_bytes(_SC_AVPHYS_PAGES);
}

HostInfo host_info() {
  HostInfo info;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line) && (info.model_name.empty() || info.vendor.empty())) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon));
    const std::string value = trim(line.substr(colon + 1));
    if (key == "model name" && info.model_name.empty()) info.model_name = value;
    if (key == "vendor_id" && info.vendor.empty()) {
      if (value == "GenuineIntel")
        info.vendor = "Intel";
      else if (value == "AuthenticAMD")
        info.vendor = "AMD";
      else
        info.vendor = value;
    }
  }
  if (info.model_name.empty()) info.model_name = "cpu";
  if (info.vendor.empty()) info.vendor = "unknown";
  info.memory_total = sysconf_bytes(_SC_PHYS_PAGES);
  info.memory_available = memory_available();
  return info;
}

int online_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace halo::cpu
