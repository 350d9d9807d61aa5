// halo-conformance --plugin PATH_OR_NAME [--device N] [--filter PATTERN] [options] [gtest flags]
//
// Checks a halo device plugin against the ABI contract (docs/plugin-guide.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace fs = std::filesystem;

namespace {

constexpr const char* kUsage =
    R"(usage: halo-conformance --plugin PATH_OR_NAME [options] [gtest flags]

  --plugin PATH_OR_NAME    the plugin under test: a .so path, or a name NAME looked up as
                           libhalo_plugin_NAME.so in $HALO_PLUGIN_PATH, then <bin>/../lib/halo/plugins
  --device N               device index to test (default 0)
  --reference PATH         the CPU reference plugin (default: libhalo_plugin_cpu.so next to the
                           plugin, in $HALO_PLUGIN_PATH, or in <bin>/../lib/halo/plugins)
  --device-option K=V      an option for device_open of the plugin under test (repeatable)
  --prepare-option K=V     an option for prepare of the plugin under test (repeatable)
  --compile-option K=V     an option for compile (ABI v1.1) of the plugin under test (repeatable);
                           a plugin with a compile entry that claims HALO_CAP_STATIC_SHAPES (or
                           any --compile-option) runs every model compiled ahead of time
  --tp-option KEY          the option (device, prepare and compile) selecting the tensor-parallel degree
  --tp-degrees 1,2,4       degrees to compare with the first (with --tp-option)
  --tolerance X            logits tolerance: max|a-b| / max(1, max|reference|) for every model
                           (default: per prepared model, from the compute dtype its prepare reports,
                           ABI v1.3 limits.compute_dtype: fp32 1e-3, fp16 5e-3, bf16 2e-2,
                           int8 8e-2, fp8 1e-1; older plugins: inferred from kv_cache_dtype)
  --model-dtype D          weights of the generated models: fp32, bf16 or fp16 (default: the first
                           the device claims, fp32 before bf16 before fp16)
  --filter PATTERN         run only matching tests (= --gtest_filter)
  --list                   list the tests (= --gtest_list_tests)
Every other flag goes to GoogleTest (--gtest_repeat, --gtest_output=xml:FILE, ...).
Exit status: 0 when every test passed or was skipped.
)";

fs::path exe_dir() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path(".") : p.parent_path();
}

std::vector<fs::path> search_dirs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("HALO_PLUGIN_PATH")) {
    std::stringstream ss(env);
    for (std::string item; std::getline(ss, item, ':');)
      if (!item.empty()) dirs.emplace_back(item);
  }
  dirs.push_back(exe_dir() / ".." / "lib" / "halo" / "plugins");
  return dirs;
}

std::string resolve(const std::string& name_or_path, std::string* why) {
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".so")) {
    if (fs::exists(name_or_path)) return fs::weakly_canonical(name_or_path).string();
    *why = name_or_path + " does not exist";
    return "";
  }
  const std::string file = "libhalo_plugin_" + name_or_path + ".so";
  std::string searched;
  for (const auto& d : search_dirs()) {
    std::error_code ec;
    if (fs::exists(d / file, ec)) return fs::weakly_canonical(d / file, ec).string();
    searched += (searched.empty() ? "" : ", ") + d.lexically_normal().string();
  }
  *why = file + " not found in [" + searched + "]";
  return "";
}

bool parse_option(const std::string& kv, conf::OptionList& into) {
  const size_t eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  into.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  conf::Settings& s = conf::settings();
  std::vector<std::string> pass{argv[0]};
  std::string reference_arg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      const std::string f = flag;
      if (a.rfind(f + "=", 0) == 0) return a.substr(f.size() + 1);
      if (i + 1 >= argc) {
        std::cerr << "halo-conformance: " << f << " needs a value\n" << kUsage;
        std::exit(2);
      }
      return argv[++i];
    };
    auto is = [&](const char* flag) {
      return a == flag || a.rfind(std::string(flag) + "=", 0) == 0;
    };
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (is("--plugin")) {
      s.plugin_arg = value("--plugin");
    } else if (is("--device")) {
      s.device = std::atoi(value("--device").c_str());
    } else if (is("--reference")) {
      reference_arg = value("--reference");
    } else if (is("--device-option") || is("--prepare-option") || is("--compile-option")) {
      const char* flag = is("--device-option")    ? "--device-option"
                         : is("--prepare-option") ? "--prepare-option"
                                                  : "--compile-option";
      const std::string kv = value(flag);
      conf::OptionList& into = std::string(flag) == "--device-option"    ? s.device_options
                               : std::string(flag) == "--prepare-option" ? s.prepare_options
                                                                         : s.compile_options;
      if (!parse_option(kv, into)) {
        std::cerr << "halo-conformance: option '" << kv << "' is not KEY=VALUE\n";
        return 2;
      }
    } else if (is("--tp-option")) {
      s.tp_option = value("--tp-option");
    } else if (is("--tp-degrees")) {
      std::stringstream ss(value("--tp-degrees"));
      for (std::string d; std::getline(ss, d, ',');) s.tp_degrees.push_back(std::atoi(d.c_str()));
    } else if (is("--tolerance")) {
      const std::string v = value("--tolerance");
      s.tolerance = std::atof(v.c_str());
      if (!(s.tolerance > 0)) {
        std::cerr << "halo-conformance: --tolerance " << v << ": expected a positive number\n";
        return 2;
      }
    } else if (is("--model-dtype")) {
      s.model_dtype = value("--model-dtype");
      if (s.model_dtype != "fp32" && s.model_dtype != "bf16" && s.model_dtype != "fp16") {
        std::cerr << "halo-conformance: --model-dtype " << s.model_dtype
                  << ": expected fp32, bf16 or fp16\n";
        return 2;
      }
    } else if (is("--filter")) {
      pass.push_back("--gtest_filter=" + value("--filter"));
    } else if (a == "--list") {
      pass.push_back("--gtest_list_tests");
    } else {
      pass.push_back(a);
    }
  }
  const bool listing = std::find(pass.begin(), pass.end(), "--gtest_list_tests") != pass.end();
  if (s.plugin_arg.empty() && !listing) {
    std::cerr << "halo-conformance: --plugin is required\n" << kUsage;
    return 2;
  }
  if (!s.plugin_arg.empty()) {
    std::string why;
    s.plugin_path = resolve(s.plugin_arg, &why);
    if (s.plugin_path.empty()) {
      std::cerr << "halo-conformance: no plugin '" << s.plugin_arg << "': " << why << "\n";
      return 2;
    }
    // The reference: --reference, else beside the plugin, else the search path.
    if (!reference_arg.empty()) {
      s.reference_path = resolve(reference_arg, &s.reference_why);
      if (s.reference_path.empty()) {
        std::cerr << "halo-conformance: --reference: " << s.reference_why << "\n";
        return 2;
      }
      s.reference_why = "--reference";
    } else if (const fs::path beside =
                   fs::path(s.plugin_path).parent_path() / "libhalo_plugin_cpu.so";
               fs::exists(beside)) {
      s.reference_path = fs::weakly_canonical(beside).string();
      s.reference_why = "beside the plugin";
    } else {
      s.reference_path = resolve("cpu", &s.reference_why);
      if (!s.reference_path.empty()) s.reference_why = "search path";
    }
  }

  std::vector<char*> gargv;
  for (auto& p : pass) gargv.push_back(p.data());
  int gargc = static_cast<int>(gargv.size());
  gargv.push_back(
      nullptr);  // argv[argc] is NULL: InitGoogleTest shifts it along with the flags it removes
  testing::InitGoogleTest(&gargc, gargv.data());
  if (!listing) {
    std::cout << "halo-conformance: plugin " << s.plugin_path << "\n";
    const conf::Lib& lib = conf::plugin();
    if (lib.api)
      std::cout << "halo-conformance: plugin_name '"
                << (lib.api->plugin_name ? lib.api->plugin_name : "(null)") << "', version '"
                << (lib.api->plugin_version ? lib.api->plugin_version : "(null)") << "', ABI v"
                << lib.api->abi_major << "." << lib.api->abi_minor << ", device " << s.device
                << "\n";
    if (s.reference_path.empty())
      std::cout << "halo-conformance: no CPU reference plugin (" << s.reference_why
                << "): golden-model tests will be skipped\n";
    else
      std::cout << "halo-conformance: reference " << s.reference_path << " (" << s.reference_why
                << ")" << (conf::testing_reference() ? ", the plugin under test itself" : "")
                << "\n";
    for (const auto& [k, v] : s.device_options)
      std::cout << "halo-conformance: device option " << k << "=" << v << "\n";
    for (const auto& [k, v] : s.prepare_options)
      std::cout << "halo-conformance: prepare option " << k << "=" << v << "\n";
    for (const auto& [k, v] : s.compile_options)
      std::cout << "halo-conformance: compile option " << k << "=" << v << "\n";
    if (s.tolerance > 0)
      std::cout << "halo-conformance: tolerance " << s.tolerance << " for every model (--tolerance)\n";
    else
      std::cout << "halo-conformance: tolerance " << conf::tolerance_rule() << "\n";
    if (conf::uses_compile())
      std::cout
          << "halo-conformance: models are compiled ahead of time (compile entry, static shapes)\n";
  }
  return RUN_ALL_TESTS();
}
