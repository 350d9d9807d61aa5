// Guided decoding's constraints, as a request sends them: the input is a
// regex (guided_regex), or, when it parses as JSON, a JSON schema
// (guided_json) compiled to one. Both are compiled to a ByteDfa (small state
// and work budgets, so each run stays fast), which then matches the input
// itself, never longer than its longest text; every reachable state must be
// live (but the start state of an empty language).
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "text/guided/json_schema_regex.h"
#include "text/guided/regex_dfa.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  using halo::text::guided::ByteDfa;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string pattern(in);
  halo::fuzz::guarded([&] {
    auto schema = nlohmann::ordered_json::parse(in, nullptr, false);
    if (!schema.is_discarded()) pattern = halo::text::guided::json_schema_to_regex(schema);
  });
  halo::fuzz::guarded([&] {
    const ByteDfa dfa = ByteDfa::compile(pattern, 2000, 2'000'000);
    // The longest text bounds every text that matches (min_tokens is refused by it).
    const auto most = dfa.max_text_bytes();
    if (dfa.matches(in) && most && in.size() > *most) __builtin_trap();
    // An empty language ("[]") is the one DFA whose (start) state is dead.
    if (dfa.num_states() == 1 && !dfa.accepting(dfa.start())) return;
    for (size_t s = 0; s < dfa.num_states(); ++s) {
      bool live = dfa.accepting(static_cast<int32_t>(s));
      for (int b = 0; b < 256 && !live; ++b)
        live = dfa.next(static_cast<int32_t>(s), static_cast<uint8_t>(b)) != ByteDfa::kDead;
      if (!live) __builtin_trap();  // a dead state would leave guided decoding without a token
    }
  });
  return 0;
}
