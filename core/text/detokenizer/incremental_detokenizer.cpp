#include "text/detokenizer/incremental_detokenizer.h"

#include <algorithm>

namespace halo::text {

namespace {
// Length of the common prefix of a and b, moved back to a UTF-8 character start.
std::size_t common_prefix(const std::string& a, const std::string& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  while (n > 0 && n < a.size() && (static_cast<unsigned char>(a[n]) & 0xC0) == 0x80) --n;
  return n;
}
}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(Tokenizer tokenizer, Options options,
                                               std::span<const int32_t> prompt_ids)
    : tok_(std::move(tokenizer)), opt_(options) {
  if (prompt_ids.empty()) return;
  const bool skip = opt_.skip_special_tokens;
  // Start the first segment at a safe point near the end of the prompt, so the
  // prompt is not decoded again for every generated id.
  const std::size_t n = prompt_ids.size();
  const std::size_t lowest = n > 8 ? n - 8 : 1;
  for (std::size_t k = n; k >= lowest; --k) {
    const auto head = prompt_ids.first(k);
    const std::string stable = tok_.decode(head, skip, {.at_sequence_start = true, .stable_only = true});
    if (stable.empty()) break;
    if (stable == tok_.decode(head, skip, {.at_sequence_start = true, .stable_only = false})) {
      start_consumed_ = true;
      seg_.assign(prompt_ids.begin() + static_cast<std::ptrdiff_t>(k), prompt_ids.end());
      break;
    }
  }
  if (seg_.empty()) seg_.assign(prompt_ids.begin(), prompt_ids.end());
  // The prompt's own text, held back or not, is never emitted: generated text
  // starts where the prompt's full decode ends.
  prompt_tail_ = tok_.decode(seg_, skip, {.at_sequence_start = !start_consumed_, .stable_only = false});
  seg_emitted_ = prompt_tail_.size();
  prompt_pending_ = true;
}

std::string IncrementalDetokenizer::step(bool final) {
  const bool skip = opt_.skip_special_tokens;
  const Tokenizer::DecodeControl stable_ctl{.at_sequence_start = !start_consumed_, .stable_only = true};
  const Tokenizer::DecodeControl full_ctl{.at_sequence_start = !start_consumed_, .stable_only = false};
  std::string out = tok_.decode(seg_, skip, final ? full_ctl : stable_ctl);
  std::string delta;
  if (prompt_pending_) {
    // Generated ids may complete a character the prompt left unfinished, so
    // the text can diverge from the prompt's inside its tail.
    const std::size_t base = common_prefix(out, prompt_tail_);
    if (out.size() > base) {
      delta = out.substr(base);
      seg_emitted_ = out.size();
      prompt_pending_ = false;
    }
  } else if (out.size() > seg_emitted_) {
    delta = out.substr(seg_emitted_);
    seg_emitted_ = out.size();
  }
  const bool closable = final || out == tok_.decode(seg_, skip, full_ctl);
  if (closable && (start_consumed_ || !out.empty()) && !prompt_pending_) {
    start_consumed_ = start_consumed_ || !out.empty();
    seg_.clear();
    seg_emitted_ = 0;
  }
  if (!delta.empty() && pending_space_) {
    delta = " " + delta;
    pending_space_ = false;
  }
  return delta;
}

std::string IncrementalDetokenizer::add_added_token(int32_t id) {
  // vLLM's slow path: the run before the token is decoded on its own, then
  // the token, joined with spaces.
  std::string delta = step(true);
  seg_.clear();
  seg_emitted_ = 0;
  start_consumed_ = false;
  if (!text_.empty() || !delta.empty()) delta += ' ';
  pending_space_ = false;
  delta += tok_.id_to_token(id);
  pending_space_ = true;
  return delta;
}

std::string IncrementalDetokenizer::add(int32_t id) {
  ++generated_;
  std::string delta;
  if (opt_.spaces_between_special_tokens && id >= 0 && id < tok_.vocab_size() && tok_.is_added_token(id)) {
    if (!(opt_.skip_special_tokens && tok_.is_special(id))) delta = add_added_token(id);
  } else {
    seg_.push_back(id);
    delta = step(false);
  }
  text_ += delta;
  return delta;
}

std::string IncrementalDetokenizer::add(std::span<const int32_t> ids) {
  std::string out;
  for (const int32_t id : ids) out += add(id);
  return out;
}

std::string IncrementalDetokenizer::finish() {
  std::string delta = step(true);
  seg_.clear();
  seg_emitted_ = 0;
  text_ += delta;
  return delta;
}

}  // namespace halo::text
