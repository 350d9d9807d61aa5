// OpenAI Responses requests (POST /v1/responses), as the server takes them:
// the input is a request body; one that parses as a JSON object is turned into
// the chat completions body (serve/responses_api.h), which must itself parse
// as a JSON object whose messages are a list. A store holds one response
// ("resp_seed"), so previous_response_id is followed too; its messages then
// go through prepare_tool_messages (tool-call arguments as JSON text, under
// the depth rule). Refusals (a 400 naming the field) are expected.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "serve/responses_api.h"
#include "serve/tool_messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  static halo::serve::ResponseStore store;
  static const bool seeded = [] {
    store.put("resp_seed",
              {halo::serve::ojson::object(),
               halo::serve::ojson::parse(
                   R"([{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}])")});
    return true;
  }();
  (void)seeded;
  const std::string body(reinterpret_cast<const char*>(data), size);
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || size > 1 << 16) return 0;
  halo::fuzz::guarded([&] {
    const auto r = halo::serve::responses_to_chat(body, store);
    const auto out = nlohmann::json::parse(r.chat_body, nullptr, false);
    if (out.is_discarded() || !out.is_object() || !out["messages"].is_array() ||
        !r.conversation.is_array())
      __builtin_trap();
    // The messages as the chat frontend prepares them: tool-call arguments
    // are JSON text, parsed under the request depth rule.
    auto messages = halo::serve::ojson::parse(r.chat_body)["messages"];
    halo::serve::prepare_tool_messages(messages, 128);
  });
  return 0;
}
