#pragma once
// A Jinja2 template engine for chat templates, configured like Hugging Face
// transformers' apply_chat_template: ImmutableSandboxedEnvironment with
// trim_blocks=True, lstrip_blocks=True, loopcontrols, transformers' tojson
// (ensure_ascii=False, insertion order kept), raise_exception(msg) and
// strftime_now(fmt) globals.
//
//   halo::text::jinja::Template t("Hello {{ name | upper }}!");
//   t.render({{"name", "world"}});   // "Hello WORLD!"
//
// Parsing and rendering throw TemplateError (text/jinja/error.h).
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "text/jinja/error.h"

namespace halo::text::jinja {

struct Node;

class Template {
 public:
  // Parses once; unknown filters/tests are reported here, as jinja2 does.
  explicit Template(const std::string& source);

  // `context` must be a JSON object: its members become template variables.
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace halo::text::jinja
