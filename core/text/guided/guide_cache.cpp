#include "text/guided/guide_cache.h"

#include <fmt/format.h>

#include "common/error.h"
#include "text/guided/matchers.h"

namespace halo::text::guided {

namespace {

std::unique_ptr<ByteMatcher> compile(ConstraintKind kind, const std::string& text) {
  if (kind == ConstraintKind::kGrammar)
    return make_grammar_matcher(std::make_shared<const Grammar>(Grammar::compile(text)));
  return make_regex_matcher(std::make_shared<const ByteDfa>(ByteDfa::compile(text)));
}

// Whether any text at all completes the constraint (every state a matcher
// reaches is live, so one live first byte or an accepting start is enough).
bool matches_something(ByteMatcher& m) {
  const int32_t s = m.start();
  if (m.accepting(s)) return true;
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (m.advance(s, std::string_view(&c, 1)) != ByteMatcher::kDead) return true;
  }
  return false;
}

}  // namespace

std::shared_ptr<const Guide> GuideCache::get(ConstraintKind kind, const std::string& text,
                                             const std::string& what) {
  std::lock_guard lk(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->kind != kind || it->text != text) continue;
    Entry hit = std::move(*it);
    entries_.erase(it);
    if (hit.guide->worn_out()) break;  // compiled afresh below
    entries_.push_back(std::move(hit));
    return entries_.back().guide;
  }
  std::unique_ptr<ByteMatcher> m;
  try {
    m = compile(kind, text);
  } catch (const Error& e) {
    throw FieldError(what, fmt::format("{}: {}", what, e.what()));
  }
  if (!matches_something(*m))
    throw FieldError(what, fmt::format("{}: the constraint matches no text at all", what));
  if (!vocab_) vocab_ = std::make_shared<const TokenVocab>(tokenizer_);
  auto g = std::make_shared<const Guide>(std::move(m), vocab_, what);
  if (entries_.size() >= capacity_) entries_.erase(entries_.begin());
  entries_.push_back({kind, text, g});
  return g;
}

}  // namespace halo::text::guided
