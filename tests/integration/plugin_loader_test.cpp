// The C++ face of the ABI: loading, refusing bad libraries by name, search
// path, and error objects turned into DeviceError with code and message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "device/plugin.h"

namespace fs = std::filesystem;
using namespace halo;

namespace {
const std::string kCpu = std::string(HALO_PLUGIN_DIR) + "/libhalo_plugin_cpu.so";
const std::string kBad = HALO_BAD_PLUGIN_DIR;

std::string load_error(const std::string& what) {
  try {
    device::Plugin::load(what);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(PluginLoader, LoadsTheCpuPluginAndReadsItsDevice) {
  auto p = device::Plugin::load(kCpu);
  EXPECT_EQ(p->name(), "cpu");
  EXPECT_EQ(p->api().abi_major, HALO_ABI_VERSION_MAJOR);
  ASSERT_GE(p->device_count(), 1);
  auto info = p->device_info(0);
  EXPECT_EQ(info.kind, HALO_DEVICE_KIND_CPU);
  EXPECT_GT(info.memory_bytes, 0u);
  EXPECT_NE(info.capabilities & HALO_CAP_DTYPE_BF16, 0u);
}

TEST(PluginLoader, RefusesBadLibrariesNamingFileAndReason) {
  std::string e = load_error(kBad + "/libhalo_bad_plugin_no_entry.so");
  EXPECT_NE(e.find("libhalo_bad_plugin_no_entry.so"), std::string::npos) << e;
  EXPECT_NE(e.find("missing entry symbol halo_plugin_get_api"), std::string::npos) << e;

  e = load_error(kBad + "/libhalo_bad_plugin_wrong_major.so");
  EXPECT_NE(e.find("ABI major version 2 (v2.0)"), std::string::npos) << e;
  EXPECT_NE(e.find("speaks v1."), std::string::npos) << e;

  e = load_error(kBad + "/libhalo_bad_plugin_null_entries.so");
  EXPECT_NE(e.find("required entry"), std::string::npos) << e;

  fs::path text = fs::temp_directory_path() / "libhalo_plugin_text_test.so";
  std::ofstream(text) << "not an ELF file";
  e = load_error(text.string());
  EXPECT_NE(e.find("truncated or not a valid shared library (15 bytes, shorter than an ELF header)"),
            std::string::npos)
      << e;
  std::ofstream(text) << std::string(64, 'x');
  e = load_error(text.string());
  EXPECT_NE(e.find("not a valid shared library (no ELF magic)"), std::string::npos) << e;
  fs::remove(text);

  e = load_error("/nonexistent/libhalo_plugin_x.so");
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
}

// Messages used to end in ": Bad file descriptor" (an error code boost::dll
// appended whatever the failure was).
TEST(PluginLoader, NoStaleErrnoInMessages) {
  for (const char* bad : {"no_entry", "wrong_major", "null_entries"}) {
    std::string e = load_error(kBad + "/libhalo_bad_plugin_" + bad + ".so");
    EXPECT_FALSE(e.empty()) << bad;
    EXPECT_EQ(e.find("Bad file descriptor"), std::string::npos) << e;
  }
}

// A truncated library used to be dlopen'ed anyway and the process died of
// SIGBUS touching a mapping past the end of the file.
TEST(PluginLoader, RefusesTruncatedLibrariesBeforeMappingThem) {
  const auto full = fs::file_size(kCpu);
  const fs::path dir = fs::temp_directory_path() / ("halo_truncated_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (uint64_t size : {full * 6 / 10, full * 9 / 10, full - 1, uint64_t{4096}, uint64_t{100}}) {
    const fs::path copy = dir / "libhalo_plugin_truncated.so";
    fs::copy_file(kCpu, copy, fs::copy_options::overwrite_existing);
    fs::resize_file(copy, size);
    std::string e = load_error(copy.string());
    EXPECT_NE(e.find("plugin " + copy.string() + ": truncated or not a valid shared library ("), std::string::npos)
        << size << ": " << e;
  }
  fs::remove_all(dir);
  EXPECT_NO_THROW(device::Plugin::load(kCpu));  // the intact file still loads
}

TEST(PluginLoader, FindsPluginsByNameOnHaloPluginPath) {
  setenv("HALO_PLUGIN_PATH", HALO_PLUGIN_DIR, 1);
  auto p = device::Plugin::load("cpu");
  EXPECT_EQ(p->path().filename(), "libhalo_plugin_cpu.so");
  bool listed = false;
  for (const auto& f : device::find_plugin_files()) listed |= f.name == "cpu";
  EXPECT_TRUE(listed);
  std::string e = load_error("nosuchdevice");
  EXPECT_NE(e.find("libhalo_plugin_nosuchdevice.so not found"), std::string::npos) << e;
  EXPECT_NE(e.find("plugins found:"), std::string::npos) << e;
  unsetenv("HALO_PLUGIN_PATH");
}

TEST(PluginLoader, PluginErrorsBecomeDeviceErrorsWithCodeAndMessage) {
  auto p = device::Plugin::load(kCpu);
  try {
    device::Device d(p, 99);
    FAIL() << "device index 99 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  auto dev = std::make_shared<device::Device>(p, 0);
  halo_model_spec spec{};
  spec.struct_size = sizeof(spec);
  spec.vocab_size = -1;  // invalid on purpose
  halo_limits limits{};
  try {
    device::Executable exe(dev, spec, {}, limits);
    FAIL() << "invalid spec accepted";
  } catch (const device::DeviceError& e) {
    EXPECT_EQ(e.code(), HALO_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("prepare (cpu plugin, INVALID_ARGUMENT)"), std::string::npos) << e.what();
  }
}
