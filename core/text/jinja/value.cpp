#include "text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace halo::text::jinja {

namespace {
[[noreturn]] void fail_depth() {
  throw std::length_error("value nested too deeply (limit " + std::to_string(kMaxValueDepth) + " levels)");
}
}  // namespace

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::List;
  int depth = 1;
  for (const auto& item : items) {
    depth = std::max(depth, item.depth() + 1);
    v.has_ns_ = v.has_ns_ || item.holds_namespace();
  }
  if (depth > kMaxValueDepth) fail_depth();
  v.depth_ = static_cast<std::uint16_t>(depth);
  v.l_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}

Value Value::dict() {
  Value v;
  v.kind_ = Kind::Dict;
  v.d_ = std::make_shared<Dict>();
  return v;
}

Value Value::make_namespace() {
  Value v = dict();
  v.kind_ = Kind::Namespace;
  return v;
}

Value Value::function(std::string name, std::function<Value(Interpreter&, Args&)> fn) {
  Value v;
  v.kind_ = Kind::Function;
  v.fn_ = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
    case T::discarded:
      return none();
    case T::boolean:
      return Value(j.get<bool>());
    case T::number_integer:
      return Value(static_cast<std::int64_t>(j.get<std::int64_t>()));
    case T::number_unsigned: {
      auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<std::int64_t>(u));
    }
    case T::number_float:
      return Value(j.get<double>());
    case T::string:
      return Value(j.get_ref<const std::string&>());
    case T::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case T::object: {
      Value d = dict();
      d.d_->entries.reserve(j.size());
      for (const auto& [k, e] : j.items()) {
        // Keys are unique in parsed JSON: append directly, tracking depth as set() does.
        Value v = from_json(e);
        d.d_->depth = std::max(d.d_->depth, v.depth() + 1);
        if (d.d_->depth > kMaxValueDepth) fail_depth();
        d.d_->entries.emplace_back(Value(k), std::move(v));
      }
      return d;
    }
    case T::binary:
      break;
  }
  return none();
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return b_;
    case Kind::Int:
      return i_ != 0;
    case Kind::Float:
      return f_ != 0.0;
    case Kind::String:
      return !s_.empty();
    case Kind::List:
    case Kind::Tuple:
      return !l_->empty();
    case Kind::Dict:
      return !d_->entries.empty();
    case Kind::Namespace:
    case Kind::Function:
      return true;
  }
  return false;
}

const void* Value::identity() const {
  if (l_) return l_.get();
  if (d_) return d_.get();
  if (fn_) return fn_.get();
  return nullptr;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Function: return "function";
  }
  return "object";
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  auto epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
      }
    } else {
      out = "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return sign + out;
}

// ---------------------------------------------------------------- UTF-8

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    char32_t cp;
    int n;
    if (c < 0x80) {
      cp = c;
      n = 0;
    } else if ((c & 0xE0) == 0xC0) {
      cp = c & 0x1F;
      n = 1;
    } else if ((c & 0xF0) == 0xE0) {
      cp = c & 0x0F;
      n = 2;
    } else if ((c & 0xF8) == 0xF0) {
      cp = c & 0x07;
      n = 3;
    } else {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    bool ok = true;
    for (int k = 1; k <= n; ++k) {
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    if (!ok) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    out += cp;
    i += n + 1;
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// ---------------------------------------------------------------- str / repr

static std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<char32_t>(quote)) {
      out += '\\';
      out += quote;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c == 0x2028 || c == 0x2029) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out += quote;
  return out;
}

namespace {
thread_local PrintLimits t_print_limits;
thread_local int t_print_depth = 0;

// One level of container printing (repr or JSON).
struct PrintLevel {
  PrintLevel() {
    if (++t_print_depth > t_print_limits.max_depth) {
      --t_print_depth;
      throw std::length_error("value nested too deeply to print (depth limit " +
                              std::to_string(t_print_limits.max_depth) + ")");
    }
  }
  ~PrintLevel() { --t_print_depth; }
  PrintLevel(const PrintLevel&) = delete;
  PrintLevel& operator=(const PrintLevel&) = delete;
};

void check_print_size(const std::string& out) {
  if (out.size() > t_print_limits.max_bytes)
    throw std::length_error("value too large to print: output exceeds the output limit (" +
                            std::to_string(t_print_limits.max_bytes) + " bytes)");
}
}  // namespace

ScopedPrintLimits::ScopedPrintLimits(PrintLimits limits) : saved_(t_print_limits) { t_print_limits = limits; }
ScopedPrintLimits::~ScopedPrintLimits() { t_print_limits = saved_; }

std::string Value::repr() const {
  switch (kind_) {
    case Kind::String:
      return repr_string(s_);
    case Kind::Undefined:
      return "Undefined";
    case Kind::List:
    case Kind::Tuple: {
      PrintLevel level;
      std::string out = kind_ == Kind::List ? "[" : "(";
      for (std::size_t i = 0; i < l_->size(); ++i) {
        if (i) out += ", ";
        out += (*l_)[i].repr();
        check_print_size(out);
      }
      if (kind_ == Kind::Tuple && l_->size() == 1) out += ",";
      out += kind_ == Kind::List ? "]" : ")";
      return out;
    }
    case Kind::Dict:
    case Kind::Namespace: {
      PrintLevel level;
      std::string out = kind_ == Kind::Namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : d_->entries) {
        if (!first) out += ", ";
        first = false;
        out += k.repr() + ": " + v.repr();
        check_print_size(out);
      }
      out += kind_ == Kind::Namespace ? "}>" : "}";
      return out;
    }
    default:
      return to_str();
  }
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::Undefined:
      return "";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return b_ ? "True" : "False";
    case Kind::Int:
      return std::to_string(i_);
    case Kind::Float:
      return py_float_repr(f_);
    case Kind::String:
      return s_;
    case Kind::Function:
      return "<function " + fn_->name + ">";
    default:
      return repr();
  }
}

// ---------------------------------------------------------------- Dict

const Value* Dict::find(const Value& key) const {
  for (const auto& e : entries)
    if (equals(e.first, key)) return &e.second;
  return nullptr;
}

Value* Dict::find(const Value& key) {
  for (auto& e : entries)
    if (equals(e.first, key)) return &e.second;
  return nullptr;
}

const Value* Dict::find_str(std::string_view key) const {
  for (const auto& e : entries)
    if (e.first.is_string() && e.first.str() == key) return &e.second;
  return nullptr;
}

int Value::depth() const {
  if (kind_ == Kind::List || kind_ == Kind::Tuple) return depth_;
  if (kind_ == Kind::Dict || kind_ == Kind::Namespace) return d_->depth;
  return 0;
}

bool Value::holds_namespace() const {
  if (kind_ == Kind::Namespace) return true;
  if (kind_ == Kind::List || kind_ == Kind::Tuple) return has_ns_;
  if (kind_ == Kind::Dict) return d_->has_ns;
  return false;
}

void Dict::set(Value key, Value value) {
  const int d = std::max(key.depth(), value.depth()) + 1;
  if (d > kMaxValueDepth) fail_depth();
  depth = std::max(depth, d);
  has_ns = has_ns || key.holds_namespace() || value.holds_namespace();
  if (Value* v = find(key)) {
    *v = std::move(value);
    return;
  }
  entries.emplace_back(std::move(key), std::move(value));
}

// ---------------------------------------------------------------- comparisons

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) {
    if (a.is_sequence_like() && b.is_sequence_like()) return false;  // [1] != (1,)
    return false;
  }
  switch (a.kind()) {
    case K::Undefined:
    case K::None:
      return true;
    case K::String:
      return a.str() == b.str();
    case K::List:
    case K::Tuple: {
      const List& x = a.items();
      const List& y = b.items();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case K::Dict: {
      const Dict& x = a.dict_ref();
      const Dict& y = b.dict_ref();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* o = y.find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order == code point order
  if (a.kind() == b.kind() && a.is_sequence_like()) {
    const List& x = a.items();
    const List& y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw std::invalid_argument("'<' not supported between instances of '" + a.type_name() + "' and '" +
                              b.type_name() + "'");
}

// ---------------------------------------------------------------- JSON

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  auto esc = [&](unsigned cp) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    out += buf;
  };
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          esc(c);
        } else if (ensure_ascii && c >= 0x80) {
          if (c >= 0x10000) {
            char32_t v = c - 0x10000;
            esc(0xD800 + (v >> 10));
            esc(0xDC00 + (v & 0x3FF));
          } else {
            esc(c);
          }
        } else {
          utf8_append(out, c);
        }
    }
  }
  out += '"';
}

static void json_dump(std::string& out, const Value& v, const JsonOptions& o, int level, int depth) {
  if (depth > 512) throw std::invalid_argument("tojson: value nested too deeply");
  PrintLevel print_level;
  check_print_size(out);
  auto newline = [&](int lvl) {
    if (!o.indent) return;
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::Float: {
      double d = v.as_float();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
      else out += py_float_repr(d);
      return;
    }
    case Value::Kind::String:
      json_string(out, v.str(), o.ensure_ascii);
      return;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      const List& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        newline(level + 1);
        json_dump(out, items[i], o, level + 1, depth + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& e : v.dict_ref().entries) entries.push_back(&e);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return less_than(a->first, b->first); });
      }
      out += '{';
      bool first = true;
      for (const auto* e : entries) {
        if (!first) out += o.item_separator;
        first = false;
        newline(level + 1);
        const Value& k = e->first;
        if (k.is_string()) json_string(out, k.str(), o.ensure_ascii);
        else if (k.is_none()) out += "\"null\"";
        else if (k.is_bool()) out += k.as_bool() ? "\"true\"" : "\"false\"";
        else if (k.is_int()) out += "\"" + std::to_string(k.as_int()) + "\"";
        else if (k.is_float()) out += "\"" + py_float_repr(k.as_float()) + "\"";
        else throw std::invalid_argument("keys must be str, int, float, bool or None, not " + k.type_name());
        out += o.key_separator;
        json_dump(out, e->second, o, level + 1, depth + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      throw std::invalid_argument("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  json_dump(out, v, opts, 0, 0);
  return out;
}

}  // namespace halo::text::jinja
