#pragma once
// Syntax tree of a parsed template (internal to halo_jinja).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace halo::text::jinja {

struct Expr;
struct Node;
using ExprPtr = std::unique_ptr<Expr>;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Expr {
  enum class K {
    Literal,      // literal
    Name,         // name
    List,         // children
    Tuple,        // children
    Dict,         // children: k0, v0, k1, v1, ...
    Attr,         // children[0].name
    Item,         // children[0][children[1]]
    Slice,        // children[0][c1:c2:c3] (null children allowed)
    Call,         // children[0](children[1..], kwargs)
    Filter,       // name; children[0] = input (null = block body), children[1..] args, kwargs
    Test,         // name; children[0] = input, children[1..] args; negated
    Unary,        // op in {"-", "+", "not"}; children[0]
    Binary,       // op; children[0], children[1]
    And,
    Or,
    Compare,      // children[0] then (ops[i], children[i+1])...
    Cond,         // children: then, cond, else (else may be null)
  };
  K k;
  int line = 0;
  Value literal;
  std::string name;  // Name / Attr / Filter / Test
  std::string op;
  std::vector<std::string> ops;
  bool negated = false;
  int height = 1;  // levels in this subtree (the parser bounds it)
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;

  Expr(K kind, int ln) : k(kind), line(ln) {}
};

struct Node {
  enum class K {
    Text,       // text
    Output,     // expr
    If,         // branches (cond, body), else_body
    For,        // targets, expr = iterable, cond = filter, body, else_body
    Set,        // target (Name / Tuple / Attr), expr
    SetBlock,   // target, filter (optional chain on placeholder), body
    Macro,      // name, params, body
    CallBlock,  // expr = call, params = caller params, body
    FilterBlock,  // filter chain on placeholder, body
    With,       // params = assignments, body
    Scope,      // body (generation blocks etc.)
    Break,
    Continue,
  };
  K k;
  int line = 0;
  std::string text;
  std::string name;
  ExprPtr expr;
  ExprPtr cond;
  ExprPtr target;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::vector<std::pair<std::string, ExprPtr>> params;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;

  Node(K kind, int ln) : k(kind), line(ln) {}
};

// Parses template source (Hugging Face settings: trim_blocks, lstrip_blocks,
// no trailing newline kept). Throws TemplateError with the line number.
Body parse_template(const std::string& source);

}  // namespace halo::text::jinja
