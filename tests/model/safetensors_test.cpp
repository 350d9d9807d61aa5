// SafetensorsFile: header parsing and validation on hand-made files.
#include <cstring>

#include "model/safetensors.h"
#include "test_util.h"

namespace halo::model::testing {
namespace {

json one_tensor_header(const std::string& dtype, std::vector<int64_t> shape, uint64_t begin, uint64_t end) {
  json h;
  h["__metadata__"] = {{"format", "pt"}};
  h["w"] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
  return h;
}

TEST(Safetensors, ParsesAndMaps) {
  TempDir dir;
  std::string data(24, '\0');
  float values[6] = {1, 2, 3, 4, 5, 6};
  std::memcpy(data.data(), values, sizeof values);
  write_safetensors_raw(dir / "a.safetensors", one_tensor_header("F32", {2, 3}, 0, 24), data);
  SafetensorsFile f(dir / "a.safetensors");
  ASSERT_EQ(f.tensors().size(), 1u);
  const TensorInfo* t = f.find("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, SafetensorsDType::kF32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->nbytes, 24u);
  EXPECT_EQ(std::memcmp(f.tensor_data(*t), values, 24), 0);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.find("nope"), nullptr);

  // Move keeps the mapping.
  const std::byte* p = f.tensor_data(*t);
  SafetensorsFile g = std::move(f);
  EXPECT_EQ(g.tensor_data(*g.find("w")), p);
}

TEST(Safetensors, ScalarAndEmptyTensorsAndOtherDtypes) {
  TempDir dir;
  json h;
  h["s"] = {{"dtype", "F64"}, {"shape", json::array()}, {"data_offsets", {0, 8}}};
  h["e"] = {{"dtype", "BF16"}, {"shape", {0, 4}}, {"data_offsets", {8, 8}}};
  h["i"] = {{"dtype", "I64"}, {"shape", {1}}, {"data_offsets", {8, 16}}};
  write_safetensors_raw(dir / "a.safetensors", h, std::string(16, '\0'));
  SafetensorsFile f(dir / "a.safetensors");
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.find("s")->dtype, SafetensorsDType::kF64);
  EXPECT_FALSE(is_weight_dtype(SafetensorsDType::kF64));
  EXPECT_TRUE(is_weight_dtype(SafetensorsDType::kBF16));
  EXPECT_EQ(dtype_name(SafetensorsDType::kI64), "I64");
}

TEST(Safetensors, OverlappingTensorsRefused) {
  TempDir dir;
  const fs::path p = dir / "a.safetensors";
  json h;
  h["a"] = {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}};
  h["b"] = {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {8, 24}}};
  write_safetensors_raw(p, h, std::string(24, '\0'));
  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(p); }, {p.string(), "tensor 'b'", "overlaps tensor 'a'"}));
  h["b"]["data_offsets"] = {0, 16};  // the same bytes twice
  write_safetensors_raw(p, h, std::string(24, '\0'));
  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(p); }, {p.string(), "overlaps"}));
  // Adjacent, and empty tensors anywhere, are fine.
  h["b"]["data_offsets"] = {16, 32};
  h["e"] = {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {8, 8}}};
  write_safetensors_raw(p, h, std::string(32, '\0'));
  EXPECT_NO_THROW(SafetensorsFile f(p));
}

TEST(Safetensors, OddHeaderLength) {
  TempDir dir;
  const fs::path p = dir / "a.safetensors";
  std::string header = one_tensor_header("F32", {2}, 0, 8).dump();
  if (header.size() % 2 == 0) header += ' ';
  std::string len(8, '\0');
  len[0] = static_cast<char>(header.size());
  const float values[2] = {1.5f, -2.0f};
  write_file(p, len + header + std::string(reinterpret_cast<const char*>(values), 8));
  SafetensorsFile f(p);
  const TensorInfo* t = f.find("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->data_offset % 2, 1u);
  EXPECT_EQ(std::memcmp(f.tensor_data(*t), values, 8), 0);
}

TEST(Safetensors, Errors) {
  TempDir dir;
  const fs::path p = dir / "bad.safetensors";
  const std::string ps = p.string();

  write_file(p, "abc");
  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(p); }, {ps, "too small"}));

  std::string huge(8, '\xff');
  write_file(p, huge + "{}");
  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(p); }, {ps, "header length 18446744073709551615", "beyond"}));

  std::string len(8, '\0');
  len[0] = 5;
  write_file(p, len + "{\"a\":");
  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(p); }, {ps, "malformed header JSON"}));

  write_safetensors_raw(p, json::array(), "");
  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(p); }, {ps, "not an object"}));

  write_safetensors_raw(p, one_tensor_header("F32", {2, 3}, 0, 24), std::string(20, '\0'));
  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(p); }, {ps, "tensor 'w'", "[0,24]", "beyond", "20 bytes"}));

  write_safetensors_raw(p, one_tensor_header("F32", {2, 3}, 0, 20), std::string(24, '\0'));
  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(p); }, {ps, "tensor 'w'", "span 20 bytes", "needs 24"}));

  write_safetensors_raw(p, one_tensor_header("F32", {2, 3}, 8, 4), std::string(24, '\0'));
  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(p); }, {ps, "tensor 'w'", "begin after end"}));

  write_safetensors_raw(p, one_tensor_header("Q4_K", {2, 3}, 0, 24), std::string(24, '\0'));
  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(p); }, {ps, "tensor 'w'", "unknown dtype 'Q4_K'"}));

  write_safetensors_raw(p, one_tensor_header("F32", {2, -3}, 0, 24), std::string(24, '\0'));
  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(p); }, {ps, "tensor 'w'", "negative"}));

  json h = one_tensor_header("F32", {2, 3}, 0, 24);
  h["w"].erase("dtype");
  write_safetensors_raw(p, h, std::string(24, '\0'));
  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(p); }, {ps, "tensor 'w'", "dtype"}));

  EXPECT_TRUE(throws_error([&] { SafetensorsFile f(dir / "missing.safetensors"); },
                           {(dir / "missing.safetensors").string(), "cannot open"}));
}

}  // namespace
}  // namespace halo::model::testing
