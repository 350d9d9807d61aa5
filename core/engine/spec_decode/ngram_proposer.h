#pragma once
// Prompt lookup decoding (vLLM's "ngram" method): the draft tokens are what followed an earlier
// occurrence of the sequence's last n tokens. Matches vLLM v1's
// _find_longest_matched_ngram_and_propose_tokens (vllm/v1/spec_decode/ngram_proposer.py):
//   - the sequence is prompt followed by output, searched as one;
//   - the longest n in [min_n, max_n] with an earlier occurrence wins;
//   - among occurrences of that n-gram, the earliest (lowest start) wins;
//   - an occurrence must be followed by at least one token, so the suffix never matches itself,
//     but an occurrence may overlap it (1 1 1 1 with n = 3 matches at 0 and proposes 1);
//   - fewer than max_k tokens after the occurrence: those are proposed;
//   - a sequence shorter than min_n, or max_k <= 0, proposes nothing.
// vLLM also caps k at max_model_len - len; here the caller passes max_k already so capped.
// Cost O(len * max_n) compares, no allocation once `out` has max_k capacity.
//
// Threads: a pure function; concurrent calls are safe with distinct `out` vectors.
#include <cstdint>
#include <span>
#include <vector>

namespace halo::engine::spec {

// Prompt lookup decoding (vLLM's "ngram"): finds the last n tokens (n from max_n down to min_n)
// earlier in prompt+output and proposes up to max_k tokens that followed that earlier
// occurrence. Clears `out`, appends the proposal and returns its length (0 = no match).
// Throws halo::Error unless 1 <= min_n <= max_n.
int propose_ngram(std::span<const int32_t> prompt, std::span<const int32_t> output, int min_n,
                  int max_n, int max_k, std::vector<int32_t>& out);

}  // namespace halo::engine::spec
