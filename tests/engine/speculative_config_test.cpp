#include "engine/spec_decode/speculative_config.h"

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

using namespace halo::engine::spec;
using Method = SpeculativeConfig::Method;

namespace {

// The message parse_speculative_config throws for `json`; fails the test if it does not throw.
std::string error_of(const std::string& json) {
  try {
    parse_speculative_config(json);
  } catch (const halo::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << json;
  return "";
}

bool has(const std::string& message, const std::string& part) {
  return message.find(part) != std::string::npos;
}

}  // namespace

TEST(SpeculativeConfig, NgramDefaultsToFiveAndFiveWhenNeitherGiven) {
  auto c = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3})");
  EXPECT_EQ(c.method, Method::kNgram);
  EXPECT_EQ(c.num_speculative_tokens, 3);
  EXPECT_EQ(c.prompt_lookup_min, 5);
  EXPECT_EQ(c.prompt_lookup_max, 5);
  EXPECT_EQ(c.model, "");
  EXPECT_EQ(c.disable_by_batch_size, 0);
  EXPECT_TRUE(c.ignored.empty());
}

TEST(SpeculativeConfig, NgramOnlyMaxGivenSetsMinToIt) {
  auto c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})");
  EXPECT_EQ(c.prompt_lookup_min, 4);
  EXPECT_EQ(c.prompt_lookup_max, 4);
}

TEST(SpeculativeConfig, NgramOnlyMinGivenSetsMaxToIt) {
  auto c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2})");
  EXPECT_EQ(c.prompt_lookup_min, 2);
  EXPECT_EQ(c.prompt_lookup_max, 2);
}

TEST(SpeculativeConfig, NgramBothGiven) {
  auto c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 5,
          "prompt_lookup_min": 1, "prompt_lookup_max": 3})");
  EXPECT_EQ(c.prompt_lookup_min, 1);
  EXPECT_EQ(c.prompt_lookup_max, 3);
}

TEST(SpeculativeConfig, NgramMinAboveMaxIsRefused) {
  auto m = error_of(
      R"({"method": "ngram", "num_speculative_tokens": 2,
          "prompt_lookup_min": 4, "prompt_lookup_max": 3})");
  EXPECT_TRUE(has(m, "prompt_lookup_min=4")) << m;
  EXPECT_TRUE(has(m, "prompt_lookup_max=3")) << m;
}

TEST(SpeculativeConfig, PromptLookupMustBeAPositiveInteger) {
  for (const char* v : {"0", "-1", "2.5", "\"3\"", "true"}) {
    for (const char* key : {"prompt_lookup_min", "prompt_lookup_max"}) {
      auto m = error_of(std::string(R"({"method": "ngram", "num_speculative_tokens": 2, ")") + key +
                        "\": " + v + "}");
      EXPECT_TRUE(has(m, std::string("'") + key + "'")) << m;
      EXPECT_TRUE(has(m, "an integer >= 1")) << m;
    }
  }
}

TEST(SpeculativeConfig, MethodInferredAsDraftModelFromModel) {
  auto c = parse_speculative_config(R"({"model": "/models/draft", "num_speculative_tokens": 4})");
  EXPECT_EQ(c.method, Method::kDraftModel);
  EXPECT_EQ(c.model, "/models/draft");
  EXPECT_EQ(c.prompt_lookup_min, 0);
  EXPECT_EQ(c.prompt_lookup_max, 0);
  auto hub =
      parse_speculative_config(R"({"model": "Qwen/Qwen2.5-0.5B", "num_speculative_tokens": 4})");
  EXPECT_EQ(hub.method, Method::kDraftModel);
}

TEST(SpeculativeConfig, MethodInferredAsNgramFromVllmModelNames) {
  for (const char* model : {"ngram", "[ngram]"}) {
    auto c = parse_speculative_config(std::string(R"({"model": ")") + model +
                                      R"(", "num_speculative_tokens": 2})");
    EXPECT_EQ(c.method, Method::kNgram) << model;
    EXPECT_EQ(c.model, "") << model;
    EXPECT_EQ(c.prompt_lookup_min, 5);
  }
}

TEST(SpeculativeConfig, NeitherMethodNorModelIsRefused) {
  auto m = error_of(R"({"num_speculative_tokens": 2})");
  EXPECT_TRUE(has(m, "'method'")) << m;
  EXPECT_TRUE(has(m, "'model'")) << m;
}

TEST(SpeculativeConfig, NgramMethodAcceptsVllmNgramModelNamesAndBracketSpelling) {
  auto a = parse_speculative_config(
      R"({"method": "ngram", "model": "[ngram]", "num_speculative_tokens": 2})");
  EXPECT_EQ(a.method, Method::kNgram);
  EXPECT_EQ(a.model, "");
  auto b = parse_speculative_config(R"({"method": "[ngram]", "num_speculative_tokens": 2})");
  EXPECT_EQ(b.method, Method::kNgram);
}

TEST(SpeculativeConfig, NgramMethodWithADraftModelIsRefused) {
  auto m =
      error_of(R"({"method": "ngram", "model": "/models/draft", "num_speculative_tokens": 2})");
  EXPECT_TRUE(has(m, "'model'")) << m;
  EXPECT_TRUE(has(m, "/models/draft")) << m;
}

TEST(SpeculativeConfig, OtherVllmMethodsAreRefused) {
  for (const char* method :
       {"eagle", "eagle3", "medusa", "mlp_speculator", "mtp", "deepseek_mtp", "qwen3_next_mtp",
        "suffix", "custom_class", "extract_hidden_states", "dflash", "dspark", "ngram_gpu"}) {
    auto m = error_of(std::string(R"({"method": ")") + method +
                      R"(", "model": "/m", "num_speculative_tokens": 2})");
    EXPECT_TRUE(has(m, std::string("'") + method + "'")) << m;
    EXPECT_TRUE(has(m, "not supported")) << m;
    EXPECT_TRUE(has(m, "halo supports ngram and draft_model")) << m;
  }
}

TEST(SpeculativeConfig, UnknownMethodIsRefused) {
  auto m = error_of(R"({"method": "lookahead", "num_speculative_tokens": 2})");
  EXPECT_TRUE(has(m, "unknown method 'lookahead'")) << m;
  EXPECT_TRUE(has(m, "halo supports ngram and draft_model")) << m;
}

TEST(SpeculativeConfig, MethodMustBeAString) {
  auto m = error_of(R"({"method": 1, "num_speculative_tokens": 2})");
  EXPECT_TRUE(has(m, "'method' must be a string")) << m;
}

TEST(SpeculativeConfig, ClassPathModelWithoutMethodIsRefusedAsVllmCustomClass) {
  auto m = error_of(R"({"model": "my_pkg.MyProposer", "num_speculative_tokens": 2})");
  EXPECT_TRUE(has(m, "'model'")) << m;
  EXPECT_TRUE(has(m, "custom_class")) << m;
  auto dir =
      parse_speculative_config(R"({"model": "./my_pkg.MyProposer", "num_speculative_tokens": 2})");
  EXPECT_EQ(dir.method, Method::kDraftModel);
  auto dashed =
      parse_speculative_config(R"({"model": "qwen2.5-0.5b", "num_speculative_tokens": 2})");
  EXPECT_EQ(dashed.method, Method::kDraftModel);
}

TEST(SpeculativeConfig, DraftNamedAsEagleIsRefusedAsVllmWouldRunEagle) {
  for (const char* json :
       {R"({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 2})",
        R"({"method": "draft_model", "model": "yuhuili/EAGLE-LLaMA3-Instruct-8B",
            "num_speculative_tokens": 2})"}) {
    auto m = error_of(json);
    EXPECT_TRUE(has(m, "'model'")) << m;
    EXPECT_TRUE(has(m, "eagle")) << m;
    EXPECT_TRUE(has(m, "halo supports ngram and draft_model")) << m;
  }
}

TEST(SpeculativeConfig, DraftModelNeedsAModel) {
  auto m = error_of(R"({"method": "draft_model", "num_speculative_tokens": 2})");
  EXPECT_TRUE(has(m, "'model'")) << m;
}

TEST(SpeculativeConfig, ModelMustBeANonEmptyString) {
  auto empty = error_of(R"({"method": "draft_model", "model": "", "num_speculative_tokens": 2})");
  EXPECT_TRUE(has(empty, "'model' must be a non-empty string")) << empty;
  auto number = error_of(R"({"method": "draft_model", "model": 3, "num_speculative_tokens": 2})");
  EXPECT_TRUE(has(number, "'model' must be a string, got 3")) << number;
}

TEST(SpeculativeConfig, DraftModelNamedNgramIsRefused) {
  auto m = error_of(R"({"method": "draft_model", "model": "ngram", "num_speculative_tokens": 2})");
  EXPECT_TRUE(has(m, "'model'")) << m;
  EXPECT_TRUE(has(m, "ngram")) << m;
}

TEST(SpeculativeConfig, DraftModelIgnoresPromptLookupAsVllmDoes) {
  auto c = parse_speculative_config(
      R"({"method": "draft_model", "model": "/d", "num_speculative_tokens": 2,
          "prompt_lookup_max": 3, "prompt_lookup_min": 4})");
  EXPECT_EQ(c.prompt_lookup_min, 0);
  EXPECT_EQ(c.prompt_lookup_max, 0);
  EXPECT_EQ(c.ignored, (std::vector<std::string>{"prompt_lookup_max", "prompt_lookup_min"}));
  // Still typed as vLLM types them.
  auto m = error_of(
      R"({"method": "draft_model", "model": "/d", "num_speculative_tokens": 2, "prompt_lookup_min": 0})");
  EXPECT_TRUE(has(m, "'prompt_lookup_min'")) << m;
}

TEST(SpeculativeConfig, NumSpeculativeTokensIsRequired) {
  auto m = error_of(R"({"method": "ngram"})");
  EXPECT_TRUE(has(m, "'num_speculative_tokens' is required")) << m;
  auto null = error_of(R"({"method": "ngram", "num_speculative_tokens": null})");
  EXPECT_TRUE(has(null, "'num_speculative_tokens' is required")) << null;
}

TEST(SpeculativeConfig, NumSpeculativeTokensFromOneToSixteen) {
  for (int k : {1, 16})
    EXPECT_EQ(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": )" +
                                       std::to_string(k) + "}")
                  .num_speculative_tokens,
              k);
  for (const char* v : {"0", "17", "-1", "1.5", "\"3\"", "true", "18446744073709551615", "[]"}) {
    auto m = error_of(std::string(R"({"method": "ngram", "num_speculative_tokens": )") + v + "}");
    EXPECT_TRUE(has(m, "'num_speculative_tokens' must be an integer from 1 to 16")) << m;
  }
}

TEST(SpeculativeConfig, DisableByBatchSizeAtLeastTwo) {
  auto c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 2})");
  EXPECT_EQ(c.disable_by_batch_size, 2);
  for (const char* v : {"1", "0", "-4", "2.0", "\"8\""}) {
    auto m = error_of(
        std::string(
            R"({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": )") +
        v + "}");
    EXPECT_TRUE(has(m, "'disable_by_batch_size' must be an integer >= 2")) << m;
  }
}

TEST(SpeculativeConfig, LoadingKeysAreAcceptedAndListedAsIgnored) {
  auto c = parse_speculative_config(R"({
      "method": "draft_model", "model": "/d", "num_speculative_tokens": 2,
      "revision": "main", "draft_tensor_parallel_size": 1, "max_model_len": 2048,
      "quantization": "fp8", "code_revision": "v1", "enforce_eager": true,
      "disable_padded_drafter_batch": false, "disable_log_stats": true})");
  EXPECT_EQ(c.ignored, (std::vector<std::string>{"code_revision", "disable_log_stats",
                                                 "disable_padded_drafter_batch",
                                                 "draft_tensor_parallel_size", "enforce_eager",
                                                 "max_model_len", "quantization"}));
  EXPECT_EQ(c.revision, "main") << "the draft's Hub revision is used";
  EXPECT_EQ(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2, "revision": "v"})").ignored,
            std::vector<std::string>{"revision"})
      << "ngram loads no model";
}

TEST(SpeculativeConfig, IgnoredKeysAreStillTypeChecked) {
  const std::string head =
      R"({"method": "draft_model", "model": "/d", "num_speculative_tokens": 2, )";
  struct Case {
    const char* field;
    const char* expected;
  };
  for (auto [field, expected] :
       {Case{R"("draft_tensor_parallel_size": 2)", "'draft_tensor_parallel_size' must be 1"},
        Case{R"("max_model_len": 0)", "'max_model_len' must be an integer >= 1"},
        Case{R"("revision": 3)", "'revision' must be a string"},
        Case{R"("quantization": [])", "'quantization' must be a string"},
        Case{R"("enforce_eager": "yes")", "'enforce_eager' must be true or false"}}) {
    auto m = error_of(head + field + "}");
    EXPECT_TRUE(has(m, expected)) << m;
  }
}

TEST(SpeculativeConfig, NullIsTheSameAsAbsent) {
  auto c = parse_speculative_config(R"({
      "method": "ngram", "num_speculative_tokens": 2, "model": null, "prompt_lookup_min": null,
      "prompt_lookup_max": 3, "revision": null, "tensor_parallel_size": null,
      "disable_by_batch_size": null})");
  EXPECT_EQ(c.prompt_lookup_min, 3);
  EXPECT_EQ(c.prompt_lookup_max, 3);
  EXPECT_EQ(c.disable_by_batch_size, 0);
  EXPECT_TRUE(c.ignored.empty());
  auto m = error_of(R"({"method": null, "model": null, "num_speculative_tokens": 2})");
  EXPECT_TRUE(has(m, "'method'")) << m;
}

TEST(SpeculativeConfig, TensorParallelSizePointsAtTheDraftKey) {
  auto m =
      error_of(R"({"method": "ngram", "num_speculative_tokens": 2, "tensor_parallel_size": 1})");
  EXPECT_TRUE(has(m, "'tensor_parallel_size'")) << m;
  EXPECT_TRUE(has(m, "'draft_tensor_parallel_size'")) << m;
}

TEST(SpeculativeConfig, UnsupportedVllmFieldsAreRefused) {
  for (const char* field : {"parallel_drafting", "draft_sample_method", "rejection_sample_method",
                            "speculative_token_tree", "suffix_decoding_max_tree_depth"}) {
    auto m = error_of(std::string(R"({"method": "ngram", "num_speculative_tokens": 2, ")") + field +
                      R"(": true})");
    EXPECT_TRUE(has(m, std::string("'") + field + "' is a vLLM field halo does not support")) << m;
  }
}

TEST(SpeculativeConfig, UnknownKeyIsRefusedListingTheKnownKeys) {
  auto m = error_of(R"({"method": "ngram", "num_speculative_tokens": 2, "num_spec_tokens": 3})");
  EXPECT_TRUE(has(m, "unknown field 'num_spec_tokens'")) << m;
  for (const char* key :
       {"method", "model", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
        "disable_by_batch_size", "draft_tensor_parallel_size", "max_model_len", "revision",
        "quantization"})
    EXPECT_TRUE(has(m, key)) << key << ": " << m;
}

TEST(SpeculativeConfig, TextMustBeAJsonObject) {
  EXPECT_TRUE(has(error_of("{\"method\": "), "not JSON"));
  EXPECT_TRUE(has(error_of(""), "not JSON"));
  for (const char* json : {"[]", "\"ngram\"", "3", "null"})
    EXPECT_TRUE(has(error_of(json), "must be a JSON object")) << json;
}

TEST(SpeculativeConfig, MessagesNameTheFlag) {
  EXPECT_EQ(error_of("[]").rfind("--speculative-config: ", 0), 0u);
}

TEST(SpeculativeConfig, ToJsonIsCanonical) {
  auto ngram = parse_speculative_config(
      R"({"num_speculative_tokens": 3, "prompt_lookup_max": 4, "method": "ngram",
          "revision": "x"})");
  EXPECT_EQ(
      ngram.to_json(),
      R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4,"prompt_lookup_min":4})");
  auto draft = parse_speculative_config(
      R"({"model": "/d", "num_speculative_tokens": 2, "disable_by_batch_size": 8})");
  EXPECT_EQ(
      draft.to_json(),
      R"({"disable_by_batch_size":8,"method":"draft_model","model":"/d","num_speculative_tokens":2})");
}

TEST(SpeculativeConfig, ToJsonRoundTrips) {
  for (const char* json :
       {R"({"method": "ngram", "num_speculative_tokens": 1})",
        R"({"model": "[ngram]", "num_speculative_tokens": 16, "prompt_lookup_min": 2,
            "prompt_lookup_max": 7, "disable_by_batch_size": 3})",
        R"({"model": "Qwen/Qwen2.5-0.5B", "num_speculative_tokens": 5, "revision": "main",
            "prompt_lookup_min": 2})"}) {
    auto c = parse_speculative_config(json);
    c.ignored.clear();
    EXPECT_EQ(parse_speculative_config(c.to_json()), c) << json;
  }
}

TEST(SpeculativeConfig, MethodNames) {
  EXPECT_STREQ(method_name(Method::kNgram), "ngram");
  EXPECT_STREQ(method_name(Method::kDraftModel), "draft_model");
}
