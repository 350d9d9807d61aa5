// The YAML device profile and the fault-injection spec.
#include <charconv>
#include <sstream>
#include <stdexcept>

#include <yaml-cpp/yaml.h>

#include "sim.h"

namespace rbln::sim {
namespace {

template <class T>
void get(const YAML::Node& node, const char* key, T& out, const std::string& path) {
  const YAML::Node v = node[key];
  if (!v) return;  // keep the default
  try {
    out = v.as<T>();
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(path + ": key '" + key + "' has a bad value: " + e.what());
  }
}

int64_t parse_int(const std::string& key, const std::string& value) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size())
    throw std::runtime_error("fault spec: " + key + "=\"" + value + "\" is not an integer");
  return v;
}

}  // namespace

void parse_faults(const std::string& spec, Faults& f) {
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw std::runtime_error("fault spec: \"" + item + "\" is not key=value");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "chip_fail_at_step")
      f.chip_fail_at_step = parse_int(k, v);
    else if (k == "chip_fail_index")
      f.chip_fail_index = static_cast<int32_t>(parse_int(k, v));
    else if (k == "alloc_fail")
      f.alloc_fail = parse_int(k, v);
    else if (k == "hang_at_step")
      f.hang_at_step = parse_int(k, v);
    else
      throw std::runtime_error("fault spec: unknown key \"" + k +
                               "\" (chip_fail_at_step, chip_fail_index, alloc_fail, hang_at_step)");
  }
}

Profile load_profile(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error("device profile " + path + ": " + e.what());
  }
  Profile p;
  p.path = path;
  if (!root.IsMap()) throw std::runtime_error("device profile " + path + ": not a YAML mapping");
  get(root, "name", p.name, path);
  get(root, "chips", p.chips, path);
  get(root, "memory_per_chip_bytes", p.memory_per_chip, path);
  get(root, "reserved_per_chip_bytes", p.reserved_per_chip, path);
  get(root, "peak_fp16_flops", p.peak_flops, path);
  get(root, "compute_efficiency", p.compute_efficiency, path);
  get(root, "dram_bandwidth_bytes_per_s", p.dram_bandwidth, path);
  get(root, "dram_efficiency", p.dram_efficiency, path);
  get(root, "sram_bytes", p.sram_bytes, path);
  get(root, "rsd", p.rsd, path);
  get(root, "link_bandwidth_bytes_per_s", p.link_bandwidth, path);
  get(root, "link_latency_s", p.link_latency, path);
  get(root, "launch_overhead_s", p.launch_overhead, path);
  get(root, "activation_bytes", p.activation_bytes, path);
  get(root, "prefill_chunk_size", p.prefill_chunk_size, path);
  get(root, "command_timeout_ms", p.command_timeout_ms, path);
  if (const YAML::Node f = root["faults"]) {
    get(f, "chip_fail_at_step", p.faults.chip_fail_at_step, path);
    get(f, "chip_fail_index", p.faults.chip_fail_index, path);
    get(f, "alloc_fail", p.faults.alloc_fail, path);
    get(f, "hang_at_step", p.faults.hang_at_step, path);
  }
  auto positive = [&](const char* key, double v) {
    if (!(v > 0)) throw std::runtime_error("device profile " + path + ": " + key + " must be positive");
  };
  positive("chips", p.chips);
  if (p.chips > 16) throw std::runtime_error("device profile " + path + ": chips must be at most 16");
  positive("memory_per_chip_bytes", double(p.memory_per_chip));
  positive("peak_fp16_flops", p.peak_flops);
  positive("compute_efficiency", p.compute_efficiency);
  positive("dram_bandwidth_bytes_per_s", p.dram_bandwidth);
  positive("dram_efficiency", p.dram_efficiency);
  positive("link_bandwidth_bytes_per_s", p.link_bandwidth);
  positive("prefill_chunk_size", p.prefill_chunk_size);
  positive("command_timeout_ms", p.command_timeout_ms);
  return p;
}

}  // namespace rbln::sim
