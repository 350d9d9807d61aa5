#pragma once
// Tree-walking evaluator (internal to halo_jinja).
#include <memory>
#include <string>
#include <unordered_map>

#include "text/jinja/ast.h"
#include "text/jinja/template.h"
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

using Limits = RenderLimits;

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
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  List iterate(const Value& v);
  void charge(std::size_t steps);
  void check_size(std::size_t n) const;
  // A new string or list of `bytes` was built: checks the size limit and
  // charges the copy to the step budget.
  void produced(std::size_t bytes);
  // Appends to a rendered buffer, charging the bytes copied.
  void emit(std::string& out, const std::string& piece);

  static bool has_filter(const std::string& name);
  static bool has_test(const std::string& name);

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec_node(const Node& n, const ScopePtr& scope, std::string& out);
  void exec_for(const Node& n, const ScopePtr& scope, std::string& out);
  void exec_call_block(const Node& n, const ScopePtr& scope, std::string& out);
  void assign(const Expr& target, Value v, const ScopePtr& scope);
  Value make_macro(const Node& n, const ScopePtr& scope);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_expr(const Expr& e, const ScopePtr& scope);
  Args eval_args(const Expr& e, const ScopePtr& scope);
  Value eval_call(const Expr& e, const ScopePtr& scope);
  Value eval_slice(const Expr& e, const ScopePtr& scope);
  Value eval_unary(const Expr& e, const ScopePtr& scope);
  Value multiply_sequence(const std::string& op, const Value& a, const Value& b);
  Value repeat(const Value& seq, const Value& cnt);
  bool compare(const std::string& op, const Value& a, const Value& b);
  bool contains(const Value& container, const Value& item);
  Value method(const Value& obj, const std::string& name);
  void step();
  List iterate_items(const Value& v);

  // Counts one level of interpreter recursion for its lifetime.
  struct DepthGuard {
    Interpreter& I;
    explicit DepthGuard(Interpreter& interp);
    ~DepthGuard() { --I.depth_; }
  };

  ScopePtr root_;
  Limits limits_;
  int line_ = 0;
  int depth_ = 0;
  std::size_t steps_ = 0;
  const Value* block_input_ = nullptr;  // value of a null filter input (block filters)
};

}  // namespace halo::text::jinja
