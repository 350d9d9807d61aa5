#pragma once
// Helpers shared by the halo_model tests: temp dirs, the test-model
// generator, file patching and error matching.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace halo::model::testing {

namespace fs = std::filesystem;
using nlohmann::json;

inline fs::path pkgchat_dir() { return fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m"; }

// A fresh directory removed (recursively) on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "_" + info->name() : "halo";
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    path_ = fs::temp_directory_path() /
            ("halo_model_" + name + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& s) const { return path_ / s; }

 private:
  fs::path path_;
};

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs tools/make_test_model.py; returns "" on success or the failure output.
inline std::string generate_model(const std::string& family, const fs::path& out, const std::string& extra = "") {
  const fs::path log = out.string() + ".log";
  std::string cmd = shell_quote(HALO_PYTHON_EXE) + " " + shell_quote(HALO_MAKE_TEST_MODEL) + " --family " + family +
                    " --out " + shell_quote(out.string()) + " " + extra + " >" + shell_quote(log.string()) + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  std::error_code ec;
  fs::remove(log, ec);
  return rc == 0 ? std::string() : "command failed (" + std::to_string(rc) + "): " + cmd + "\n" + ss.str();
}

inline bool have_python() { return std::string(HALO_PYTHON_EXE).find("NOTFOUND") == std::string::npos; }

// Generates a model into `dir` or fails (skips without a python) the test.
#define HALO_GENERATE(family, dir, extra)                                  \
  do {                                                                     \
    if (!have_python()) GTEST_SKIP() << "no python3 (HALO_PYTHON) found";  \
    std::string halo_gen_err = generate_model((family), (dir), (extra));   \
    ASSERT_EQ(halo_gen_err, "");                                           \
  } while (0)

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const fs::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

inline json read_json(const fs::path& p) { return json::parse(read_file(p)); }
inline void write_json(const fs::path& p, const json& j) { write_file(p, j.dump(2)); }

// Header JSON and data section of a safetensors file.
struct RawSafetensors {
  json header;
  std::string data;
};

inline RawSafetensors read_safetensors_raw(const fs::path& p) {
  std::string all = read_file(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(all[static_cast<size_t>(i)]);
  return {json::parse(all.substr(8, n)), all.substr(8 + n)};
}

inline void write_safetensors_raw(const fs::path& p, const json& header, const std::string& data) {
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  write_file(p, out + h + data);
}

// Rewrites a safetensors file's header, keeping its data.
inline void patch_header(const fs::path& p, const std::function<void(json&)>& edit) {
  RawSafetensors raw = read_safetensors_raw(p);
  edit(raw.header);
  write_safetensors_raw(p, raw.header, raw.data);
}

inline void patch_config(const fs::path& dir, const std::function<void(json&)>& edit) {
  json j = read_json(dir / "config.json");
  edit(j);
  write_json(dir / "config.json", j);
}

// Asserts fn throws halo::Error whose message contains every needle.
template <typename Fn>
::testing::AssertionResult throws_error(Fn&& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const halo::Error& e) {
    std::string msg = e.what();
    for (const auto& n : needles) {
      if (msg.find(n) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks '" << n << "': " << msg;
    }
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-halo exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace halo::model::testing
