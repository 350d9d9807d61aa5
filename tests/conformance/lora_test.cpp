// ABI v1.6, LoRA adapter slots. With HALO_CAP_LORA: a slot runs as the model
// with merged weights W + B A (computed here, run on the reference plugin), a
// step mixing the base and several slots gives each sequence bitwise the rows
// it gets alone, an emptied slot runs the base and a refilled one the new
// adapter, and bad adapters or slots are refused, leaving slots and cache as
// they were. Without it: 0 slots agreed, no lora_slot_set, and a step asking
// for a slot refused with UNIMPLEMENTED while all -1 runs the base.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>

#include "suite.h"

namespace conf {
namespace {

constexpr int kSlots = 4;  // proposed max_loras
constexpr int kRank = 8;   // proposed max_lora_rank
constexpr int kNumProj = 7;
const char* const kProj[kNumProj] = {
    HALO_WEIGHT_Q_PROJ,    HALO_WEIGHT_K_PROJ,  HALO_WEIGHT_V_PROJ,   HALO_WEIGHT_O_PROJ,
    HALO_WEIGHT_GATE_PROJ, HALO_WEIGHT_UP_PROJ, HALO_WEIGHT_DOWN_PROJ};

// [out, in] of projection p.
std::pair<int64_t, int64_t> proj_shape(const ModelConfig& c, int p) {
  const int64_t H = c.hidden, I = c.inter, NQ = int64_t{c.heads} * c.head_dim,
                NKV = int64_t{c.kv_heads} * c.head_dim;
  switch (p) {
    case 0:
      return {NQ, H};
    case 1:
    case 2:
      return {NKV, H};
    case 3:
      return {H, NQ};
    case 4:
    case 5:
      return {I, H};
    default:
      return {H, I};
  }
}

std::string layer_name(int layer, int p) {
  return HALO_WEIGHT_LAYER_PREFIX + std::to_string(layer) + "." + kProj[p];
}

// Host tensors with stable addresses, handed to lora_slot_set by name.
class Tensors {
 public:
  // fp32 values (or, for dtype checks, raw int32 of the same count).
  void add(const std::string& name, std::vector<int64_t> shape, std::vector<float> v,
           DLDataType dt = {kDLFloat, 32, 1}) {
    auto t = std::make_unique<T>();
    t->name = name;
    t->shape = std::move(shape);
    t->data = std::move(v);
    t->dl.data = t->data.data();
    t->dl.device = {kDLCPU, 0};
    t->dl.ndim = static_cast<int>(t->shape.size());
    t->dl.dtype = dt;
    t->dl.shape = t->shape.data();
    t_.push_back(std::move(t));
  }
  void remove(const std::string& name) {
    t_.erase(std::remove_if(t_.begin(), t_.end(), [&](const auto& t) { return t->name == name; }),
             t_.end());
  }
  std::vector<halo_named_tensor> named() const {
    std::vector<halo_named_tensor> out;
    for (const auto& t : t_) out.push_back({t->name.c_str(), &t->dl});
    return out;
  }

 private:
  struct T {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;
    DLTensor dl{};
  };
  std::vector<std::unique_ptr<T>> t_;
};

// A random adapter: ranks[p] per projection (0: none) on every layer, A
// [r, in] and B [out, r] in fp32, scaled so that the delta is about half the
// size of the base projection's output.
struct Adapter {
  struct Part {
    int layer, proj;
    int64_t rank, in, out;
    std::vector<float> a, b;
  };
  std::vector<Part> parts;
  Tensors tensors;

  Adapter(const ModelConfig& c, std::vector<int> ranks, uint32_t seed) {
    std::mt19937 rng(seed * 2246822519u + 3u);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int l = 0; l < c.layers; ++l)
      for (int p = 0; p < kNumProj; ++p) {
        if (ranks[static_cast<size_t>(p)] <= 0) continue;
        Part part{l, p, ranks[static_cast<size_t>(p)], 0, 0, {}, {}};
        std::tie(part.out, part.in) = proj_shape(c, p);
        part.a.resize(static_cast<size_t>(part.rank * part.in));
        part.b.resize(static_cast<size_t>(part.out * part.rank));
        for (auto& x : part.a) x = static_cast<float>(u(rng) * std::sqrt(3.0 / double(part.in)));
        for (auto& x : part.b)
          x = static_cast<float>(0.5 * u(rng) * std::sqrt(3.0 / double(part.rank)));
        const std::string n = layer_name(l, p);
        tensors.add(n + HALO_LORA_A_SUFFIX, {part.rank, part.in}, part.a);
        tensors.add(n + HALO_LORA_B_SUFFIX, {part.out, part.rank}, part.b);
        parts.push_back(std::move(part));
      }
  }
  Adapter(const Adapter&) = delete;
};

// The model's weights with every adapted projection replaced by W + B A
// (double accumulation, stored fp32).
struct Merged {
  Tensors owned;
  std::vector<halo_named_tensor> weights;
  Merged(const Model& m, const Adapter& ad) {
    for (const halo_named_tensor& w : m.weights) {
      const Adapter::Part* part = nullptr;
      for (const auto& p : ad.parts)
        if (layer_name(p.layer, p.proj) == w.name) part = &p;
      if (part == nullptr) continue;
      std::vector<float> W = m.weight_f32(w.name);
      const auto in = static_cast<size_t>(part->in), r = static_cast<size_t>(part->rank);
      for (size_t o = 0; o < static_cast<size_t>(part->out); ++o)
        for (size_t i = 0; i < in; ++i) {
          double acc = W[o * in + i];
          for (size_t j = 0; j < r; ++j)
            acc += double(part->b[o * r + j]) * double(part->a[j * in + i]);
          W[o * in + i] = static_cast<float>(acc);
        }
      owned.add(w.name, {part->out, part->in}, std::move(W));
    }
    const auto mine = owned.named();
    for (const halo_named_tensor& w : m.weights) {
      auto it = std::find_if(mine.begin(), mine.end(), [&](const halo_named_tensor& t) {
        return std::strcmp(t.name, w.name) == 0;
      });
      weights.push_back(it != mine.end() ? *it : w);
    }
  }
};

bool has_lora_entry(const halo_plugin_api* api) {
  return api->struct_size >= HALO_STRUCT_SIZE(halo_plugin_api, lora_slot_set) && api->lora_slot_set;
}

Status set_slot(const Session& s, int slot, const std::vector<halo_named_tensor>& w) {
  halo_lora_slot_args a{};
  a.struct_size = sizeof a;
  a.executable = s.exec.get();
  a.slot = slot;
  a.weights = w.empty() ? nullptr : w.data();
  a.num_weights = w.size();
  return take(s.lib->api, s.lib->api->lora_slot_set(&a));
}

std::optional<Session> lora_session(const Model& m, Status* st) {
  SessionOptions o;
  o.proposal.block_size = 4;  // sequences span blocks (a fixed-shape device keeps its own)
  o.proposal.max_loras = kSlots;
  o.proposal.max_lora_rank = kRank;
  return make_session(plugin(), settings().device, m, o, st);
}

// Rows of a run: [sequence][step][vocab].
using Rows = std::vector<std::vector<std::vector<float>>>;

// Prefills every sequence, then decodes `decodes` fixed tokens: all
// sequences in shared steps (together) or each in steps of its own. slots:
// each sequence's LoRA slot (NULL: lora_slots not passed).
Status run_seqs(Session& s, const std::vector<std::vector<int32_t>>& prompts,
                const std::vector<int32_t>* slots, bool together, int decodes, Rows* out) {
  const size_t n = prompts.size();
  std::vector<Seq> seqs(n);
  BlockPool pool(s.num_blocks, 0);
  out->assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    seqs[i].tokens = prompts[i];
    const auto fed = random_tokens(decodes, s.vocab, 700 + static_cast<uint32_t>(i));
    seqs[i].tokens.insert(seqs[i].tokens.end(), fed.begin(), fed.end());
    if (!pool.reserve(seqs[i], static_cast<int>(seqs[i].tokens.size()), s.limits.block_size))
      return {HALO_STATUS_OUT_OF_MEMORY, "the test's block pool is too small"};
  }
  std::vector<std::vector<size_t>> groups;
  if (together) {
    groups.emplace_back();
    for (size_t i = 0; i < n; ++i) groups.back().push_back(i);
  } else {
    for (size_t i = 0; i < n; ++i) groups.push_back({i});
  }
  for (const auto& g : groups)
    for (int step = 0; step <= decodes; ++step) {
      std::vector<Chunk> batch;
      std::vector<int32_t> sl;
      for (size_t i : g) {
        batch.push_back(
            {&seqs[i], step == 0 ? static_cast<int>(prompts[i].size()) : 1, true, false});
        if (slots) sl.push_back((*slots)[i]);
      }
      StepExtras x;
      if (slots) x.lora_slots = &sl;
      std::vector<std::vector<float>> rows;
      Status st = run_step(s, batch, &rows, x);
      if (!st.ok()) return st;
      for (size_t k = 0; k < g.size(); ++k) (*out)[g[k]].push_back(rows[k]);
    }
  return {};
}

// The first row (sequence, step) where a and b differ in any bit, or "".
std::string first_difference(const Rows& a, const Rows& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    for (size_t j = 0; j < a[i].size() && j < b[i].size(); ++j)
      if (a[i][j].size() != b[i][j].size() ||
          std::memcmp(a[i][j].data(), b[i][j].data(), a[i][j].size() * sizeof(float)) != 0)
        return "sequence " + std::to_string(i) + ", row " + std::to_string(j);
  if (a.size() != b.size()) return "different numbers of sequences";
  return "";
}

Model lora_model(const ModelConfig& fc) {
  ModelConfig c = fc;
  c.dtype = preferred_dtype();
  return Model(c);
}

// Ranks per projection differing from each other, within the agreed rank.
std::vector<int> ranks_within(std::vector<int> r, int max_rank) {
  for (int& x : r) x = std::min(x, max_rank);
  return r;
}

class LoraTest : public Conformance {
 protected:
  // A session with adapter slots; skips when the device has no LoRA.
  bool lora_or_skip(const Model& m, std::optional<Session>* s) {
    if (!claims(HALO_CAP_LORA)) return false;
    Status st;
    *s = lora_session(m, &st);
    if (!*s) {
      ADD_FAILURE() << describe(st);
      return false;
    }
    EXPECT_TRUE(has_lora_entry(api()))
        << "HALO_CAP_LORA claimed but lora_slot_set is NULL " CONTRACT_LORA_NONE;
    EXPECT_GE((*s)->limits.max_loras, 1) << "HALO_CAP_LORA claimed, 4 slots proposed, 0 agreed";
    EXPECT_LE((*s)->limits.max_loras, kSlots) << "more slots agreed than proposed";
    EXPECT_GE((*s)->limits.max_lora_rank, 1);
    EXPECT_LE((*s)->limits.max_lora_rank, kRank) << "a larger rank agreed than proposed";
    return has_lora_entry(api()) && (*s)->limits.max_loras >= 1 && (*s)->limits.max_lora_rank >= 1;
  }
};

}  // namespace

// (a) An adapter in a slot (every projection of every layer, ranks differing
// per projection) gives the logits of the model with merged weights W + B A,
// run on the reference plugin, within the compute dtype's tolerance.
TEST_F(LoraTest, LoraSlotEqualsMergedWeights) {
  if (!claims(HALO_CAP_LORA))
    GTEST_SKIP() << "the device does not claim HALO_CAP_LORA (LoraWithoutCapability checks it)";
  if (reference() == nullptr)
    GTEST_SKIP() << "no CPU reference plugin: " << settings().reference_why;
  for (const ModelConfig& fc : model_families()) {
    SCOPED_TRACE("family " + fc.family);
    const Model m = lora_model(fc);
    std::optional<Session> s;
    if (!lora_or_skip(m, &s)) return;
    const Adapter ad(m.cfg, ranks_within({4, 2, 8, 3, 8, 5, 1}, s->limits.max_lora_rank), 11);
    ASSERT_TRUE(set_slot(*s, 0, ad.tensors.named()).ok())
        << describe(set_slot(*s, 0, ad.tensors.named()));
    const Merged merged(m, ad);
    SessionOptions ro;
    ro.proposal.max_num_seqs = s->limits.max_num_seqs;
    ro.proposal.max_model_len = s->limits.max_model_len;
    ro.proposal.max_num_batched_tokens =
        std::max(s->limits.max_num_batched_tokens, s->limits.max_model_len);
    ro.proposal.block_size = 16;
    ro.device_options = {{"threads", "1"}};
    ro.weights = &merged.weights;
    Status st;
    auto r = make_session(*reference(), 0, m, ro, &st);
    ASSERT_TRUE(r) << "reference with merged weights: " << describe(st);
    const auto prompts = make_prompts(*s, {5, 11}, 4, 500);
    const std::vector<int32_t> slots{0, 0};
    Rows got, want, base;
    ASSERT_TRUE((st = run_seqs(*s, prompts, &slots, true, 3, &got)).ok())
        << describe(st) << " " CONTRACT_LORA_MERGED;
    ASSERT_TRUE((st = run_seqs(*r, prompts, nullptr, true, 3, &want)).ok()) << describe(st);
    ASSERT_TRUE((st = run_seqs(*s, prompts, nullptr, true, 3, &base)).ok()) << describe(st);
    const double tol = tolerance_for(*s).value;
    bool adapter_matters = false;
    for (size_t i = 0; i < got.size(); ++i)
      for (size_t j = 0; j < got[i].size(); ++j) {
        EXPECT_EQ(compare_rows(got[i][j], want[i][j], tol), "")
            << "sequence " << i << ", row " << j << " (tolerance " << tol
            << ") " CONTRACT_LORA_MERGED;
        adapter_matters |= !compare_rows(base[i][j], want[i][j], tol).empty();
      }
    EXPECT_TRUE(adapter_matters)
        << "the test adapter changes no logits row beyond the tolerance: the "
           "test could not tell an ignored adapter";
  }
}

// (b) One step mixing the base and three adapters (two sequences sharing one)
// gives every sequence bitwise the rows it gets alone in its steps.
TEST_F(LoraTest, LoraMixedStepEqualsAlone) {
  const Model m = lora_model(family("qwen3"));  // q_out != hidden: the projections' shapes differ
  std::optional<Session> s;
  if (!lora_or_skip(m, &s)) GTEST_SKIP() << "the device has no LoRA slots";
  const int R = s->limits.max_lora_rank, S = s->limits.max_loras;
  const Adapter a0(m.cfg, ranks_within({8, 8, 8, 8, 8, 8, 8}, R), 21);
  const Adapter a1(m.cfg, ranks_within({2, 5, 1, 7, 3, 6, 4}, R), 22);
  const Adapter a2(m.cfg, ranks_within({3, 0, 0, 0, 0, 0, 2}, R), 23);  // q and down only
  const Adapter* ads[] = {&a0, &a1, &a2};
  for (int k = 0; k < std::min(S, 3); ++k)
    ASSERT_TRUE(set_slot(*s, k, ads[k]->tensors.named()).ok());
  const std::vector<int32_t> slots{std::min(1, S - 1), -1, 0, std::min(2, S - 1), 0};
  const auto prompts = make_prompts(*s, {6, 3, 9, 4, 7}, 4, 600);
  Rows together, alone, base;
  Status st = run_seqs(*s, prompts, &slots, true, 3, &together);
  ASSERT_TRUE(st.ok()) << describe(st) << " " CONTRACT_LORA_MIXED;
  ASSERT_TRUE((st = run_seqs(*s, prompts, &slots, false, 3, &alone)).ok()) << describe(st);
  EXPECT_EQ(first_difference(together, alone), "")
      << "a mixed step differs from the sequences alone " CONTRACT_LORA_MIXED;
  ASSERT_TRUE((st = run_seqs(*s, prompts, nullptr, false, 3, &base)).ok()) << describe(st);
  for (size_t i = 0; i < slots.size(); ++i) {
    const bool same = first_difference({alone[i]}, {base[i]}).empty();
    EXPECT_EQ(same, slots[i] < 0)
        << "sequence " << i << " (slot " << slots[i]
        << "): an adapter must change its rows, the base must not " CONTRACT_LORA_MIXED;
  }
}

// (c) An emptied slot (num_weights 0) runs the base; a refilled one runs the
// new adapter (exactly as another slot holding it).
TEST_F(LoraTest, LoraSlotEmptiedAndRefilled) {
  const Model m = lora_model(family("llama"));
  std::optional<Session> s;
  if (!lora_or_skip(m, &s)) GTEST_SKIP() << "the device has no LoRA slots";
  const int R = s->limits.max_lora_rank, last = s->limits.max_loras - 1;
  const Adapter x(m.cfg, ranks_within({4, 4, 4, 4, 4, 4, 4}, R), 31);
  const Adapter y(m.cfg, ranks_within({1, 2, 3, 4, 5, 6, 7}, R), 32);
  const auto prompts = make_prompts(*s, {7}, 3, 650);
  auto run = [&](int slot, Rows* out) {
    const std::vector<int32_t> sl{slot};
    return run_seqs(*s, prompts, &sl, false, 2, out);
  };
  Rows rb, rx, ry, r;
  ASSERT_TRUE(run(-1, &rb).ok());
  ASSERT_TRUE(run(last, &r).ok());
  EXPECT_EQ(first_difference(r, rb), "")
      << "a slot never filled must run the base " CONTRACT_LORA_SLOTS;
  ASSERT_TRUE(set_slot(*s, last, x.tensors.named()).ok());
  ASSERT_TRUE(run(last, &rx).ok());
  EXPECT_NE(first_difference(rx, rb), "") << "the adapter changed nothing " CONTRACT_LORA_SLOTS;
  Status st = set_slot(*s, last, {});
  ASSERT_TRUE(st.ok()) << "emptying a slot (num_weights 0): " << describe(st)
                       << " " CONTRACT_LORA_SLOTS;
  ASSERT_TRUE(run(last, &r).ok());
  EXPECT_EQ(first_difference(r, rb), "")
      << "an emptied slot must run the base " CONTRACT_LORA_SLOTS;
  ASSERT_TRUE(set_slot(*s, last, x.tensors.named()).ok());
  ASSERT_TRUE(set_slot(*s, last, y.tensors.named()).ok());  // replaces x
  ASSERT_TRUE(run(last, &ry).ok());
  EXPECT_NE(first_difference(ry, rx), "")
      << "refilling a slot kept the old adapter " CONTRACT_LORA_SLOTS;
  if (last > 0) {
    ASSERT_TRUE(set_slot(*s, 0, y.tensors.named()).ok());
    ASSERT_TRUE(run(0, &r).ok());
    EXPECT_EQ(first_difference(ry, r), "")
        << "a refilled slot must run exactly as a fresh one " CONTRACT_LORA_SLOTS;
  }
  ASSERT_TRUE(set_slot(*s, last, x.tensors.named()).ok());
  ASSERT_TRUE(run(last, &r).ok());
  EXPECT_EQ(first_difference(r, rx), "")
      << "refilling with the first adapter again " CONTRACT_LORA_SLOTS;
}

// (d) Refusals: a slot outside [0, max_loras), a rank above max_lora_rank
// (OUT_OF_RANGE); an unknown projection or layer, a lone A or B, a wrong shape
// or dtype (INVALID_ARGUMENT); a lora_slots entry outside [-1, max_loras)
// (OUT_OF_RANGE). Each leaves the slots and the cache as they were.
TEST_F(LoraTest, LoraRefusals) {
  const Model m = lora_model(family("llama"));
  std::optional<Session> s;
  if (!lora_or_skip(m, &s)) GTEST_SKIP() << "the device has no LoRA slots";
  const int R = s->limits.max_lora_rank, S = s->limits.max_loras;
  const ModelConfig& c = m.cfg;
  const Adapter x(m.cfg, ranks_within({3, 3, 3, 3, 3, 3, 3}, R), 41);
  ASSERT_TRUE(set_slot(*s, 0, x.tensors.named()).ok());
  const auto prompts = make_prompts(*s, {6}, 3, 660);
  auto run = [&](int slot, Rows* out) {
    const std::vector<int32_t> sl{slot};
    return run_seqs(*s, prompts, &sl, false, 2, out);
  };
  Rows rx, rb;
  ASSERT_TRUE(run(0, &rx).ok());
  ASSERT_TRUE(run(-1, &rb).ok());

  const auto RANGE = HALO_STATUS_OUT_OF_RANGE;
  const auto INVALID = HALO_STATUS_INVALID_ARGUMENT;
  // Bad lists carry a valid adapter z besides the fault: a plugin applying
  // part of a refused list would change the slot.
  struct Case {
    std::string what;
    std::function<void(Adapter&)> spoil;
    halo_status_code code;
    std::string hint;
  };
  const std::string q0 = layer_name(0, 0), k0 = layer_name(0, 1), o0 = layer_name(0, 3),
                    up1 = layer_name(c.layers - 1, 5);
  const auto [o_out, o_in] = proj_shape(c, 3);
  const auto [k_out, k_in] = proj_shape(c, 1);
  const std::vector<Case> cases{
      {"rank above max_lora_rank",
       [&](Adapter& z) {
         z.tensors.remove(q0 + HALO_LORA_A_SUFFIX);
         z.tensors.remove(q0 + HALO_LORA_B_SUFFIX);
         const auto [out, in] = proj_shape(c, 0);
         z.tensors.add(q0 + HALO_LORA_A_SUFFIX, {R + 1, in},
                       std::vector<float>(size_t((R + 1) * in), 0.01f));
         z.tensors.add(q0 + HALO_LORA_B_SUFFIX, {out, R + 1},
                       std::vector<float>(size_t(out * (R + 1)), 0.01f));
       },
       RANGE, "rank"},
      {"an unknown projection (lm_head)",
       [&](Adapter& z) {
         z.tensors.add("layers.0.lm_head" HALO_LORA_A_SUFFIX, {1, c.hidden},
                       std::vector<float>(size_t(c.hidden)));
         z.tensors.add("layers.0.lm_head" HALO_LORA_B_SUFFIX, {c.vocab, 1},
                       std::vector<float>(size_t(c.vocab)));
       },
       INVALID, "lm_head"},
      {"a layer beyond num_layers",
       [&](Adapter& z) {
         const std::string n = layer_name(c.layers, 0);
         const auto [out, in] = proj_shape(c, 0);
         z.tensors.add(n + HALO_LORA_A_SUFFIX, {1, in}, std::vector<float>(size_t(in)));
         z.tensors.add(n + HALO_LORA_B_SUFFIX, {out, 1}, std::vector<float>(size_t(out)));
       },
       INVALID, layer_name(c.layers, 0)},
      {"a lone A", [&](Adapter& z) { z.tensors.remove(up1 + HALO_LORA_B_SUFFIX); }, INVALID, up1},
      {"a lone B", [&](Adapter& z) { z.tensors.remove(up1 + HALO_LORA_A_SUFFIX); }, INVALID, up1},
      {"A of the wrong input width",
       [&](Adapter& z) {
         z.tensors.remove(k0 + HALO_LORA_A_SUFFIX);
         const int64_t r = std::min(3, R);
         z.tensors.add(k0 + HALO_LORA_A_SUFFIX, {r, k_in + 1},
                       std::vector<float>(size_t(r * (k_in + 1))));
       },
       INVALID, k0 + HALO_LORA_A_SUFFIX},
      {"B of the wrong output height",
       [&](Adapter& z) {
         z.tensors.remove(o0 + HALO_LORA_B_SUFFIX);
         const int64_t r = std::min(3, R);
         z.tensors.add(o0 + HALO_LORA_B_SUFFIX, {o_out - 1, r},
                       std::vector<float>(size_t((o_out - 1) * r)));
       },
       INVALID, o0 + HALO_LORA_B_SUFFIX},
      {"B whose rank differs from A's",
       [&](Adapter& z) {
         z.tensors.remove(k0 + HALO_LORA_B_SUFFIX);
         const int64_t r = std::min(3, R) + 1;
         z.tensors.add(k0 + HALO_LORA_B_SUFFIX, {k_out, r}, std::vector<float>(size_t(k_out * r)));
       },
       INVALID, k0 + HALO_LORA_B_SUFFIX},
      {"an int32 A",
       [&](Adapter& z) {
         z.tensors.remove(k0 + HALO_LORA_A_SUFFIX);
         const int64_t r = std::min(3, R);
         z.tensors.add(k0 + HALO_LORA_A_SUFFIX, {r, k_in}, std::vector<float>(size_t(r * k_in)),
                       {kDLInt, 32, 1});
       },
       INVALID, k0 + HALO_LORA_A_SUFFIX},
  };
  for (const Case& cs : cases)
    for (int slot : {0, S - 1}) {
      Adapter z(c, ranks_within({2, 3, 2, 3, 2, 3, 2}, R), 42);
      cs.spoil(z);
      const auto w = z.tensors.named();
      expect_error(
          cs.what + " into slot " + std::to_string(slot), [&] { return set_slot(*s, slot, w); },
          {cs.code}, cs.hint, CONTRACT_LORA_REFUSED);
    }
  const Adapter z(c, ranks_within({2, 2, 2, 2, 2, 2, 2}, R), 43);
  const auto zw = z.tensors.named();
  for (int slot : {S, -1, S + 100})
    expect_error(
        "slot " + std::to_string(slot) + " of max_loras=" + std::to_string(S),
        [&] { return set_slot(*s, slot, zw); }, {RANGE}, "slot", CONTRACT_LORA_REFUSED);
  Rows r;
  ASSERT_TRUE(run(0, &r).ok());
  EXPECT_EQ(first_difference(r, rx), "")
      << "a refused lora_slot_set changed slot 0 " CONTRACT_LORA_REFUSED;
  if (S > 1) {
    ASSERT_TRUE(run(S - 1, &r).ok());
    EXPECT_EQ(first_difference(r, rb), "")
        << "a refused lora_slot_set filled the empty slot " << S - 1 << " " CONTRACT_LORA_REFUSED;
  }

  // execute: a lora_slots entry outside [-1, max_loras), between a prefill
  // and a decode; the decode that follows still gives slot 0's rows.
  std::vector<Seq> q(1);
  q[0].tokens = prompts[0];
  const auto fed = random_tokens(2, s->vocab, 700);
  q[0].tokens.insert(q[0].tokens.end(), fed.begin(), fed.end());
  BlockPool pool(s->num_blocks, 0);
  ASSERT_TRUE(pool.reserve(q[0], static_cast<int>(q[0].tokens.size()), s->limits.block_size));
  const std::vector<int32_t> zero{0};
  StepExtras ok;
  ok.lora_slots = &zero;
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(
      run_step(*s, {{&q[0], static_cast<int>(prompts[0].size()), true, false}}, &rows, ok).ok());
  for (int bad : {S, -2}) {
    const std::vector<int32_t> sl{bad};
    expect_error(
        "execute with lora_slots[0]=" + std::to_string(bad),
        [&] {
          StepExtras x;
          x.lora_slots = &sl;
          return run_step(*s, {{&q[0], 1, true, false}}, nullptr, x);
        },
        {RANGE}, "lora_slots", CONTRACT_LORA_REFUSED);
  }
  ASSERT_EQ(q[0].cached, static_cast<int>(prompts[0].size()))
      << "a refused step advanced the sequence";
  ASSERT_TRUE(run_step(*s, {{&q[0], 1, true, false}}, &rows, ok).ok());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0] == rx[0][1])
      << "the decode after refused steps differs from slot 0's rows " CONTRACT_LORA_REFUSED;
}

// A device without HALO_CAP_LORA: 0 slots agreed, no lora_slot_set, a step
// asking for a slot refused (UNIMPLEMENTED), lora_slots all -1 runs the base.
TEST_F(LoraTest, LoraWithoutCapability) {
  if (claims(HALO_CAP_LORA))
    GTEST_SKIP() << "the device claims HALO_CAP_LORA (the other Lora tests check it)";
  const Model m = lora_model(family("llama"));
  Status st;
  auto s = lora_session(m, &st);
  ASSERT_TRUE(s) << describe(st);
  const bool v16 = api()->abi_minor >= 6;
  if (v16) {
    EXPECT_EQ(s->limits.max_loras, 0)
        << "4 slots proposed to a device without HALO_CAP_LORA " CONTRACT_LORA_NONE;
    EXPECT_FALSE(has_lora_entry(api()))
        << "lora_slot_set is set without HALO_CAP_LORA " CONTRACT_LORA_NONE;
  }
  const auto prompts = make_prompts(*s, {6}, 2, 670);
  const std::vector<int32_t> base{-1};
  Rows with, without;
  ASSERT_TRUE((st = run_seqs(*s, prompts, &base, false, 1, &with)).ok())
      << "lora_slots all -1: " << describe(st) << " " CONTRACT_LORA_NONE;
  ASSERT_TRUE((st = run_seqs(*s, prompts, nullptr, false, 1, &without)).ok()) << describe(st);
  EXPECT_EQ(first_difference(with, without), "")
      << "lora_slots all -1 must run the base " CONTRACT_LORA_NONE;
  if (!v16)
    GTEST_SKIP() << "the plugin speaks ABI v1." << api()->abi_minor << ": it never sees lora_slots";
  std::vector<Seq> q(1);
  q[0].tokens = prompts[0];
  BlockPool pool(s->num_blocks, 0);
  ASSERT_TRUE(pool.reserve(q[0], static_cast<int>(q[0].tokens.size()), s->limits.block_size));
  const std::vector<int32_t> zero{0};
  expect_error(
      "execute with lora_slots[0]=0 on a device without HALO_CAP_LORA",
      [&] {
        StepExtras x;
        x.lora_slots = &zero;
        return run_step(*s, {{&q[0], static_cast<int>(prompts[0].size()), true, false}}, nullptr,
                        x);
      },
      {HALO_STATUS_UNIMPLEMENTED}, "lora_slots", CONTRACT_LORA_NONE);
}

// A v1.5 caller's halo_limits ends before max_loras' pair (on LP64 its
// struct_size, 64, reaches into max_loras, which lies in its tail padding):
// prepare must not write past it, and the plugin runs without slots.
TEST_F(LoraTest, LoraOlderCallerLimits) {
  SessionOptions o;
  o.proposal.block_size = 4;
  o.limits_size =
      (HALO_STRUCT_SIZE(halo_limits, num_speculative_tokens) + 7) / 8 * 8;  // sizeof, v1.5
  Status st;
  auto s = make_session(plugin(), settings().device, tiny_model(), o, &st);
  ASSERT_TRUE(s) << "a v1.5 caller's limits: " << describe(st) << " " CONTRACT_VERSION;
  Rows r;
  ASSERT_TRUE((st = run_seqs(*s, make_prompts(*s, {4}, 2, 680), nullptr, false, 1, &r)).ok())
      << describe(st);
}

}  // namespace conf
