// A safetensors file (8-byte header length, JSON header, data), written to a
// fixed scratch path and opened as the model loader opens it: mapped and
// validated. Every tensor the header accepts is then read at its first and
// last byte, so an offset the validation let through outside the file is an
// ASan report.
#include "fuzz_util.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  const auto path = halo::fuzz::write_scratch("model.safetensors", data, size);
  halo::fuzz::guarded([&] {
    halo::model::SafetensorsFile f(path);
    volatile unsigned sum = 0;
    for (const auto& [name, info] : f.tensors()) {
      (void)halo::model::dtype_name(info.dtype);
      if (info.data_offset > f.file_size() || info.nbytes > f.file_size() - info.data_offset) std::abort();
      if (info.nbytes == 0) continue;
      const std::byte* p = f.tensor_data(info);
      sum += static_cast<unsigned>(p[0]) + static_cast<unsigned>(p[info.nbytes - 1]);
      (void)f.find(name);
    }
    for (const auto& [k, v] : f.metadata()) sum += static_cast<unsigned>(k.size() + v.size());
  });
  return 0;
}
