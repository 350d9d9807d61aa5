// Test helpers: the loaded CPU plugin, RAII handles, a tiny random model with
// canonical weights, a naive dense reference forward pass (double precision,
// no paging) and a small "engine" that drives execute() with block tables.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "halo/device_abi.h"

namespace halo::test {

const halo_plugin_api* api();

struct Status {
  halo_status_code code = HALO_STATUS_OK;
  std::string message;
};
// Takes ownership of e and returns its code and message.
Status take(halo_error* e);

struct DeviceDeleter {
  void operator()(halo_device* d) const { api()->device_destroy(d); }
};
struct ExecDeleter {
  void operator()(halo_executable* e) const { api()->executable_destroy(e); }
};
struct KvDeleter {
  void operator()(halo_kv_cache* k) const { api()->kv_cache_destroy(k); }
};
struct BufferDeleter {
  void operator()(halo_buffer* b) const { api()->buffer_destroy(b); }
};
using Device = std::unique_ptr<halo_device, DeviceDeleter>;
using Exec = std::unique_ptr<halo_executable, ExecDeleter>;
using Kv = std::unique_ptr<halo_kv_cache, KvDeleter>;
using Buffer = std::unique_ptr<halo_buffer, BufferDeleter>;

Device open_device(int threads);  // asserts success (threads <= 0: default)

enum class WeightType { F32, BF16, F16, Mixed };

struct Config {
  int vocab = 67, hidden = 40, inter = 72, layers = 2, heads = 4, kv_heads = 4, head_dim = 10;
  int max_pos = 512;
  float eps = 1e-5f, theta = 10000.f;
  halo_rope_scaling scaling = HALO_ROPE_SCALING_NONE;
  float factor = 1.f, low = 1.f, high = 4.f;
  int orig_max = 64;
  halo_activation act = HALO_ACTIVATION_SILU;
  uint32_t flags = 0;
  WeightType wt = WeightType::F32;
  uint32_t seed = 1;
};

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // exactly what is stored (already rounded to the dtype)
  DLDataType dtype{};
  size_t offset = 0;  // byte offset into the arena
};

class TestModel {
 public:
  explicit TestModel(const Config& c);
  TestModel(const TestModel&) = delete;
  TestModel& operator=(const TestModel&) = delete;

  const Config cfg;
  halo_model_spec spec{};
  std::vector<halo_named_tensor> named;  // all weights, each a view into one arena (byte_offset)

  const std::vector<float>& w(const std::string& name) const;
  const Tensor& tensor(const std::string& name) const;
  const DLTensor* dl(const std::string& name) const;
  // Replaces the values reference_forward uses for `name` (e.g. by a
  // quantized weight's dequantized values); what plugins see is unchanged.
  void set_reference_values(const std::string& name, std::vector<float> v);

 private:
  void add(const std::string& name, std::vector<int64_t> shape, int kind);
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> index_;
  std::vector<uint64_t> arena_;
  std::vector<DLTensor> dl_;
};

// Logits [tokens][vocab] of a dense causal forward pass over one sequence.
std::vector<std::vector<double>> reference_forward(const TestModel& m,
                                                   const std::vector<int>& tokens,
                                                   const std::vector<int>& positions);

// Prepared executable + KV cache driven like an engine would.
struct Runner {
  // options: prepare options of the plugin (e.g. {"dtype", "float32"}).
  // weights/quantized (ABI v1.4): prepare gets these instead of m.named.
  Runner(const TestModel& m, int threads, int block_size, int num_blocks,
         std::vector<halo_option> options = {},
         const std::vector<halo_named_tensor>* weights = nullptr,
         const std::vector<halo_quantized_tensor>* quantized = nullptr);
  Status prepare_status;  // of prepare (and kv_cache_create)
  Device device;
  Exec exec;
  Kv kv;
  halo_limits limits{};
  int block_size;
  int num_blocks;
  int vocab;
};

struct Seq {
  std::vector<int> tokens;      // the whole sequence, prompt and later tokens
  std::vector<int32_t> blocks;  // block table
  int cached = 0;               // tokens whose K/V are in the cache
};

struct StepSeq {
  Seq* seq;
  int n_new;
  bool all_logits = false;  // logits for every new token (else only the last)
};

// Runs one execute() step; returns the logits rows (per sequence in order,
// all new tokens or the last one) and advances seq->cached.
Status run_step(Runner& r, const std::vector<StepSeq>& batch,
                std::vector<std::vector<float>>* logits, int max_blocks_per_seq = 0);

// max |a - b| / max(1, max |b|)
double rel_err(const std::vector<float>& a, const std::vector<double>& b);
double rel_err(const std::vector<float>& a, const std::vector<float>& b);

std::vector<int> random_tokens(int n, int vocab, uint32_t seed);

}  // namespace halo::test
