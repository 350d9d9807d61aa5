#include "text/jinja/chat_template.h"

#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/file_text.h"
#include "text/jinja/value.h"

namespace halo::text {
namespace {

using json = nlohmann::ordered_json;


// Python str.strip()/lstrip() (Unicode whitespace) on UTF-8.
std::string py_strip(const std::string& s, bool left, bool right) {
  std::u32string u = jinja::utf8_decode(s);
  std::size_t b = 0, e = u.size();
  if (left)
    while (b < e && jinja::py_isspace(u[b])) ++b;
  if (right)
    while (e > b && jinja::py_isspace(u[e - 1])) --e;
  return jinja::utf8_encode(u.substr(b, e - b));
}

}  // namespace

json normalize_chat_messages(const json& messages) {
  if (!messages.is_array()) throw TemplateError(0, "messages must be a JSON array, got " + std::string(messages.type_name()));
  json out = json::array();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object()) throw TemplateError(0, "messages[" + std::to_string(i) + "] must be an object");
    json msg = m;
    auto it = msg.find("content");
    if (it != msg.end() && it->is_array()) {
      std::string text;
      bool first = true;
      for (std::size_t k = 0; k < it->size(); ++k) {
        const json& part = (*it)[k];
        std::string piece;
        if (part.is_string()) {
          piece = part.get<std::string>();
        } else if (part.is_object()) {
          std::string type = part.contains("type") && part["type"].is_string() ? part["type"].get<std::string>() : "text";
          if (type != "text" && type != "input_text")
            throw TemplateError(0, "messages[" + std::to_string(i) + "].content[" + std::to_string(k) + "]: content part type '" +
                                       type + "' is not supported (text only)");
          if (!part.contains("text") || !part["text"].is_string())
            throw TemplateError(0, "messages[" + std::to_string(i) + "].content[" + std::to_string(k) + "]: text part without a string 'text'");
          piece = part["text"].get<std::string>();
        } else {
          throw TemplateError(0, "messages[" + std::to_string(i) + "].content[" + std::to_string(k) + "] must be an object");
        }
        if (!first) text += "\n";
        first = false;
        text += piece;
      }
      *it = text;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

bool starts_with_bos(std::string_view prompt, std::string_view bos_token) {
  return !bos_token.empty() && prompt.substr(0, bos_token.size()) == bos_token;
}

std::string special_token_text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object()) {
    auto it = value.find("content");
    if (it != value.end() && it->is_string()) return it->get<std::string>();
  }
  return {};
}

ChatTemplate::ChatTemplate(std::string source) : source_(std::move(source)), template_(source_) {}

ChatTemplate ChatTemplate::from_tokenizer_config(const std::filesystem::path& path) {
  json cfg;
  try {
    cfg = json::parse(read_file_text(path));
  } catch (const json::exception& e) {
    throw halo::Error(path.string() + ": invalid JSON: " + e.what());
  }
  json tpl = cfg.is_object() && cfg.contains("chat_template") ? cfg["chat_template"] : json();
  if (tpl.is_string()) return ChatTemplate(tpl.get<std::string>());
  if (tpl.is_array()) {
    std::string names;
    for (const auto& entry : tpl) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template")) continue;
      if (entry["name"] == "default" && entry["template"].is_string()) return ChatTemplate(entry["template"].get<std::string>());
      names.append(names.empty() ? "" : ", ").append(entry["name"].dump());
    }
    throw halo::Error(path.string() + ": chat_template has no \"default\" entry (named templates: " + names + ")");
  }
  // Newer checkpoints keep the template next to the config.
  auto sibling = path.parent_path() / "chat_template.jinja";
  if (tpl.is_null() && std::filesystem::exists(sibling)) return ChatTemplate(read_file_text(sibling));
  throw halo::Error(path.string() + ": no \"chat_template\" field (string or list of {name, template}); pass --chat-template");
}

std::string ChatTemplate::render(const ChatRenderRequest& req, const jinja::RenderLimits& limits) const {
  if (req.continue_final_message && req.add_generation_prompt)
    throw TemplateError(0, "continue_final_message and add_generation_prompt are not compatible: use "
                           "continue_final_message to continue the final message, add_generation_prompt to start a new "
                           "assistant message");
  json messages = normalize_chat_messages(req.messages);
  if (!req.tools.is_null() && !req.tools.is_array()) throw TemplateError(0, "tools must be a JSON array or null");
  if (!req.chat_template_kwargs.is_null() && !req.chat_template_kwargs.is_object())
    throw TemplateError(0, "chat_template_kwargs must be a JSON object");

  json ctx = json::object();
  if (!req.bos_token.empty()) ctx["bos_token"] = req.bos_token;
  if (!req.eos_token.empty()) ctx["eos_token"] = req.eos_token;
  ctx["messages"] = messages;
  ctx["tools"] = req.tools;  // transformers passes tools=None when absent
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = req.add_generation_prompt;
  if (req.chat_template_kwargs.is_object())
    for (const auto& [k, v] : req.chat_template_kwargs.items()) ctx[k] = v;

  std::string rendered = template_.render(ctx, limits);
  if (!req.continue_final_message) return rendered;

  if (messages.empty()) throw TemplateError(0, "continue_final_message is set but there are no messages");
  const json& last = messages.back();
  if (!last.contains("content") || !last["content"].is_string())
    throw TemplateError(0, "continue_final_message is set but the final message has no text content to continue");
  const std::string final_message = last["content"].get<std::string>();
  const std::string stripped = py_strip(final_message, true, true);
  std::size_t loc = rendered.rfind(stripped);
  if (loc == std::string::npos)
    throw TemplateError(0, "continue_final_message is set but the final message does not appear in the chat after "
                           "applying the chat template");
  const std::string lstripped = py_strip(final_message, true, false);
  if (rendered.substr(loc, lstripped.size()) == final_message) return rendered.substr(0, loc + lstripped.size());
  return rendered.substr(0, loc + stripped.size());
}

}  // namespace halo::text
