// Anthropic Messages requests (POST /v1/messages), as the server takes them:
// the input is a request body; one that parses as a JSON object is turned into
// the chat completions body (serve/messages_api.h), which must itself parse
// as a JSON object. Refusals (a 400 naming the field) are expected.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "serve/messages_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  const std::string body(reinterpret_cast<const char*>(data), size);
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || size > 1 << 16) return 0;
  halo::fuzz::guarded([&] {
    const std::string chat = halo::serve::messages_to_chat_body(body);
    const auto out = nlohmann::json::parse(chat, nullptr, false);
    if (out.is_discarded() || !out.is_object()) __builtin_trap();
  });
  return 0;
}
