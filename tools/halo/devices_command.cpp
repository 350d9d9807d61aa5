// `halo devices`: which plugins are found, and what their devices offer.
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "device/plugin.h"

namespace halo::tools {
namespace {

void print_plugin(const device::Plugin& plugin) {
  fmt::print("{}  {}  ({})\n", plugin.name(), plugin.path().string(), plugin.version_string());
  int n = plugin.device_count();
  for (int i = 0; i < n; ++i) {
    auto d = plugin.device_info(i);
    fmt::print("  [{}] {} {}: kind={} memory={:.1f} GiB free={:.1f} GiB chips={} capabilities={}", i,
               d.vendor, d.name, device::kind_name(d.kind), d.memory_bytes / 1073741824.0,
               d.memory_free_bytes / 1073741824.0, d.num_chips, device::capability_names(d.capabilities));
    if (d.max_batch_size) fmt::print(" max_batch_size={}", d.max_batch_size);
    if (d.required_block_size) fmt::print(" required_block_size={}", d.required_block_size);
    if (d.max_model_len) fmt::print(" max_model_len={}", d.max_model_len);
    fmt::print("\n");
  }
}

}  // namespace

void add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List device plugins found and the devices they offer");
  auto device = std::make_shared<std::string>();
  cmd->add_option("--device", *device, "Only this plugin: a name or a .so path (errors exit non-zero)");
  cmd->callback([device] {
    if (!device->empty()) {
      print_plugin(*device::Plugin::load(*device));
      return;
    }
    std::string dirs;
    for (const auto& d : device::plugin_search_path()) dirs.append(dirs.empty() ? "" : ":").append(d.lexically_normal().string());
    fmt::print("plugin search path: {}\n", dirs);
    auto files = device::find_plugin_files();
    if (files.empty()) fmt::print("no plugins found\n");
    for (const auto& f : files) {
      try {
        print_plugin(*device::Plugin::load(f.path.string()));
      } catch (const std::exception& e) {
        fmt::print("{}  {}  unusable: {}\n", f.name, f.path.string(), e.what());
      }
    }
  });
}

}  // namespace halo::tools
