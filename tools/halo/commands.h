#pragma once
// Subcommands of the `halo` binary. Each add_*_command registers itself and
// its callback on the app; the callback throws halo::Error on bad input and
// main() turns that into "error: ..." and exit code 1.
#include <filesystem>

#include <CLI/CLI.hpp>

#include "engine/llm_engine.h"

namespace halo::tools {

// The embedded default model: <prefix>/share/halo/models/pkgchat-5m when
// installed, else the copy in the source tree this binary was built from.
std::filesystem::path default_model_dir();

// Engine flags shared by every command that runs a model (named as vLLM's).
void add_engine_options(CLI::App& cmd, engine::EngineConfig& config);
// --enable-lora, --max-loras, --max-lora-rank, --max-cpu-loras (vLLM's spelling).
void add_lora_options(CLI::App& cmd, engine::EngineConfig& config);

void add_generate_command(CLI::App& app);
void add_devices_command(CLI::App& app);
void add_render_chat_command(CLI::App& app);
void add_bench_command(CLI::App& app);
// `halo bench latency` (bench_latency.cpp), added under `halo bench`.
void add_bench_latency_command(CLI::App& bench);
// `halo bench serve` (bench_serve.cpp), added under `halo bench`.
void add_bench_serve_command(CLI::App& bench);
void add_serve_command(CLI::App& app);
void add_compile_command(CLI::App& app);

}  // namespace halo::tools
