// A Jinja chat template (what a request's `chat_template` field or a model's
// tokenizer_config.json carries): parsed, then rendered against a typical chat
// context, with the render budget's defaults (steps, output size, call depth).
#include "fuzz_util.h"
#include "text/jinja/template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json c = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "What is curl?"},
      {"role": "assistant", "content": "A tool.", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
      {"role": "tool", "content": "42", "tool_call_id": "c1"},
      {"role": "user", "content": [{"type": "text", "text": "and vim?"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
    "add_generation_prompt": true,
    "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false, "n": 3, "s": "abc", "none": null
  })");
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  const std::string source(reinterpret_cast<const char*>(data), size);
  halo::fuzz::guarded([&] {
    halo::text::jinja::Template t(source);
    (void)t.render(context());
  });
  return 0;
}
