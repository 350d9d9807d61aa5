// A regex DFA as a ByteMatcher: the DFA is complete and immutable, so nothing
// grows and every state's next byte is one table read.
#include "text/guided/matchers.h"

namespace halo::text::guided {

namespace {

class DfaMatcher final : public ByteMatcher {
 public:
  explicit DfaMatcher(std::shared_ptr<const ByteDfa> dfa) : dfa_(std::move(dfa)) {}

  int32_t start() override { return dfa_->start(); }
  bool accepting(int32_t state) override { return dfa_->accepting(state); }

  int32_t advance(int32_t state, std::string_view bytes) override {
    for (unsigned char c : bytes) {
      state = dfa_->next(state, c);
      if (state == ByteDfa::kDead) break;
    }
    return state;
  }

  void fill_mask(int32_t state, const TokenVocab& vocab, std::vector<uint64_t>& mask) override {
    const ByteDfa& d = *dfa_;
    walk_trie(
        vocab, state, [&d](int32_t s, uint8_t b) { return d.next(s, b); }, mask);
  }

  std::optional<size_t> max_text_bytes() const override { return dfa_->max_text_bytes(); }

 private:
  std::shared_ptr<const ByteDfa> dfa_;
};

}  // namespace

std::unique_ptr<ByteMatcher> make_regex_matcher(std::shared_ptr<const ByteDfa> dfa) {
  return std::make_unique<DfaMatcher>(std::move(dfa));
}

}  // namespace halo::text::guided
