// GGUF reader and ggml block conversion: blocks converted to the ABI layout
// dequantize (by the ABI formula) to exactly what the blocks dequantize to;
// files of every metadata type parse; malformed files are refused naming
// what was wrong.
#include "common/half.h"
#include "model/gguf.h"

#include <gtest/gtest.h>

#include <bit>
#include <random>

#include "gguf_writer.h"
#include "model/ggml_blocks.h"
#include "test_util.h"

namespace halo::model {
namespace {

using testing::GgufWriter;
using testing::TempDir;
using testing::throws_error;

constexpr GgmlType kQuantTypes[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K,
                                    GgmlType::kQ5_K, GgmlType::kQ6_K};

struct Expected {
  int32_t quant, group, scale_bits;
  bool offsets;
};

Expected expected_layout(GgmlType t) {
  switch (t) {
    case GgmlType::kQ8_0:
      return {HALO_QUANT_INT8, 32, 16, false};
    case GgmlType::kQ4_0:
      return {HALO_QUANT_UINT4, 32, 16, true};
    case GgmlType::kQ4_K:
      return {HALO_QUANT_UINT4, 32, 32, true};
    case GgmlType::kQ5_K:
      return {HALO_QUANT_INT8, 32, 32, true};
    default:
      return {HALO_QUANT_INT8, 16, 32, false};
  }
}

// Converts `rows` rows of random blocks in `order` and checks every element
// against the direct dequantization of its source row.
void check_conversion(GgmlType t, int64_t rows, int64_t cols, const std::vector<int64_t>& order,
                      int32_t want_scale_bits, int exp_lo = 5, int exp_hi = 18) {
  std::mt19937 rng(static_cast<uint32_t>(t) * 7919u + static_cast<uint32_t>(cols));
  const auto type = static_cast<uint32_t>(t);
  const int64_t row_bytes = ggml_row_bytes(type, cols);
  const std::string data =
      testing::random_blocks(t, rows * cols / ggml_block(type)->elems, rng, exp_lo, exp_hi);
  WeightStore store;
  const auto* bytes = reinterpret_cast<const std::byte*>(data.data());
  const QuantizedView q = ggml_to_abi(type, bytes, cols, order, store, "test");
  const Expected e = expected_layout(t);
  EXPECT_EQ(q.type, e.quant);
  EXPECT_EQ(q.group_size, e.group);
  EXPECT_EQ(q.scale_dtype.bits, want_scale_bits);
  EXPECT_EQ(q.offsets != nullptr, e.offsets);
  std::vector<float> direct(static_cast<size_t>(cols)), abi(static_cast<size_t>(cols));
  for (size_t r = 0; r < order.size(); ++r) {
    ggml_dequantize_row(type, bytes + order[r] * row_bytes, cols, direct.data());
    abi_dequantize_row(q, static_cast<int64_t>(r), abi.data());
    for (int64_t k = 0; k < cols; ++k)
      ASSERT_EQ(abi[static_cast<size_t>(k)], direct[static_cast<size_t>(k)])
          << ggml_type_name(type) << " row " << r << " element " << k;
  }
}

TEST(GgmlBlocks, AbiLayoutDequantizesExactlyAsTheBlocks) {
  for (GgmlType t : kQuantTypes) {
    SCOPED_TRACE(ggml_type_name(static_cast<uint32_t>(t)));
    check_conversion(t, 4, 512, {0, 1, 2, 3}, expected_layout(t).scale_bits);
  }
}

TEST(GgmlBlocks, RowOrderPicksSourceRows) {
  for (GgmlType t : kQuantTypes)
    check_conversion(t, 5, 256, {4, 0, 3, 3, 1}, expected_layout(t).scale_bits);
}

TEST(GgmlBlocks, Q4_0WithScalesBeyondHalfRangeOfOffsetsUsesFp32) {
  // |d| >= 2^13: -8 d overflows fp16, so the tensor's scales go fp32.
  check_conversion(GgmlType::kQ4_0, 2, 64, {0, 1}, 32, 28, 29);
  // Subnormal and small scales stay fp16 (exact).
  check_conversion(GgmlType::kQ4_0, 2, 64, {0, 1}, 16, 1, 3);
}

TEST(GgmlBlocks, HalfAndBfloatConversion) {
  EXPECT_EQ(fp16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_float(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(fp16_to_float(0x7C00)));
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
}

TEST(GgmlBlocks, KnownQ4_0BlockAndNibbleOrder) {
  // d = 1: element j = low nibble of byte j minus 8, element j+16 the high one.
  std::string b;
  testing::put<uint16_t>(b, 0x3C00);
  for (int j = 0; j < 16; ++j) b += static_cast<char>(j | ((15 - j) << 4));
  std::vector<float> y(32);
  ggml_dequantize_row(static_cast<uint32_t>(GgmlType::kQ4_0),
                      reinterpret_cast<const std::byte*>(b.data()), 32, y.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], static_cast<float>(j - 8));
    EXPECT_EQ(y[j + 16], static_cast<float>(7 - j));
  }
  WeightStore store;
  const int64_t order[] = {0};
  const QuantizedView q =
      ggml_to_abi(static_cast<uint32_t>(GgmlType::kQ4_0),
                  reinterpret_cast<const std::byte*>(b.data()), 32, order, store, "t");
  const auto* v = static_cast<const uint8_t*>(q.values);
  EXPECT_EQ(v[0], 0x10);  // elements 0 (q 0) and 1 (q 1)
  EXPECT_EQ(v[8], 0xEF);  // elements 16 (q 15) and 17 (q 14)
}

TEST(GgmlBlocks, UnsupportedTypeIsNamed) {
  WeightStore store;
  const std::string data(84, '\0');
  const int64_t order[] = {0};
  EXPECT_TRUE(throws_error(
      [&] {
        ggml_to_abi(10, reinterpret_cast<const std::byte*>(data.data()), 256, order, store, "w");
      },
      {"Q2_K", "Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"}));
}

// ---------------------------------------------------------------- reader

GgufWriter every_value_type() {
  GgufWriter w;
  w.kv<uint8_t>("a.u8", testing::kU8, 200);
  w.kv<int8_t>("a.i8", testing::kI8, -5);
  w.kv<uint16_t>("a.u16", testing::kU16, 60000);
  w.kv<int16_t>("a.i16", testing::kI16, -300);
  w.kv<uint32_t>("a.u32", testing::kU32, 4000000000u);
  w.kv<int32_t>("a.i32", testing::kI32, -70000);
  w.kv<uint64_t>("a.u64", testing::kU64, uint64_t{1} << 40);
  w.kv<int64_t>("a.i64", testing::kI64, -(int64_t{1} << 40));
  w.kv<float>("a.f32", testing::kF32, 0.5f);
  w.kv<double>("a.f64", testing::kF64, 0.25);
  w.kv<uint8_t>("a.bool", testing::kBool, 1);
  w.kv_string("a.str", "héllo");
  w.kv_strings("tokenizer.ggml.tokens", {"<s>", "a", "b"});
  w.kv_array<float>("tokenizer.ggml.scores", testing::kF32, {0.0f, -1.0f, -2.0f});
  // [[1, 2], [3]] of int32
  std::string nested;
  testing::put<uint32_t>(nested, testing::kArr);
  testing::put<uint64_t>(nested, 2);
  for (const std::vector<int32_t>& inner : {std::vector<int32_t>{1, 2}, std::vector<int32_t>{3}}) {
    testing::put<uint32_t>(nested, testing::kI32);
    testing::put<uint64_t>(nested, inner.size());
    for (int32_t x : inner) testing::put<int32_t>(nested, x);
  }
  w.kv_raw("a.nested", testing::kArr, nested);
  return w;
}

TEST(GgufFile, ParsesEveryValueTypeIntoJson) {
  TempDir dir;
  GgufWriter w = every_value_type();
  w.tensor("t", 0, {4, 2}, std::string(32, '\1'));
  w.write(dir / "m.gguf");
  GgufFile f(dir / "m.gguf");
  EXPECT_EQ(f.version(), 3u);
  const nlohmann::json& m = f.metadata_json();
  EXPECT_EQ(m["a.u8"], 200);
  EXPECT_EQ(m["a.i8"], -5);
  EXPECT_EQ(m["a.u16"], 60000);
  EXPECT_EQ(m["a.i16"], -300);
  EXPECT_EQ(m["a.u32"], 4000000000u);
  EXPECT_EQ(m["a.i32"], -70000);
  EXPECT_EQ(m["a.u64"], uint64_t{1} << 40);
  EXPECT_EQ(m["a.i64"], -(int64_t{1} << 40));
  EXPECT_EQ(m["a.f32"], 0.5);
  EXPECT_EQ(m["a.f64"], 0.25);
  EXPECT_EQ(m["a.bool"], true);
  EXPECT_EQ(m["a.str"], "héllo");
  EXPECT_EQ(m["tokenizer.ggml.tokens"], nlohmann::json({"<s>", "a", "b"}));
  EXPECT_EQ(m["tokenizer.ggml.scores"], nlohmann::json({0.0, -1.0, -2.0}));
  EXPECT_EQ(m["a.nested"], nlohmann::json::parse("[[1, 2], [3]]"));
  EXPECT_EQ(f.get_int("a.u16"), 60000);
  EXPECT_EQ(f.get_float("a.f32"), 0.5);
  EXPECT_EQ(f.get_float("a.i8"), -5.0);
  EXPECT_EQ(f.get_string("a.str"), "héllo");
  EXPECT_EQ(f.get_bool("a.bool"), true);
  EXPECT_EQ(f.get_int("absent"), std::nullopt);
  EXPECT_TRUE(throws_error([&] { f.get_int("a.str"); }, {"'a.str'", "string", "integer"}));
  EXPECT_TRUE(throws_error([&] { f.get_string("a.u8"); }, {"'a.u8'", "uint8"}));
  ASSERT_EQ(f.tensors().size(), 1u);
  const GgufTensor& t = f.tensors()[0];
  EXPECT_EQ(t.dims, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(t.nbytes, 32u);
  EXPECT_EQ(t.offset % 32, 0u);
  EXPECT_EQ(static_cast<char>(t.data[0]), '\1');
}

TEST(GgufFile, HonoursGeneralAlignmentAndVersion2) {
  TempDir dir;
  GgufWriter w;
  w.version = 2;
  w.alignment = 64;
  w.kv_u32("general.alignment", 64);
  w.tensor("a", 0, {3}, std::string(12, 'a'));
  w.tensor("b", 1, {5}, std::string(10, 'b'));
  w.write(dir / "m.gguf");
  GgufFile f(dir / "m.gguf");
  EXPECT_EQ(f.alignment(), 64u);
  ASSERT_NE(f.find("b"), nullptr);
  EXPECT_EQ(f.find("b")->offset % 64, 0u);
  EXPECT_EQ(static_cast<char>(f.find("b")->data[9]), 'b');
}

// ---------------------------------------------------------------- malformed

std::string small_valid() {
  GgufWriter w = every_value_type();
  w.tensor("blk.0.attn_q.weight", 8, {32, 2}, std::string(68, '\0'));
  return w.build();
}

::testing::AssertionResult refused(const std::string& bytes,
                                   std::initializer_list<std::string> needles) {
  TempDir dir;
  testing::write_file(dir / "bad.gguf", bytes);
  return throws_error([&] { GgufFile f(dir / "bad.gguf"); }, needles);
}

TEST(GgufFile, EveryTruncationIsRefused) {
  const std::string full = small_valid();
  TempDir dir;
  for (size_t n = 0; n < full.size(); ++n) {
    testing::write_file(dir / "t.gguf", full.substr(0, n));
    try {
      GgufFile f(dir / "t.gguf");
      ADD_FAILURE() << "a file cut to " << n << " of " << full.size() << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("t.gguf"), std::string::npos) << e.what();
    }
  }
}

TEST(GgufFile, BadHeadersAreRefused) {
  std::string s = small_valid();
  EXPECT_TRUE(refused("GGML" + s.substr(4), {"bad.gguf", "not a GGUF file"}));
  std::string v1 = s;
  v1[4] = 1;
  EXPECT_TRUE(refused(v1, {"version 1"}));
  std::string be = s;
  be[4] = 0;
  be[7] = 3;
  EXPECT_TRUE(refused(be, {"big-endian"}));
  std::string huge_tensors = s;
  std::memset(&huge_tensors[8], 0xFF, 8);
  EXPECT_TRUE(refused(huge_tensors, {"tensor count", "cannot fit"}));
  std::string huge_kv = s;
  std::memset(&huge_kv[16], 0x7F, 8);
  EXPECT_TRUE(refused(huge_kv, {"metadata count", "cannot fit"}));
}

TEST(GgufFile, BadMetadataIsRefused) {
  GgufWriter w;
  w.kv<uint8_t>("flag", testing::kBool, 2);
  EXPECT_TRUE(refused(w.build(), {"'flag'", "neither 0 nor 1"}));
  GgufWriter t;
  t.kv<uint32_t>("k", 13, 0);
  EXPECT_TRUE(refused(t.build(), {"'k'", "unknown value type 13"}));
  GgufWriter d;
  d.kv_u32("k", 1);
  d.kv_u32("k", 2);
  EXPECT_TRUE(refused(d.build(), {"'k'", "duplicate"}));
  GgufWriter s;
  std::string str;
  testing::put<uint64_t>(str, uint64_t{1} << 62);
  s.kv_raw("name", testing::kStr, str);
  EXPECT_TRUE(refused(s.build(), {"'name'", "beyond the end"}));
  GgufWriter a;
  std::string arr;
  testing::put<uint32_t>(arr, testing::kU64);
  testing::put<uint64_t>(arr, uint64_t{1} << 60);
  a.kv_raw("tokenizer.ggml.scores", testing::kArr, arr);
  EXPECT_TRUE(refused(a.build(), {"'tokenizer.ggml.scores'", "array length", "cannot fit"}));
  for (uint32_t align : {0u, 3u, 48u}) {
    GgufWriter al;
    al.kv_u32("general.alignment", align);
    EXPECT_TRUE(refused(al.build(), {"general.alignment", "power of two"}));
  }
  GgufWriter af;
  af.kv_f32("general.alignment", 32.0f);
  EXPECT_TRUE(refused(af.build(), {"general.alignment"}));
}

TEST(GgufFile, BadTensorInfosAreRefused) {
  auto one = [](uint32_t type, std::vector<uint64_t> dims, std::string data) {
    GgufWriter w;
    w.tensor("w", type, std::move(dims), std::move(data));
    return w.build();
  };
  EXPECT_TRUE(refused(one(99, {4}, std::string(16, '\0')), {"tensor 'w'", "unknown ggml type 99"}));
  EXPECT_TRUE(
      refused(one(8, {16}, std::string(34, '\0')), {"tensor 'w'", "not a multiple", "Q8_0"}));
  EXPECT_TRUE(refused(one(0, {4, 1, 1, 1, 1}, std::string(16, '\0')), {"tensor 'w'", "n_dims=5"}));
  EXPECT_TRUE(refused(one(0, {4, 0}, ""), {"tensor 'w'", "dimension 1 is 0"}));
  EXPECT_TRUE(refused(one(0, {1024}, std::string(100, '\0')),
                      {"tensor 'w'", "beyond the end", "truncated"}));
  EXPECT_TRUE(refused(one(0, {uint64_t{1} << 40, uint64_t{1} << 40}, std::string(16, '\0')),
                      {"tensor 'w'", "overflows"}));
  GgufWriter dup;
  dup.tensor("w", 0, {1}, "abcd");
  dup.tensor("w", 0, {1}, "abcd");
  EXPECT_TRUE(refused(dup.build(), {"tensor 'w'", "duplicate"}));
  // An offset that is not a multiple of the alignment: patch the offset
  // field (after the name, n_dims, one dim and the type).
  GgufWriter w;
  w.tensor("w", 0, {1}, "abcd");
  std::string s = w.build();
  const size_t off_pos = s.find("w") + 1 + 4 + 8 + 4;
  s[off_pos] = 4;
  EXPECT_TRUE(refused(s, {"tensor 'w'", "offset 4", "alignment 32"}));
}

}  // namespace
}  // namespace halo::model
