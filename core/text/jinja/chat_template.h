#pragma once
// Chat-template rendering with the semantics of transformers'
// apply_chat_template as vLLM calls it.
//
//   auto tpl = halo::text::ChatTemplate::from_tokenizer_config(dir / "tokenizer_config.json");
//   halo::text::ChatRenderRequest req;
//   req.messages = nlohmann::ordered_json::parse(R"([{"role":"user","content":"Hi"}])");
//   std::string prompt = tpl.render(req);
//
// Errors (bad template, raise_exception in the template, bad request) throw
// halo::text::jinja::TemplateError (a halo::Error).
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "text/jinja/error.h"
#include "text/jinja/template.h"

namespace halo::text {

using jinja::TemplateError;

struct ChatRenderRequest {
  // [{role, content (string, null, or list of {"type":"text","text":...} parts),
  //   tool_calls, tool_call_id, name, reasoning_content, ...}]
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: no tools (the template sees tools = none)
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  // Extra template variables (e.g. enable_thinking); they override the defaults.
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  std::string bos_token, eos_token;
};

class ChatTemplate {
 public:
  explicit ChatTemplate(std::string source);  // parses once; throws TemplateError

  // Reads "chat_template" (a string, or a list of {name, template} of which
  // "default" is used). Throws halo::Error naming the file when absent.
  static ChatTemplate from_tokenizer_config(const std::filesystem::path& tokenizer_config_json);

  // `limits` is the per-render budget (see jinja::RenderLimits): the server
  // passes a per-request one when the template came from the client.
  std::string render(const ChatRenderRequest& request, const jinja::RenderLimits& limits = {}) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  jinja::Template template_;
};

// Content given as a list of parts becomes one string: the "text" of the
// text parts joined with "\n" (vLLM's "string" content format).
nlohmann::ordered_json normalize_chat_messages(const nlohmann::ordered_json& messages);

// True when `prompt` begins with a non-empty `bos_token`: the caller then
// tokenizes without adding a second BOS.
bool starts_with_bos(std::string_view prompt, std::string_view bos_token);

// bos_token / eos_token of a tokenizer_config.json value (string, or
// {"content": ...} AddedToken form); "" when null/absent.
std::string special_token_text(const nlohmann::ordered_json& value);

}  // namespace halo::text
