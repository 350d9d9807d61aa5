#include "config_file.h"

#include <cctype>
#include <map>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "common/error.h"

namespace halo::tools {
namespace {

// Where the flags of this run came from: what the last expand_config_args
// found (each call starts afresh, so repeated parses do not accumulate).
struct Origins {
  std::map<std::string, std::string> from_file;  // "--flag" -> "FILE:LINE"
  std::set<std::string> on_command_line;         // "--flag"
};
Origins& origins() {
  static Origins o;
  return o;
}

std::string flag_name(const std::string& arg) {
  size_t eq = arg.find('=');
  return eq == std::string::npos ? arg : arg.substr(0, eq);
}

std::vector<std::string> yaml_to_args(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error(fmt::format("--config {}: cannot open the file", path));
  } catch (const YAML::Exception& e) {
    throw Error(fmt::format("--config {}: not valid YAML: {}", path, e.what()));
  }
  if (root.IsNull()) return {};
  if (!root.IsMap()) throw Error(fmt::format("--config {}: expected a map of flag names to values", path));
  std::vector<std::string> args;
  for (const auto& kv : root) {
    std::string key = kv.first.as<std::string>();
    if (key.starts_with("--")) key = key.substr(2);
    const YAML::Node& v = kv.second;
    std::string flag = "--" + key;
    origins().from_file[flag] = fmt::format("{}:{}", path, kv.first.Mark().line + 1);
    if (v.IsScalar()) {
      std::string s = v.as<std::string>();
      if (s == "true" || s == "false") {
        args.push_back(flag + "=" + s);
      } else {
        args.push_back(flag);
        args.push_back(s);
      }
    } else if (v.IsSequence()) {
      for (const auto& item : v) {
        if (!item.IsScalar()) throw Error(fmt::format("--config {}: key '{}' holds a nested value", path, key));
        args.push_back(flag);
        args.push_back(item.as<std::string>());
      }
    } else if (!v.IsNull()) {
      throw Error(fmt::format("--config {}: key '{}' must be a scalar or a list", path, key));
    }
  }
  return args;
}

}  // namespace

std::vector<std::string> expand_config_args(int argc, char** argv) {
  origins() = Origins{};
  std::vector<std::string> in(argv, argv + argc), head, config, tail;
  // Settings go after the subcommand chain and its positionals (the first run
  // of words not starting with '-', after any global flags), before the rest
  // of the command line, which therefore wins.
  size_t sub = 1;
  while (sub < in.size() && in[sub].starts_with("-")) sub += (in[sub] == "--log-level") ? 2 : 1;
  while (sub + 1 < in.size() && !in[sub + 1].starts_with("-")) ++sub;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i > sub && in[i] == "--config") {
      if (i + 1 >= in.size()) throw Error("--config needs a file name");
      auto more = yaml_to_args(in[++i]);
      config.insert(config.end(), more.begin(), more.end());
    } else if (i > sub && in[i].starts_with("--config=")) {
      auto more = yaml_to_args(in[i].substr(9));
      config.insert(config.end(), more.begin(), more.end());
    } else {
      (i <= sub ? head : tail).push_back(in[i]);
    }
  }
  for (const auto& a : tail)
    if (a.starts_with("--")) origins().on_command_line.insert(flag_name(a));
  head.insert(head.end(), config.begin(), config.end());
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

std::string config_origin(const std::string& flag) {
  const auto& o = origins();
  if (o.on_command_line.count(flag)) return "";
  auto it = o.from_file.find(flag);
  return it == o.from_file.end() ? "" : it->second;
}

std::string config_origin_note(const std::string& message) {
  std::string note;
  for (const auto& [flag, where] : origins().from_file) {
    if (origins().on_command_line.count(flag)) continue;
    size_t at = message.find(flag);
    // The flag itself, not a longer one it prefixes.
    while (at != std::string::npos) {
      size_t end = at + flag.size();
      if (end >= message.size() || !(std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '-'))
        break;
      at = message.find(flag, end);
    }
    if (at != std::string::npos) note += fmt::format("note: {} is set by --config {} (key '{}')\n", flag, where, flag.substr(2));
  }
  return note;
}

void add_config_option(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_subcommands({}).empty()) {
      // Parsed away by expand_config_args before CLI11 sees it; here for --help.
      sub->add_option("--config", "YAML file of settings keyed by long flag names; the command line wins");
      for (CLI::Option* opt : sub->get_options())
        if (opt->get_expected_max() <= 1) opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
    add_config_option(*sub);
  }
}

}  // namespace halo::tools
