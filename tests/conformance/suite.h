// Shared pieces of the conformance tests.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "harness.h"

namespace conf {

// Contracts named in failure messages (docs/plugin-guide.md lists them).
#define CONTRACT_EXPORTS "[contract: exports and the function table]"
#define CONTRACT_VERSION "[contract: ABI version negotiation and struct_size]"
#define CONTRACT_ERRORS "[contract: null and out-of-range arguments return an error object]"
#define CONTRACT_NO_EXCEPTION "[contract: no C++ exception crosses the ABI]"
#define CONTRACT_PROPERTIES "[contract: device properties]"
#define CONTRACT_BUFFERS "[contract: buffer round trips]"
#define CONTRACT_LOGITS "[contract: logits match the reference plugin]"
#define CONTRACT_GREEDY "[contract: greedy ids match the reference plugin]"
#define CONTRACT_BLOCK_TABLES "[contract: paging - K/V are read only through block_tables]"
#define CONTRACT_CHUNKED "[contract: paging - chunked prefill equals whole prefill]"
#define CONTRACT_MIXED "[contract: paging - a mixed batch equals separate steps]"
#define CONTRACT_COPY "[contract: paging - kv_cache_copy_blocks equals recompute]"
#define CONTRACT_STALE "[contract: paging - reused blocks carry no stale state]"
#define CONTRACT_LIMITS "[contract: limits - agreed limits are honoured and steps beyond them refused]"
#define CONTRACT_COMPUTE "[contract: limits - prepare reports its compute dtype (v1.3)]"
#define CONTRACT_FACTS "[contract: device properties - declared KV and compute dtypes hold at prepare (v1.3)]"
#define CONTRACT_PADDING "[contract: limits - batches smaller than the limits are correct]"
#define CONTRACT_TP "[contract: tensor parallel equals one chip]"
#define CONTRACT_LIFETIME "[contract: lifetime]"
#define CONTRACT_OPTIONS "[contract: unknown options are refused, naming them (v1.3)]"
#define CONTRACT_QUANT "[contract: quantized weights run as their dequantized values (v1.4)]"
#define CONTRACT_SPEC_LIMIT \
  "[contract: speculative decoding - the verify limit (v1.5): dynamic devices honour the proposal]"
#define CONTRACT_VERIFY \
  "[contract: speculative decoding - a verify step equals decoding token by token (v1.5)]"
#define CONTRACT_HIDDEN \
  "[contract: speculative decoding - hidden_states are the rows lm_head takes (v1.5)]"
#define CONTRACT_LORA_MERGED \
  "[contract: LoRA - a slot runs as the model with merged weights W + B A (v1.6)]"
#define CONTRACT_LORA_MIXED                                                                        \
  "[contract: LoRA - a step mixing the base and several slots gives each sequence its rows alone " \
  "(v1.6)]"
#define CONTRACT_LORA_SLOTS \
  "[contract: LoRA - an emptied slot runs the base, a refilled one the new adapter (v1.6)]"
#define CONTRACT_LORA_REFUSED                                                                   \
  "[contract: LoRA - bad adapters and slots are refused, leaving slots and cache as they were " \
  "(v1.6)]"
#define CONTRACT_LORA_NONE \
  "[contract: LoRA - a device without HALO_CAP_LORA answers 0 slots and refuses adapters (v1.6)]"
#define CONTRACT_QUANT_REFUSED                                                                \
  "[contract: quantized weights outside the declared layouts are refused, naming the weight " \
  "(v1.4)]"

class Conformance : public testing::Test {
 protected:
  void SetUp() override {
    const Lib& lib = plugin();
    if (lib.api == nullptr) GTEST_FAIL() << "cannot load the plugin: " << lib.load_error << " " CONTRACT_EXPORTS;
    api_ = lib.api;
    const int n = device_count(lib);
    if (n <= settings().device)
      GTEST_FAIL() << "--device " << settings().device << " but device_count says " << n << " " CONTRACT_PROPERTIES;
    props_ = properties(lib, settings().device);
    if (props_.struct_size == 0) GTEST_FAIL() << "device_get_properties failed " CONTRACT_PROPERTIES;
  }
  const halo_plugin_api* api() const { return api_; }
  const halo_device_properties& props() const { return props_; }
  bool claims(uint32_t cap) const { return (props_.capabilities & cap) == cap; }
  int dev() const { return settings().device; }

 private:
  const halo_plugin_api* api_ = nullptr;
  halo_device_properties props_{};
};

// The small model most API tests prepare.
const Model& tiny_model();
// Session on the plugin under test with the tiny model; fails the test when it cannot be made.
std::optional<Session> tiny_session(const Proposal& p = {}, int num_blocks = 0);

// A session of the CPU reference plugin on `m` agreeing with `under_test`'s
// limits (its own block size); the reference must exist.
std::optional<Session> reference_like(const Session& under_test, const Model& m, Status* st);

// Runs `call` in a forked child (crash detection) and in-process, and checks it
// returns an error with one of `codes` and a non-empty message naming `hint`.
void expect_error(const std::string& what, const std::function<Status()>& call,
                  std::initializer_list<halo_status_code> codes, const std::string& hint = "",
                  const char* contract = CONTRACT_ERRORS);

}  // namespace conf
