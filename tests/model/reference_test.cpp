// Smoke test of the numpy reference (tests/reference/forward.py): it runs on
// pkgchat-5m and on a generated model of every family and prints sane JSON.
// Its numerical self-checks live in tests/reference/forward_test.py.
#include <cmath>
#include <cstdio>
#include <memory>

#include "test_util.h"

namespace halo::model::testing {
namespace {

json run_reference(const fs::path& model_dir, const std::string& ids, int steps) {
  const std::string cmd = shell_quote(HALO_PYTHON_EXE) + " " + shell_quote(HALO_REFERENCE_FORWARD) + " " +
                          shell_quote(model_dir.string()) + " --prompt-ids " + ids + " --steps " +
                          std::to_string(steps);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(cmd.c_str(), "r"), ::pclose);
  if (!pipe) throw std::runtime_error("popen failed: " + cmd);
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe.get())) > 0) out.append(buf, n);
  return json::parse(out);
}

void check_output(const json& r, int vocab, int steps) {
  ASSERT_TRUE(r.contains("last_logits"));
  ASSERT_TRUE(r.contains("greedy_ids"));
  ASSERT_EQ(r["last_logits"].size(), static_cast<size_t>(vocab));
  double lo = 1e30, hi = -1e30;
  for (const auto& v : r["last_logits"]) {
    const double x = v.get<double>();
    ASSERT_TRUE(std::isfinite(x));
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_GT(hi - lo, 0.5);  // not degenerate
  ASSERT_EQ(r["greedy_ids"].size(), static_cast<size_t>(steps));
  for (const auto& id : r["greedy_ids"]) {
    EXPECT_GE(id.get<int>(), 0);
    EXPECT_LT(id.get<int>(), vocab);
  }
}

TEST(Reference, PkgChatAnswersInText) {
  if (!have_python()) GTEST_SKIP() << "no python3 (HALO_PYTHON) found";
  // <s><|user|>\nWhat is curl?<|end|>\n<|assistant|>\n
  const json r = run_reference(pkgchat_dir(), "1,3,17,4053,321,300,2399,4026,4061,5,17,4,17", 8);
  check_output(r, 4096, 8);
  for (const auto& id : r["greedy_ids"]) EXPECT_GT(id.get<int>(), 6) << "special token in a plain answer";
}

TEST(Reference, EveryFamily) {
  TempDir dir;
  for (const char* family : {"llama", "llama3", "mistral", "qwen2", "qwen3", "phi3"}) {
    SCOPED_TRACE(family);
    HALO_GENERATE(family, dir / family, "--vocab 512");
    check_output(run_reference(dir / family, "1,7,300,42,9", 4), 512, 4);
  }
}

}  // namespace
}  // namespace halo::model::testing
