// The readers of how an embedding model pools: --pooler-config (vLLM's JSON)
// and sentence-transformers' modules.json + Pooling config.json, with every
// mode halo cannot apply refused by name; and the pooling arithmetic itself.
#include "serve/pooling_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/error.h"
#include "engine/pooling.h"

using namespace halo;
using namespace halo::serve;
using engine::PoolingType;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

const char* kModules = R"([
  {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
  {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])";

std::string pooling_json(const char* mode) {
  return std::string(R"({"word_embedding_dimension": 64, "pooling_mode_cls_token": )") +
         (std::string(mode) == "cls" ? "true" : "false") + R"(, "pooling_mode_mean_tokens": )" +
         (std::string(mode) == "mean" ? "true" : "false") + R"(, "pooling_mode_max_tokens": )" +
         (std::string(mode) == "max" ? "true" : "false") + R"(, "pooling_mode_lasttoken": )" +
         (std::string(mode) == "last" ? "true" : "false") + "}";
}

TEST(PoolerConfig, ParsesVllmJson) {
  EXPECT_FALSE(parse_pooler_config("").has_value());
  auto p = parse_pooler_config(R"({"pooling_type": "mean", "normalize": false})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->type, PoolingType::kMean);
  EXPECT_FALSE(p->normalize);
  p = parse_pooler_config(R"({"pooling_type": "CLS"})");
  EXPECT_EQ(p->type, PoolingType::kCls);
  EXPECT_TRUE(p->normalize);
  EXPECT_EQ(parse_pooler_config("{}")->type, PoolingType::kLast);
}

TEST(PoolerConfig, RefusesWhatItCannotApplyByName) {
  EXPECT_NE(error_of([] { parse_pooler_config(R"({"pooling_type": "MAX"})"); }).find("MAX"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_pooler_config(R"({"pooling_type": "MEAN", "softmax": true})");
            }).find("softmax"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_pooler_config(R"({"normalize": "yes"})"); }).find("normalize"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_pooler_config("[1]"); }).find("--pooler-config"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_pooler_config("{"); }).find("not valid JSON"), std::string::npos);
}

TEST(SentenceTransformers, ModesAndNormalize) {
  EXPECT_EQ(sentence_transformers_pooling_dir(kModules), "1_Pooling");
  auto p = parse_sentence_transformers(kModules, pooling_json("mean"));
  EXPECT_EQ(p.type, PoolingType::kMean);
  EXPECT_TRUE(p.normalize);
  EXPECT_EQ(parse_sentence_transformers(kModules, pooling_json("cls")).type, PoolingType::kCls);
  EXPECT_EQ(parse_sentence_transformers(kModules, pooling_json("last")).type, PoolingType::kLast);
  const char* no_norm = R"([{"path": "", "type": "sentence_transformers.models.Transformer"},
                            {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])";
  EXPECT_FALSE(parse_sentence_transformers(no_norm, pooling_json("mean")).normalize);
}

TEST(SentenceTransformers, RefusesModesAndModulesHaloDoesNotApply) {
  EXPECT_NE(error_of([] {
              parse_sentence_transformers(kModules, pooling_json("max"));
            }).find("pooling_mode_max_tokens"),
            std::string::npos);
  const char* dense = R"([{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                          {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}])";
  EXPECT_NE(
      error_of([&] { parse_sentence_transformers(dense, pooling_json("mean")); }).find("Dense"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              parse_sentence_transformers(
                  kModules, R"({"pooling_mode_mean_tokens": true, "include_prompt": false})");
            }).find("include_prompt"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_sentence_transformers(kModules, pooling_json("none"));
            }).find("exactly one"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              sentence_transformers_pooling_dir(
                  R"([{"path": "../x", "type": "sentence_transformers.models.Pooling"}])");
            }).find("leaves the model directory"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_sentence_transformers("{}", ""); }).find("modules.json"),
            std::string::npos);
}

TEST(SentenceTransformers, ResolvedFromAModelDirectory) {
  const fs::path dir = fs::temp_directory_path() / ("halo-st-" + std::to_string(getpid()));
  fs::create_directories(dir / "1_Pooling");
  std::ofstream(dir / "modules.json") << kModules;
  std::ofstream(dir / "1_Pooling" / "config.json") << pooling_json("cls");
  EXPECT_EQ(resolve_pooling("", dir).type, PoolingType::kCls);
  EXPECT_EQ(resolve_pooling(R"({"pooling_type": "MEAN"})", dir).type, PoolingType::kMean)
      << "the flag wins";
  std::ofstream(dir / "1_Pooling" / "config.json") << "{broken";
  EXPECT_NE(error_of([&] { resolve_pooling("", dir); }).find(dir.string()), std::string::npos);
  fs::remove_all(dir / "1_Pooling");
  EXPECT_NE(error_of([&] { resolve_pooling("", dir); }).find("cannot be read"), std::string::npos);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto p =
      resolve_pooling("", dir);  // no sentence-transformers files: vLLM's decoder default
  EXPECT_EQ(p.type, PoolingType::kLast);
  EXPECT_TRUE(p.normalize);
  fs::remove_all(dir);
}

// ---- the pooling arithmetic (engine/pooling.h)

TEST(Pooling, MeanOverChunksSkipsRecomputedPositions) {
  engine::PoolingParams p;
  p.type = PoolingType::kMean;
  p.normalize = false;
  engine::PoolState s;
  const float rows[] = {1, 2, 3, 4, 5, 6, 7, 8};  // 4 positions x 2
  engine::pool_rows(p, s, 0, 2, 2, rows);
  engine::pool_rows(p, s, 0, 3, 2, rows);  // recomputed 0, 1 (skipped) and 2
  const float last[] = {7, 8};
  engine::pool_rows(p, s, 3, 1, 2, last);
  const auto v = engine::finish_pooling(p, s, 4, last, 2);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_FLOAT_EQ(v[0], 4.0f);  // (1 + 3 + 5 + 7) / 4
  EXPECT_FLOAT_EQ(v[1], 5.0f);
  engine::PoolState gap;
  EXPECT_THROW(engine::pool_rows(p, gap, 1, 1, 2, rows), Error);
  EXPECT_THROW(engine::finish_pooling(p, gap, 4, last, 2), Error) << "positions missing";
}

TEST(Pooling, ClsLastNormalizeAndDimensions) {
  engine::PoolingParams p;
  p.type = PoolingType::kCls;
  engine::PoolState s;
  const float rows[] = {3, 4, 0, 9, 9, 9};
  engine::pool_rows(p, s, 0, 2, 3, rows);
  const float last[] = {1, 0, 0};
  auto v = engine::finish_pooling(p, s, 2, last, 3);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], 0.8f);
  EXPECT_FLOAT_EQ(v[2], 0.0f);
  p.type = PoolingType::kLast;
  p.dimensions = 2;
  const float last2[] = {0, 2, 7};
  v = engine::finish_pooling(p, engine::PoolState{}, 9, last2, 3);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_FLOAT_EQ(v[1], 1.0f);
  const float zero[] = {0, 0, 0};
  p.dimensions = 0;
  v = engine::finish_pooling(p, engine::PoolState{}, 1, zero, 3);
  EXPECT_EQ(v, std::vector<float>(3, 0.0f)) << "a zero vector stays zero (no division by 0)";
  EXPECT_EQ(engine::parse_pooling_type("cls"), PoolingType::kCls);
  EXPECT_THROW(engine::parse_pooling_type("max"), Error);
}

}  // namespace
