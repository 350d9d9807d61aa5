#pragma once
// The `halo` command line as a function, so the binary and the Python package
// (`python -m halo ...`) run the same program. Not reentrant: one run at a
// time per process (CLI11's parse state, the --config origins and the serve
// command's signal handling are process-wide).
#include <filesystem>
#include <string>
#include <vector>

namespace halo::tools {

// Runs `halo ARGS...` (args without the program name) and returns its exit
// code; errors are printed to stderr as the binary prints them.
int run_cli(const std::vector<std::string>& args);

// halo's logger (stderr, the binary's pattern) as spdlog's default, once per
// process; run_cli calls it, and so does the Python module when it loads.
void install_logger();

// Where the embedded model is, instead of the install tree's or the source
// tree's copy (the Python package ships its own). Call before run_cli.
void set_default_model_dir(const std::filesystem::path& dir);

}  // namespace halo::tools
