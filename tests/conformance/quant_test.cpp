// ABI v1.4 quantized weights. For every halo_quant_type the plugin declares
// (halo_device_properties.quant_types), the suite quantizes a random model's
// projections itself (harness: int8 per channel and group 32, uint4 group 32
// with offsets; fp32, fp16 and bf16 scales; a scheme mixing types inside
// q|k|v and gate|up), prepares them as quantized_weights and compares the
// logits with the CPU reference running the dequantized values in fp32: only
// the plugin's own rounding (of activations, of the KV cache) differs. Layouts
// outside what the plugin declares are refused with INVALID_ARGUMENT naming
// the weight. A plugin declaring no type skips, saying so.
#include <iostream>

#include "suite.h"

namespace conf {
namespace {

// The quantized tests' models: every matmul's K (hidden, heads * head_dim,
// intermediate) a multiple of 96, so that groups 32 and 48 divide it.
ModelConfig quant_config(const std::string& fam) {
  ModelConfig c = family(fam);
  c.hidden = 96;
  c.inter = 192;
  c.head_dim = 96 / c.heads;    // 24 or 32: even
  c.dtype = preferred_dtype();  // of the weights left plain (embedding, norms, biases)
  return c;
}

QuantScheme scheme_named(const std::string& name) {
  for (const QuantScheme& q : quant_schemes())
    if (q.name == name) return q;
  throw std::logic_error("no quantization scheme " + name);
}

std::string type_names(uint32_t types) {
  std::string s;
  for (int32_t t : {HALO_QUANT_INT8, HALO_QUANT_UINT4})
    if (types & HALO_DTYPE_BIT(t))
      s += std::string(s.empty() ? "" : ", ") + halo_quant_type_name(t);
  return s.empty() ? "none" : s;
}

// Why the plugin under test cannot run quantized weights of `types` ("" if it can).
std::string why_not(const halo_plugin_api* api, const halo_device_properties& p, uint32_t types) {
  if (api->abi_minor < 4)
    return "the plugin speaks ABI v1." + std::to_string(api->abi_minor) +
           ", before quantized weights (v1.4)";
  if (p.quant_types == 0) return "the device declares no quantized weight types (quant_types = 0)";
  if ((p.quant_types & types) != types)
    return "the device does not declare " + type_names(types & ~p.quant_types) +
           " (quant_types: " + type_names(p.quant_types) + ")";
  return "";
}

std::optional<Session> quantized_session(const Model& m, Status* st) {
  SessionOptions o;
  o.weights = &m.plain;
  o.quantized = &m.quantized;
  return make_session(plugin(), settings().device, m, o, st);
}

// ================================================================== golden

struct QuantCase {
  std::string family;
  QuantScheme scheme;
};

void PrintTo(const QuantCase& c, std::ostream* os) { *os << c.family << "/" << c.scheme.name; }

class QuantizedGolden : public Conformance, public testing::WithParamInterface<QuantCase> {};

TEST_P(QuantizedGolden, MatchesDequantizedReference) {
  const QuantCase& qc = GetParam();
  const std::string no = why_not(api(), props(), qc.scheme.types());
  if (!no.empty()) {
    std::cout << "[ quant ] " << qc.family << "/" << qc.scheme.name << " skipped: " << no << "\n";
    GTEST_SKIP() << no;
  }
  if (reference() == nullptr)
    GTEST_SKIP() << "no CPU reference plugin: " << settings().reference_why;
  if (const std::string no = tp_cannot_split(quant_config(qc.family)); !no.empty()) GTEST_SKIP() << no;
  const Model m(quant_config(qc.family), &qc.scheme);
  Status st;
  auto s = quantized_session(m, &st);
  // A grouped layout may be refused for this model's shape (a tensor-parallel
  // split inside a group); per-channel weights split anywhere, so never.
  const bool grouped = qc.scheme.name.find("channel") == std::string::npos;
  if (!s && grouped && st.code == HALO_STATUS_UNIMPLEMENTED) {
    std::cout << "[ quant ] " << qc.family << "/" << qc.scheme.name << " skipped: " << describe(st) << "\n";
    GTEST_SKIP() << describe(st);
  }
  ASSERT_TRUE(s) << qc.family << "/" << qc.scheme.name << ": " << describe(st)
                 << " " CONTRACT_QUANT;
  auto r = reference_like(*s, m, &st);  // the dequantized values, plain fp32
  ASSERT_TRUE(r) << "reference: " << describe(st);
  Workload w;
  w.prompts = make_prompts(*s, {5, 17, 1, 33, 9, 24}, 6, 100);
  w.outputs = 6;
  const WorkloadResult want = run_workload(*r, w);
  ASSERT_TRUE(want.status.ok()) << "reference: " << describe(want.status);
  w.forced = &want.argmax;
  const WorkloadResult got = run_workload(*s, w);
  ASSERT_TRUE(got.status.ok()) << "execute failed: " << describe(got.status) << " " CONTRACT_QUANT;
  const int32_t cd = api()->abi_minor >= 3 ? s->limits.compute_dtype : HALO_COMPUTE_DTYPE_UNSET;
  const Tolerance tol = tolerance_for(*s);
  std::cout << "[ quant ] " << qc.family << "/" << qc.scheme.name << ": compute dtype "
            << halo_compute_dtype_name(cd) << ", KV cache "
            << halo_kv_dtype_name(s->limits.kv_cache_dtype) << ", max error "
            << max_error(got, want) << ", tolerance " << tol.value << " (" << tol.why << ")\n";
  EXPECT_GT(dtype_tolerance(cd), 0)
      << "quantized weights: limits.compute_dtype=" << cd << " (" << halo_compute_dtype_name(cd)
      << ") is not a known type " CONTRACT_COMPUTE;
  const std::string e = compare_results(got, want, tol.value, true);
  EXPECT_EQ(e, "") << qc.family << "/" << qc.scheme.name << ", tolerance " << tol.value << " ("
                   << tol.why
                   << "): " << (e.find("greedy") != std::string::npos ? "" : CONTRACT_QUANT);
}

std::vector<QuantCase> quant_cases() {
  std::vector<QuantCase> out;
  for (const QuantScheme& q : quant_schemes()) out.push_back({"llama", q});
  for (const QuantScheme& q : quant_schemes())
    if (q.name == "uint4_g32_f16" || q.name == "mixed" || q.name == "int8_g32_f16")
      for (const char* f : {"qwen2", "qwen3", "gelu"}) out.push_back({f, q});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Schemes, QuantizedGolden, testing::ValuesIn(quant_cases()),
                         [](const auto& info) {
                           return info.param.family + "_" + info.param.scheme.name;
                         });

// ================================================================ refusals

class Quantized : public Conformance {
 protected:
  // Prepares `m` with these weights; the status of prepare (or of the session).
  std::function<Status()> prepare_with(const Model& m, std::vector<halo_named_tensor> plain,
                                       std::vector<halo_quantized_tensor> quantized) const {
    return [&m, plain = std::move(plain), quantized = std::move(quantized)] {
      SessionOptions o;
      o.weights = &plain;
      o.quantized = &quantized;
      Status st;
      return make_session(plugin(), settings().device, m, o, &st) ? Status{} : st;
    };
  }
  static halo_quantized_tensor& entry(std::vector<halo_quantized_tensor>& q,
                                      const std::string& name) {
    for (auto& t : q)
      if (name == t.name) return t;
    throw std::logic_error("no quantized " + name);
  }
};

TEST_F(Quantized, OutsideTheDeclaredLayoutsRefused) {
  const uint32_t declared = props().quant_types;
  // Needs one declared type (the lowest bit set), whichever it is.
  const std::string no = why_not(api(), props(), declared ? declared & (0u - declared) : 1u);
  if (!no.empty()) {
    std::cout << "[ quant ] refusals skipped: " << no << "\n";
    GTEST_SKIP() << no;
  }
  if (uses_compile())
    GTEST_SKIP() << "prepares raw weights directly; this plugin runs compiled models only";
  const QuantScheme scheme =
      scheme_named((declared & HALO_DTYPE_BIT(HALO_QUANT_INT8)) ? "int8_g32_f16" : "uint4_g32_f16");
  const Model m(quant_config("llama"), &scheme);
  const std::string p0 = std::string(HALO_WEIGHT_LAYER_PREFIX) + "0.";
  const std::string q0 = p0 + HALO_WEIGHT_Q_PROJ, k0 = p0 + HALO_WEIGHT_K_PROJ;
  auto refused = [&](const std::string& what, std::vector<halo_named_tensor> plain,
                     std::vector<halo_quantized_tensor> q, const std::string& name) {
    expect_error("prepare(quantized_weights: " + what + ")",
                 prepare_with(m, std::move(plain), std::move(q)), {HALO_STATUS_INVALID_ARGUMENT},
                 name, CONTRACT_QUANT_REFUSED);
  };
  for (int32_t g : {24, 64, 0}) {  // not a multiple of 16; not dividing K = 96; not positive
    auto q = m.quantized;
    entry(q, q0).group_size = g;
    refused(q0 + " group_size " + std::to_string(g), m.plain, q, q0);
  }
  // k_proj's tensor [kv_heads * head_dim, hidden] under q_proj's name.
  auto q = m.quantized;
  halo_quantized_tensor wrong = *m.find_quantized(k0);
  wrong.name = m.find_quantized(q0)->name;
  entry(q, q0) = wrong;
  refused(q0 + " with k_proj's shape", m.plain, q, q0);
  auto plain = m.plain;
  for (const auto& w : m.weights)
    if (q0 == w.name) plain.push_back(w);
  refused(q0 + " also given plain", plain, m.quantized, q0);
  int32_t undeclared = 3;
  for (int32_t t : {HALO_QUANT_INT8, HALO_QUANT_UINT4})
    if (!(declared & HALO_DTYPE_BIT(t))) {
      undeclared = t;
      break;
    }
  q = m.quantized;
  entry(q, q0).type = undeclared;
  refused(q0 + " of type " + std::to_string(undeclared) + " (" + halo_quant_type_name(undeclared) +
              "), not declared",
          m.plain, q, q0);
  // embed_tokens is never quantized (nor is a norm): q_proj's tensor under its name.
  q = m.quantized;
  halo_quantized_tensor embed = *m.find_quantized(q0);
  embed.name = HALO_WEIGHT_EMBED_TOKENS;
  q.push_back(embed);
  plain.clear();
  for (const auto& w : m.plain)
    if (std::string(w.name) != HALO_WEIGHT_EMBED_TOKENS) plain.push_back(w);
  refused("embed_tokens quantized", plain, q, HALO_WEIGHT_EMBED_TOKENS);
}

// A v1.3 caller's halo_prepare_args ends at `executable`: the plugin must not
// read quantized_weights beyond it (here they point at real tensors of the
// weights also given plain, which a reader would refuse as given twice).
TEST_F(Conformance, VersionPrepareArgsOfV13) {
  if (uses_compile())
    GTEST_SKIP() << "prepares raw weights directly; this plugin runs compiled models only";
  const QuantScheme scheme = scheme_named("int8_g32_f16");
  const Model m(quant_config("llama"), &scheme);
  SessionOptions o;
  o.weights = &m.weights;
  o.quantized = &m.quantized;
  o.prepare_args_size = HALO_STRUCT_SIZE(halo_prepare_args, executable);
  Status st;
  auto s = make_session(plugin(), dev(), m, o, &st);
  EXPECT_TRUE(s) << "halo_prepare_args of a v1.3 caller (struct_size=" << o.prepare_args_size
                 << "): " << describe(st) << " " CONTRACT_VERSION;
}

}  // namespace
}  // namespace conf
