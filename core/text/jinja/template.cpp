#include "text/jinja/template.h"

#include <ctime>

#include "text/jinja/ast.h"
#include "text/jinja/interpreter.h"

namespace halo::text::jinja {
namespace {

void check_expr(const Expr* e) {
  if (!e) return;
  if (e->k == Expr::K::Filter && !Interpreter::has_filter(e->name))
    throw TemplateError(e->line, "No filter named '" + e->name + "'.");
  if (e->k == Expr::K::Test && !Interpreter::has_test(e->name))
    throw TemplateError(e->line, "No test named '" + e->name + "'.");
  for (const auto& c : e->children) check_expr(c.get());
  for (const auto& [k, c] : e->kwargs) check_expr(c.get());
}

void check_body(const Body& body) {
  for (const auto& n : body) {
    check_expr(n->expr.get());
    check_expr(n->cond.get());
    check_expr(n->target.get());
    check_expr(n->filter.get());
    for (const auto& [k, e] : n->params) check_expr(e.get());
    for (const auto& [c, b] : n->branches) {
      check_expr(c.get());
      check_body(b);
    }
    check_body(n->body);
    check_body(n->else_body);
  }
}

std::string strftime_now(const std::string& fmt) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  if (fmt.empty()) return "";
  std::string buf(256 + fmt.size() * 8, '\0');
  std::size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  buf.resize(n);
  return buf;
}

ScopePtr make_globals() {
  auto g = std::make_shared<Scope>();
  g->vars["range"] = Value::function("range", [](Interpreter& I, Args& a) -> Value {
    if (!a.kw.empty()) I.fail("range() takes no keyword arguments");
    std::int64_t start = 0, stop = 0, step = 1;
    for (const auto& v : a.pos)
      if (!(v.is_int() || v.is_bool())) {
        std::string msg = v.type_name();
        msg.append(" object cannot be interpreted as an integer");
        I.fail(msg);
      }
    if (a.pos.size() == 1) stop = a.pos[0].as_int();
    else if (a.pos.size() == 2 || a.pos.size() == 3) {
      start = a.pos[0].as_int();
      stop = a.pos[1].as_int();
      if (a.pos.size() == 3) step = a.pos[2].as_int();
    } else {
      I.fail("range expected 1 to 3 arguments, got " + std::to_string(a.pos.size()));
    }
    if (step == 0) I.fail("range() arg 3 must not be zero");
    List out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 1'000'000) I.fail("range too big (more than 1000000 items)");
      out.emplace_back(i);
    }
    I.charge(out.size() / 16);  // building the list is work even if it is never iterated
    return Value::list(std::move(out));
  });
  auto make_mapping = [](bool ns) {
    return [ns](Interpreter& I, Args& a) -> Value {
      Value d = ns ? Value::make_namespace() : Value::dict();
      for (const auto& p : a.pos) {
        if (!p.is_mapping())
          I.fail(ns ? "namespace() positional argument must be a mapping" : "dict() positional argument must be a mapping");
        for (const auto& [k, v] : p.dict_ref().entries) d.dict_ref().set(k, v);
      }
      for (const auto& [k, v] : a.kw) d.dict_ref().set(Value(k), v);
      return d;
    };
  };
  g->vars["namespace"] = Value::function("namespace", make_mapping(true));
  g->vars["dict"] = Value::function("dict", make_mapping(false));
  g->vars["raise_exception"] = Value::function("raise_exception", [](Interpreter& I, Args& a) -> Value {
    std::string msg = a.pos.empty() ? std::string() : a.pos[0].to_str();
    throw TemplateError(I.line(), msg, /*raised_by_template=*/true);
  });
  g->vars["strftime_now"] = Value::function("strftime_now", [](Interpreter& I, Args& a) -> Value {
    if (a.pos.empty() || !a.pos[0].is_string()) I.fail("strftime_now() needs a format string");
    return Value(strftime_now(a.pos[0].str()));
  });
  return g;
}

}  // namespace

Template::Template(const std::string& source) {
  auto body = std::make_shared<Body>(parse_template(source));
  check_body(*body);
  body_ = std::move(body);
}

std::string Template::render(const nlohmann::ordered_json& context, const RenderLimits& limits) const {
  if (!context.is_object() && !context.is_null()) throw TemplateError(0, "render context must be a JSON object");
  auto root = std::make_shared<Scope>();
  root->parent = make_globals();
  if (context.is_object())
    for (const auto& [k, v] : context.items()) root->vars[k] = Value::from_json(v);
  Interpreter interp(root, limits);
  ScopedPrintLimits print_limits({limits.max_output_bytes, limits.max_depth});
  try {
    return interp.render(*body_);
  } catch (const TemplateError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw TemplateError(interp.line(), "out of memory while rendering");
  } catch (const std::exception& e) {
    throw TemplateError(interp.line(), e.what());
  }
}

}  // namespace halo::text::jinja
