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
//
// A template may come from a client (a request's chat_template), so parsing
// refuses nesting deeper than 200 levels (parentheses, blocks, operator
// chains) and every render runs under a budget (RenderLimits) that stops a
// hostile template with a TemplateError naming the limit, instead of a stack
// overflow, an endless loop or an allocation of gigabytes.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/jinja/error.h"

namespace halo::text::jinja {

struct Node;

// Per-render budget. The defaults are far above what real chat templates use
// (they render in well under 10^5 steps, nest under 30 levels and produce a
// prompt of at most a few MB) and stop a hostile template within about a second.
struct RenderLimits {
  // Interpreter steps: one per statement, loop iteration and expression node,
  // plus one per 256 bytes of string copied or built (so quadratic string
  // building is bounded in time, not only in size).
  std::size_t max_steps = 5'000'000;
  // Largest string or list (in bytes) the template may build, the rendered
  // output included.
  std::size_t max_output_bytes = 64u << 20;
  // Interpreter recursion: nested expressions + blocks + macro calls. Bounds
  // the native stack the render uses (well under 1 MB at the default).
  int max_depth = 500;
};

class Template {
 public:
  // Parses once; unknown filters/tests are reported here, as jinja2 does.
  explicit Template(const std::string& source);

  // `context` must be a JSON object: its members become template variables.
  std::string render(const nlohmann::ordered_json& context, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace halo::text::jinja
