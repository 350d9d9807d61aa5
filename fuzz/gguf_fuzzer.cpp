// A GGUF file, written to a fixed scratch path and opened as the model
// loader opens it: mapped and validated. Every tensor the reader accepts is
// read at its first and last byte, dequantized when halo supports its type,
// and converted to the ABI quantized layout when quantized, whose
// dequantization must equal the direct one wherever that is finite. Then the
// whole file is loaded as a model (config from the metadata, weights by
// name), which a fuzzed file mostly fails with a halo::Error.
#include <cmath>
#include <numeric>
#include <vector>

#include "fuzz_util.h"
#include "model/ggml_blocks.h"
#include "model/gguf.h"
#include "model/model_loader.h"

namespace {

using namespace halo::model;

void check_tensor(const GgufTensor& t) {
  volatile unsigned sum = 0;
  if (t.nbytes > 0)
    sum += static_cast<unsigned>(t.data[0]) + static_cast<unsigned>(t.data[t.nbytes - 1]);
  if (!ggml_is_supported(t.type)) return;
  const int64_t cols = t.cols(), rows = t.rows();
  std::vector<float> direct(static_cast<size_t>(cols)), abi(static_cast<size_t>(cols));
  ggml_dequantize_row(t.type, t.data + (rows - 1) * ggml_row_bytes(t.type, cols), cols,
                      direct.data());
  if (ggml_is_plain(t.type)) return;
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  WeightStore store;
  const QuantizedView q = ggml_to_abi(t.type, t.data, cols, order, store, t.name);
  abi_dequantize_row(q, rows - 1, abi.data());
  for (size_t k = 0; k < direct.size(); ++k)
    if (std::isfinite(direct[k]) && abi[k] != direct[k]) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  const auto path = halo::fuzz::write_scratch("model.gguf", data, size);
  halo::fuzz::guarded([&] {
    GgufFile f(path);
    for (const GgufTensor& t : f.tensors()) {
      if (t.offset > size || t.nbytes > size - t.offset) std::abort();
      check_tensor(t);
      if (f.find(t.name) == nullptr) std::abort();
    }
    (void)f.metadata_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  });
  halo::fuzz::guarded([&] { (void)LoadedModel::load(path); });
  return 0;
}
