// Where plugins are looked for: HALO_PLUGIN_PATH, then the directory beside
// the running binary (build and install trees share the layout
// bin/halo + lib/halo/plugins/libhalo_plugin_<name>.so).
#include <cstdlib>
#include <set>
#include <sstream>

#include <boost/dll/runtime_symbol_info.hpp>

#include "device/plugin.h"

namespace halo::device {
namespace fs = std::filesystem;

namespace {
constexpr std::string_view kPrefix = "libhalo_plugin_";
constexpr std::string_view kSuffix = ".so";
}  // namespace

std::vector<fs::path> plugin_search_path() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("HALO_PLUGIN_PATH"); env && *env) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ':')) {
      if (!item.empty()) dirs.emplace_back(item);
    }
  }
  boost::system::error_code ec;
  auto exe = boost::dll::program_location(ec);
  if (!ec) dirs.push_back(fs::path(exe.parent_path().string()) / ".." / "lib" / "halo" / "plugins");
  return dirs;
}

std::vector<PluginFile> find_plugin_files() {
  std::vector<PluginFile> found;
  std::set<std::string> seen;
  for (const auto& dir : plugin_search_path()) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> entries;
    for (const auto& entry : fs::directory_iterator(dir, ec)) entries.push_back(entry.path());
    std::sort(entries.begin(), entries.end());
    for (const auto& path : entries) {
      std::string file = path.filename().string();
      if (!file.starts_with(kPrefix) || !file.ends_with(kSuffix)) continue;
      std::string name = file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size());
      if (seen.insert(name).second) found.push_back({name, fs::weakly_canonical(path, ec)});
    }
  }
  return found;
}

}  // namespace halo::device
