// Unit tests of the serving-configuration layers without a model or device:
// setting parsing and the source in every error, LMI option names, the
// environment and serving.properties layers, model.json and config.pbtxt
// reading, the memory arithmetic.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/error.h"
#include "serve/model_loading.h"
#include "serve/model_repository.h"
#include "serve/serving_config.h"

namespace halo::serve {
namespace {
namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

fs::path write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
  return p;
}

class ServingFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("halo-serving-config-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(ServingConfig, LayersApplyInOrderAndRecordTheirSource) {
  ModelSettings s;
  apply_layer(s, {{"max-num-seqs", "4", "env"}, {"block-size", "32", "env"}});
  apply_layer(s, {{"max-num-seqs", "6", "props:2"}});
  EXPECT_EQ(s.engine.max_num_seqs, 6);
  EXPECT_EQ(s.engine.block_size, 32);
  EXPECT_EQ(s.origin["max-num-seqs"], "props:2");
  EXPECT_EQ(s.origin["block-size"], "env");
  apply_setting(s, {"gpu-memory-utilization", "0.5", "x"});
  EXPECT_FLOAT_EQ(s.engine.device_memory_utilization, 0.5f);
  apply_setting(s, {"kv-cache-memory", "64MiB", "x"});
  EXPECT_EQ(s.engine.kv_cache_memory, 64u << 20);
  apply_setting(s, {"dtype", "bf16", "x"});
  EXPECT_EQ(s.dtype, "bfloat16");
  apply_setting(s, {"tensor-parallel-size", "max", "x"});
  EXPECT_EQ(s.tensor_parallel_size, 0);
  apply_setting(s, {"enable-prefix-caching", "True", "x"});
  EXPECT_TRUE(s.engine.enable_prefix_caching);
}

TEST(ServingConfig, EveryErrorNamesItsSource) {
  ModelSettings s;
  EXPECT_EQ(error_of([&] { apply_setting(s, {"max-num-seqs", "lots", "f.properties:3"}); }),
            "f.properties:3: max-num-seqs=lots: expected an integer");
  EXPECT_EQ(error_of([&] { apply_setting(s, {"enable-prefix-caching", "maybe", "environment OPTION_X"}); }),
            "environment OPTION_X: enable-prefix-caching=maybe: expected true or false");
  EXPECT_NE(error_of([&] { apply_setting(s, {"frobnicate", "1", "src"}); }).find("src: unknown setting 'frobnicate'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_setting(s, {"kv-cache-memory", "4 parsecs", "src"}); }).find("src: kv-cache-memory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_setting(s, {"device-memory-utilization", "0", "src"}); }).find("fraction"),
            std::string::npos);
}

TEST(ServingConfig, LmiOptionNames) {
  EXPECT_EQ(lmi_option_key("max_rolling_batch_size", "8", "s"), "max-num-seqs");
  EXPECT_EQ(lmi_option_key("TENSOR_PARALLEL_DEGREE", "2", "s"), "tensor-parallel-size");
  EXPECT_EQ(lmi_option_key("max_model_len", "512", "s"), "max-model-len");
  EXPECT_EQ(lmi_option_key("dtype", "fp16", "s"), "dtype");
  EXPECT_EQ(lmi_option_key("trust_remote_code", "true", "s"), "");
  EXPECT_EQ(lmi_option_key("revision", "v1", "s"), "revision");
  EXPECT_NE(error_of([] { lmi_option_key("speculative_draft_model", "m", "env OPTION_SPECULATIVE_DRAFT_MODEL"); })
                .find("env OPTION_SPECULATIVE_DRAFT_MODEL: unknown option"),
            std::string::npos);
}

// vLLM's arguments mean the same in LMI options as on the command line.
TEST(ServingConfig, LmiOptionsFollowVllmArgumentTable) {
  EXPECT_EQ(lmi_option_key("enforce_eager", "true", "s"), "");
  EXPECT_EQ(lmi_option_key("pipeline_parallel_size", "1", "s"), "");
  EXPECT_NE(error_of([] { lmi_option_key("pipeline_parallel_size", "2", "env OPTION_PIPELINE_PARALLEL_SIZE"); })
                .find("env OPTION_PIPELINE_PARALLEL_SIZE: pipeline_parallel_size=2: not supported"),
            std::string::npos);
  EXPECT_EQ(lmi_option_key("quantization", "int8", "s"), "quantization");
}

// vLLM's LoRA flags: settings, LMI options, and --lora-modules in its two forms.
TEST(ServingConfig, LoraSettingsAndModules) {
  EXPECT_EQ(lmi_option_key("enable_lora", "true", "s"), "enable-lora");
  EXPECT_EQ(lmi_option_key("max_cpu_loras", "2", "s"), "max-cpu-loras");
  ModelSettings m;
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"enable-lora", "true"},
           {"max-loras", "3"},
           {"max-lora-rank", "32"},
           {"max-cpu-loras", "5"},
           {"lora-modules", "sql=/a/sql, chat=org/chat"}})
    apply_setting(m, {k, v, "t"});
  EXPECT_TRUE(m.engine.enable_lora);
  EXPECT_EQ(m.engine.max_loras, 3);
  EXPECT_EQ(m.engine.max_lora_rank, 32);
  EXPECT_EQ(m.engine.max_cpu_loras, 5);
  ASSERT_EQ(m.lora_modules.size(), 2u);
  EXPECT_EQ(m.lora_modules[1].name, "chat");
  EXPECT_EQ(m.lora_modules[1].path, "org/chat");
  const auto json = parse_lora_modules(R"([{"name": "a", "path": "/x", "base_model_name": "b"}])");
  ASSERT_EQ(json.size(), 1u);
  EXPECT_EQ(json[0].path, "/x");
  EXPECT_NE(error_of([] { parse_lora_modules("sql"); }).find("'sql' is not name=path"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_lora_modules("a=/x a=/y"); }).find("'a' is given twice"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_lora_modules(R"({"name": "a"})"); }).find("\"path\""),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_lora_modules("[1,"); }).find("JSON"), std::string::npos);
  EXPECT_NE(error_of([&] {
              apply_setting(m, {"max-loras", "0", "cli --max-loras"});
            }).find("cli --max-loras"),
            std::string::npos);
}

TEST(ServingConfig, EnvironmentLayer) {
  auto layer = sagemaker_env_layer({{"OPTION_MAX_ROLLING_BATCH_SIZE", "8"},
                                    {"TENSOR_PARALLEL_DEGREE", "1"},
                                    {"OPTION_ENTRYPOINT", "djl_python.huggingface"},
                                    {"OPTION_DTYPE", ""},
                                    {"PATH", "/bin"}});
  ASSERT_EQ(layer.size(), 2u);
  EXPECT_EQ(layer[0].key, "tensor-parallel-size");
  EXPECT_EQ(layer[0].source, "environment TENSOR_PARALLEL_DEGREE");
  EXPECT_EQ(layer[1].key, "max-num-seqs");
  EXPECT_EQ(layer[1].source, "environment OPTION_MAX_ROLLING_BATCH_SIZE");
}

TEST_F(ServingFiles, ServingPropertiesLayer) {
  auto f = write(dir_ / "m" / "serving.properties",
                 "# comment\nengine=Python\noption.model_id=weights\noption.max_rolling_batch_size = 6\n");
  auto layer = serving_properties_layer(f);
  ASSERT_EQ(layer.size(), 2u);
  EXPECT_EQ(layer[0].key, "model");
  EXPECT_EQ(layer[0].value, (dir_ / "m" / "weights").string());
  EXPECT_EQ(layer[1].value, "6");
  EXPECT_EQ(layer[1].source, f.string() + ":4");
  write(f, "option.dtype=auto\nnot a setting\n");
  EXPECT_NE(error_of([&] { serving_properties_layer(f); }).find(f.string() + ":2: expected key=value"),
            std::string::npos);
}

TEST_F(ServingFiles, ModelJsonAndPbtxt) {
  auto j = write(dir_ / "repo" / "a" / "1" / "model.json",
                 "{\n  \"model\": \"../../../w\",\n  \"gpu_memory_utilization\": 0.5,\n  \"enforce_eager\": true\n}\n");
  write(dir_ / "repo" / "a" / "config.pbtxt",
        "name: \"a\"  # the name\nmax_batch_size: 8\nparameters {\n  key: \"name\"\n  value: { string_value: \"x\" }\n}\n");
  write(dir_ / "repo" / "b" / "config.pbtxt", "name: \"b\"\n");
  auto layer = model_json_layer(j);
  ASSERT_EQ(layer.size(), 2u);
  EXPECT_EQ(layer[0].value, (dir_ / "w").string());
  EXPECT_EQ(layer[1].key, "device-memory-utilization");
  EXPECT_EQ(layer[1].source, j.string() + ":3 key 'gpu_memory_utilization'");
  auto models = scan_model_repository(dir_ / "repo");
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[0].name, "a");
  EXPECT_EQ(models[0].max_batch_size, 8);
  EXPECT_EQ(models[0].version, "1");
  EXPECT_TRUE(models[0].error.empty()) << models[0].error;
  EXPECT_NE(models[1].error.find("no version directory with a model.json"), std::string::npos);
}

// A draft model counts in the memory estimate: its weight files, and its KV
// (the same blocks hold both models' entries). Both from its own files.
TEST(MemoryEstimate, CountsTheDraftModel) {
  const fs::path models = fs::path(HALO_SOURCE_DIR) / "models";
  const auto target = model::load_config(models / "pkgchat-5m");
  ModelSettings s;
  s.engine.max_kv_tokens = 1000;
  const auto plain = estimate_memory(s, target, 100, 1ull << 40, 0);
  s.engine.speculative_config = R"({"model": ")" + (models / "pkgchat-5m-draft").string() +
                                R"(", "num_speculative_tokens": 3})";
  const auto with_draft = estimate_memory(s, target, 100, 1ull << 40, 0);
  const auto draft = model::load_config(models / "pkgchat-5m-draft");
  const uint64_t draft_kv = 2ull * draft.spec.num_layers * draft.spec.num_kv_heads * draft.spec.head_dim * 2;
  EXPECT_EQ(with_draft.weights, 100 + fs::file_size(models / "pkgchat-5m-draft" / "model.safetensors"));
  EXPECT_EQ(with_draft.kv_bytes_per_token, plain.kv_bytes_per_token + draft_kv);
  EXPECT_EQ(with_draft.kv, 1000 * with_draft.kv_bytes_per_token);
  s.engine.speculative_config = R"({"method": "ngram", "num_speculative_tokens": 3})";
  EXPECT_EQ(estimate_memory(s, target, 100, 1ull << 40, 0).total(), plain.total()) << "ngram loads nothing";
}

TEST(MemoryPlan, RefusesWithTheNumbers) {
  MemoryPlan plan;
  MemoryEstimate a{100u << 20, 400u << 20, 1024, "kv-cache-memory from x"};
  EXPECT_EQ(plan.claim("a", "cpu:0", 1024u << 20, a), "");
  EXPECT_EQ(plan.left("cpu:0", 1024u << 20), 524u << 20);
  MemoryEstimate b{100u << 20, 500u << 20, 1024, "kv-cache-memory from y"};
  std::string why = plan.claim("b", "cpu:0", 1024u << 20, b);
  EXPECT_NE(why.find("model 'b' does not fit on cpu:0: weights 100.0 MiB + KV cache 500.0 MiB (kv-cache-memory from y) = "
                     "600.0 MiB needed, but only 524.0 MiB of the device's 1.0 GiB free is left (models loaded before "
                     "it: a claim 500.0 MiB)"),
            std::string::npos)
      << why;
  EXPECT_EQ(plan.claim("c", "cuda:1", 1024u << 20, b), "") << "another device has its own budget";
}

}  // namespace
}  // namespace halo::serve
