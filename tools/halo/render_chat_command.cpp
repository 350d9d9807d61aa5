// `halo render-chat`: print the exact prompt a chat request becomes after the
// model's chat template (like transformers' apply_chat_template(tokenize=False)).
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "model_source.h"
#include "common/error.h"
#include "text/jinja/chat_template.h"

namespace halo::tools {
namespace fs = std::filesystem;
namespace {

using json = nlohmann::ordered_json;

struct RenderChatOptions {
  std::string model_dir;
  std::string messages_file;
  std::string tools_file;
  std::string chat_template_file;
  std::string chat_template_kwargs;
  bool no_generation_prompt = false;
  bool continue_final_message = false;
  ModelSource source;
};

std::string read_text(const fs::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(std::string(what) + " " + path.string() + ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json(const fs::path& path, const char* what) {
  std::string text = read_text(path, what);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(std::string(what) + " " + path.string() + ": invalid JSON: " + e.what());
  }
}

void run_render_chat(const RenderChatOptions& o) {
  const fs::path dir = resolve_tokenizer_dir(resolve_model_dir(o.model_dir, o.source), o.source);
  fs::path config_path = dir / "tokenizer_config.json";

  // bos/eos come from the model's tokenizer_config.json (string or {"content": ...}).
  json config = json::object();
  if (fs::exists(config_path)) config = read_json(config_path, "tokenizer config");
  else if (o.chat_template_file.empty()) throw Error(config_path.string() + ": not found (is " + dir.string() + " a model directory?)");

  text::ChatRenderRequest req;
  if (config.is_object()) {
    req.bos_token = text::special_token_text(config.value("bos_token", json()));
    req.eos_token = text::special_token_text(config.value("eos_token", json()));
  }

  json messages = read_json(o.messages_file, "--messages");
  if (messages.is_object() && messages.contains("messages")) messages = messages["messages"];  // a chat request body
  if (!messages.is_array()) throw Error("--messages " + o.messages_file + ": expected a JSON array of messages");
  req.messages = std::move(messages);

  if (!o.tools_file.empty()) {
    json tools = read_json(o.tools_file, "--tools");
    if (!tools.is_array()) throw Error("--tools " + o.tools_file + ": expected a JSON array of tools");
    req.tools = std::move(tools);
  }
  if (!o.chat_template_kwargs.empty()) {
    try {
      req.chat_template_kwargs = json::parse(o.chat_template_kwargs);
    } catch (const json::exception& e) {
      throw Error("--chat-template-kwargs '" + o.chat_template_kwargs + "': invalid JSON: " + e.what());
    }
    if (!req.chat_template_kwargs.is_object())
      throw Error("--chat-template-kwargs '" + o.chat_template_kwargs + "': expected a JSON object");
  }
  req.continue_final_message = o.continue_final_message;
  req.add_generation_prompt = !o.no_generation_prompt && !o.continue_final_message;

  std::optional<text::ChatTemplate> tpl;
  if (!o.chat_template_file.empty()) tpl.emplace(read_text(o.chat_template_file, "--chat-template"));
  else tpl.emplace(text::ChatTemplate::from_tokenizer_config(config_path));

  std::string prompt = tpl->render(req);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

void add_render_chat_command(CLI::App& app) {
  auto o = std::make_shared<RenderChatOptions>();
  auto* cmd = app.add_subcommand("render-chat", "Print the prompt a chat conversation becomes after the chat template");
  cmd->add_option("model", o->model_dir, "Hugging Face model directory or id (default: the embedded pkgchat-5m)");
  add_model_source_options(*cmd, o->source);
  cmd->add_option("--messages", o->messages_file, "JSON file: an array of {role, content, ...} messages")->required();
  cmd->add_option("--tools", o->tools_file, "JSON file: an array of tool definitions");
  cmd->add_flag("--no-generation-prompt", o->no_generation_prompt, "Do not open an assistant turn at the end");
  cmd->add_flag("--continue-final-message", o->continue_final_message,
                "End the prompt inside the final (assistant) message so the model continues it");
  cmd->add_option("--chat-template", o->chat_template_file, "Jinja file to use instead of the model's chat_template");
  cmd->add_option("--chat-template-kwargs", o->chat_template_kwargs,
                  "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'");
  cmd->callback([o] { run_render_chat(*o); });
}

}  // namespace halo::tools
