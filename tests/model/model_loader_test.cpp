// LoadedModel: pkgchat-5m, generated models of every family, shards, Phi-3
// fused views, and broken model directories.
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "model/model_loader.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace halo::model::testing {
namespace {

std::vector<int64_t> shape_of(const DLTensor* t) { return std::vector<int64_t>(t->shape, t->shape + t->ndim); }

size_t nbytes(const DLTensor* t) {
  size_t n = (t->dtype.bits / 8u) * t->dtype.lanes;
  for (int i = 0; i < t->ndim; ++i) n *= static_cast<size_t>(t->shape[i]);
  return n;
}

const std::byte* bytes_of(const DLTensor* t) { return static_cast<const std::byte*>(t->data) + t->byte_offset; }

// Canonical names the ABI lists for a spec, in loader order.
std::vector<std::string> canonical_names(const halo_model_spec& s) {
  std::vector<std::string> names{"embed_tokens"};
  for (int i = 0; i < s.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    names.push_back(p + "attn_norm");
    for (const char* n : {"q_proj", "k_proj", "v_proj"}) names.push_back(p + n);
    if (s.flags & HALO_MODEL_QKV_BIAS)
      for (const char* n : {"q_bias", "k_bias", "v_bias"}) names.push_back(p + n);
    if (s.flags & HALO_MODEL_QK_NORM)
      for (const char* n : {"q_norm", "k_norm"}) names.push_back(p + n);
    for (const char* n : {"o_proj", "mlp_norm", "gate_proj", "up_proj", "down_proj"}) names.push_back(p + n);
  }
  names.push_back("final_norm");
  if (!(s.flags & HALO_MODEL_TIED_EMBEDDINGS)) names.push_back("lm_head");
  return names;
}

// Every canonical weight has the ABI's shape, is contiguous CPU memory and
// lies inside one of the model's files.
void check_abi_shapes(const LoadedModel& m) {
  const halo_model_spec& s = m.config().spec;
  const int64_t h = s.hidden_size, q = int64_t{s.num_heads} * s.head_dim, kv = int64_t{s.num_kv_heads} * s.head_dim;
  const int64_t in = s.intermediate_size;
  std::map<std::string, std::vector<int64_t>> want{{"embed_tokens", {s.vocab_size, h}},
                                                   {"final_norm", {h}},
                                                   {"lm_head", {s.vocab_size, h}}};
  const std::map<std::string, std::vector<int64_t>> per_layer{
      {"attn_norm", {h}},     {"q_proj", {q, h}},     {"k_proj", {kv, h}},    {"v_proj", {kv, h}},
      {"q_bias", {q}},        {"k_bias", {kv}},       {"v_bias", {kv}},       {"q_norm", {s.head_dim}},
      {"k_norm", {s.head_dim}}, {"o_proj", {h, q}},   {"mlp_norm", {h}},      {"gate_proj", {in, h}},
      {"up_proj", {in, h}},   {"down_proj", {h, in}}};
  for (int i = 0; i < s.num_layers; ++i)
    for (const auto& [n, sh] : per_layer) want["layers." + std::to_string(i) + "." + n] = sh;

  std::vector<std::string> names;
  uint64_t total = 0;
  for (const halo_named_tensor& w : m.weights()) {
    names.push_back(w.name);
    SCOPED_TRACE(w.name);
    const DLTensor* t = w.tensor;
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(m.find(w.name), t);
    EXPECT_EQ(t->device.device_type, kDLCPU);
    EXPECT_EQ(t->device.device_id, 0);
    EXPECT_EQ(t->strides, nullptr);
    EXPECT_EQ(t->dtype.lanes, 1);
    EXPECT_TRUE((t->dtype.code == kDLBfloat && t->dtype.bits == 16) ||
                (t->dtype.code == kDLFloat && (t->dtype.bits == 16 || t->dtype.bits == 32)));
    EXPECT_EQ(shape_of(t), want.at(w.name));
    total += nbytes(t);
  }
  EXPECT_EQ(names, canonical_names(s));
  EXPECT_EQ(total, m.weight_bytes());
}

TEST(LoadedModel, PkgChat) {
  LoadedModel m = LoadedModel::load(pkgchat_dir());
  EXPECT_EQ(m.config().spec.num_layers, 6);
  EXPECT_EQ(m.config().spec.num_heads, 8);
  EXPECT_EQ(m.config().spec.num_kv_heads, 4);
  EXPECT_TRUE(m.config().tied_embeddings());
  EXPECT_EQ(m.weights().size(), 2u + 6u * 9u);
  EXPECT_EQ(m.find("lm_head"), nullptr);
  check_abi_shapes(m);
  ASSERT_EQ(m.files().size(), 1u);
  EXPECT_EQ(m.files()[0], pkgchat_dir() / "model.safetensors");

  // The bytes are the file's: compare with an independent read of the file.
  const RawSafetensors raw = read_safetensors_raw(pkgchat_dir() / "model.safetensors");
  const std::pair<const char*, const char*> pairs[] = {
      {"embed_tokens", "model.embed_tokens.weight"},
      {"layers.3.k_proj", "model.layers.3.self_attn.k_proj.weight"},
      {"layers.5.down_proj", "model.layers.5.mlp.down_proj.weight"},
      {"final_norm", "model.norm.weight"}};
  for (const auto& [canon, hf] : pairs) {
    SCOPED_TRACE(canon);
    const DLTensor* t = m.find(canon);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype.code, kDLBfloat);
    const auto off = raw.header[hf]["data_offsets"];
    const size_t b = off[0].get<size_t>(), e = off[1].get<size_t>();
    ASSERT_EQ(nbytes(t), e - b);
    EXPECT_EQ(std::memcmp(bytes_of(t), raw.data.data() + b, e - b), 0);
  }
  EXPECT_EQ(m.weight_bytes(), raw.data.size());  // every stored tensor is a weight
}

TEST(LoadedModel, MoveKeepsPointers) {
  LoadedModel a = LoadedModel::load(pkgchat_dir());
  const halo_named_tensor* arr = a.weights().data();
  const DLTensor* t0 = arr[0].tensor;
  const void* d0 = t0->data;
  const char* arch = a.config().spec.architecture;
  LoadedModel b = std::move(a);
  EXPECT_EQ(b.weights().data(), arr);
  EXPECT_EQ(b.weights()[0].tensor, t0);
  EXPECT_EQ(b.weights()[0].tensor->data, d0);
  EXPECT_EQ(b.config().spec.architecture, arch);
  EXPECT_STREQ(b.config().spec.architecture, "LlamaForCausalLM");
  LoadedModel c = LoadedModel::load(pkgchat_dir());
  c = std::move(b);
  EXPECT_EQ(c.weights().data(), arr);
  EXPECT_STREQ(c.weights()[1].name, "layers.0.attn_norm");
}

struct FamilyCase {
  std::string family;
  std::string architecture;
  uint32_t flags;
  int head_dim;
  halo_rope_scaling scaling;
  float theta;
};

class Families : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(Families, GeneratedModelLoads) {
  const FamilyCase& fc = GetParam();
  TempDir dir;
  HALO_GENERATE(fc.family, dir.path(), "");
  LoadedModel m = LoadedModel::load(dir.path());
  const ModelConfig& c = m.config();
  EXPECT_EQ(c.architecture(), fc.architecture);
  EXPECT_STREQ(c.spec.architecture, fc.architecture.c_str());
  EXPECT_EQ(c.spec.flags, fc.flags);
  EXPECT_EQ(c.spec.head_dim, fc.head_dim);
  EXPECT_EQ(c.spec.rope_scaling, fc.scaling);
  EXPECT_FLOAT_EQ(c.spec.rope_theta, fc.theta);
  EXPECT_EQ(c.spec.hidden_size, 64);
  EXPECT_EQ(c.spec.num_layers, 2);
  EXPECT_EQ(c.spec.num_heads, 4);
  EXPECT_EQ(c.spec.num_kv_heads, 2);
  EXPECT_EQ(c.spec.intermediate_size, 128);
  EXPECT_EQ(c.spec.vocab_size, 4096);  // pkgchat tokenizer: max id + 1
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{5, 2}));
  check_abi_shapes(m);
  for (const auto& w : m.weights()) EXPECT_EQ(w.tensor->dtype.code, kDLBfloat) << w.name;
  if (fc.scaling == HALO_ROPE_SCALING_LLAMA3) {
    EXPECT_FLOAT_EQ(c.spec.rope_factor, 8.0f);
    EXPECT_FLOAT_EQ(c.spec.rope_low_freq_factor, 1.0f);
    EXPECT_FLOAT_EQ(c.spec.rope_high_freq_factor, 4.0f);
    EXPECT_EQ(c.spec.rope_original_max_position, 8192);
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, Families,
    ::testing::Values(FamilyCase{"llama", "LlamaForCausalLM", 0, 16, HALO_ROPE_SCALING_NONE, 10000.0f},
                      FamilyCase{"llama3", "LlamaForCausalLM", 0, 16, HALO_ROPE_SCALING_LLAMA3, 500000.0f},
                      FamilyCase{"mistral", "MistralForCausalLM", 0, 16, HALO_ROPE_SCALING_NONE, 1e6f},
                      FamilyCase{"qwen2", "Qwen2ForCausalLM", HALO_MODEL_QKV_BIAS, 16, HALO_ROPE_SCALING_NONE, 1e6f},
                      FamilyCase{"qwen3", "Qwen3ForCausalLM", HALO_MODEL_QK_NORM, 32, HALO_ROPE_SCALING_NONE, 1e6f},
                      FamilyCase{"phi3", "Phi3ForCausalLM", 0, 16, HALO_ROPE_SCALING_NONE, 10000.0f}),
    [](const ::testing::TestParamInfo<FamilyCase>& i) { return i.param.family; });

TEST(LoadedModel, DtypesAndTiedEmbeddings) {
  TempDir dir;
  HALO_GENERATE("qwen2", dir / "fp16", "--dtype fp16 --tie-embeddings");
  LoadedModel a = LoadedModel::load(dir / "fp16");
  EXPECT_EQ(a.config().spec.flags, HALO_MODEL_QKV_BIAS | HALO_MODEL_TIED_EMBEDDINGS);
  EXPECT_EQ(a.find("lm_head"), nullptr);
  EXPECT_EQ(a.config().torch_dtype, "float16");
  for (const auto& w : a.weights()) {
    EXPECT_EQ(w.tensor->dtype.code, kDLFloat);
    EXPECT_EQ(w.tensor->dtype.bits, 16);
  }
  check_abi_shapes(a);

  HALO_GENERATE("llama", dir / "fp32", "--dtype fp32 --hidden 32 --heads 2 --kv-heads 1 --layers 3 --vocab 300");
  LoadedModel b = LoadedModel::load(dir / "fp32");
  EXPECT_EQ(b.config().spec.vocab_size, 300);
  EXPECT_EQ(b.config().spec.num_layers, 3);
  for (const auto& w : b.weights()) EXPECT_EQ(w.tensor->dtype.bits, 32);
  check_abi_shapes(b);
}

TEST(LoadedModel, ExplicitHeadDimAndTokenizerVocab) {
  TempDir dir;
  HALO_GENERATE("mistral", dir.path(),
                "--head-dim 24 --tokenizer " + shell_quote(std::string(HALO_TEST_DATA_DIR) + "/tokenizers/mistral"));
  LoadedModel m = LoadedModel::load(dir.path());
  EXPECT_EQ(m.config().spec.head_dim, 24);
  EXPECT_EQ(m.config().spec.vocab_size, 32000);
  EXPECT_EQ(shape_of(m.find("layers.0.q_proj")), (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(shape_of(m.find("layers.1.o_proj")), (std::vector<int64_t>{64, 96}));
  check_abi_shapes(m);
}

TEST(LoadedModel, ShardedEqualsSingleFile) {
  TempDir dir;
  HALO_GENERATE("qwen3", dir / "one", "--seed 7");
  HALO_GENERATE("qwen3", dir / "three", "--seed 7 --shards 3");
  ASSERT_FALSE(fs::exists(dir / "three" / "model.safetensors"));
  ASSERT_TRUE(fs::exists(dir / "three" / "model.safetensors.index.json"));
  LoadedModel one = LoadedModel::load(dir / "one");
  LoadedModel three = LoadedModel::load(dir / "three");
  EXPECT_EQ(three.files().size(), 3u);
  ASSERT_EQ(one.weights().size(), three.weights().size());
  EXPECT_EQ(one.weight_bytes(), three.weight_bytes());
  std::set<const void*> bases;
  for (size_t i = 0; i < one.weights().size(); ++i) {
    const halo_named_tensor& a = one.weights()[i];
    const halo_named_tensor& b = three.weights()[i];
    SCOPED_TRACE(a.name);
    EXPECT_STREQ(a.name, b.name);
    EXPECT_EQ(shape_of(a.tensor), shape_of(b.tensor));
    ASSERT_EQ(nbytes(a.tensor), nbytes(b.tensor));
    EXPECT_EQ(std::memcmp(bytes_of(a.tensor), bytes_of(b.tensor), nbytes(a.tensor)), 0);
  }
}

TEST(LoadedModel, Phi3FusedViewsShareTheBuffer) {
  TempDir dir;
  HALO_GENERATE("phi3", dir.path(), "--dtype fp32");
  LoadedModel m = LoadedModel::load(dir.path());
  const halo_model_spec& s = m.config().spec;
  const int64_t h = s.hidden_size, qr = s.num_heads * s.head_dim, kvr = s.num_kv_heads * s.head_dim;
  const int64_t in = s.intermediate_size;
  const RawSafetensors raw = read_safetensors_raw(dir / "model.safetensors");
  for (int layer = 0; layer < s.num_layers; ++layer) {
    SCOPED_TRACE(layer);
    const std::string p = "layers." + std::to_string(layer) + ".";
    const DLTensor* q = m.find(p + "q_proj");
    const DLTensor* k = m.find(p + "k_proj");
    const DLTensor* v = m.find(p + "v_proj");
    ASSERT_TRUE(q && k && v);
    EXPECT_EQ(q->data, k->data);
    EXPECT_EQ(q->data, v->data);
    EXPECT_EQ(q->byte_offset, 0u);
    EXPECT_EQ(k->byte_offset, static_cast<uint64_t>(qr * h * 4));
    EXPECT_EQ(v->byte_offset, static_cast<uint64_t>((qr + kvr) * h * 4));
    const auto qkv_off = raw.header["model.layers." + std::to_string(layer) + ".self_attn.qkv_proj.weight"]["data_offsets"];
    EXPECT_EQ(std::memcmp(bytes_of(v), raw.data.data() + qkv_off[0].get<size_t>() + (qr + kvr) * h * 4, nbytes(v)), 0);
    EXPECT_EQ(qkv_off[1].get<size_t>() - qkv_off[0].get<size_t>(), nbytes(q) + nbytes(k) + nbytes(v));

    const DLTensor* g = m.find(p + "gate_proj");
    const DLTensor* u = m.find(p + "up_proj");
    ASSERT_TRUE(g && u);
    EXPECT_EQ(g->data, u->data);
    EXPECT_EQ(g->byte_offset, 0u);
    EXPECT_EQ(u->byte_offset, static_cast<uint64_t>(in * h * 4));
    EXPECT_EQ(shape_of(u), (std::vector<int64_t>{in, h}));
  }
  // Slices counted once each: the fused tensors' bytes, not more.
  EXPECT_EQ(m.weight_bytes(), raw.data.size());
}

// ------------------------------------------------------------ broken inputs

class BrokenModel : public ::testing::Test {
 protected:
  void SetUp() override { HALO_GENERATE("llama", dir_.path(), "--layers 2"); }
  fs::path st() const { return dir_ / "model.safetensors"; }
  std::string sts() const { return st().string(); }
  bool load_fails(std::initializer_list<std::string> needles) const {
    auto r = throws_error([&] { LoadedModel::load(dir_.path()); }, needles);
    if (!r) ADD_FAILURE() << r.message();
    return static_cast<bool>(r);
  }
  TempDir dir_;
};

TEST_F(BrokenModel, Baseline) { EXPECT_NO_THROW(LoadedModel::load(dir_.path())); }

TEST_F(BrokenModel, MissingConfig) {
  fs::remove(dir_ / "config.json");
  EXPECT_TRUE(load_fails({(dir_ / "config.json").string(), "not found"}));
}

TEST_F(BrokenModel, MalformedConfig) {
  write_file(dir_ / "config.json", "{\"architectures\": [\"LlamaForCausalLM\"] \"hidden_size\": 64}");
  EXPECT_TRUE(load_fails({"config.json", "malformed JSON"}));
}

TEST_F(BrokenModel, UnsupportedArchitecture) {
  patch_config(dir_.path(), [](json& j) { j["architectures"] = {"MambaForCausalLM"}; });
  EXPECT_TRUE(load_fails({"config.json", "unsupported architecture 'MambaForCausalLM'", "Qwen3ForCausalLM"}));
}

TEST_F(BrokenModel, HeadsNotDivisible) {
  patch_config(dir_.path(), [](json& j) { j["num_key_value_heads"] = 3; });
  EXPECT_TRUE(load_fails({"config.json", "num_key_value_heads=3 does not divide num_attention_heads=4"}));
}

TEST_F(BrokenModel, MissingRequiredKey) {
  patch_config(dir_.path(), [](json& j) { j.erase("num_hidden_layers"); });
  EXPECT_TRUE(load_fails({"config.json", "num_hidden_layers"}));
}

TEST_F(BrokenModel, TruncatedSafetensors) {
  const std::string all = read_file(st());
  write_file(st(), all.substr(0, all.size() - 100));
  // The last tensor in the data section (names are sorted) is the one cut off.
  EXPECT_TRUE(load_fails({sts(), "tensor 'model.norm.weight'", "beyond the data section"}));
}

TEST_F(BrokenModel, TruncatedInsideHeader) {
  const std::string all = read_file(st());
  write_file(st(), all.substr(0, 40));
  EXPECT_TRUE(load_fails({sts(), "header length", "beyond the end of the file (40 bytes)"}));
}

TEST_F(BrokenModel, HeaderLengthBeyondFile) {
  std::string all = read_file(st());
  const uint64_t bogus = all.size() + 1000;
  for (int i = 0; i < 8; ++i) all[static_cast<size_t>(i)] = static_cast<char>((bogus >> (8 * i)) & 0xff);
  write_file(st(), all);
  EXPECT_TRUE(load_fails({sts(), "header length " + std::to_string(bogus), "beyond"}));
}

TEST_F(BrokenModel, MalformedHeaderJson) {
  std::string all = read_file(st());
  all[8 + 1] = '}';  // {"__metadata__"... -> {}"__metadata__"...
  write_file(st(), all);
  EXPECT_TRUE(load_fails({sts(), "malformed header JSON"}));
}

TEST_F(BrokenModel, UnsupportedDtypeI64) {
  patch_header(st(), [](json& h) {
    auto& t = h["model.norm.weight"];  // [64] bf16 = 128 bytes = [16] int64
    t["dtype"] = "I64";
    t["shape"] = {16};
  });
  EXPECT_TRUE(load_fails({sts(), "tensor 'model.norm.weight'", "dtype I64"}));
}

TEST_F(BrokenModel, UnsupportedDtypeF64) {
  patch_header(st(), [](json& h) {
    auto& t = h["model.layers.1.self_attn.k_proj.weight"];  // [32, 64] bf16 = [16, 64] f64
    t["dtype"] = "F64";
    t["shape"] = {8, 64};
  });
  EXPECT_TRUE(load_fails({sts(), "tensor 'model.layers.1.self_attn.k_proj.weight'", "dtype F64"}));
}

TEST_F(BrokenModel, WrongShape) {
  patch_header(st(), [](json& h) { h["model.layers.0.mlp.up_proj.weight"]["shape"] = {64, 128}; });
  EXPECT_TRUE(load_fails({sts(), "tensor 'model.layers.0.mlp.up_proj.weight'", "shape [64, 128]",
                          "expected [128, 64]"}));
}

TEST_F(BrokenModel, SizeNotMatchingShape) {
  patch_header(st(), [](json& h) { h["model.layers.0.mlp.up_proj.weight"]["shape"] = {128, 60}; });
  EXPECT_TRUE(load_fails({sts(), "tensor 'model.layers.0.mlp.up_proj.weight'", "data_offsets"}));
}

TEST_F(BrokenModel, MissingTensor) {
  patch_header(st(), [](json& h) {
    h["model.layers.1.self_attn.o_proj.weight_renamed"] = h["model.layers.1.self_attn.o_proj.weight"];
    h.erase("model.layers.1.self_attn.o_proj.weight");
  });
  EXPECT_TRUE(load_fails({sts(), "missing tensor 'model.layers.1.self_attn.o_proj.weight'", "[64, 64]"}));
}

TEST_F(BrokenModel, MissingLmHeadWhenUntied) {
  patch_header(st(), [](json& h) { h.erase("lm_head.weight"); });
  EXPECT_TRUE(load_fails({sts(), "missing tensor 'lm_head.weight'", "[4096, 64]"}));
  // Declaring the embeddings tied makes the same file valid.
  patch_config(dir_.path(), [](json& j) { j["tie_word_embeddings"] = true; });
  EXPECT_NO_THROW(LoadedModel::load(dir_.path()));
}

TEST_F(BrokenModel, ExtraTensorsIgnored) {
  // The extra tensor gets bytes of its own (sharing another's is refused).
  RawSafetensors raw = read_safetensors_raw(st());
  const size_t end = raw.data.size();
  raw.header["model.layers.0.self_attn.rotary_emb.inv_freq"] = {
      {"dtype", "I64"}, {"shape", {2}}, {"data_offsets", {end, end + 16}}};
  write_safetensors_raw(st(), raw.header, raw.data + std::string(16, '\0'));
  LoadedModel m = LoadedModel::load(dir_.path());
  EXPECT_EQ(m.weights().size(), 2u + 2u * 9u + 1u);
}

TEST_F(BrokenModel, HugeLayerCountRefusedBeforeAllocating) {
  patch_config(dir_.path(), [](json& j) { j["num_hidden_layers"] = 1e9; });
  EXPECT_TRUE(load_fails({"config.json", "num_hidden_layers=1000000000 is beyond"}));
  // Within the bound but more layers than the file has tensors: refused
  // before the per-layer tables are built.
  patch_config(dir_.path(), [](json& j) { j["num_hidden_layers"] = 4000; });
  EXPECT_TRUE(load_fails({"config.json", "num_hidden_layers=4000", sts(), "holds only 21 tensors"}));
}

TEST_F(BrokenModel, OverlappingTensorsRefused) {
  patch_header(st(), [](json& h) {
    h["model.layers.0.mlp.up_proj.weight"]["data_offsets"] = h["model.layers.0.mlp.down_proj.weight"]["data_offsets"];
    h["model.layers.0.mlp.up_proj.weight"]["shape"] = h["model.layers.0.mlp.down_proj.weight"]["shape"];
  });
  EXPECT_TRUE(load_fails({sts(), "overlaps tensor", "model.layers.0.mlp.up_proj.weight",
                          "model.layers.0.mlp.down_proj.weight"}));
}

// safetensors allows any header length: an odd one leaves every tensor
// unaligned in the mapping. The cpu plugin refused such files ("not aligned");
// the loader now hands out aligned copies with the same bytes.
TEST_F(BrokenModel, OddHeaderLengthLoadsWithAlignedData) {
  const LoadedModel before = LoadedModel::load(dir_.path());
  std::map<std::string, std::string> expected;
  for (const auto& w : before.weights()) expected[w.name] = std::string(reinterpret_cast<const char*>(bytes_of(w.tensor)), nbytes(w.tensor));

  RawSafetensors raw = read_safetensors_raw(st());
  std::string h = raw.header.dump();
  if (h.size() % 2 == 0) h += ' ';  // odd length: the data starts at an odd offset
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  write_file(st(), out + h + raw.data);

  const LoadedModel m = LoadedModel::load(dir_.path());
  ASSERT_EQ(m.weights().size(), expected.size());
  for (const auto& w : m.weights()) {
    const auto* p = static_cast<const std::byte*>(w.tensor->data) + w.tensor->byte_offset;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (w.tensor->dtype.bits / 8), 0u) << w.name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes_of(w.tensor)), nbytes(w.tensor)), expected[w.name]) << w.name;
  }
}

TEST_F(BrokenModel, NanWeightsWarnNamingTheTensor) {
  RawSafetensors raw = read_safetensors_raw(st());
  const auto off = raw.header["model.layers.1.mlp.gate_proj.weight"]["data_offsets"];
  for (size_t i = off[0].get<size_t>(); i < off[1].get<size_t>(); i += 2) {  // bf16 NaN = 0x7fc0
    raw.data[i] = '\xc0';
    raw.data[i + 1] = '\x7f';
  }
  write_safetensors_raw(st(), raw.header, raw.data);
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  auto saved = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  EXPECT_NO_THROW(LoadedModel::load(dir_.path()));
  spdlog::set_default_logger(saved);
  EXPECT_NE(log.str().find("tensor 'model.layers.1.mlp.gate_proj.weight' holds NaN or Inf"), std::string::npos)
      << log.str();
  EXPECT_EQ(log.str().find("model.layers.0"), std::string::npos) << log.str();
}

TEST_F(BrokenModel, NoWeights) {
  fs::remove(st());
  EXPECT_TRUE(load_fails({"neither model.safetensors nor model.safetensors.index.json"}));
}

TEST(BrokenShards, IndexPointsAtMissingShard) {
  TempDir dir;
  HALO_GENERATE("llama", dir.path(), "--shards 2");
  fs::remove(dir / "model-00002-of-00002.safetensors");
  EXPECT_TRUE(throws_error([&] { LoadedModel::load(dir.path()); },
                           {(dir / "model.safetensors.index.json").string(), "model-00002-of-00002.safetensors",
                            "not found"}));
}

TEST(BrokenShards, TensorMissingFromIndexOrShard) {
  TempDir dir;
  HALO_GENERATE("llama", dir.path(), "--shards 2");
  const fs::path index = dir / "model.safetensors.index.json";
  json j = read_json(index);
  const std::string shard = j["weight_map"]["model.layers.1.mlp.down_proj.weight"];
  j["weight_map"].erase("model.layers.1.mlp.down_proj.weight");
  write_json(index, j);
  EXPECT_TRUE(throws_error([&] { LoadedModel::load(dir.path()); },
                           {index.string(), "missing tensor 'model.layers.1.mlp.down_proj.weight'"}));

  // Index says shard 1, tensor actually lives in the other shard.
  j["weight_map"]["model.layers.1.mlp.down_proj.weight"] =
      shard == "model-00001-of-00002.safetensors" ? "model-00002-of-00002.safetensors"
                                                  : "model-00001-of-00002.safetensors";
  write_json(index, j);
  EXPECT_TRUE(throws_error([&] { LoadedModel::load(dir.path()); },
                           {"missing tensor 'model.layers.1.mlp.down_proj.weight'"}));

  write_file(index, "{\"weight_map\": ");
  EXPECT_TRUE(throws_error([&] { LoadedModel::load(dir.path()); }, {index.string(), "malformed JSON"}));
}

}  // namespace
}  // namespace halo::model::testing
