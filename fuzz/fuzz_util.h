#pragma once
// Shared helpers of the libFuzzer targets (see docs/testing.md).
//
// Every target catches the exceptions halo answers with (a 4xx/5xx, a
// refused file): what a fuzzer must find is a crash, a sanitizer report, a
// hang (libFuzzer -timeout) or runaway memory (-rss_limit_mb). Set
// HALO_FUZZ_STRICT=1 to also stop on exceptions that are not halo::Error
// (e.g. a nlohmann::json type_error, which the server turns into a 500).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "common/error.h"

namespace halo::fuzz {

inline bool strict() {
  static const bool s = [] {
    const char* e = std::getenv("HALO_FUZZ_STRICT");
    return e && *e && std::string_view(e) != "0";
  }();
  return s;
}

inline void quiet() {
  static const bool once = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)once;
}

// A fixed scratch directory per process (removed at exit), so that targets
// that read files do not create a new file per input.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(base && *base ? base : "/tmp") /
                              ("halo-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    static struct Cleanup {
      std::filesystem::path p;
      ~Cleanup() {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    } cleanup{d};
    return d;
  }();
  return dir;
}

inline std::filesystem::path write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  std::filesystem::path p = scratch_dir() / name;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return p;
}

inline std::filesystem::path write_scratch(const std::string& name, std::string_view text) {
  return write_scratch(name, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// Runs `body`, swallowing the errors halo reports to its caller.
template <class F>
void guarded(F&& body) {
  try {
    body();
  } catch (const halo::Error&) {
  } catch (const std::exception& e) {
    if (strict()) {
      std::fprintf(stderr, "HALO_FUZZ_STRICT: exception that is not a halo::Error: %s\n", e.what());
      std::abort();
    }
  }
}

}  // namespace halo::fuzz
