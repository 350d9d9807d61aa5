// GGUF models through LoadedModel::load: models/pkgchat-5m written as GGUF
// (F32, BF16, Q8_0) the way llama.cpp's converter writes it (q/k rows
// permuted) loads to the safetensors weights and the same spec; synthetic
// phi3 (fused qkv / gate_up) and qwen2 (biases) files load their slices;
// missing or unsupported tensors and metadata are refused by name.
#include "common/half.h"
#include "model/gguf_model.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <map>
#include <numbers>
#include <random>

#include "gguf_writer.h"
#include "model/ggml_blocks.h"
#include "model/model_loader.h"
#include "test_util.h"

namespace halo::model {
namespace {

using testing::GgufWriter;
using testing::TempDir;
using testing::throws_error;

// Canonical weight name -> the GGUF tensor llama.cpp names it.
std::string gguf_tensor_name(const std::string& canonical) {
  static const std::map<std::string, std::string> kLayer = {
      {"attn_norm", "attn_norm"}, {"q_proj", "attn_q"},      {"k_proj", "attn_k"},
      {"v_proj", "attn_v"},       {"o_proj", "attn_output"}, {"mlp_norm", "ffn_norm"},
      {"gate_proj", "ffn_gate"},  {"up_proj", "ffn_up"},     {"down_proj", "ffn_down"},
      {"q_bias", "attn_q.bias"},  {"k_bias", "attn_k.bias"}, {"v_bias", "attn_v.bias"},
      {"q_norm", "attn_q_norm"},  {"k_norm", "attn_k_norm"}};
  if (canonical == "embed_tokens") return "token_embd.weight";
  if (canonical == "final_norm") return "output_norm.weight";
  if (canonical == "lm_head") return "output.weight";
  const size_t dot = canonical.find('.', 7);
  const std::string n = canonical.substr(7, dot - 7), suffix = kLayer.at(canonical.substr(dot + 1));
  return "blk." + n + "." + suffix + (suffix.find('.') == std::string::npos ? ".weight" : "");
}

float element(const DLTensor& t, int64_t i) {
  const auto* p = static_cast<const std::byte*>(t.data) + t.byte_offset;
  if (t.dtype.bits == 32) {
    float f;
    std::memcpy(&f, p + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + i * 2, 2);
  return t.dtype.code == kDLBfloat ? bf16_to_float(h) : fp16_to_float(h);
}

int64_t numel(const DLTensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

std::vector<float> floats(const DLTensor& t) {
  std::vector<float> v(static_cast<size_t>(numel(t)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = element(t, static_cast<int64_t>(i));
  return v;
}

// llama.cpp's permutation of q/k rows: GGUF row 2b + a of a head is HF row
// a * D/2 + b.
std::vector<float> permute_rows(const std::vector<float>& w, int64_t rows, int64_t cols,
                                int64_t heads) {
  const int64_t d = rows / heads;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < d / 2; ++b)
        std::memcpy(&out[static_cast<size_t>((h * d + 2 * b + a) * cols)],
                    &w[static_cast<size_t>((h * d + a * d / 2 + b) * cols)],
                    static_cast<size_t>(cols) * 4);
  return out;
}

std::string bytes_of(const std::vector<float>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * 4};
}

std::string bf16_bytes(const std::vector<float>& v) {
  std::string out;
  for (float f : v)
    testing::put<uint16_t>(out, static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16));
  return out;
}

std::string q8_bytes(const std::vector<float>& v, int64_t cols) {
  std::string out;
  for (size_t r = 0; r < v.size() / static_cast<size_t>(cols); ++r)
    out += testing::quantize_q8_0(&v[r * static_cast<size_t>(cols)], cols);
  return out;
}

enum class Store { kF32, kBF16, kQ8_0 };

void llama_metadata(GgufWriter& w, const halo_model_spec& s) {
  w.kv_string("general.architecture", "llama");
  w.kv_u32("general.alignment", 32);
  w.kv_u32("llama.context_length", static_cast<uint32_t>(s.max_position_embeddings));
  w.kv_u32("llama.embedding_length", static_cast<uint32_t>(s.hidden_size));
  w.kv_u32("llama.block_count", static_cast<uint32_t>(s.num_layers));
  w.kv_u32("llama.feed_forward_length", static_cast<uint32_t>(s.intermediate_size));
  w.kv_u32("llama.attention.head_count", static_cast<uint32_t>(s.num_heads));
  w.kv_u32("llama.attention.head_count_kv", static_cast<uint32_t>(s.num_kv_heads));
  w.kv_f32("llama.attention.layer_norm_rms_epsilon", s.rms_norm_eps);
  w.kv_f32("llama.rope.freq_base", s.rope_theta);
  w.kv_u32("llama.rope.dimension_count", static_cast<uint32_t>(s.head_dim));
  w.kv_u32("tokenizer.ggml.bos_token_id", 1);
  w.kv_u32("tokenizer.ggml.eos_token_id", 2);
  w.kv_string("tokenizer.chat_template", "{{ messages }}");
  w.kv_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
}

// pkgchat-5m as llama.cpp's converter would write it, skipping `skip`.
GgufWriter pkgchat_gguf(const LoadedModel& hf, Store store, const std::string& skip = "") {
  const halo_model_spec& s = hf.config().spec;
  GgufWriter w;
  llama_metadata(w, s);
  for (const halo_named_tensor& nt : hf.weights()) {
    const std::string name = gguf_tensor_name(nt.name);
    if (name == skip) continue;
    const DLTensor& t = *nt.tensor;
    std::vector<float> v = floats(t);
    const int64_t cols = t.shape[t.ndim - 1], rows = numel(t) / cols;
    const std::string c = nt.name;
    if (c.ends_with(".q_proj")) v = permute_rows(v, rows, cols, s.num_heads);
    if (c.ends_with(".k_proj")) v = permute_rows(v, rows, cols, s.num_kv_heads);
    std::vector<uint64_t> dims;
    for (int i = t.ndim - 1; i >= 0; --i) dims.push_back(static_cast<uint64_t>(t.shape[i]));
    if (store == Store::kQ8_0 && t.ndim == 2) {
      w.tensor(name, 8, dims, q8_bytes(v, cols));
    } else if (store == Store::kBF16) {
      w.tensor(name, 30, dims, bf16_bytes(v));
    } else {
      w.tensor(name, 0, dims, bytes_of(v));
    }
  }
  return w;
}

void expect_same_spec(const ModelConfig& a, const ModelConfig& b) {
  const halo_model_spec &x = a.spec, &y = b.spec;
  EXPECT_STREQ(x.architecture, y.architecture);
  EXPECT_EQ(x.vocab_size, y.vocab_size);
  EXPECT_EQ(x.hidden_size, y.hidden_size);
  EXPECT_EQ(x.intermediate_size, y.intermediate_size);
  EXPECT_EQ(x.num_layers, y.num_layers);
  EXPECT_EQ(x.num_heads, y.num_heads);
  EXPECT_EQ(x.num_kv_heads, y.num_kv_heads);
  EXPECT_EQ(x.head_dim, y.head_dim);
  EXPECT_EQ(x.max_position_embeddings, y.max_position_embeddings);
  EXPECT_EQ(x.rms_norm_eps, y.rms_norm_eps);
  EXPECT_EQ(x.rope_theta, y.rope_theta);
  EXPECT_EQ(x.rope_scaling, y.rope_scaling);
  EXPECT_EQ(x.activation, y.activation);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  ASSERT_FALSE(a.eos_token_ids.empty());
  EXPECT_EQ(a.eos_token_ids[0], b.eos_token_ids[0]);
}

class PkgchatGguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { hf_ = new LoadedModel(LoadedModel::load(testing::pkgchat_dir())); }
  static void TearDownTestSuite() {
    delete hf_;
    hf_ = nullptr;
  }
  static LoadedModel* hf_;
  TempDir dir_;
};
LoadedModel* PkgchatGguf::hf_ = nullptr;

TEST_F(PkgchatGguf, F32LoadsBitwiseToTheSafetensorsWeights) {
  pkgchat_gguf(*hf_, Store::kF32).write(dir_ / "pkgchat-f32.gguf");
  const LoadedModel g = LoadedModel::load(dir_ / "pkgchat-f32.gguf");
  expect_same_spec(g.config(), hf_->config());
  EXPECT_EQ(g.config().spec.flags, hf_->config().spec.flags);  // tied
  EXPECT_TRUE(g.quantized_weights().empty());
  ASSERT_EQ(g.weights().size(), hf_->weights().size());
  for (const halo_named_tensor& nt : hf_->weights()) {
    const DLTensor* t = g.find(nt.name);
    ASSERT_NE(t, nullptr) << nt.name;
    EXPECT_EQ(t->dtype.bits, 32);
    ASSERT_EQ(numel(*t), numel(*nt.tensor)) << nt.name;
    const std::vector<float> want = floats(*nt.tensor), got = floats(*t);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
          << nt.name << " element " << i;
  }
  ASSERT_NE(g.gguf_metadata(), nullptr);
  EXPECT_EQ((*g.gguf_metadata())["tokenizer.chat_template"], "{{ messages }}");
  EXPECT_EQ((*g.gguf_metadata())["tokenizer.ggml.tokens"].size(), 3u);
  EXPECT_EQ(hf_->gguf_metadata(), nullptr);
  EXPECT_EQ(g.files().size(), 1u);
}

TEST_F(PkgchatGguf, Bf16InADirectoryLoadsInPlace) {
  pkgchat_gguf(*hf_, Store::kBF16).write(dir_ / "pkgchat-bf16.gguf");
  const LoadedModel g = LoadedModel::load(dir_.path());
  expect_same_spec(g.config(), hf_->config());
  EXPECT_EQ(g.config().torch_dtype, "bfloat16");
  for (const halo_named_tensor& nt : hf_->weights()) {
    const DLTensor* t = g.find(nt.name);
    ASSERT_NE(t, nullptr) << nt.name;
    EXPECT_EQ(t->dtype.code, kDLBfloat);
    const std::vector<float> want = floats(*nt.tensor), got = floats(*t);
    ASSERT_EQ(got, want) << nt.name;
  }
}

// The ABI view of a quantized weight, for abi_dequantize_row.
QuantizedView view_of(const halo_quantized_tensor& q) {
  QuantizedView v;
  v.type = q.type;
  v.group_size = q.group_size;
  v.rows = q.rows;
  v.cols = q.cols;
  v.values = q.values->data;
  v.scales = q.scales->data;
  v.offsets = q.offsets ? q.offsets->data : nullptr;
  v.scale_dtype = q.scales->dtype;
  return v;
}

TEST_F(PkgchatGguf, Q8_0ProjectionsLoadQuantizedWithRowsUnpermuted) {
  pkgchat_gguf(*hf_, Store::kQ8_0).write(dir_ / "pkgchat-q8_0.gguf");
  const LoadedModel g = LoadedModel::load(dir_ / "pkgchat-q8_0.gguf");
  expect_same_spec(g.config(), hf_->config());
  EXPECT_FALSE(g.config().tied_embeddings());  // lm_head given as the quantized token_embd
  const halo_model_spec& s = g.config().spec;
  EXPECT_EQ(g.quantized_weights().size(), static_cast<size_t>(7 * s.num_layers + 1));
  for (const halo_quantized_tensor& q : g.quantized_weights()) {
    SCOPED_TRACE(q.name);
    EXPECT_EQ(q.type, HALO_QUANT_INT8);
    EXPECT_EQ(q.group_size, 32);
    const std::string hf_name = std::string(q.name) == "lm_head" ? "embed_tokens" : q.name;
    const DLTensor* orig = hf_->find(hf_name);
    ASSERT_NE(orig, nullptr);
    const std::vector<float> w = floats(*orig);
    std::vector<float> want(static_cast<size_t>(q.cols)), got(static_cast<size_t>(q.cols));
    for (int64_t r = 0; r < q.rows; ++r) {
      // The HF row quantized as the test wrote it, then dequantized as ggml does.
      const std::string blocks =
          testing::quantize_q8_0(&w[static_cast<size_t>(r * q.cols)], q.cols);
      ggml_dequantize_row(8, reinterpret_cast<const std::byte*>(blocks.data()), q.cols,
                          want.data());
      abi_dequantize_row(view_of(q), r, got.data());
      ASSERT_EQ(got, want) << "row " << r;
    }
  }
  // embed_tokens: plain fp32, the dequantized rows of lm_head.
  const DLTensor* e = g.find("embed_tokens");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype.bits, 32);
  const halo_quantized_tensor* head = g.store().find_quantized("lm_head");
  ASSERT_NE(head, nullptr);
  std::vector<float> row(static_cast<size_t>(head->cols));
  abi_dequantize_row(view_of(*head), 7, row.data());
  for (int64_t k = 0; k < head->cols; ++k)
    EXPECT_EQ(element(*e, 7 * head->cols + k), row[static_cast<size_t>(k)]);
}

TEST_F(PkgchatGguf, MissingTensorIsNamed) {
  pkgchat_gguf(*hf_, Store::kF32, "blk.3.ffn_down.weight").write(dir_ / "m.gguf");
  EXPECT_TRUE(
      throws_error([&] { LoadedModel::load(dir_ / "m.gguf"); },
                   {"m.gguf", "missing tensor 'blk.3.ffn_down.weight'", "layers.3.down_proj"}));
}

TEST_F(PkgchatGguf, UnsupportedTypeIsNamedWithTheSupportedOnes) {
  GgufWriter w = pkgchat_gguf(*hf_, Store::kF32, "blk.0.attn_v.weight");
  std::mt19937 rng(1);
  w.tensor("blk.0.attn_v.weight", 10, {256, 128}, std::string(84 * 128, '\0'));
  w.write(dir_ / "m.gguf");
  EXPECT_TRUE(throws_error(
      [&] { LoadedModel::load(dir_ / "m.gguf"); },
      {"tensor 'blk.0.attn_v.weight'", "Q2_K", "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"}));
}

TEST(GgufModel, MetadataErrorsNameTheKey) {
  TempDir dir;
  GgufWriter w;
  w.kv_string("general.architecture", "gpt2");
  w.write(dir / "a.gguf");
  EXPECT_TRUE(throws_error([&] { LoadedModel::load(dir / "a.gguf"); },
                           {"a.gguf", "'gpt2'", "llama, qwen2"}));
  GgufWriter m;
  m.kv_string("general.architecture", "llama");
  m.tensor("token_embd.weight", 0, {8, 16}, std::string(8 * 16 * 4, '\0'));
  m.write(dir / "b.gguf");
  EXPECT_TRUE(throws_error([&] { LoadedModel::load(dir / "b.gguf"); },
                           {"b.gguf", "'llama.embedding_length'"}));
}

TEST(GgufModel, DirectoryWithSeveralGgufFilesIsRefused) {
  TempDir dir;
  testing::write_file(dir / "a.gguf", "");
  testing::write_file(dir / "b.gguf", "");
  EXPECT_TRUE(throws_error([&] { LoadedModel::load(dir.path()); },
                           {"several GGUF files", "a.gguf, b.gguf"}));
}

// ------------------------------------------------------------ phi3, qwen2

struct Tiny {
  int64_t hidden = 64, inter = 96, heads = 4, kv_heads = 2, head_dim = 16, vocab = 128, layers = 1;
};

std::vector<float> random_floats(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

void tiny_metadata(GgufWriter& w, const std::string& arch, const Tiny& t, float theta = 1e6f) {
  w.kv_string("general.architecture", arch);
  w.kv_u32(arch + ".context_length", 256);
  w.kv_u32(arch + ".embedding_length", static_cast<uint32_t>(t.hidden));
  w.kv_u32(arch + ".block_count", static_cast<uint32_t>(t.layers));
  w.kv_u32(arch + ".feed_forward_length", static_cast<uint32_t>(t.inter));
  w.kv_u32(arch + ".attention.head_count", static_cast<uint32_t>(t.heads));
  w.kv_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(t.kv_heads));
  w.kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.kv_f32(arch + ".rope.freq_base", theta);
}

// Adds an F32 tensor of random values (shape outermost first); returns them.
std::vector<float> add_random(GgufWriter& w, std::mt19937& rng, const std::string& name,
                              std::vector<int64_t> shape) {
  int64_t n = 1;
  std::vector<uint64_t> dims;
  for (auto it = shape.rbegin(); it != shape.rend(); ++it) {
    n *= *it;
    dims.push_back(static_cast<uint64_t>(*it));
  }
  std::vector<float> v = random_floats(rng, n);
  w.tensor(name, 0, dims, bytes_of(v));
  return v;
}

void expect_rows(const LoadedModel& m, const std::string& name, const std::vector<float>& src,
                 int64_t row_begin, int64_t rows, int64_t cols) {
  const DLTensor* t = m.find(name);
  ASSERT_NE(t, nullptr) << name;
  ASSERT_EQ(numel(*t), rows * cols) << name;
  for (int64_t i = 0; i < rows * cols; ++i)
    ASSERT_EQ(element(*t, i), src[static_cast<size_t>(row_begin * cols + i)])
        << name << " element " << i;
}

TEST(GgufModel, Phi3FusedTensorsGiveRowSlices) {
  TempDir dir;
  const Tiny t;
  std::mt19937 rng(3);
  GgufWriter w;
  tiny_metadata(w, "phi3", t);
  add_random(w, rng, "token_embd.weight", {t.vocab, t.hidden});
  add_random(w, rng, "blk.0.attn_norm.weight", {t.hidden});
  const int64_t q = t.heads * t.head_dim, kv = t.kv_heads * t.head_dim;
  const auto qkv = add_random(w, rng, "blk.0.attn_qkv.weight", {q + 2 * kv, t.hidden});
  add_random(w, rng, "blk.0.attn_output.weight", {t.hidden, q});
  add_random(w, rng, "blk.0.ffn_norm.weight", {t.hidden});
  const auto up = add_random(w, rng, "blk.0.ffn_up.weight", {2 * t.inter, t.hidden});
  add_random(w, rng, "blk.0.ffn_down.weight", {t.hidden, t.inter});
  add_random(w, rng, "output_norm.weight", {t.hidden});
  add_random(w, rng, "output.weight", {t.vocab, t.hidden});
  w.write(dir / "phi3.gguf");
  const LoadedModel m = LoadedModel::load(dir / "phi3.gguf");
  EXPECT_EQ(m.config().architecture(), "Phi3ForCausalLM");
  EXPECT_FALSE(m.config().tied_embeddings());
  expect_rows(m, "layers.0.q_proj", qkv, 0, q, t.hidden);  // phi3 is not permuted
  expect_rows(m, "layers.0.k_proj", qkv, q, kv, t.hidden);
  expect_rows(m, "layers.0.v_proj", qkv, q + kv, kv, t.hidden);
  expect_rows(m, "layers.0.gate_proj", up, 0, t.inter, t.hidden);
  expect_rows(m, "layers.0.up_proj", up, t.inter, t.inter, t.hidden);
  ASSERT_NE(m.find("lm_head"), nullptr);
}

// alignment 2 with a 2-byte tensor first: every F32 tensor after it sits at
// an address that is not 4-byte aligned, and is copied.
void qwen2_case(uint64_t alignment) {
  TempDir dir;
  const Tiny t;
  std::mt19937 rng(4);
  GgufWriter w;
  tiny_metadata(w, "qwen2", t);
  if (alignment != 32) {
    w.alignment = alignment;
    w.kv_u32("general.alignment", static_cast<uint32_t>(alignment));
    w.tensor("odd", 1, {1}, "\1\2");
  }
  const int64_t q = t.heads * t.head_dim, kv = t.kv_heads * t.head_dim;
  add_random(w, rng, "token_embd.weight", {t.vocab, t.hidden});
  const auto norm = add_random(w, rng, "blk.0.attn_norm.weight", {t.hidden});
  const auto wq = add_random(w, rng, "blk.0.attn_q.weight", {q, t.hidden});
  add_random(w, rng, "blk.0.attn_k.weight", {kv, t.hidden});
  add_random(w, rng, "blk.0.attn_v.weight", {kv, t.hidden});
  const auto bq = add_random(w, rng, "blk.0.attn_q.bias", {q});
  add_random(w, rng, "blk.0.attn_k.bias", {kv});
  add_random(w, rng, "blk.0.attn_v.bias", {kv});
  add_random(w, rng, "blk.0.attn_output.weight", {t.hidden, q});
  add_random(w, rng, "blk.0.ffn_norm.weight", {t.hidden});
  add_random(w, rng, "blk.0.ffn_gate.weight", {t.inter, t.hidden});
  add_random(w, rng, "blk.0.ffn_up.weight", {t.inter, t.hidden});
  add_random(w, rng, "blk.0.ffn_down.weight", {t.hidden, t.inter});
  add_random(w, rng, "output_norm.weight", {t.hidden});
  w.write(dir / "qwen2.gguf");
  const LoadedModel m = LoadedModel::load(dir / "qwen2.gguf");
  EXPECT_EQ(m.config().architecture(), "Qwen2ForCausalLM");
  EXPECT_TRUE(m.config().qkv_bias());
  EXPECT_TRUE(m.config().tied_embeddings());
  EXPECT_EQ(m.config().spec.rope_theta, 1e6f);
  expect_rows(m, "layers.0.q_proj", wq, 0, q, t.hidden);
  expect_rows(m, "layers.0.q_bias", bq, 0, 1, q);
  expect_rows(m, "layers.0.attn_norm", norm, 0, 1, t.hidden);
  for (const halo_named_tensor& nt : m.weights())
    EXPECT_EQ((reinterpret_cast<uintptr_t>(nt.tensor->data) + nt.tensor->byte_offset) % 4, 0u)
        << nt.name;
}

// A one-layer llama with `rope_freqs` (llama.cpp's form of Llama 3.1 rope
// scaling), factor 8 over theta 500000; `bend` spoils one of its values.
std::string llama3_rope_file(const TempDir& dir, bool bend) {
  const Tiny t;
  std::mt19937 rng(5);
  GgufWriter w;
  tiny_metadata(w, "llama", t, 500000.0f);
  std::vector<float> freqs;
  for (int64_t i = 0; i < t.head_dim / 2; ++i) {
    const double wavelen =
        2 * std::numbers::pi *
        std::pow(500000.0, 2.0 * static_cast<double>(i) / static_cast<double>(t.head_dim));
    double f = 1.0;
    if (wavelen > 8192.0) {
      f = 8.0;
    } else if (wavelen >= 2048.0) {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      f = 1.0 / ((1 - smooth) / 8.0 + smooth);
    }
    freqs.push_back(static_cast<float>(f));
  }
  if (bend) freqs[1] *= 1.5f;
  w.tensor("rope_freqs.weight", 0, {static_cast<uint64_t>(freqs.size())}, bytes_of(freqs));
  const int64_t q = t.heads * t.head_dim, kv = t.kv_heads * t.head_dim;
  add_random(w, rng, "token_embd.weight", {t.vocab, t.hidden});
  for (const char* n : {"attn_norm", "ffn_norm"})
    add_random(w, rng, std::string("blk.0.") + n + ".weight", {t.hidden});
  add_random(w, rng, "blk.0.attn_q.weight", {q, t.hidden});
  add_random(w, rng, "blk.0.attn_k.weight", {kv, t.hidden});
  add_random(w, rng, "blk.0.attn_v.weight", {kv, t.hidden});
  add_random(w, rng, "blk.0.attn_output.weight", {t.hidden, q});
  add_random(w, rng, "blk.0.ffn_gate.weight", {t.inter, t.hidden});
  add_random(w, rng, "blk.0.ffn_up.weight", {t.inter, t.hidden});
  add_random(w, rng, "blk.0.ffn_down.weight", {t.hidden, t.inter});
  add_random(w, rng, "output_norm.weight", {t.hidden});
  const std::string path = (dir / (bend ? "bent.gguf" : "llama3.gguf")).string();
  w.write(path);
  return path;
}

TEST(GgufModel, Llama3RopeScalingFromRopeFreqs) {
  TempDir dir;
  const LoadedModel m = LoadedModel::load(llama3_rope_file(dir, false));
  const halo_model_spec& s = m.config().spec;
  EXPECT_EQ(s.rope_scaling, HALO_ROPE_SCALING_LLAMA3);
  EXPECT_EQ(s.rope_factor, 8.0f);
  EXPECT_EQ(s.rope_low_freq_factor, 1.0f);
  EXPECT_EQ(s.rope_high_freq_factor, 4.0f);
  EXPECT_EQ(s.rope_original_max_position, 8192);
  EXPECT_TRUE(throws_error([&] { LoadedModel::load(llama3_rope_file(dir, true)); },
                           {"'rope_freqs.weight'", "not llama3 rope scaling", "element 1"}));
}

TEST(GgufModel, Qwen2BiasesAndUnpermutedRows) { qwen2_case(32); }
TEST(GgufModel, MisalignedTensorsAreCopiedAligned) { qwen2_case(2); }

}  // namespace
}  // namespace halo::model

namespace halo::model {
namespace {

// The fuzzer's seeds (fuzz/corpus/gguf_fuzzer) are valid: the llama ones load
// as models (F16, Q8_0 with a tied quantized embedding, Q4_0 with BF16
// embedding), the other parses with its K-quant tensors converting.
TEST(GgufModel, FuzzSeedsAreValid) {
  const std::filesystem::path seeds =
      std::filesystem::path(HALO_SOURCE_DIR) / "fuzz/corpus/gguf_fuzzer";
  for (const char* name : {"llama_f16.gguf", "llama_q8_0.gguf", "llama_q4_0.gguf"}) {
    SCOPED_TRACE(name);
    const LoadedModel m = LoadedModel::load(seeds / name);
    EXPECT_EQ(m.config().spec.num_layers, 1);
  }
  EXPECT_EQ(LoadedModel::load(seeds / "llama_q8_0.gguf").quantized_weights().size(), 8u);
  EXPECT_EQ(LoadedModel::load(seeds / "llama_q4_0.gguf").quantized_weights().size(), 7u);
  const GgufFile f(seeds / "ktypes_metadata.gguf");
  EXPECT_EQ(f.alignment(), 64u);
  WeightStore store;
  for (const GgufTensor& t : f.tensors()) {
    if (ggml_is_plain(t.type)) continue;
    const int64_t order[] = {0, 1};
    EXPECT_EQ(ggml_to_abi(t.type, t.data, t.cols(), order, store, t.name).rows, 2);
  }
}

}  // namespace
}  // namespace halo::model
