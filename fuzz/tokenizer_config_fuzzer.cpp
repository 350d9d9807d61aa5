// tokenizer_config.json as the tokenizer and the chat template read it: the
// input is written to a fixed scratch path and loaded beside a small
// byte-level tokenizer.json (fuzz/data/tiny_tokenizer.json: the 256 byte
// tokens, a few merges and added tokens, so that loading is cheap): bos/eos
// tokens (strings or {"content": ...}), add_bos_token/add_eos_token,
// added_tokens_decoder, and chat_template (a string or a list of
// {name, template}), which is then parsed and rendered (within a small budget).
#include "fuzz_util.h"
#include "text/jinja/chat_template.h"
#include "text/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  static const std::filesystem::path tokenizer_json =
      std::filesystem::path(HALO_SOURCE_DIR) / "fuzz/data/tiny_tokenizer.json";
  const auto config = halo::fuzz::write_scratch("tokenizer_config.json", data, size);
  halo::fuzz::guarded([&] {
    auto tok = halo::text::Tokenizer::from_files(tokenizer_json, config);
    auto ids = tok.encode("hello <s> the </s>", true);
    (void)tok.decode(ids, true);
    (void)tok.decode(ids, false);
  });
  halo::fuzz::guarded([&] {
    auto tpl = halo::text::ChatTemplate::from_tokenizer_config(config);
    halo::text::ChatRenderRequest req;
    req.messages = nlohmann::ordered_json::parse(R"([{"role":"user","content":"Hi"}])");
    // A small render budget: this target is about the config's forms; the
    // template language and its default budget are jinja_fuzzer's. With the
    // default 5M steps every looping template the fuzzer finds costs ~1 s.
    halo::text::jinja::RenderLimits budget;
    budget.max_steps = 100'000;
    budget.max_output_bytes = 1u << 20;
    (void)tpl.render(req, budget);
  });
  return 0;
}
