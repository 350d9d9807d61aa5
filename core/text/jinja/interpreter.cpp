#include "text/jinja/interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string_view>

#include <utf8proc.h>

#include "text/jinja/error.h"

namespace halo::text::jinja {
namespace {

// Bytes a copy of `items` costs (strings are held by value, containers shared).
std::size_t copy_bytes(const List& items) {
  std::size_t n = items.size() * sizeof(Value);
  for (const auto& v : items)
    if (v.is_string()) n += v.str().size();
  return n;
}

// ------------------------------------------------------------ string helpers

std::string py_upper(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) utf8_append(out, static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))));
  return out;
}
std::string py_lower(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) utf8_append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  return out;
}
bool is_alpha_cp(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}
// Python str.title(): uppercase after non-cased characters.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    char32_t m = prev_cased ? static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)))
                            : static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
    utf8_append(out, m);
    prev_cased = is_alpha_cp(c);
  }
  return out;
}
std::string py_capitalize(const std::string& s) {
  std::u32string u = utf8_decode(s);
  std::string out;
  for (std::size_t i = 0; i < u.size(); ++i) {
    auto c = static_cast<utf8proc_int32_t>(u[i]);
    utf8_append(out, static_cast<char32_t>(i == 0 ? utf8proc_totitle(c) : utf8proc_tolower(c)));
  }
  return out;
}
// jinja's title filter: split on [-\s({\[<]+, capitalise each piece.
std::string jinja_title(const std::string& s) {
  std::u32string u = utf8_decode(s);
  std::string out;
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  std::size_t i = 0;
  while (i < u.size()) {
    std::size_t j = i;
    bool sep = is_sep(u[i]);
    while (j < u.size() && is_sep(u[j]) == sep) ++j;
    if (sep) {
      out += utf8_encode(u.substr(i, j - i));
    } else {
      utf8_append(out, static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(u[i]))));
      for (std::size_t k = i + 1; k < j; ++k)
        utf8_append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(u[k]))));
    }
    i = j;
  }
  return out;
}

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set;
  bool use_set = chars && !chars->is_none() && !chars->is_undefined();
  if (use_set) set = utf8_decode(chars->str());
  auto strip_it = [&](char32_t c) { return use_set ? set.find(c) != std::u32string::npos : py_isspace(c); };
  std::size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  if (b == 0 && e == u.size()) return s;
  return utf8_encode(u.substr(b, e - b));
}

List py_split(const std::string& s, const Value* sep, std::int64_t maxsplit, bool from_right) {
  List out;
  if (sep && sep->is_string()) {
    const std::string& d = sep->str();
    if (d.empty()) throw std::invalid_argument("empty separator");
    std::vector<std::string> parts;
    if (!from_right) {
      std::size_t pos = 0;
      while (true) {
        if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) >= maxsplit) break;
        std::size_t f = s.find(d, pos);
        if (f == std::string::npos) break;
        parts.push_back(s.substr(pos, f - pos));
        pos = f + d.size();
      }
      parts.push_back(s.substr(pos));
    } else {
      std::size_t end = s.size();
      while (true) {
        if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) >= maxsplit) break;
        if (end < d.size()) break;
        std::size_t f = s.rfind(d, end - d.size());
        if (f == std::string::npos) break;
        parts.push_back(s.substr(f + d.size(), end - f - d.size()));
        end = f;
      }
      parts.push_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    for (auto& p : parts) out.emplace_back(std::move(p));
    return out;
  }
  // Whitespace split.
  std::u32string u = utf8_decode(s);
  std::vector<std::pair<std::size_t, std::size_t>> words;
  std::size_t i = 0;
  while (i < u.size()) {
    while (i < u.size() && py_isspace(u[i])) ++i;
    if (i >= u.size()) break;
    if (maxsplit >= 0 && static_cast<std::int64_t>(words.size()) >= maxsplit) {
      std::size_t e = u.size();
      while (e > i && py_isspace(u[e - 1])) --e;
      words.emplace_back(i, e);
      break;
    }
    std::size_t j = i;
    while (j < u.size() && !py_isspace(u[j])) ++j;
    words.emplace_back(i, j);
    i = j;
  }
  for (auto [b, e] : words) out.emplace_back(utf8_encode(u.substr(b, e - b)));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, std::int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts rep between every character.
    std::u32string u = utf8_decode(s);
    std::int64_t n = 0;
    for (std::size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) {
        out += rep;
        ++n;
      }
      if (i < u.size()) utf8_append(out, u[i]);
    }
    return out;
  }
  std::size_t pos = 0;
  std::int64_t n = 0;
  while (count < 0 || n < count) {
    std::size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += rep;
    pos = f + old.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

bool is_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

std::int64_t py_len(const std::string& s) {
  if (is_ascii(s)) return static_cast<std::int64_t>(s.size());
  std::int64_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

std::int64_t floordiv(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
std::int64_t pymod(std::int64_t a, std::int64_t b) {
  std::int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
double pyfmod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Slice indices per Python's slice.indices().
std::vector<std::int64_t> slice_indices(std::int64_t len, const Value& start, const Value& stop, const Value& stepv) {
  std::int64_t step = (stepv.is_none() || stepv.is_undefined()) ? 1 : stepv.as_int();
  if (step == 0) throw std::invalid_argument("slice step cannot be zero");
  auto norm = [&](const Value& v, std::int64_t def, bool is_start) -> std::int64_t {
    if (v.is_none() || v.is_undefined()) return def;
    std::int64_t x = v.as_int();
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    (void)is_start;
    return x;
  };
  std::int64_t b = norm(start, step < 0 ? len - 1 : 0, true);
  std::int64_t e = norm(stop, step < 0 ? -1 : len, false);
  std::vector<std::int64_t> idx;
  if (step > 0)
    for (std::int64_t i = b; i < e; i += step) idx.push_back(i);
  else
    for (std::int64_t i = b; i > e; i += step) idx.push_back(i);
  return idx;
}

const Value* arg(Args& a, std::size_t pos, const char* name) {
  for (auto& [k, v] : a.kw)
    if (k == name) return &v;
  if (pos < a.pos.size()) return &a.pos[pos];
  return nullptr;
}

std::string str_arg(Interpreter& I, const Value* v, const char* what) {
  if (!v || !v->is_string()) I.fail(std::string(what) + " must be a string");
  return v->str();
}

// Python's "%" string formatting (%s %r %d %i %f %x %%).
std::string percent_format(Interpreter& I, const std::string& fmt, const Value& argsv) {
  List args;
  const Value* dict = nullptr;
  if (argsv.is_tuple()) args = argsv.items();
  else if (argsv.is_dict()) dict = &argsv;
  else args.push_back(argsv);
  std::size_t ai = 0;
  std::string out;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) I.fail("incomplete format");
    std::string key;
    if (fmt[i] == '(') {
      std::size_t e = fmt.find(')', i);
      if (e == std::string::npos) I.fail("incomplete format key");
      key = fmt.substr(i + 1, e - i - 1);
      i = e + 1;
    }
    std::string spec = "%";
    while (i < fmt.size() && std::string_view("-+ #0123456789.").find(fmt[i]) != std::string_view::npos) spec += fmt[i++];
    if (i >= fmt.size()) I.fail("incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    Value v;
    if (!key.empty()) {
      const Value* f = dict ? dict->dict_ref().find(key) : nullptr;
      if (!f) I.fail("format key '" + key + "' not found");
      v = *f;
    } else {
      if (ai >= args.size()) I.fail("not enough arguments for format string");
      v = args[ai++];
    }
    char buf[512];
    switch (conv) {
      case 's': out += v.to_str(); break;
      case 'r': out += v.repr(); break;
      case 'd':
      case 'i':
        if (!v.is_number()) I.fail("%d format: a number is required, not " + v.type_name());
        std::snprintf(buf, sizeof buf, (spec + "lld").c_str(), static_cast<long long>(v.is_float() ? static_cast<std::int64_t>(v.as_float()) : v.as_int()));
        out += buf;
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'g':
        if (!v.is_number()) I.fail("must be real number, not " + v.type_name());
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v.as_float());
        out += buf;
        break;
      case 'x':
      case 'X':
      case 'o':
        if (!v.is_number() || v.is_float()) I.fail("%x format: an integer is required, not " + v.type_name());
        std::snprintf(buf, sizeof buf, (spec + "ll" + conv).c_str(), static_cast<long long>(v.as_int()));
        out += buf;
        break;
      default:
        I.fail(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (!dict && ai < args.size()) I.fail("not all arguments converted during string formatting");
  return out;
}

// str.format with {} / {0} / {name} fields (format specs are not supported).
std::string brace_format(Interpreter& I, const std::string& fmt, Args& a) {
  std::string out;
  std::size_t auto_idx = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
        out += '{';
        ++i;
        continue;
      }
      std::size_t e = fmt.find('}', i);
      if (e == std::string::npos) I.fail("Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, e - i - 1);
      std::string conv;
      if (auto p = field.find('!'); p != std::string::npos) {
        conv = field.substr(p + 1);
        field = field.substr(0, p);
      }
      if (field.find(':') != std::string::npos) I.fail("format specs in str.format are not supported");
      Value v;
      if (field.empty()) {
        if (auto_idx >= a.pos.size()) I.fail("Replacement index " + std::to_string(auto_idx) + " out of range");
        v = a.pos[auto_idx++];
      } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
        std::size_t k = std::stoul(field);
        if (k >= a.pos.size()) I.fail("Replacement index " + field + " out of range");
        v = a.pos[k];
      } else {
        const Value* f = arg(a, SIZE_MAX, field.c_str());
        if (!f) I.fail("KeyError: '" + field + "'");
        v = *f;
      }
      out += conv == "r" ? v.repr() : v.to_str();
      i = e;
    } else if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else I.fail("Single '}' encountered in format string");
      out += '}';
    } else {
      out += c;
    }
  }
  return out;
}

Value to_int(const Value& v, const Value& def) {
  switch (v.kind()) {
    case Value::Kind::Bool:
    case Value::Kind::Int:
      return Value(v.as_int());
    case Value::Kind::Float:
      if (std::isnan(v.as_float()) || std::isinf(v.as_float())) return def;
      return Value(static_cast<std::int64_t>(v.as_float()));
    case Value::Kind::String: {
      std::string s;
      for (char c : v.str())
        if (c != '_') s += c;
      while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
      std::size_t b = 0;
      while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
      s = s.substr(b);
      if (s.empty()) return def;
      try {
        std::size_t n = 0;
        long long i = std::stoll(s, &n, 10);
        if (n == s.size()) return Value(static_cast<std::int64_t>(i));
        double d = std::stod(s, &n);
        if (n == s.size() && std::isfinite(d)) return Value(static_cast<std::int64_t>(d));
      } catch (const std::exception&) {
      }
      return def;
    }
    default:
      return def;
  }
}

Value to_float(const Value& v, const Value& def) {
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    std::string s = v.str();
    try {
      std::size_t n = 0;
      std::size_t b = 0;
      while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
      while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
      s = s.substr(b);
      double d = std::stod(s, &n);
      if (n == s.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return def;
}

const char* kDictMethods[] = {"items", "keys", "values", "get", "pop", "update", "copy", "setdefault", "clear", "popitem"};
const char* kStrMethods[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "split", "rsplit", "upper",
                             "lower", "title", "capitalize", "replace", "format", "join", "find", "rfind", "count",
                             "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", "splitlines",
                             "index", "casefold", "swapcase", "center", "ljust", "rjust", "zfill", "removeprefix",
                             "removesuffix", "partition", "rpartition", "expandtabs", "encode"};
const char* kListMethods[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "index", "count", "copy"};
bool in_list(const char* const* b, std::size_t n, const std::string& name) {
  for (std::size_t i = 0; i < n; ++i)
    if (name == b[i]) return true;
  return false;
}
template <std::size_t N>
bool in_list(const char* const (&a)[N], const std::string& name) {
  return in_list(a, N, name);
}

}  // namespace

// ===================================================================== core

Interpreter::Interpreter(ScopePtr root, Limits limits) : root_(std::move(root)), limits_(limits) {}

void Interpreter::fail(const std::string& msg) const { throw TemplateError(line_, msg); }

void Interpreter::step() { charge(1); }

void Interpreter::charge(std::size_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) fail("template exceeded the step limit (" + std::to_string(limits_.max_steps) + " steps)");
}

void Interpreter::check_size(std::size_t n) const {
  if (n > limits_.max_output_bytes)
    fail("template output exceeds the output limit (" + std::to_string(limits_.max_output_bytes) + " bytes)");
}

// Copying memory is cheap per byte but not free: one step per 256 bytes keeps
// a loop that rebuilds a growing string (quadratic copying) within the budget
// of time the step limit stands for.
constexpr std::size_t kBytesPerStep = 256;

void Interpreter::produced(std::size_t bytes) {
  check_size(bytes);
  charge(bytes / kBytesPerStep);
}

void Interpreter::emit(std::string& out, const std::string& piece) {
  charge(piece.size() / kBytesPerStep);
  out += piece;
  check_size(out.size());
}

Interpreter::DepthGuard::DepthGuard(Interpreter& interp) : I(interp) {
  if (++I.depth_ > I.limits_.max_depth) {
    --I.depth_;
    I.fail("maximum recursion depth exceeded: the template passed the depth limit (" +
           std::to_string(I.limits_.max_depth) + ") of nested calls, blocks and expressions");
  }
}

[[noreturn]] static void fail_undefined(const Interpreter& I, const Value& v) {
  I.fail(v.str().empty() ? std::string("value is undefined") : v.str());
}

std::string Interpreter::render(const Body& body) {
  std::string out;
  Flow f = exec(body, root_, out);
  (void)f;
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& n : body) {
    Flow f = exec_node(*n, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_node(const Node& n, const ScopePtr& scope, std::string& out) {
  step();
  DepthGuard depth(*this);
  line_ = n.line;
  switch (n.k) {
    case Node::K::Text:
      emit(out, n.text);
      return Flow::Normal;
    case Node::K::Output: {
      Value v = eval(*n.expr, scope);
      emit(out, v.to_str());
      return Flow::Normal;
    }
    case Node::K::If:
      for (const auto& [cond, body] : n.branches) {
        line_ = cond->line;
        if (eval(*cond, scope).truthy()) return exec(body, scope, out);
      }
      return exec(n.else_body, scope, out);
    case Node::K::For:
      exec_for(n, scope, out);
      return Flow::Normal;
    case Node::K::Set:
      assign(*n.target, eval(*n.expr, scope), scope);
      return Flow::Normal;
    case Node::K::SetBlock: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      std::string buf;
      exec(n.body, inner, buf);
      Value v(std::move(buf));
      if (n.filter) {
        const Value* saved = block_input_;
        block_input_ = &v;
        Value r = eval(*n.filter, scope);
        block_input_ = saved;
        v = std::move(r);
      }
      line_ = n.line;
      assign(*n.target, std::move(v), scope);
      return Flow::Normal;
    }
    case Node::K::FilterBlock: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      std::string buf;
      exec(n.body, inner, buf);
      Value v(std::move(buf));
      const Value* saved = block_input_;
      block_input_ = &v;
      line_ = n.line;
      Value r = eval(*n.filter, scope);
      block_input_ = saved;
      emit(out, r.to_str());
      return Flow::Normal;
    }
    case Node::K::Macro:
      scope->vars[n.name] = make_macro(n, scope);
      return Flow::Normal;
    case Node::K::CallBlock:
      exec_call_block(n, scope, out);
      return Flow::Normal;
    case Node::K::With: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      for (const auto& [name, e] : n.params) inner->vars[name] = eval(*e, scope);
      return exec(n.body, inner, out);
    }
    case Node::K::Scope:
      return exec(n.body, scope, out);
    case Node::K::Break:
      return Flow::Break;
    case Node::K::Continue:
      return Flow::Continue;
  }
  return Flow::Normal;
}

// {% call fn(args) %}body{% endcall %}: calls fn with a `caller` keyword, a
// function that renders the body.
void Interpreter::exec_call_block(const Node& n, const ScopePtr& scope, std::string& out) {
  // caller() renders the block body in the current scope.
  std::weak_ptr<Scope> weak = scope;
  const Node* node = &n;
  Value caller = Value::function("caller", [this, weak, node](Interpreter& I, Args& a) -> Value {
    auto parent = weak.lock();
    if (!parent) I.fail("caller() used outside of its call block");
    auto s = std::make_shared<Scope>();
    s->parent = parent;
    for (std::size_t i = 0; i < node->params.size(); ++i) {
      const auto& [pname, def] = node->params[i];
      const Value* v = arg(a, i, pname.c_str());
      s->vars[pname] =
          v ? *v : (def ? eval(*def, s) : Value::undefined("'" + pname + "' is undefined"));
    }
    std::string buf;
    exec(node->body, s, buf);
    return Value(std::move(buf));
  });
  const Expr& call_expr = *n.expr;
  Value fn = eval(*call_expr.children[0], scope);
  Args args = eval_args(call_expr, scope);
  args.kw.emplace_back("caller", caller);
  line_ = n.line;
  emit(out, call(fn, args).to_str());
}

// ===================================================================== statements

namespace {
void bind_targets(Interpreter& I, const std::vector<std::string>& targets, const Value& item, Scope& s) {
  if (targets.size() == 1) {
    s.vars[targets[0]] = item;
    return;
  }
  List parts = I.iterate(item);
  if (parts.size() != targets.size())
    I.fail(parts.size() > targets.size() ? "too many values to unpack (expected " + std::to_string(targets.size()) + ")"
                                         : "not enough values to unpack (expected " + std::to_string(targets.size()) +
                                               ", got " + std::to_string(parts.size()) + ")");
  for (std::size_t i = 0; i < targets.size(); ++i) s.vars[targets[i]] = parts[i];
}
}  // namespace

void Interpreter::exec_for(const Node& n, const ScopePtr& scope, std::string& out) {
  line_ = n.line;
  Value seq = eval(*n.expr, scope);
  line_ = n.line;
  List items = iterate(seq);
  if (n.cond) {
    List kept;
    for (auto& item : items) {
      step();
      auto s = std::make_shared<Scope>();
      s->parent = scope;
      bind_targets(*this, n.targets, item, *s);
      if (eval(*n.cond, s).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(n.else_body, scope, out);
    return;
  }
  const auto len = static_cast<std::int64_t>(items.size());
  // One scope and one loop object per for statement, refreshed per iteration
  // (variables set in the body do not survive into the next iteration).
  auto s = std::make_shared<Scope>();
  s->parent = scope;
  auto counter = std::make_shared<std::int64_t>(0);
  Value loop = Value::dict();
  Dict& d = loop.dict_ref();
  for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0",
                          "previtem", "nextitem"})
    d.entries.emplace_back(Value(key), Value());
  d.entries.emplace_back(Value("cycle"), Value::function("cycle", [counter](Interpreter& I, Args& a) -> Value {
                           if (a.pos.empty()) I.fail("no items for cycling given");
                           return a.pos[static_cast<std::size_t>(*counter) % a.pos.size()];
                         }));
  // loop.previtem / nextitem hold the items: the loop object nests them.
  for (const auto& item : items) {
    d.depth = std::max(d.depth, item.depth() + 1);
    d.has_ns = d.has_ns || item.holds_namespace();
  }
  const std::size_t base_vars = n.targets.size() + 1;
  for (std::int64_t i = 0; i < len; ++i) {
    step();
    if (s->vars.size() > base_vars) s->vars.clear();
    bind_targets(*this, n.targets, items[i], *s);
    *counter = i;
    d.entries[0].second = Value(i + 1);
    d.entries[1].second = Value(i);
    d.entries[2].second = Value(len - i);
    d.entries[3].second = Value(len - i - 1);
    d.entries[4].second = Value(i == 0);
    d.entries[5].second = Value(i == len - 1);
    d.entries[6].second = Value(len);
    d.entries[7].second = Value(1);
    d.entries[8].second = Value(0);
    d.entries[9].second = i > 0 ? items[i - 1] : Value::undefined("there is no previous item");
    d.entries[10].second = i + 1 < len ? items[i + 1] : Value::undefined("there is no next item");
    s->vars["loop"] = loop;
    Flow f = exec(n.body, s, out);
    if (f == Flow::Break) break;
  }
}

void Interpreter::assign(const Expr& t, Value v, const ScopePtr& scope) {
  if (t.k == Expr::K::Name) {
    scope->vars[t.name] = std::move(v);
    return;
  }
  if (t.k == Expr::K::Tuple) {
    List parts = iterate(v);
    if (parts.size() != t.children.size()) fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(t.children.size()) + " names");
    for (std::size_t i = 0; i < parts.size(); ++i) scope->vars[t.children[i]->name] = parts[i];
    return;
  }
  if (t.k == Expr::K::Attr) {
    const std::string& base = t.children[0]->name;
    Value* ns = scope->lookup(base);
    if (!ns) fail("'" + base + "' is undefined");
    if (!ns->is_namespace()) fail("cannot assign attribute on non-namespace object");
    // A namespace inside a namespace can close a cycle (ns.a = ns), which
    // comparing or printing would follow forever; chat templates never need it.
    if (v.holds_namespace()) fail("cannot store a namespace in a namespace attribute");
    ns->dict_ref().set(Value(t.name), std::move(v));
    return;
  }
  fail("can't assign to this expression");
}

Value Interpreter::make_macro(const Node& n, const ScopePtr& scope) {
  std::weak_ptr<Scope> weak = scope;
  const Node* node = &n;
  return Value::function(n.name, [this, weak, node](Interpreter& I, Args& a) -> Value {
    auto parent = weak.lock();
    if (!parent) I.fail("macro '" + node->name + "' called outside of the scope it was defined in");
    if (a.pos.size() > node->params.size())
      I.fail("macro '" + node->name + "' takes not more than " + std::to_string(node->params.size()) + " argument(s)");
    auto s = std::make_shared<Scope>();
    s->parent = parent;
    for (const auto& [k, v] : a.kw) {
      bool known = k == "caller";
      for (const auto& p : node->params) known = known || p.first == k;
      if (!known) I.fail("macro '" + node->name + "' takes no keyword argument '" + k + "'");
      if (k == "caller") s->vars["caller"] = v;
    }
    for (std::size_t i = 0; i < node->params.size(); ++i) {
      const auto& [pname, def] = node->params[i];
      const Value* v = arg(a, i, pname.c_str());
      if (v) s->vars[pname] = *v;
      else if (def) s->vars[pname] = eval(*def, s);
      else s->vars[pname] = Value::undefined("parameter '" + pname + "' was not provided");
    }
    std::string buf;
    exec(node->body, s, buf);
    return Value(std::move(buf));
  });
}

// ===================================================================== expressions

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  step();
  DepthGuard depth(*this);
  return eval_expr(e, scope);
}

Value Interpreter::eval_expr(const Expr& e, const ScopePtr& scope) {
  switch (e.k) {
    case Expr::K::Literal:
      return e.literal;
    case Expr::K::Name: {
      if (Value* v = scope->lookup(e.name)) {
        // Strings are copied by value: referencing a big one costs its size.
        if (v->is_string()) charge(v->str().size() / kBytesPerStep);
        return *v;
      }
      return Value::undefined("'" + e.name + "' is undefined");
    }
    case Expr::K::List:
    case Expr::K::Tuple: {
      List items;
      items.reserve(e.children.size());
      for (const auto& c : e.children) items.push_back(eval(*c, scope));
      return e.k == Expr::K::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case Expr::K::Dict: {
      Value d = Value::dict();
      for (std::size_t i = 0; i + 1 < e.children.size(); i += 2) {
        Value k = eval(*e.children[i], scope);
        d.dict_ref().set(std::move(k), eval(*e.children[i + 1], scope));
      }
      return d;
    }
    case Expr::K::Attr: {
      Value v = eval(*e.children[0], scope);
      line_ = e.line;
      if (v.is_undefined()) fail_undefined(*this, v);
      return getattr(v, e.name);
    }
    case Expr::K::Item: {
      Value v = eval(*e.children[0], scope);
      Value k = eval(*e.children[1], scope);
      line_ = e.line;
      if (v.is_undefined()) fail_undefined(*this, v);
      return getitem(v, k);
    }
    case Expr::K::Slice:
      return eval_slice(e, scope);
    case Expr::K::Call:
      return eval_call(e, scope);
    case Expr::K::Filter: {
      Value input;
      if (e.children[0]) input = eval(*e.children[0], scope);
      else if (block_input_) input = *block_input_;
      Args args = eval_args(e, scope);
      line_ = e.line;
      return apply_filter(e.name, std::move(input), args);
    }
    case Expr::K::Test: {
      Value input = eval(*e.children[0], scope);
      Args args = eval_args(e, scope);
      line_ = e.line;
      return Value(apply_test(e.name, input, args) != e.negated);
    }
    case Expr::K::Unary:
      return eval_unary(e, scope);
    case Expr::K::Binary: {
      Value a = eval(*e.children[0], scope);
      Value b = eval(*e.children[1], scope);
      line_ = e.line;
      return eval_binary(e.op, a, b);
    }
    case Expr::K::And: {
      Value a = eval(*e.children[0], scope);
      if (!a.truthy()) return a;
      return eval(*e.children[1], scope);
    }
    case Expr::K::Or: {
      Value a = eval(*e.children[0], scope);
      if (a.truthy()) return a;
      return eval(*e.children[1], scope);
    }
    case Expr::K::Compare: {
      Value left = eval(*e.children[0], scope);
      for (std::size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.children[i + 1], scope);
        line_ = e.line;
        if (!compare(e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case Expr::K::Cond: {
      if (eval(*e.children[1], scope).truthy()) return eval(*e.children[0], scope);
      if (e.children[2]) return eval(*e.children[2], scope);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
  }
  return Value();
}

// not x, +x, -x.
Value Interpreter::eval_unary(const Expr& e, const ScopePtr& scope) {
  Value v = eval(*e.children[0], scope);
  line_ = e.line;
  if (e.op == "not") return Value(!v.truthy());
  if (v.is_undefined()) fail_undefined(*this, v);
  if (!v.is_number()) fail("bad operand type for unary " + e.op + ": '" + v.type_name() + "'");
  if (e.op == "+") return v.is_float() ? Value(v.as_float()) : Value(v.as_int());
  return v.is_float() ? Value(-v.as_float()) : Value(-v.as_int());
}

// The arguments of a call, filter or test: children 1.. then the keywords.
Args Interpreter::eval_args(const Expr& e, const ScopePtr& scope) {
  Args args;
  for (std::size_t i = 1; i < e.children.size(); ++i)
    args.pos.push_back(eval(*e.children[i], scope));
  for (const auto& [k, x] : e.kwargs) args.kw.emplace_back(k, eval(*x, scope));
  return args;
}

// obj.method(...) looks the method up on the evaluated object; any other
// callee is an expression.
Value Interpreter::eval_call(const Expr& e, const ScopePtr& scope) {
  const Expr& callee = *e.children[0];
  Value fn;
  if (callee.k == Expr::K::Attr) {
    Value obj = eval(*callee.children[0], scope);
    line_ = e.line;
    if (obj.is_undefined()) fail_undefined(*this, obj);
    fn = getattr(obj, callee.name);
  } else {
    fn = eval(callee, scope);
  }
  Args args = eval_args(e, scope);
  line_ = e.line;
  return call(fn, args);
}

// v[start:stop:step] on a string (by code point), list or tuple.
Value Interpreter::eval_slice(const Expr& e, const ScopePtr& scope) {
  Value v = eval(*e.children[0], scope);
  Value parts[3];
  for (int i = 0; i < 3; ++i)
    parts[i] = e.children[i + 1] ? eval(*e.children[i + 1], scope) : Value::none();
  line_ = e.line;
  if (v.is_undefined()) fail_undefined(*this, v);
  for (const auto& p : parts)
    if (!p.is_none() && !(p.is_int() || p.is_bool()))
      fail("slice indices must be integers or None");
  try {
    if (v.is_string()) {
      std::u32string u = utf8_decode(v.str());
      std::u32string r;
      for (auto i :
           slice_indices(static_cast<std::int64_t>(u.size()), parts[0], parts[1], parts[2]))
        r += u[i];
      return Value(utf8_encode(r));
    }
    if (v.is_sequence_like()) {
      const List& l = v.items();
      List r;
      for (auto i :
           slice_indices(static_cast<std::int64_t>(l.size()), parts[0], parts[1], parts[2]))
        r.push_back(l[i]);
      return v.is_tuple() ? Value::tuple(std::move(r)) : Value::list(std::move(r));
    }
  } catch (const std::invalid_argument& ex) {
    fail(ex.what());
  }
  return Value::undefined("'" + v.type_name() + " object' is not subscriptable");
}

// a * b where one is a string, list or tuple and the other an int: the
// sequence repeated (empty if the count is <= 0).
Value Interpreter::multiply_sequence(const std::string& op, const Value& a, const Value& b) {
  const Value* seq = nullptr;
  const Value* cnt = nullptr;
  if ((a.is_string() || a.is_sequence_like()) && (b.is_int() || b.is_bool())) {
    seq = &a;
    cnt = &b;
  } else if ((b.is_string() || b.is_sequence_like()) && (a.is_int() || a.is_bool())) {
    seq = &b;
    cnt = &a;
  }
  if (!seq) {
    if (a.is_string() || b.is_string())
      fail("can't multiply sequence by non-int of type '" + (a.is_string() ? b : a).type_name() +
           "'");
    fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
         b.type_name() + "'");
  }
  return repeat(*seq, *cnt);
}

// seq * n: a string, list or tuple repeated n times (none if n <= 0).
Value Interpreter::repeat(const Value& seq, const Value& cnt) {
  std::int64_t n = std::max<std::int64_t>(0, cnt.as_int());
  // Size checked before building: n * size may not even fit in size_t.
  const std::size_t unit = seq.is_string() ? seq.str().size() : copy_bytes(seq.items());
  if (n > 0 && unit > 0 && static_cast<std::size_t>(n) > limits_.max_output_bytes / unit)
    check_size(limits_.max_output_bytes + 1);
  produced(static_cast<std::size_t>(n) * unit);
  if (seq.is_string()) {
    std::string r;
    for (std::int64_t i = 0; i < n; ++i) r += seq.str();
    return Value(std::move(r));
  }
  List r;
  for (std::int64_t i = 0; i < n; ++i) r.insert(r.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(r)) : Value::list(std::move(r));
}

// base ** ex for ex >= 0 by squaring, into r; false on overflow.
static bool int_pow(std::int64_t base, std::int64_t ex, std::int64_t& r) {
  r = 1;
  bool overflow = false;
  while (ex > 0 && !overflow) {
    if (ex & 1) overflow |= __builtin_mul_overflow(r, base, &r);
    ex >>= 1;
    if (ex > 0) overflow |= __builtin_mul_overflow(base, base, &base);
  }
  return !overflow;
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = a.to_str() + b.to_str();
    produced(s.size());
    return Value(std::move(s));
  }
  if (a.is_undefined()) fail_undefined(*this, a);
  if (b.is_undefined()) fail_undefined(*this, b);
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && !a.is_float() && !b.is_float();
  auto type_err = [&]() {
    fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  if (op == "+") {
    if (ints) {
      std::int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) return Value(a.as_float() + b.as_float());
      return Value(r);
    }
    if (nums) return Value(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) {
      produced(a.str().size() + b.str().size());
      return Value(a.str() + b.str());
    }
    if (a.kind() == b.kind() && a.is_sequence_like()) {
      produced(copy_bytes(a.items()) + copy_bytes(b.items()));
      List r = a.items();
      r.insert(r.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(r)) : Value::list(std::move(r));
    }
    if (a.is_string()) fail("can only concatenate str (not \"" + b.type_name() + "\") to str");
    if (a.is_list()) fail("can only concatenate list (not \"" + b.type_name() + "\") to list");
    type_err();
  }
  if (op == "-") {
    if (ints) {
      std::int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) return Value(a.as_float() - b.as_float());
      return Value(r);
    }
    if (nums) return Value(a.as_float() - b.as_float());
    type_err();
  }
  if (op == "*") {
    if (ints) {
      std::int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) return Value(a.as_float() * b.as_float());
      return Value(r);
    }
    if (nums) return Value(a.as_float() * b.as_float());
    return multiply_sequence(op, a, b);
  }
  if (op == "/") {
    if (!nums) type_err();
    if (b.as_float() == 0.0) fail("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//") {
    if (!nums) type_err();
    if (ints) {
      if (b.as_int() == 0) fail("integer division or modulo by zero");
      if (b.as_int() == -1 && a.as_int() == INT64_MIN) return Value(-a.as_float());
      return Value(floordiv(a.as_int(), b.as_int()));
    }
    if (b.as_float() == 0.0) fail("float floor division by zero");
    return Value(std::floor(a.as_float() / b.as_float()));
  }
  if (op == "%") {
    if (a.is_string()) return Value(percent_format(*this, a.str(), b));
    if (!nums) type_err();
    if (ints) {
      if (b.as_int() == 0) fail("integer division or modulo by zero");
      if (b.as_int() == -1) return Value(std::int64_t{0});
      return Value(pymod(a.as_int(), b.as_int()));
    }
    if (b.as_float() == 0.0) fail("float modulo");
    return Value(pyfmod(a.as_float(), b.as_float()));
  }
  if (op == "**") {
    if (!nums) type_err();
    if (ints && b.as_int() >= 0) {
      std::int64_t r;
      if (int_pow(a.as_int(), b.as_int(), r)) return Value(r);
      return Value(std::pow(a.as_float(), b.as_float()));
    }
    if (a.as_float() == 0.0 && b.as_float() < 0) fail("0.0 cannot be raised to a negative power");
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  fail("unknown operator " + op);
}

bool Interpreter::compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) fail_undefined(*this, a);
  if (b.is_undefined()) fail_undefined(*this, b);
  try {
    if (op == "<") return less_than(a, b);
    if (op == ">") return less_than(b, a);
    if (op == "<=") return less_than(a, b) || equals(a, b);
    if (op == ">=") return less_than(b, a) || equals(a, b);
  } catch (const std::invalid_argument& ex) {
    std::string msg = ex.what();
    if (op != "<") {
      auto p = msg.find("'<'");
      if (p != std::string::npos) msg.replace(p, 3, "'" + op + "'");
    }
    fail(msg);
  }
  fail("unknown comparison " + op);
}

bool Interpreter::contains(const Value& c, const Value& item) {
  switch (c.kind()) {
    case Value::Kind::String:
      if (!item.is_string()) fail("'in <string>' requires string as left operand, not " + item.type_name());
      return c.str().find(item.str()) != std::string::npos;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      for (const auto& x : c.items())
        if (equals(x, item)) return true;
      return false;
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
      return c.dict_ref().find(item) != nullptr;
    case Value::Kind::Undefined:
      return false;
    default:
      fail("argument of type '" + c.type_name() + "' is not iterable");
  }
}

// Every loop and sequence filter copies its input through here: charging the
// copy keeps a loop over a big list inside a loop within the step budget.
List Interpreter::iterate(const Value& v) {
  List items = iterate_items(v);
  charge(copy_bytes(items) / kBytesPerStep);
  return items;
}

List Interpreter::iterate_items(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::List:
    case Value::Kind::Tuple:
      return v.items();
    case Value::Kind::Dict: {
      List keys;
      for (const auto& e : v.dict_ref().entries) keys.push_back(e.first);
      return keys;
    }
    case Value::Kind::String: {
      List chars;
      for (char32_t c : utf8_decode(v.str())) {
        std::string s;
        utf8_append(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    case Value::Kind::Undefined:
      return {};
    default:
      fail("'" + v.type_name() + "' object is not iterable");
  }
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Dict:
      if (in_list(kDictMethods, name)) return method(obj, name);
      if (const Value* v = obj.dict_ref().find_str(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    case Value::Kind::Namespace:
      if (const Value* v = obj.dict_ref().find_str(name)) return *v;
      return Value::undefined("'Namespace object' has no attribute '" + name + "'");
    case Value::Kind::String:
      if (in_list(kStrMethods, name)) return method(obj, name);
      return Value::undefined("'str object' has no attribute '" + name + "'");
    case Value::Kind::List:
    case Value::Kind::Tuple:
      if (in_list(kListMethods, name)) return method(obj, name);
      return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
    case Value::Kind::Undefined:
      fail_undefined(*this, obj);
    case Value::Kind::None:
      return Value::undefined("'None' has no attribute '" + name + "'");
    default:
      return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  }
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  if ((obj.is_sequence_like() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    std::int64_t i = key.as_int();
    if (obj.is_string()) {
      std::u32string u = utf8_decode(obj.str());
      auto n = static_cast<std::int64_t>(u.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("'str object' has no element " + key.to_str());
      std::string s;
      utf8_append(s, u[static_cast<std::size_t>(i)]);
      return Value(std::move(s));
    }
    const List& l = obj.items();
    auto n = static_cast<std::int64_t>(l.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("'" + obj.type_name() + " object' has no element " + key.to_str());
    return l[static_cast<std::size_t>(i)];
  }
  if (obj.is_mapping()) {
    if (const Value* v = obj.dict_ref().find(key)) return *v;
  }
  if (key.is_string() && !obj.is_namespace()) {
    Value r = getattr(obj, key.str());
    return r;
  }
  return Value::undefined("'" + obj.type_name() + " object' has no attribute " + key.repr());
}

Value Interpreter::call(const Value& fn, Args& args) {
  if (!fn.is_function()) {
    if (fn.is_undefined()) fail_undefined(*this, fn);
    fail("'" + fn.type_name() + "' object is not callable");
  }
  DepthGuard depth(*this);
  int saved_line = line_;
  Value r = fn.fn().fn(*this, args);
  line_ = saved_line;
  return r;
}

// ===================================================================== methods

namespace {

std::int64_t cp_index(const std::string& s, std::size_t byte_pos) {
  return py_len(s.substr(0, byte_pos));
}

// str.isdigit() and the other is*() predicates (`name`).
Value str_predicate(const std::string& s, const std::string& name) {
  std::u32string u = utf8_decode(s);
  if (u.empty()) return Value(false);
  bool cased = false;
  for (char32_t c : u) {
    auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    bool digit = cat == UTF8PROC_CATEGORY_ND;
    bool alpha = is_alpha_cp(c);
    if (name == "isdigit" && !digit) return Value(false);
    if (name == "isalpha" && !alpha) return Value(false);
    if (name == "isalnum" && !alpha && !digit) return Value(false);
    if (name == "isspace" && !py_isspace(c)) return Value(false);
    if (name == "islower") {
      if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return Value(false);
      if (cat == UTF8PROC_CATEGORY_LL) cased = true;
    }
    if (name == "isupper") {
      if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) return Value(false);
      if (cat == UTF8PROC_CATEGORY_LU) cased = true;
    }
  }
  if (name == "islower" || name == "isupper") return Value(cased);
  return Value(true);
}

// str.splitlines() without keepends: splits at \n, \r and \r\n.
Value str_splitlines(const std::string& s) {
  List out;
  std::size_t b = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      out.emplace_back(s.substr(b, i - b));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      b = i + 1;
    }
  }
  if (b < s.size()) out.emplace_back(s.substr(b));
  return Value::list(std::move(out));
}

// str.center(), ljust(), rjust() and zfill() (`name`).
Value str_pad(Interpreter& I, const std::string& s, const std::string& name, Args& a) {
  const Value* w = arg(a, 0, "width");
  if (!w || !(w->is_int() || w->is_bool())) I.fail(name + "() needs an integer width");
  std::int64_t width = w->as_int(), len = py_len(s);
  if (width > static_cast<std::int64_t>(1 << 24)) I.fail(name + "() width too large");
  std::string fill = " ";
  if (name == "zfill") fill = "0";
  if (const Value* f = arg(a, 1, "fillchar"); f && f->is_string()) fill = f->str();
  if (len >= width) return Value(s);
  std::int64_t pad = width - len, left = 0;
  if (name == "center")
    left = pad / 2 + ((pad & width & 1) ? 1 : 0);
  else if (name == "rjust" || name == "zfill")
    left = pad;
  std::string r;
  for (std::int64_t i = 0; i < left; ++i) r += fill;
  r += s;
  for (std::int64_t i = 0; i < pad - left; ++i) r += fill;
  return Value(std::move(r));
}

// str.startswith() and endswith() (`name`), with a string or a tuple of them.
Value str_affix(Interpreter& I, const std::string& s, const std::string& name, Args& a) {
  const Value* p = arg(a, 0, "prefix");
  if (!p) I.fail(name + "() takes at least 1 argument (0 given)");
  List cands;
  if (p->is_sequence_like())
    cands = p->items();
  else
    cands.push_back(*p);
  for (const auto& c : cands) {
    if (!c.is_string())
      I.fail(name + " first arg must be str or a tuple of str, not " + c.type_name());
    const std::string& x = c.str();
    if (x.size() > s.size()) continue;
    if (name == "startswith" ? s.compare(0, x.size(), x) == 0
                             : s.compare(s.size() - x.size(), x.size(), x) == 0)
      return Value(true);
  }
  return Value(false);
}

Value call_str_method(Interpreter& I, const std::string& s, const std::string& name, Args& a) {
  auto opt_str = [&](std::size_t pos, const char* kw) -> const Value* {
    const Value* v = arg(a, pos, kw);
    if (v && !v->is_none() && !v->is_string()) I.fail(name + " arg must be None or str");
    return v;
  };
  if (name == "strip") return Value(py_strip(s, opt_str(0, "chars"), true, true));
  if (name == "lstrip") return Value(py_strip(s, opt_str(0, "chars"), true, false));
  if (name == "rstrip") return Value(py_strip(s, opt_str(0, "chars"), false, true));
  if (name == "startswith" || name == "endswith") return str_affix(I, s, name, a);
  if (name == "split" || name == "rsplit") {
    const Value* sep = opt_str(0, "sep");
    const Value* maxs = arg(a, 1, "maxsplit");
    std::int64_t m = maxs ? maxs->as_int() : -1;
    try {
      return Value::list(py_split(s, sep, m, name == "rsplit" && sep && sep->is_string()));
    } catch (const std::invalid_argument& e) {
      I.fail(e.what());
    }
  }
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower" || name == "casefold") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "replace") {
    const Value* o = arg(a, 0, "old");
    const Value* n = arg(a, 1, "new");
    const Value* c = arg(a, 2, "count");
    if (!o || !n || !o->is_string() || !n->is_string()) I.fail("replace() needs two string arguments");
    std::string r = py_replace(s, o->str(), n->str(), c ? c->as_int() : -1);
    I.produced(r.size());
    return Value(std::move(r));
  }
  if (name == "format") return Value(brace_format(I, s, a));
  if (name == "join") {
    const Value* it = arg(a, 0, "iterable");
    if (!it) I.fail("join() takes exactly one argument");
    std::string r;
    bool first = true;
    for (const auto& x : I.iterate(*it)) {
      if (!x.is_string()) I.fail("sequence item: expected str instance, " + x.type_name() + " found");
      if (!first) r += s;
      first = false;
      r += x.str();
      I.check_size(r.size());
    }
    I.produced(r.size());
    return Value(std::move(r));
  }
  if (name == "find" || name == "rfind" || name == "index") {
    std::string sub = str_arg(I, arg(a, 0, "sub"), "substring");
    std::size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name == "index") I.fail("substring not found");
      return Value(std::int64_t{-1});
    }
    return Value(cp_index(s, p));
  }
  if (name == "count") {
    std::string sub = str_arg(I, arg(a, 0, "sub"), "substring");
    if (sub.empty()) return Value(py_len(s) + 1);
    std::int64_t n = 0;
    for (std::size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value(n);
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "islower" || name == "isupper")
    return str_predicate(s, name);
  if (name == "splitlines") return str_splitlines(s);
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill")
    return str_pad(I, s, name, a);
  if (name == "removeprefix" || name == "removesuffix") {
    std::string x = str_arg(I, arg(a, 0, "prefix"), name.c_str());
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0 && x.size() <= s.size()) return Value(s.substr(x.size()));
    if (name == "removesuffix" && x.size() <= s.size() && !x.empty() && s.compare(s.size() - x.size(), x.size(), x) == 0)
      return Value(s.substr(0, s.size() - x.size()));
    return Value(s);
  }
  if (name == "partition" || name == "rpartition") {
    std::string sep = str_arg(I, arg(a, 0, "sep"), "separator");
    if (sep.empty()) I.fail("empty separator");
    std::size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos)
      return name == "partition" ? Value::tuple({Value(s), Value(""), Value("")}) : Value::tuple({Value(""), Value(""), Value(s)});
    return Value::tuple({Value(s.substr(0, p)), Value(sep), Value(s.substr(p + sep.size()))});
  }
  I.fail("str." + name + "() is not supported");
}

}  // namespace

Value Interpreter::method(const Value& obj, const std::string& name) {
  return Value::function(name, [obj, name](Interpreter& I, Args& a) -> Value {
    if (obj.is_string()) return call_str_method(I, obj.str(), name, a);
    if (obj.is_dict()) {
      const Dict& d = obj.dict_ref();
      if (name == "items") {
        List r;
        for (const auto& [k, v] : d.entries) r.push_back(Value::tuple({k, v}));
        return Value::list(std::move(r));
      }
      if (name == "keys" || name == "values") {
        List r;
        for (const auto& [k, v] : d.entries) r.push_back(name == "keys" ? k : v);
        return Value::list(std::move(r));
      }
      if (name == "get") {
        const Value* k = arg(a, 0, "key");
        if (!k) I.fail("get expected at least 1 argument, got 0");
        if (const Value* v = d.find(*k)) return *v;
        const Value* def = arg(a, 1, "default");
        return def ? *def : Value::none();
      }
      if (name == "copy") {
        Value c = Value::dict();
        c.dict_ref().entries = d.entries;
        return c;
      }
      I.fail("access to attribute '" + name + "' of 'dict' object is unsafe.");
    }
    if (obj.is_sequence_like()) {
      const List& l = obj.items();
      if (name == "index" || name == "count") {
        const Value* x = arg(a, 0, "value");
        if (!x) I.fail(name + "() takes exactly one argument");
        std::int64_t n = 0;
        for (std::size_t i = 0; i < l.size(); ++i) {
          if (equals(l[i], *x)) {
            if (name == "index") return Value(static_cast<std::int64_t>(i));
            ++n;
          }
        }
        if (name == "index") I.fail(x->repr() + " is not in list");
        return Value(n);
      }
      if (name == "copy") return Value::list(l);
      I.fail("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
    }
    I.fail("'" + obj.type_name() + "' object has no method '" + name + "'");
  });
}

// ===================================================================== filters

namespace {

const char* kFilters[] = {"abs", "attr", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
                          "first", "float", "forceescape", "format", "indent", "int", "items", "join", "last",
                          "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace",
                          "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title",
                          "tojson", "trim", "unique", "upper", "wordcount"};
const char* kTests[] = {"boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even",
                        "false", "filter", "float", "ge", ">=", "gt", ">", "greaterthan", "in", "integer", "iterable",
                        "le", "<=", "lower", "lt", "<", "lessthan", "mapping", "ne", "!=", "none", "number", "odd",
                        "sameas", "sequence", "string", "test", "true", "undefined", "upper"};

bool arg_bool(const Value* v, bool def) { return v ? v->truthy() : def; }

// environment.getitem-based attribute path ("a.b.0"), as jinja's make_attrgetter.
Value attr_path(Interpreter& I, Value item, const Value& attribute, const Value* def) {
  List parts;
  if (attribute.is_string()) {
    const std::string& s = attribute.str();
    std::size_t b = 0;
    while (true) {
      std::size_t e = s.find('.', b);
      std::string p = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
      bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
      if (digits) parts.emplace_back(static_cast<std::int64_t>(std::stoll(p)));
      else parts.emplace_back(std::move(p));
      if (e == std::string::npos) break;
      b = e + 1;
    }
  } else {
    parts.push_back(attribute);
  }
  for (const auto& p : parts) {
    if (item.is_undefined()) break;
    item = I.getitem(item, p);
    if (item.is_undefined() && def) return *def;
  }
  return item;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

// A filter's implementation. `name` is the name it was called by: a few
// filters share one (select/reject, sort/unique/max/min) and the errors name
// the one used. `v` is the filter's input, passed on by value as
// apply_filter got it (so `safe` and `default` return it without a copy).
using FilterFn = Value (*)(Interpreter& I, const std::string& name, Value v, Args& a);

Value filter_safe(Interpreter&, const std::string&, Value v, Args&) { return v; }
Value filter_string(Interpreter&, const std::string&, Value v, Args&) { return Value(v.to_str()); }
Value filter_trim(Interpreter&, const std::string&, Value v, Args& a) {
  const Value* chars = arg(a, 0, "chars");
  return Value(py_strip(v.to_str(), chars, true, true));
}
Value filter_upper(Interpreter&, const std::string&, Value v, Args&) {
  return Value(py_upper(v.to_str()));
}
Value filter_lower(Interpreter&, const std::string&, Value v, Args&) {
  return Value(py_lower(v.to_str()));
}
Value filter_capitalize(Interpreter&, const std::string&, Value v, Args&) {
  return Value(py_capitalize(v.to_str()));
}
Value filter_title(Interpreter&, const std::string&, Value v, Args&) {
  return Value(jinja_title(v.to_str()));
}
Value filter_escape(Interpreter&, const std::string&, Value v, Args&) {
  return Value(html_escape(v.to_str()));
}

Value filter_length(Interpreter& I, const std::string&, Value v, Args&) {
  switch (v.kind()) {
    case Value::Kind::String:
      return Value(py_len(v.str()));
    case Value::Kind::List:
    case Value::Kind::Tuple:
      return Value(static_cast<std::int64_t>(v.items().size()));
    case Value::Kind::Dict:
      return Value(static_cast<std::int64_t>(v.dict_ref().entries.size()));
    case Value::Kind::Undefined:
      return Value(std::int64_t{0});
    default:
      I.fail("object of type '" + v.type_name() + "' has no len()");
  }
}

Value filter_default(Interpreter&, const std::string&, Value v, Args& a) {
  const Value* def = arg(a, 0, "default_value");
  bool boolean = arg_bool(arg(a, 1, "boolean"), false);
  if (v.is_undefined() || (boolean && !v.truthy())) return def ? *def : Value("");
  return v;
}

Value filter_join(Interpreter& I, const std::string&, Value v, Args& a) {
  const Value* sep = arg(a, 0, "d");
  const Value* attribute = arg(a, 1, "attribute");
  std::string d = sep ? sep->to_str() : "";
  std::string r;
  bool first = true;
  for (auto& x : I.iterate(v)) {
    if (!first) r += d;
    first = false;
    r += (attribute ? attr_path(I, x, *attribute, nullptr) : x).to_str();
    I.check_size(r.size());
  }
  I.produced(r.size());
  return Value(std::move(r));
}

Value filter_tojson(Interpreter& I, const std::string&, Value v, Args& a) {
  JsonOptions o;
  o.ensure_ascii = arg_bool(arg(a, 0, "ensure_ascii"), false);
  const Value* indent = arg(a, 1, "indent");
  const Value* seps = arg(a, 2, "separators");
  o.sort_keys = arg_bool(arg(a, 3, "sort_keys"), false);
  if (indent && !indent->is_none()) {
    if (indent->is_string())
      o.indent = indent->str();
    else if (indent->is_int() || indent->is_bool())
      o.indent = std::string(
          static_cast<std::size_t>(std::clamp<std::int64_t>(indent->as_int(), 0, 1024)), ' ');
    else
      I.fail("tojson: indent must be an integer or a string");
    o.item_separator = ",";
  }
  if (seps && !seps->is_none()) {
    if (!seps->is_sequence_like() || seps->items().size() != 2 || !seps->items()[0].is_string() ||
        !seps->items()[1].is_string())
      I.fail("tojson: separators must be a pair of strings");
    o.item_separator = seps->items()[0].str();
    o.key_separator = seps->items()[1].str();
  }
  try {
    return Value(to_json(v, o));
  } catch (const std::invalid_argument& e) {
    I.fail(e.what());
  }
}

Value filter_items(Interpreter& I, const std::string&, Value v, Args&) {
  if (v.is_undefined()) return Value::list();
  if (!v.is_mapping()) I.fail("Can only get item pairs from a mapping.");
  List r;
  for (const auto& [k, x] : v.dict_ref().entries) r.push_back(Value::tuple({k, x}));
  return Value::list(std::move(r));
}

Value filter_list(Interpreter& I, const std::string&, Value v, Args&) {
  return Value::list(I.iterate(v));
}

Value filter_first(Interpreter& I, const std::string&, Value v, Args&) {
  if (v.is_undefined()) return Value::undefined("No first item, sequence was empty.");
  List items = I.iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value filter_last(Interpreter& I, const std::string&, Value v, Args&) {
  if (v.is_undefined()) return Value::undefined("No last item, sequence was empty.");
  List items = I.iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value filter_reverse(Interpreter& I, const std::string&, Value v, Args&) {
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.str());
    std::reverse(u.begin(), u.end());
    return Value(utf8_encode(u));
  }
  List items = I.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value filter_int(Interpreter&, const std::string&, Value v, Args& a) {
  const Value* def = arg(a, 0, "default");
  return to_int(v, def ? *def : Value(std::int64_t{0}));
}

Value filter_float(Interpreter&, const std::string&, Value v, Args& a) {
  const Value* def = arg(a, 0, "default");
  return to_float(v, def ? *def : Value(0.0));
}

Value filter_abs(Interpreter& I, const std::string&, Value v, Args&) {
  if (v.is_undefined()) fail_undefined(I, v);
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_number()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  I.fail("bad operand type for abs(): '" + v.type_name() + "'");
}

Value filter_round(Interpreter& I, const std::string&, Value v, Args& a) {
  const Value* pv = arg(a, 0, "precision");
  const Value* mv = arg(a, 1, "method");
  std::int64_t p = pv ? pv->as_int() : 0;
  std::string method = mv ? mv->to_str() : "common";
  if (v.is_undefined()) fail_undefined(I, v);
  if (!v.is_number()) I.fail("type " + v.type_name() + " doesn't define __round__ method");
  if (method != "common" && method != "ceil" && method != "floor")
    I.fail("method must be common, ceil or floor");
  if (method == "common") {
    if (!v.is_float()) {
      if (p >= 0) return Value(v.as_int());
    }
    p = std::clamp<std::int64_t>(p, -300, 300);
    char buf[512];
    if (p >= 0) {
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<std::int64_t>(p, 100)),
                    v.as_float());
      return Value(std::strtod(buf, nullptr));
    }
    double scale = std::pow(10.0, static_cast<double>(-p));
    return Value(std::nearbyint(v.as_float() / scale) * scale);
  }
  double scale = std::pow(10.0, static_cast<double>(p));
  double x = v.as_float() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value filter_replace(Interpreter& I, const std::string&, Value v, Args& a) {
  const Value* o = arg(a, 0, "old");
  const Value* n = arg(a, 1, "new");
  const Value* c = arg(a, 2, "count");
  if (!o || !n) I.fail("replace filter needs old and new");
  std::string r =
      py_replace(v.to_str(), o->to_str(), n->to_str(), (c && !c->is_none()) ? c->as_int() : -1);
  I.produced(r.size());
  return Value(std::move(r));
}

Value filter_indent(Interpreter& I, const std::string&, Value v, Args& a) {
  const Value* wv = arg(a, 0, "width");
  bool first = arg_bool(arg(a, 1, "first"), false);
  bool blank = arg_bool(arg(a, 2, "blank"), false);
  std::string ind = "    ";
  if (wv)
    ind = wv->is_string()
              ? wv->str()
              : std::string(
                    static_cast<std::size_t>(std::clamp<std::int64_t>(wv->as_int(), 0, 1024)), ' ');
  std::string s = v.to_str() + "\n";
  Args no_args;
  Value lines = call_str_method(I, s, "splitlines", no_args);
  std::string rv;
  const List& ls = lines.items();
  if (blank) {
    for (std::size_t i = 0; i < ls.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += ls[i].str();
    }
  } else if (!ls.empty()) {
    rv = ls[0].str();
    for (std::size_t i = 1; i < ls.size(); ++i) {
      rv += "\n";
      if (!ls[i].str().empty()) rv += ind;
      rv += ls[i].str();
    }
  }
  if (first) rv = ind + rv;
  I.produced(rv.size());
  return Value(std::move(rv));
}

Value filter_center(Interpreter& I, const std::string&, Value v, Args& a) {
  const Value* w = arg(a, 0, "width");
  Args ca;
  ca.pos.push_back(w ? *w : Value(std::int64_t{80}));
  return call_str_method(I, v.to_str(), "center", ca);
}

Value filter_wordcount(Interpreter&, const std::string&, Value v, Args&) {
  std::int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(v.to_str())) {
    bool w = is_alpha_cp(c) ||
             utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND ||
             c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value filter_format(Interpreter& I, const std::string&, Value v, Args& a) {
  if (!a.kw.empty() && !a.pos.empty())
    I.fail("can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    Value d = Value::dict();
    for (const auto& [k, x] : a.kw) d.dict_ref().set(Value(k), x);
    return Value(percent_format(I, v.to_str(), d));
  }
  return Value(percent_format(I, v.to_str(), Value::tuple(a.pos)));
}

Value filter_attr(Interpreter& I, const std::string&, Value v, Args& a) {
  // Python getattr only: dict keys are not attributes.
  const Value* n = arg(a, 0, "name");
  if (!n || !n->is_string()) I.fail("attr filter needs a name");
  if (v.is_undefined()) fail_undefined(I, v);
  if (v.is_dict() && !in_list(kDictMethods, n->str()))
    return Value::undefined("'dict object' has no attribute '" + n->str() + "'");
  return I.getattr(v, n->str());
}

Value filter_map(Interpreter& I, const std::string&, Value v, Args& a) {
  List out;
  List items = I.iterate(v);
  if (a.pos.empty()) {
    const Value* attribute = arg(a, SIZE_MAX, "attribute");
    if (!attribute) I.fail("map requires a filter name or attribute=");
    const Value* def = arg(a, SIZE_MAX, "default");
    for (auto& x : items) out.push_back(attr_path(I, x, *attribute, def));
    return Value::list(std::move(out));
  }
  if (!a.pos[0].is_string()) I.fail("map: filter name must be a string");
  std::string fname = a.pos[0].str();
  if (!Interpreter::has_filter(fname)) I.fail("No filter named '" + fname + "'.");
  for (auto& x : items) {
    Args fa;
    fa.pos.assign(a.pos.begin() + 1, a.pos.end());
    fa.kw = a.kw;
    out.push_back(I.apply_filter(fname, x, fa));
  }
  return Value::list(std::move(out));
}

// select, reject, selectattr, rejectattr.
Value filter_select(Interpreter& I, const std::string& name, Value v, Args& a) {
  bool by_attr = name == "selectattr" || name == "rejectattr";
  bool want = name == "select" || name == "selectattr";
  std::size_t ti = 0;
  Value attribute;
  if (by_attr) {
    if (a.pos.empty()) I.fail(name + " requires an attribute name");
    attribute = a.pos[0];
    ti = 1;
  }
  std::string test;
  Args ta;
  if (a.pos.size() > ti) {
    if (!a.pos[ti].is_string()) I.fail(name + ": test name must be a string");
    test = a.pos[ti].str();
    if (!Interpreter::has_test(test)) I.fail("No test named '" + test + "'.");
    ta.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(ti) + 1, a.pos.end());
    ta.kw = a.kw;
  }
  List out;
  for (auto& x : I.iterate(v)) {
    Value subject = by_attr ? attr_path(I, x, attribute, nullptr) : x;
    bool ok = test.empty() ? subject.truthy() : I.apply_test(test, subject, ta);
    if (ok == want) out.push_back(x);
  }
  return Value::list(std::move(out));
}

// The items of `items` whose keys (`keyed`: key, index) are not equal to an
// earlier one's.
Value unique_items(const List& items, const std::vector<std::pair<Value, std::size_t>>& keyed) {
  List out;
  List seen;
  for (auto& [k, i] : keyed) {
    bool dup = false;
    for (const auto& s : seen) dup = dup || equals(s, k);
    if (!dup) {
      seen.push_back(k);
      out.push_back(items[i]);
    }
  }
  return Value::list(std::move(out));
}

// sort, unique, max, min: all compare the items by key (an attribute, folded
// to lower case unless case_sensitive).
Value filter_sort(Interpreter& I, const std::string& name, Value v, Args& a) {
  bool reverse = name == "sort" && arg_bool(arg(a, 0, "reverse"), false);
  bool cs = arg_bool(arg(a, name == "sort" ? 1 : 0, "case_sensitive"), false);
  const Value* attribute = arg(a, name == "sort" ? 2 : 1, "attribute");
  List items = I.iterate(v);
  std::vector<std::pair<Value, std::size_t>> keyed;
  for (std::size_t i = 0; i < items.size(); ++i) {
    Value k =
        attribute && !attribute->is_none() ? attr_path(I, items[i], *attribute, nullptr) : items[i];
    keyed.emplace_back(sort_key(k, cs), i);
  }
  try {
    if (name == "unique") return unique_items(items, keyed);
    if (name == "max" || name == "min") {
      if (keyed.empty()) return Value::undefined("No aggregated item, sequence was empty.");
      std::size_t best = 0;
      for (std::size_t i = 1; i < keyed.size(); ++i) {
        bool better = name == "max" ? less_than(keyed[best].first, keyed[i].first)
                                    : less_than(keyed[i].first, keyed[best].first);
        if (better) best = i;
      }
      return items[keyed[best].second];
    }
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      return reverse ? less_than(y.first, x.first) : less_than(x.first, y.first);
    });
  } catch (const std::invalid_argument& e) {
    I.fail(e.what());
  }
  List out;
  for (auto& [k, i] : keyed) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Value filter_dictsort(Interpreter& I, const std::string&, Value v, Args& a) {
  if (!v.is_mapping()) I.fail("dictsort: expected a mapping, got " + v.type_name());
  bool cs = arg_bool(arg(a, 0, "case_sensitive"), false);
  const Value* by = arg(a, 1, "by");
  bool reverse = arg_bool(arg(a, 2, "reverse"), false);
  bool by_value = by && by->is_string() && by->str() == "value";
  List pairs;
  for (const auto& [k, x] : v.dict_ref().entries) pairs.push_back(Value::tuple({k, x}));
  try {
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
      Value kx = sort_key(x.items()[by_value ? 1 : 0], cs),
            ky = sort_key(y.items()[by_value ? 1 : 0], cs);
      return reverse ? less_than(ky, kx) : less_than(kx, ky);
    });
  } catch (const std::invalid_argument& e) {
    I.fail(e.what());
  }
  return Value::list(std::move(pairs));
}

Value filter_sum(Interpreter& I, const std::string&, Value v, Args& a) {
  const Value* attribute = arg(a, 0, "attribute");
  const Value* start = arg(a, 1, "start");
  Value acc = start ? *start : Value(std::int64_t{0});
  for (auto& x : I.iterate(v))
    acc = I.eval_binary("+", acc, attribute ? attr_path(I, x, *attribute, nullptr) : x);
  return acc;
}

// Filter name -> implementation (has_filter's kFilters lists the same names).
const std::unordered_map<std::string_view, FilterFn>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"safe", filter_safe},
      {"string", filter_string},
      {"trim", filter_trim},
      {"upper", filter_upper},
      {"lower", filter_lower},
      {"capitalize", filter_capitalize},
      {"title", filter_title},
      {"e", filter_escape},
      {"escape", filter_escape},
      {"forceescape", filter_escape},
      {"length", filter_length},
      {"count", filter_length},
      {"default", filter_default},
      {"d", filter_default},
      {"join", filter_join},
      {"tojson", filter_tojson},
      {"items", filter_items},
      {"list", filter_list},
      {"first", filter_first},
      {"last", filter_last},
      {"reverse", filter_reverse},
      {"int", filter_int},
      {"float", filter_float},
      {"abs", filter_abs},
      {"round", filter_round},
      {"replace", filter_replace},
      {"indent", filter_indent},
      {"center", filter_center},
      {"wordcount", filter_wordcount},
      {"format", filter_format},
      {"attr", filter_attr},
      {"map", filter_map},
      {"select", filter_select},
      {"reject", filter_select},
      {"selectattr", filter_select},
      {"rejectattr", filter_select},
      {"sort", filter_sort},
      {"unique", filter_sort},
      {"max", filter_sort},
      {"min", filter_sort},
      {"dictsort", filter_dictsort},
      {"sum", filter_sum},
  };
  return table;
}

}  // namespace

bool Interpreter::has_filter(const std::string& name) { return in_list(kFilters, name); }
bool Interpreter::has_test(const std::string& name) { return in_list(kTests, name); }

Value Interpreter::apply_filter(const std::string& name, Value v, Args& a) {
  const auto& table = filter_table();
  auto it = table.find(name);
  if (it == table.end()) fail("No filter named '" + name + "'.");
  return it->second(*this, name, std::move(v), a);
}

// ===================================================================== tests

bool Interpreter::apply_test(const std::string& name, const Value& v, Args& a) {
  const Value* x = a.pos.empty() ? nullptr : &a.pos[0];
  auto need = [&]() -> const Value& {
    if (!x) fail("test '" + name + "' needs an argument");
    return *x;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_sequence_like() || v.is_string() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_sequence_like() || v.is_string() || v.is_dict() || v.is_undefined();
  if (name == "callable") return v.is_function();
  if (name == "escaped") return false;
  if (name == "lower") return v.is_string() && py_lower(v.str()) == v.str();
  if (name == "upper") return v.is_string() && py_upper(v.str()) == v.str();
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (v.is_undefined()) fail_undefined(*this, v);
    if (!v.is_number()) fail("unsupported operand type(s) for %: '" + v.type_name() + "' and 'int'");
    std::int64_t m = 2;
    if (name == "divisibleby") {
      const Value& d = need();
      if (!d.is_number()) fail("divisibleby needs a number");
      if (v.is_float() || d.is_float()) {
        if (d.as_float() == 0.0) fail("float modulo");
        return pyfmod(v.as_float(), d.as_float()) == 0.0;
      }
      m = d.as_int();
      if (m == 0) fail("integer division or modulo by zero");
      return pymod(v.as_int(), m) == 0;
    }
    if (v.is_float()) return pyfmod(v.as_float(), 2.0) == (name == "odd" ? 1.0 : 0.0);
    return pymod(v.as_int(), 2) == (name == "odd" ? 1 : 0);
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, need());
  if (name == "ne" || name == "!=") return !equals(v, need());
  if (name == "lt" || name == "<" || name == "lessthan") return compare("<", v, need());
  if (name == "le" || name == "<=") return compare("<=", v, need());
  if (name == "gt" || name == ">" || name == "greaterthan") return compare(">", v, need());
  if (name == "ge" || name == ">=") return compare(">=", v, need());
  if (name == "in") return contains(need(), v);
  if (name == "sameas") {
    const Value& o = need();
    if (v.kind() != o.kind()) return false;
    if (v.identity() || o.identity()) return v.identity() == o.identity();
    return equals(v, o);
  }
  if (name == "filter") return v.is_string() && has_filter(v.str());
  if (name == "test") return v.is_string() && has_test(v.str());
  fail("No test named '" + name + "'.");
}

}  // namespace halo::text::jinja
