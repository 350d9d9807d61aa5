// Unit tests of the model repository reader without a model or device:
// config.pbtxt parsing (parameters, template placeholders, sources), the
// TensorRT-LLM parameter mapping and a TensorRT-LLM repository scanned as
// one pipeline.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "common/error.h"
#include "serve/model_repository.h"

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

std::string param(const std::string& key, const std::string& value) {
  return "parameters: {\n  key: \"" + key + "\"\n  value: {\n    string_value: \"" + value + "\"\n  }\n}\n";
}

class Repository : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("halo_repo_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    write(dir_ / "ckpt" / "config.json", "{}");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }
  // inflight_batcher_llm's five models; `engine_params` for tensorrt_llm.
  fs::path pipeline(const std::string& engine_params, const std::string& max_batch = "8") {
    const fs::path r = dir_ / "repo";
    write(r / "ensemble" / "config.pbtxt", "name: \"ensemble\"\nplatform: \"ensemble\"\nmax_batch_size: 8\n"
                                           "ensemble_scheduling {\n  step [\n    {\n      model_name: \"preprocessing\"\n"
                                           "      model_version: -1\n    }\n  ]\n}\n");
    fs::create_directories(r / "ensemble" / "1");
    for (const char* py : {"preprocessing", "postprocessing"})
      write(r / py / "config.pbtxt", std::string("name: \"") + py + "\"\nbackend: \"python\"\nmax_batch_size: 8\n" +
                                         param("tokenizer_dir", (dir_ / "ckpt").string()) +
                                         param("my_own_key", "${whatever}"));
    write(r / "tensorrt_llm_bls" / "config.pbtxt",
          "name: \"tensorrt_llm_bls\"\nbackend: \"python\"\nmax_batch_size: 8\n" + param("accumulate_tokens", "False"));
    write(r / "tensorrt_llm" / "config.pbtxt", "name: \"tensorrt_llm\"\nbackend: \"tensorrtllm\"\nmax_batch_size: " +
                                                   max_batch + "\nmodel_transaction_policy {\n  decoupled: True\n}\n" +
                                                   engine_params);
    return r;
  }
  fs::path dir_;
};

TEST_F(Repository, PbtxtParametersAndNestedFields) {
  auto f = write(dir_ / "c.pbtxt",
                 "name: \"m\"  # comment\nbackend: 'tensorrtllm'\nmax_batch_size: 16\n"
                 "model_transaction_policy {\n  decoupled: true\n}\n"
                 "dynamic_batching {\n  preferred_batch_size: [ 16 ]\n}\n"
                 "input [\n  {\n    name: \"x\"\n    dims: [ -1 ]\n    reshape: { shape: [ ] }\n  }\n]\n"
                 "instance_group [ { count: 1\n kind : KIND_CPU } ]\n" +
                     param("enable_kv_cache_reuse", "true") + "parameters { key: \"a\" value { string_value: \"b\" } }\n");
  PbtxtConfig c = read_config_pbtxt(f);
  EXPECT_EQ(c.name, "m");
  EXPECT_EQ(c.backend, "tensorrtllm");
  EXPECT_EQ(c.max_batch_size, 16);
  EXPECT_TRUE(c.decoupled);
  ASSERT_EQ(c.parameters.size(), 2u);
  EXPECT_EQ(c.parameters[0].key, "enable_kv_cache_reuse");
  EXPECT_EQ(c.parameters[0].value, "true");
  EXPECT_EQ(c.parameters[0].line, 22);
  EXPECT_EQ(c.parameters[1].value, "b");
}

TEST_F(Repository, UnfilledPlaceholdersOutsideParametersNameFileLineKey) {
  auto f = write(dir_ / "c.pbtxt", "name: \"m\"\nmax_batch_size: ${triton_max_batch_size}\n");
  EXPECT_NE(error_of([&] { read_config_pbtxt(f); })
                .find(f.string() + ":2 key 'max_batch_size': the template placeholder ${triton_max_batch_size} was "
                                   "not filled"),
            std::string::npos);
  write(f, "name: \"m\"\nbackend: \"${triton_backend}\"\n");
  EXPECT_NE(error_of([&] { read_config_pbtxt(f); }).find(":2 key 'backend'"), std::string::npos);
  write(f, "input [\n  {\n    data_type: ${logits_datatype}\n  }\n]\n");
  EXPECT_NE(error_of([&] { read_config_pbtxt(f); }).find(":3 key 'data_type'"), std::string::npos);
  write(f, "name: \"m\"\nmax_batch_size: 8\ninput [\n");
  EXPECT_NE(error_of([&] { read_config_pbtxt(f); }).find(f.string() + ":4: cannot parse"), std::string::npos);
  // Inside a parameter the placeholder is the mapping's to judge.
  write(f, param("kv_cache_host_memory_bytes", "${kv_cache_host_memory_bytes}"));
  EXPECT_EQ(read_config_pbtxt(f).parameters.at(0).value, "${kv_cache_host_memory_bytes}");
}

TEST_F(Repository, TensorRtLlmParametersMapToSettings) {
  auto f = write(dir_ / "c.pbtxt", param("kv_cache_free_gpu_mem_fraction", "0.7") +
                                       param("enable_kv_cache_reuse", "True") +
                                       param("max_tokens_in_paged_kv_cache", "4096") +
                                       param("enable_chunked_context", "true") + param("gpu_device_ids", "1") +
                                       param("gpt_model_type", "inflight_fused_batching") +
                                       param("gpt_model_path", "/engines/x") + param("max_beam_width", "1") +
                                       param("lora_cache_host_memory_bytes", "${lora_cache_host_memory_bytes}") +
                                       param("exclude_input_in_output", "True") + param("decoding_mode", ""));
  SettingLayer layer = tensorrt_llm_layer(read_config_pbtxt(f));
  ASSERT_EQ(layer.size(), 5u);
  EXPECT_EQ(layer[0].key, "device-memory-utilization");
  EXPECT_EQ(layer[0].value, "0.7");
  EXPECT_EQ(layer[0].source, f.string() + ":4 key 'kv_cache_free_gpu_mem_fraction'");
  EXPECT_EQ(layer[1].key, "enable-prefix-caching");
  EXPECT_EQ(layer[2].key, "max-kv-tokens");
  EXPECT_EQ(layer[3].key, "enable-chunked-prefill");
  EXPECT_EQ(layer[4].key, "device-index");

  auto refused = [&](const std::string& key, const std::string& value) {
    write(f, param(key, value));
    return error_of([&] { tensorrt_llm_layer(read_config_pbtxt(f)); });
  };
  EXPECT_EQ(refused("max_beam_width", "4"), "(no error)");  // beam search is served
  EXPECT_NE(refused("max_beam_width", "0")
                .find(f.string() + ":4 key 'max_beam_width': expected a positive integer"),
            std::string::npos);
  EXPECT_EQ(refused("decoding_mode", "beam_search"), "(no error)");
  EXPECT_NE(refused("gpt_model_type", "static").find("expected inflight_fused_batching"), std::string::npos);
  EXPECT_EQ(refused("gpt_model_type", "V1"), "(no error)");
  EXPECT_NE(refused("gpt_model_path", "${engine_dir}").find(":4 key 'gpt_model_path': the template placeholder "
                                                            "${engine_dir} was not filled"),
            std::string::npos);
  EXPECT_NE(refused("gpu_device_ids", "0,1").find("one device index"), std::string::npos);
  EXPECT_NE(refused("frobnicate", "1").find(":4 key 'frobnicate': unknown TensorRT-LLM parameter"),
            std::string::npos);
}

TEST_F(Repository, TensorRtLlmRepositoryIsOnePipeline) {
  const fs::path r = pipeline(param("kv_cache_free_gpu_mem_fraction", "0.5") + param("gpt_model_path", "/e"));
  write(r / "pkgchat" / "1" / "model.json", "{\"model\": \"../../../ckpt\"}");
  auto models = scan_model_repository(r);
  ASSERT_EQ(models.size(), 2u);
  const auto& m = models[0];
  EXPECT_EQ(m.name, "ensemble");
  EXPECT_EQ(m.error, "");
  EXPECT_EQ(m.version, "1");
  EXPECT_EQ(m.max_batch_size, 8);
  EXPECT_EQ(m.aliases, (std::vector<std::string>{"tensorrt_llm_bls", "tensorrt_llm"}));
  ASSERT_EQ(m.settings.size(), 2u);
  EXPECT_EQ(m.settings[0].key, "model");
  EXPECT_EQ(m.settings[0].value, (dir_ / "ckpt").string());
  // tensorrt_llm's tokenizer_dir, else preprocessing's, else postprocessing's.
  EXPECT_EQ(m.settings[0].source, (r / "preprocessing" / "config.pbtxt").string() + ":7 key 'tokenizer_dir'");
  EXPECT_EQ(models[1].name, "pkgchat");
  EXPECT_EQ(models[1].error, "");

  // tensorrt_llm/1/model.json names the checkpoint instead.
  write(r / "tensorrt_llm" / "1" / "model.json", "{\"model\": \"../../../ckpt\", \"max_num_seqs\": 4}");
  models = scan_model_repository(r);
  ASSERT_EQ(models[0].settings.size(), 3u);
  EXPECT_EQ(models[0].settings[1].key, "model");
  EXPECT_EQ(models[0].settings[2].key, "max-num-seqs");

  // One bad config refuses the pipeline, not the other model.
  pipeline("", "${triton_max_batch_size}");
  models = scan_model_repository(r);
  EXPECT_NE(models[0].error.find("tensorrt_llm/config.pbtxt:3 key 'max_batch_size'"), std::string::npos)
      << models[0].error;
  EXPECT_EQ(models[1].error, "");
}

TEST_F(Repository, TensorRtLlmCheckpointMustBeAHuggingFaceDirectory) {
  const fs::path r = pipeline("");
  for (const char* py : {"preprocessing", "postprocessing"})
    write(r / py / "config.pbtxt", std::string("name: \"") + py + "\"\n" + param("tokenizer_dir", dir_.string()));
  auto models = scan_model_repository(r);
  EXPECT_NE(models[0].error.find("key 'tokenizer_dir': " + dir_.string() + " holds no Hugging Face checkpoint"),
            std::string::npos)
      << models[0].error;
  for (const char* py : {"preprocessing", "postprocessing"})
    write(r / py / "config.pbtxt", std::string("name: \"") + py + "\"\n" + param("tokenizer_dir", "${tokenizer_dir}"));
  models = scan_model_repository(r);
  EXPECT_NE(models[0].error.find("preprocessing/config.pbtxt:5 key 'tokenizer_dir': the template placeholder "
                                 "${tokenizer_dir} was not filled"),
            std::string::npos)
      << models[0].error;
}

}  // namespace
}  // namespace halo::serve
