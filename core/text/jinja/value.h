#pragma once
// Value: the dynamic type of the Jinja engine, modelled on the Python objects
// jinja2 works with (Undefined, None, bool, int, float, str, list, tuple,
// dict with insertion order, namespace, callables). str()/repr() follow Python.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace halo::text::jinja {

class Value;
class Interpreter;
struct Dict;
struct Function;

using List = std::vector<Value>;

// Arguments of a call: positional and keyword (in call order).
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Value {
 public:
  enum class Kind : std::uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Function };

  Value() = default;  // Undefined
  Value(bool b) : kind_(Kind::Bool), b_(b) {}
  Value(int i) : kind_(Kind::Int), i_(i) {}
  Value(std::int64_t i) : kind_(Kind::Int), i_(i) {}
  Value(double f) : kind_(Kind::Float), f_(f) {}
  Value(std::string s) : kind_(Kind::String), s_(std::move(s)) {}
  Value(std::string_view s) : kind_(Kind::String), s_(s) {}
  Value(const char* s) : kind_(Kind::String), s_(s) {}

  static Value undefined(std::string hint = {});
  static Value none();
  static Value list(List items = {});
  static Value tuple(List items);
  static Value dict();
  static Value make_namespace();
  static Value function(std::string name, std::function<Value(Interpreter&, Args&)> fn);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }  // not bool
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::Tuple; }
  bool is_sequence_like() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_mapping() const { return kind_ == Kind::Dict || kind_ == Kind::Namespace; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return b_; }
  std::int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }
  double as_float() const {
    return kind_ == Kind::Float ? f_ : static_cast<double>(as_int());
  }
  const std::string& str() const { return s_; }  // String payload, or Undefined hint
  List& items() const { return *l_; }            // List / Tuple
  Dict& dict_ref() const { return *d_; }         // Dict / Namespace
  Function& fn() const { return *fn_; }

  bool truthy() const;
  std::string to_str() const;  // Python str()
  std::string repr() const;    // Python repr()
  std::string type_name() const;  // Python type name: str, int, dict, ...
  // Identity of shared containers (for the sameas test).
  const void* identity() const;
  // Container nesting (0 for scalars). Bounded by kMaxValueDepth at
  // construction: destroying, comparing or printing a value recurses once per
  // level, and a loop can wrap a list in a list millions of times.
  int depth() const;
  // True for a namespace or a container holding one: only namespaces are
  // mutable, so only they can come to contain themselves.
  bool holds_namespace() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  std::int64_t i_ = 0;
  double f_ = 0.0;
  std::uint16_t depth_ = 0;  // List / Tuple (a Dict keeps its own)
  bool has_ns_ = false;      // List / Tuple
  std::string s_;
  std::shared_ptr<List> l_;
  std::shared_ptr<Dict> d_;
  std::shared_ptr<Function> fn_;
};

constexpr int kMaxValueDepth = 512;

struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  int depth = 1;
  bool has_ns = false;
  const Value* find(const Value& key) const;
  Value* find(const Value& key);
  const Value* find_str(std::string_view key) const;
  void set(Value key, Value value);
};

struct Function {
  std::string name;
  std::function<Value(Interpreter&, Args&)> fn;
};

// Python == between two values.
bool equals(const Value& a, const Value& b);
// Python <; throws std::invalid_argument naming the types when unorderable.
bool less_than(const Value& a, const Value& b);

// json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...)
struct JsonOptions {
  std::optional<std::string> indent;  // nullopt: single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string to_json(const Value& v, const JsonOptions& opts);

// Bounds what repr()/to_str()/to_json() of a container may build on this
// thread (Template::render sets it from its RenderLimits): containers share
// their children, so a value made in a few steps ([l, l] doubled 40 times) can
// print as terabytes, and a list may contain itself. Exceeding either bound
// throws std::length_error naming it.
struct PrintLimits {
  std::size_t max_bytes = SIZE_MAX;
  int max_depth = 512;
};
class ScopedPrintLimits {
 public:
  explicit ScopedPrintLimits(PrintLimits limits);
  ~ScopedPrintLimits();
  ScopedPrintLimits(const ScopedPrintLimits&) = delete;
  ScopedPrintLimits& operator=(const ScopedPrintLimits&) = delete;

 private:
  PrintLimits saved_;
};

// Python float repr: shortest round-trip digits, '1e-05', '3.0', 'inf'.
std::string py_float_repr(double d);

// UTF-8 <-> code points (invalid bytes map to U+FFFD).
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t cp);
bool py_isspace(char32_t c);

}  // namespace halo::text::jinja
