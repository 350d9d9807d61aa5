// halo: serve, generate, compile, bench and inspect devices.
#include <algorithm>
#include <cstdio>
#include <exception>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "config_file.h"
#include "common/error.h"

int main(int argc, char** argv) {
  CLI::App app{"halo: serve large language models on any accelerator", "halo"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("halo ") + HALO_VERSION);
  app.fallthrough();  // global flags may follow the subcommand
  auto logger = spdlog::stderr_color_mt("halo");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%^[%Y-%m-%d %H:%M:%S.%e] [%l]%$ %v");
  app.add_option_function<std::string>(
         "--log-level", [](const std::string& level) { spdlog::set_level(spdlog::level::from_str(level)); },
         "trace, debug, info, warn, error or off (default info)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  halo::tools::add_serve_command(app);
  halo::tools::add_generate_command(app);
  halo::tools::add_devices_command(app);
  halo::tools::add_render_chat_command(app);
  halo::tools::add_bench_command(app);
  halo::tools::add_compile_command(app);
  halo::tools::add_config_option(app);
  try {
    std::vector<std::string> args = halo::tools::expand_config_args(argc, argv);
    args.erase(args.begin());                  // CLI11 wants no program name
    std::reverse(args.begin(), args.end());    // and the arguments last-first
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    if (rc != 0) std::fputs(halo::tools::config_origin_note(e.what()).c_str(), stderr);
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
