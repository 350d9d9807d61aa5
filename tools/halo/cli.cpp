// run_cli: the subcommands, the global flags and the error handling of main().
#include "cli.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>

#include "commands.h"
#include "config_file.h"

namespace halo::tools {

void install_logger() {
  if (spdlog::get("halo") != nullptr) return;
  auto logger = spdlog::stderr_color_mt("halo");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%^[%Y-%m-%d %H:%M:%S.%e] [%l]%$ %v");
}

int run_cli(const std::vector<std::string>& args) {
  CLI::App app{"halo: serve large language models on any accelerator", "halo"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("halo ") + HALO_VERSION);
  app.fallthrough();  // global flags may follow the subcommand
  install_logger();
  app.add_option_function<std::string>(
         "--log-level",
         [](const std::string& level) { spdlog::set_level(spdlog::level::from_str(level)); },
         "trace, debug, info, warn, error or off (default info)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  add_serve_command(app);
  add_generate_command(app);
  add_devices_command(app);
  add_render_chat_command(app);
  add_bench_command(app);
  add_compile_command(app);
  add_config_option(app);
  try {
    std::vector<std::string> argv_strings{"halo"};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_strings) argv.push_back(a.data());
    std::vector<std::string> expanded =
        expand_config_args(static_cast<int>(argv.size()), argv.data());
    expanded.erase(expanded.begin());                // CLI11 wants no program name
    std::reverse(expanded.begin(), expanded.end());  // and the arguments last-first
    app.parse(expanded);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    if (rc != 0) std::fputs(config_origin_note(e.what()).c_str(), stderr);
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace halo::tools
