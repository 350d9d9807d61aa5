#include "engine/spec_decode/proposer.h"

#include <algorithm>

#include "engine/spec_decode/ngram_proposer.h"

namespace halo::engine::spec {

namespace {

class NgramLookup : public Proposer {
 public:
  NgramLookup(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {}
  void propose(std::span<const ProposeRequest> batch) override {
    for (const auto& r : batch)
      propose_ngram(r.seq->prompt_ids, r.seq->output_ids, min_n_, max_n_, r.max_k, r.seq->spec_ids);
  }

 private:
  int min_n_, max_n_;
};

}  // namespace

std::unique_ptr<Proposer> make_ngram_proposer(int prompt_lookup_min, int prompt_lookup_max) {
  return std::make_unique<NgramLookup>(prompt_lookup_min, prompt_lookup_max);
}

void ReplayProposer::propose(std::span<const ProposeRequest> batch) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int32_t> other(1, vocab_ - 1);
  for (const auto& r : batch) {
    auto it = scripts_.find(r.seq->request_id);
    if (it == scripts_.end()) continue;
    const auto& script = it->second;
    const auto& out = r.seq->output_ids;
    if (out.size() > script.size() || !std::equal(out.begin(), out.end(), script.begin())) continue;
    for (size_t i = out.size(); i < script.size() && r.seq->spec_ids.size() < size_t(r.max_k);
         ++i) {
      const int32_t t = script[i];
      r.seq->spec_ids.push_back(u(rng_) < corrupt_ ? (t + other(rng_)) % vocab_ : t);
    }
  }
}

}  // namespace halo::engine::spec
