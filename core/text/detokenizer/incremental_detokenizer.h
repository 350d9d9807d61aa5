#pragma once
// Streaming detokenization: feed generated ids one at a time, get text deltas.
//
// Guarantees (for the decoders halo's Tokenizer supports):
//  * without a prompt, the concatenation of all deltas (including finish())
//    equals tokenizer.decode(all generated ids, skip_special_tokens);
//  * with a prompt context (as vLLM does, so the SentencePiece leading-space
//    rule applies mid-sequence), it equals the part of
//    decode(prompt + generated) after its common prefix with decode(prompt)
//    (at a character boundary): the prompt's own text is never emitted, even
//    a tail the prompt left undecided;
//  * every delta is valid UTF-8: text that later ids could still change (an
//    unfinished byte-fallback group, an incomplete UTF-8 sequence, text that
//    clean_up_tokenization could still alter) is held back until decided;
//  * work per id is proportional to the few ids since the last safe point.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace halo::text {

struct DetokenizerOptions {
  bool skip_special_tokens = true;
  // vLLM's slow-tokenizer behaviour: a space between an added token and the
  // text around it. Hugging Face (fast) tokenizers and vLLM with them ignore
  // it, so it is off by default. When on, the concatenation of the deltas is
  // the texts of the runs between added tokens and the added tokens
  // themselves, joined with single spaces.
  bool spaces_between_special_tokens = false;
};


class IncrementalDetokenizer {
 public:
  using Options = DetokenizerOptions;

  explicit IncrementalDetokenizer(Tokenizer tokenizer, Options options = {},
                                  std::span<const int32_t> prompt_ids = {});

  // Feeds one generated id; returns the text that became final.
  std::string add(int32_t id);
  std::string add(std::span<const int32_t> ids);
  // No more ids: returns whatever was held back.
  std::string finish();

  const std::string& text() const { return text_; }  // all text returned so far
  std::size_t num_generated() const { return generated_; }

 private:
  std::string step(bool final);
  std::string add_added_token(int32_t id);

  Tokenizer tok_;
  Options opt_;
  std::vector<int32_t> seg_;     // ids since the last safe point
  std::size_t seg_emitted_ = 0;  // bytes of the segment's text already returned
  bool start_consumed_ = false;  // start-of-text decoder rules already applied
  bool pending_space_ = false;   // spaces_between_special_tokens: space owed before the next text
  std::string prompt_tail_;      // text of the prompt ids still in the segment
  bool prompt_pending_ = false;  // nothing generated has been emitted yet
  std::string text_;
  std::size_t generated_ = 0;
};

}  // namespace halo::text
