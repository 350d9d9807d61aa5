// `--config FILE.yaml` as the halo tool reads it (tools/halo/config_file.cpp,
// yaml-cpp): the input is written to a fixed scratch path and expanded into
// command-line arguments, then the origin notes are looked up.
#include <vector>

#include "config_file.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  const auto path = halo::fuzz::write_scratch("config.yaml", data, size);
  halo::fuzz::guarded([&] {
    std::string p = path.string();
    std::vector<std::string> args = {"halo", "serve", "--config", p, "--port", "1"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    auto out = halo::tools::expand_config_args(static_cast<int>(args.size()), argv.data());
    for (const auto& a : out)
      if (a.starts_with("--")) (void)halo::tools::config_origin(a);
    (void)halo::tools::config_origin_note("--max-num-seqs: value is not an integer");
  });
  return 0;
}
