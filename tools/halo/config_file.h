#pragma once
// `--config FILE.yaml`: engine and command settings from a YAML map whose keys
// are the long flag names (`max-num-seqs: 8`). The file's settings are placed
// before the command line's, and single-valued options keep their last value,
// so the command line wins.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace halo::tools {

// Returns argv with the settings of every `--config FILE` expanded in place of
// that flag, right after the subcommand name. Throws halo::Error naming the
// file and key for unreadable YAML or values that are not scalars or lists.
// Each call replaces what config_origin() reports (one parse per run; not
// thread-safe).
std::vector<std::string> expand_config_args(int argc, char** argv);

// Where a flag ("--max-num-seqs") got its value: "FILE:LINE" of the --config
// key that set it, or "" when the command line set it (or nothing did).
std::string config_origin(const std::string& flag);

// For a command-line parse error: one line per flag the message names that a
// --config file set, naming the file and line ("" when none).
std::string config_origin_note(const std::string& message);

// Documents --config on every (nested) subcommand that takes options and
// makes their single-valued options keep their last value.
void add_config_option(CLI::App& app);

}  // namespace halo::tools
