// ggml_dump_blocks OUT_DIR: for each quantized type halo reads, writes
// OUT_DIR/<TYPE>.blocks (random blocks, valid fp16 scales) and
// OUT_DIR/<TYPE>.f32 (halo's dequantization of them, little-endian fp32),
// for tests/model/ggml_dequant_reference.py to recompute independently.
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gguf_writer.h"
#include "model/ggml_blocks.h"

int main(int argc, char** argv) {
  using halo::model::GgmlType;
  if (argc != 2) {
    std::fprintf(stderr, "usage: ggml_dump_blocks OUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::mt19937 rng(20261125);
  for (GgmlType t :
       {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const auto type = static_cast<uint32_t>(t);
    const int64_t cols = 1024;  // 4 super-blocks, 32 small blocks
    const int64_t rows = 8;
    const std::string blocks = halo::model::testing::random_blocks(
        t, rows * cols / halo::model::ggml_block(type)->elems, rng);
    std::vector<float> out(static_cast<size_t>(rows * cols));
    const int64_t row_bytes = halo::model::ggml_row_bytes(type, cols);
    for (int64_t r = 0; r < rows; ++r)
      halo::model::ggml_dequantize_row(
          type, reinterpret_cast<const std::byte*>(blocks.data()) + r * row_bytes, cols,
          out.data() + r * cols);
    const std::string name = halo::model::ggml_type_name(type);
    std::ofstream(dir + "/" + name + ".blocks", std::ios::binary)
        .write(blocks.data(), static_cast<std::streamsize>(blocks.size()));
    std::ofstream(dir + "/" + name + ".f32", std::ios::binary)
        .write(reinterpret_cast<const char*>(out.data()),
               static_cast<std::streamsize>(out.size() * sizeof(float)));
  }
  return 0;
}
