#pragma once
// Tree-walking evaluator (internal to halo_jinja).
#include <memory>
#include <string>
#include <unordered_map>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace halo::text::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  Value* lookup(const std::string& name) {
    for (Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

struct Limits {
  int max_call_depth = 64;                          // nested macro calls
  std::size_t max_output_bytes = 64u << 20;         // any rendered string
  std::size_t max_steps = 10'000'000;               // statements + loop iterations
};

class Interpreter {
 public:
  explicit Interpreter(ScopePtr root, Limits limits = {});

  std::string render(const Body& body);

  // Used by builtins.
  [[noreturn]] void fail(const std::string& msg) const;
  int line() const { return line_; }
  Value call(const Value& fn, Args& args);
  Value apply_filter(const std::string& name, Value input, Args& args);
  bool apply_test(const std::string& name, const Value& v, Args& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  List iterate(const Value& v);
  void check_size(std::size_t n) const;

  static bool has_filter(const std::string& name);
  static bool has_test(const std::string& name);

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec_node(const Node& n, const ScopePtr& scope, std::string& out);
  void exec_for(const Node& n, const ScopePtr& scope, std::string& out);
  void assign(const Expr& target, Value v, const ScopePtr& scope);
  Value make_macro(const Node& n, const ScopePtr& scope);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  bool compare(const std::string& op, const Value& a, const Value& b);
  bool contains(const Value& container, const Value& item);
  Value method(const Value& obj, const std::string& name);
  void step();

  ScopePtr root_;
  Limits limits_;
  int line_ = 0;
  int call_depth_ = 0;
  std::size_t steps_ = 0;
  const Value* block_input_ = nullptr;  // value of a null filter input (block filters)
};

}  // namespace halo::text::jinja
