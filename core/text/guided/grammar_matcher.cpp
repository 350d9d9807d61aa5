// A Grammar as a ByteMatcher: a pushdown automaton over bytes.
//
// A parse stack is a chain of frames (alternative, element index, parent
// frame), interned so equal stacks share one id; the top frame always waits
// on a byte set. A configuration is the sorted set of stack tops that are
// alive (kAccept among them when the whole root may have ended), numbered the
// first time it is met, with its transitions memoized: the grammar behaves as
// a DFA built lazily over the configurations text actually reaches.
// Right recursion is a tail call (a reference as an alternative's last
// element pushes no frame), so `x*` keeps one configuration however long.
//
// Sequences' states live in one table that keeps every configuration; the
// walks that compute token masks use a scratch table emptied per walk, since
// they visit many prefixes no sequence will ever be in.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"
#include "text/guided/matchers.h"

namespace halo::text::guided {

namespace {

constexpr int32_t kAccept = -2;  // in a configuration: the root has ended
// A configuration larger than this is taken as dead (at the start: refused).
// A list of 11,000 words is one grammar people write (10,000 refused it).
constexpr size_t kMaxStacks = 100'000;

struct VecHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct FrameKey {
  int32_t alt, idx, parent;
  bool operator==(const FrameKey&) const = default;
};
struct FrameHash {
  size_t operator()(const FrameKey& k) const {
    return std::hash<uint64_t>()((static_cast<uint64_t>(static_cast<uint32_t>(k.alt)) << 32) ^
                                 (static_cast<uint64_t>(static_cast<uint32_t>(k.idx)) << 20) ^
                                 static_cast<uint32_t>(k.parent));
  }
};

// Numbered configurations with memoized transitions.
class Configs {
 public:
  int32_t intern(const std::vector<int32_t>& set) {
    auto [it, fresh] = ids_.try_emplace(set, static_cast<int32_t>(sets_.size()));
    if (fresh) {
      sets_.push_back(&it->first);
      bytes_ += set.size() * sizeof(int32_t) + 64;
    }
    return it->second;
  }
  const std::vector<int32_t>& set(int32_t id) const { return *sets_[static_cast<size_t>(id)]; }
  bool accepting(int32_t id) const {
    const auto& s = set(id);
    return !s.empty() && s.front() == kAccept;  // sorted: kAccept comes first
  }
  // The memo slot of (id, byte), inserted as `missing` when new.
  int32_t& memo(int32_t id, uint8_t byte, bool& missing) {
    auto [it, fresh] = memo_.try_emplace((static_cast<uint64_t>(id) << 8) | byte, 0);
    missing = fresh;
    if (fresh) bytes_ += 32;
    return it->second;
  }
  void clear() {
    ids_.clear();
    sets_.clear();
    memo_.clear();
    bytes_ = 0;
  }
  size_t bytes() const { return bytes_; }

 private:
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids_;
  std::vector<const std::vector<int32_t>*> sets_;  // keys of ids_ (node-stable)
  std::unordered_map<uint64_t, int32_t> memo_;
  size_t bytes_ = 0;
};

class GrammarMatcher final : public ByteMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
    visited_.clear();
    std::vector<int32_t> tops;
    for (int32_t a : g_->alts_of(g_->root())) expand({a, 0, -1}, tops);
    normalize(tops);
    if (tops.empty())
      throw Error(
          fmt::format("grammar: more than {} alternatives are open at its start", kMaxStacks));
    start_ = states_.intern(tops);
  }

  int32_t start() override { return start_; }
  bool accepting(int32_t state) override { return states_.accepting(state); }

  int32_t advance(int32_t state, std::string_view bytes) override {
    for (unsigned char c : bytes) {
      state = next(states_, state, c);
      if (state == kDead) break;
    }
    return state;
  }

  void fill_mask(int32_t state, const TokenVocab& vocab, std::vector<uint64_t>& mask) override {
    scratch_.clear();
    const int32_t s0 = scratch_.intern(states_.set(state));
    walk_trie(
        vocab, s0, [this](int32_t s, uint8_t b) { return next(scratch_, s, b); }, mask);
  }

  size_t table_bytes() const override { return states_.bytes() + frames_.size() * 48; }
  std::optional<size_t> max_text_bytes() const override { return g_->max_text_bytes(); }

 private:
  std::shared_ptr<const Grammar> g_;
  std::vector<FrameKey> frames_;
  std::unordered_map<FrameKey, int32_t, FrameHash> frame_ids_;
  Configs states_, scratch_;
  int32_t start_ = 0;
  // Scratch of one step.
  std::unordered_set<FrameKey, FrameHash> visited_;
  std::vector<FrameKey> work_;
  std::vector<int32_t> tops_;

  int32_t frame(const FrameKey& k) {
    auto [it, fresh] = frame_ids_.try_emplace(k, static_cast<int32_t>(frames_.size()));
    if (fresh) frames_.push_back(k);
    return it->second;
  }

  // Adds the stack tops reached from position f without reading a byte:
  // completed alternatives return to their parent, references descend into
  // every alternative of their rule, byte sets stop.
  void expand(FrameKey f0, std::vector<int32_t>& out) {
    work_.push_back(f0);
    while (!work_.empty()) {
      FrameKey f = work_.back();
      work_.pop_back();
      for (;;) {
        const auto& elems = g_->alt(f.alt);
        if (f.idx == static_cast<int32_t>(elems.size())) {
          if (f.parent < 0) {
            out.push_back(kAccept);
            break;
          }
          f = frames_[static_cast<size_t>(f.parent)];  // resume where the rule was referenced
          continue;
        }
        const Grammar::Elem e = elems[static_cast<size_t>(f.idx)];
        if (!Grammar::is_rule(e)) {
          out.push_back(frame(f));
          break;
        }
        if (!visited_.insert(f).second) break;
        const bool tail = f.idx + 1 == static_cast<int32_t>(elems.size());
        const int32_t cont = tail ? f.parent : frame({f.alt, f.idx + 1, f.parent});
        for (int32_t a : g_->alts_of(Grammar::rule_of(e))) work_.push_back({a, 0, cont});
        break;
      }
    }
  }

  static void normalize(std::vector<int32_t>& tops) {
    std::sort(tops.begin(), tops.end());
    tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
    if (tops.size() > kMaxStacks) tops.clear();
  }

  int32_t next(Configs& c, int32_t state, uint8_t byte) {
    bool missing = false;
    int32_t& slot = c.memo(state, byte, missing);
    if (!missing) return slot;
    visited_.clear();
    tops_.clear();
    for (int32_t id : c.set(state)) {
      if (id == kAccept) continue;
      const FrameKey f = frames_[static_cast<size_t>(id)];
      if (g_->term(g_->alt(f.alt)[static_cast<size_t>(f.idx)])[byte])
        expand({f.alt, f.idx + 1, f.parent}, tops_);
    }
    normalize(tops_);
    const int32_t to = tops_.empty() ? kDead : c.intern(tops_);
    // `slot` is still valid: unordered_map nodes do not move, and intern() uses another map.
    slot = to;
    return to;
  }
};

}  // namespace

std::unique_ptr<ByteMatcher> make_grammar_matcher(std::shared_ptr<const Grammar> grammar) {
  return std::make_unique<GrammarMatcher>(std::move(grammar));
}

}  // namespace halo::text::guided
