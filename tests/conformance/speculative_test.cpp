// ABI v1.5, speculative decoding: the verify limit a device agrees to, verify
// steps (1 + k query tokens of a decoding sequence) equal decoding token by
// token, and hidden states are the rows lm_head takes.
#include <algorithm>
#include <cmath>

#include "suite.h"

namespace conf {
namespace {

constexpr int kProposed = 3;  // proposed tokens per sequence

// What the device agreed to verify, with the core's rule for a plugin older
// than v1.5 (core/device/plugin.cpp): any count with mixed batches, else none.
int agreed_spec_tokens(const Session& s, int proposed) {
  if (s.lib->api->abi_minor < 5) return (s.limits.capabilities & HALO_CAP_MIXED_BATCH) ? proposed : 0;
  return s.limits.num_speculative_tokens;
}

std::optional<Session> spec_session(const Model& m, int proposed, Status* st) {
  SessionOptions o;
  o.proposal.block_size = 4;  // sequences span blocks (a fixed-shape device keeps its own)
  o.proposal.num_speculative_tokens = proposed;
  return make_session(plugin(), settings().device, m, o, st);
}

Model family_model(const ModelConfig& family_cfg) {
  ModelConfig c = family_cfg;
  c.dtype = preferred_dtype();
  return Model(c);
}

// Prefills each sequence in a step of its own (every device runs that).
Status prefill(Session& s, std::vector<Seq>& seqs, BlockPool& pool) {
  for (Seq& q : seqs) {
    if (!pool.reserve(q, static_cast<int>(q.tokens.size()), s.limits.block_size))
      return {HALO_STATUS_OUT_OF_MEMORY, "the test's block pool is too small"};
    Status st = run_step(s, {{&q, static_cast<int>(q.tokens.size()), true, false}}, nullptr);
    if (!st.ok()) return st;
  }
  return {};
}

}  // namespace

TEST_F(Conformance, SpeculativeLimitNegotiation) {
  for (int proposed : {0, 1, kProposed}) {
    SCOPED_TRACE("proposed num_speculative_tokens " + std::to_string(proposed));
    Status st;
    auto s = spec_session(tiny_model(), proposed, &st);
    ASSERT_TRUE(s) << describe(st) << " " CONTRACT_SPEC_LIMIT;
    const int agreed = agreed_spec_tokens(*s, proposed);
    EXPECT_GE(agreed, 0) << CONTRACT_SPEC_LIMIT;
    if (!claims(HALO_CAP_STATIC_SHAPES)) {
      EXPECT_EQ(agreed, proposed) << "a dynamic-shape device verifies what the core proposes " CONTRACT_SPEC_LIMIT;
    }
  }
}

// One decode step in which sequences verify 1 + k tokens (k = agreed, 0 and
// in between, side by side) gives, row for row, the logits that feeding the
// same tokens one step at a time gives: what greedy speculation's exactness
// rests on.
TEST_F(Conformance, SpeculativeVerifyEqualsDecodeSteps) {
  for (const ModelConfig& fc : model_families()) {
    if (!tp_cannot_split(fc).empty()) continue;  // refused at compile time, rightly (Golden says so)
    SCOPED_TRACE("family " + fc.family);
    const Model m = family_model(fc);
    Status st;
    auto s = spec_session(m, kProposed, &st);
    ASSERT_TRUE(s) << describe(st) << " " CONTRACT_VERIFY;
    const int k = std::min(kProposed, agreed_spec_tokens(*s, kProposed));
    if (k == 0) GTEST_SKIP() << "the device verifies no proposed tokens (answered num_speculative_tokens=0)";
    const double tol = tolerance_for(*s).value;
    const std::vector<int> lengths{5, 9, 2}, ks{k, 0, std::max(1, k - 1)};
    auto prompts = make_prompts(*s, lengths, k + 2, 900);
    // The same sequences twice: one set verifies, the other decodes.
    std::vector<Seq> verify(prompts.size()), decode(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) verify[i].tokens = decode[i].tokens = prompts[i];
    BlockPool pool(s->num_blocks, 0);
    ASSERT_TRUE(prefill(*s, verify, pool).ok());
    ASSERT_TRUE(prefill(*s, decode, pool).ok());
    std::vector<Chunk> step;
    for (size_t i = 0; i < verify.size(); ++i) {
      const auto fed = random_tokens(1 + ks[i], s->vocab, 910 + static_cast<uint32_t>(i));
      for (Seq* q : {&verify[i], &decode[i]}) {
        q->tokens.insert(q->tokens.end(), fed.begin(), fed.end());
        ASSERT_TRUE(pool.reserve(*q, static_cast<int>(q->tokens.size()), s->limits.block_size));
      }
      step.push_back({&verify[i], 1 + ks[i], true, true});
    }
    std::vector<std::vector<float>> verified;
    st = run_step(*s, step, &verified);
    ASSERT_TRUE(st.ok()) << "a verify step within the agreed num_speculative_tokens=" << k << ": " << describe(st)
                         << " " CONTRACT_VERIFY;
    std::vector<std::vector<std::vector<float>>> decoded(decode.size());
    for (int j = 0; j <= k; ++j) {
      std::vector<Chunk> one;
      std::vector<size_t> who;
      for (size_t i = 0; i < decode.size(); ++i)
        if (j <= ks[i]) one.push_back({&decode[i], 1, true, false}), who.push_back(i);
      std::vector<std::vector<float>> rows;
      st = run_step(*s, one, &rows);
      ASSERT_TRUE(st.ok()) << describe(st);
      for (size_t r = 0; r < who.size(); ++r) decoded[who[r]].push_back(rows[r]);
    }
    size_t row = 0;
    for (size_t i = 0; i < verify.size(); ++i)
      for (int j = 0; j <= ks[i]; ++j, ++row)
        EXPECT_EQ(compare_rows(verified.at(row), decoded[i].at(static_cast<size_t>(j)), tol), "")
            << "sequence " << i << " (" << ks[i] << " proposed), verify row " << j << " " CONTRACT_VERIFY;
  }
}

// With HALO_CAP_HIDDEN_STATES, hidden_states holds the rows lm_head takes:
// hidden x lm_head^T = logits. Without it the buffer is left alone.
TEST_F(Conformance, SpeculativeHiddenStatesFeedLmHead) {
  for (const ModelConfig& fc : model_families()) {
    if (!tp_cannot_split(fc).empty()) continue;  // refused at compile time, rightly (Golden says so)
    SCOPED_TRACE("family " + fc.family);
    const Model m = family_model(fc);
    Status st;
    auto s = spec_session(m, 0, &st);
    ASSERT_TRUE(s) << describe(st);
    std::vector<Seq> q(1);
    q[0].tokens = make_prompts(*s, {7}, 1, 950)[0];
    BlockPool pool(s->num_blocks, 0);
    ASSERT_TRUE(pool.reserve(q[0], 7, s->limits.block_size));
    std::vector<std::vector<float>> logits, hidden;
    StepExtras x;
    x.hidden_size = m.cfg.hidden;
    x.hidden = &hidden;
    // Every prompt row, asked in reverse, where the device takes all-row
    // prefills (LimitsLogitsRowsAsRequested); else the last row.
    const bool all = s->limits.capabilities & HALO_CAP_MIXED_BATCH;
    if (all) x.logits_order = {6, 5, 4, 3, 2, 1, 0};
    st = run_step(*s, {{&q[0], 7, true, all}}, &logits, x);
    ASSERT_TRUE(st.ok()) << describe(st) << " " CONTRACT_HIDDEN;
    ASSERT_EQ(hidden.size(), logits.size());
    const bool has = s->lib->api->abi_minor >= 5 && (s->device_caps & HALO_CAP_HIDDEN_STATES);
    if (!has) {
      for (const auto& h : hidden)
        for (float v : h) ASSERT_TRUE(std::isnan(v)) << "a device without HALO_CAP_HIDDEN_STATES wrote hidden_states " CONTRACT_HIDDEN;
      GTEST_SKIP() << "the device does not claim HALO_CAP_HIDDEN_STATES (checked: it leaves the buffer alone)";
    }
    std::vector<float> head = m.weight_f32(HALO_WEIGHT_LM_HEAD);
    if (head.empty()) head = m.weight_f32(HALO_WEIGHT_EMBED_TOKENS);  // tied
    const auto H = static_cast<size_t>(m.cfg.hidden);
    ASSERT_EQ(head.size(), static_cast<size_t>(m.cfg.vocab) * H);
    for (size_t r = 0; r < hidden.size(); ++r) {
      std::vector<float> want(static_cast<size_t>(m.cfg.vocab));
      for (size_t v = 0; v < want.size(); ++v) {
        double acc = 0;
        for (size_t i = 0; i < H; ++i) acc += double(hidden[r][i]) * double(head[v * H + i]);
        want[v] = static_cast<float>(acc);
      }
      EXPECT_EQ(compare_rows(logits[r], want, tolerance_for(*s).value), "")
          << "row " << r << ": hidden_states x lm_head^T differs from the logits " CONTRACT_HIDDEN;
    }
  }
}

}  // namespace conf
