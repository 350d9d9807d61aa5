#pragma once
// Prefix-cache block hashes: the hash chain that names a full KV block by its
// tokens and everything before them. The scheme is the one llm-d's KV-cache
// indexer (the Gateway API Inference Extension's precise prefix scorer)
// computes from a request's tokens, so the hashes halo publishes as KV events
// (BlockStored / BlockRemoved) are the keys the router looks up:
//
//   root  = FNV-64a(CBOR([FNV-64a(seed), null, model_name]))
//   block = FNV-64a(CBOR([parent, [token ids...], null]))
//
// with CBOR in canonical (shortest) form, the parent of the first block the
// root, `seed` the deployment-wide hash seed (llm-d's hashSeed, vLLM's
// PYTHONHASHSEED; "" by default) and `model_name` the served model name.
// docs/kv-events.md has the details. Pure functions; no state.
#include <cstdint>
#include <span>
#include <string_view>

namespace halo::engine {

uint64_t block_hash_root(std::string_view seed, std::string_view model_name);
uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens);

}  // namespace halo::engine
