// A /v1/chat/completions request body rendered through real chat templates
// (Qwen3's and Llama 3's, from tests/data/tokenizers, parsed once): the
// body's `messages`, `tools`, `add_generation_prompt`, `continue_final_message`
// and `chat_template_kwargs` become the ChatRenderRequest, as the OpenAI
// frontend builds it. Oddly typed messages must end in an error, never a
// crash. Bodies nested deeper than the server's request limit
// (--max-request-json-depth, 128 by default; parse_request_json refuses them
// before anything else reads them) are skipped: nlohmann's copy, dump and
// destructor recurse per level, so without that limit a 30000-deep body
// overflows the stack in any JSON code, not only in the renderer.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "text/jinja/chat_template.h"

using halo::text::ChatRenderRequest;
using halo::text::ChatTemplate;

namespace {

// Nesting depth of JSON text (brackets outside strings).
int json_depth(std::string_view s) {
  int depth = 0, max = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max = std::max(max, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max;
}

std::vector<ChatTemplate>& templates() {
  static std::vector<ChatTemplate> t = [] {
    std::vector<ChatTemplate> v;
    const std::filesystem::path dir = std::filesystem::path(HALO_SOURCE_DIR) / "tests/data/tokenizers";
    for (const char* name : {"qwen3", "llama3", "llama2"})
      v.push_back(ChatTemplate::from_tokenizer_config(dir / name / "tokenizer_config.json"));
    return v;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  halo::fuzz::quiet();
  (void)templates();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const ChatTemplate& tpl = templates()[data[0] % templates().size()];
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  if (json_depth(body) > 128) return 0;  // the server answers 400
  halo::fuzz::guarded([&] {
    auto j = nlohmann::ordered_json::parse(body);
    if (!j.is_object()) return;
    ChatRenderRequest req;
    if (auto it = j.find("messages"); it != j.end()) req.messages = *it;
    if (auto it = j.find("tools"); it != j.end()) req.tools = *it;
    if (auto it = j.find("add_generation_prompt"); it != j.end() && it->is_boolean())
      req.add_generation_prompt = it->get<bool>();
    if (auto it = j.find("continue_final_message"); it != j.end() && it->is_boolean())
      req.continue_final_message = it->get<bool>();
    if (auto it = j.find("chat_template_kwargs"); it != j.end() && it->is_object()) req.chat_template_kwargs = *it;
    req.bos_token = "<s>";
    req.eos_token = "</s>";
    (void)tpl.render(req);
  });
  return 0;
}
