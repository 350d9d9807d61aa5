// Lexer and recursive-descent parser following jinja2 3.1's grammar and its
// whitespace rules with trim_blocks=True, lstrip_blocks=True.
#include <cctype>
#include <algorithm>
#include <charconv>
#include <string_view>

#include "text/jinja/ast.h"
#include "text/jinja/error.h"

namespace halo::text::jinja {
namespace {

constexpr int kMaxNesting = 200;

struct Token {
  enum class T { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Int, Float, String, Op, Eof };
  T t;
  std::string v;
  int line;
};

const char* token_desc(Token::T t) {
  switch (t) {
    case Token::T::Text: return "template data";
    case Token::T::VarBegin: return "begin of print statement";
    case Token::T::VarEnd: return "end of print statement";
    case Token::T::BlockBegin: return "begin of statement block";
    case Token::T::BlockEnd: return "end of statement block";
    case Token::T::Name: return "name";
    case Token::T::Int: return "integer";
    case Token::T::Float: return "float";
    case Token::T::String: return "string";
    case Token::T::Op: return "operator";
    case Token::T::Eof: return "end of template";
  }
  return "token";
}

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// ------------------------------------------------------------------ lexer
class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    std::size_t pos = 0;
    while (pos < s_.size()) {
      std::size_t p = find_tag(pos);
      if (p == std::string::npos) {
        emit_text(pos, s_.size());
        break;
      }
      char kind = s_[p + 1];  // '{', '%', '#'
      char mod = p + 2 < s_.size() ? s_[p + 2] : '\0';
      std::size_t text_end = p;
      std::size_t text_start = pos;
      std::string_view data(s_.data() + text_start, text_end - text_start);
      if (mod == '-') {
        while (!data.empty() && is_ws(data.back())) data.remove_suffix(1);
      } else if (mod != '+' && kind != '{') {
        // lstrip_blocks: strip spaces between the line start and the tag.
        std::size_t nl = data.rfind('\n');
        std::size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        bool line_starting = text_start == 0 || s_[text_start - 1] == '\n';
        if (l_pos > 0 || line_starting) {
          std::string_view tail = data.substr(l_pos);
          bool all_ws = !tail.empty();
          for (char c : tail)
            if (!is_ws(c)) all_ws = false;
          if (all_ws) data = data.substr(0, l_pos);
        }
      }
      emit_text_view(data, text_start);
      line_ = line_at(p);
      std::size_t q = p + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(q, p);
      } else if (kind == '{') {
        out_.push_back({Token::T::VarBegin, "", line_at(p)});
        pos = lex_tag(q, false);
      } else {
        if (auto raw_end = try_raw(q, p)) {
          pos = *raw_end;
          continue;
        }
        out_.push_back({Token::T::BlockBegin, "", line_at(p)});
        pos = lex_tag(q, true);
      }
    }
    out_.push_back({Token::T::Eof, "", line_at(s_.size())});
    return std::move(out_);
  }

 private:
  std::string s_;
  std::vector<Token> out_;
  int line_ = 1;
  // Incremental line counting.
  std::size_t line_pos_ = 0;
  int line_count_ = 1;

  int line_at(std::size_t p) {
    if (p < line_pos_) {
      line_pos_ = 0;
      line_count_ = 1;
    }
    for (; line_pos_ < p && line_pos_ < s_.size(); ++line_pos_)
      if (s_[line_pos_] == '\n') ++line_count_;
    return line_count_;
  }

  [[noreturn]] void fail(std::size_t p, const std::string& msg) { throw TemplateError(line_at(p), msg); }

  std::size_t find_tag(std::size_t pos) const {
    while (true) {
      std::size_t p = s_.find('{', pos);
      if (p == std::string::npos || p + 1 >= s_.size()) return std::string::npos;
      char c = s_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  void emit_text(std::size_t a, std::size_t b) { emit_text_view(std::string_view(s_.data() + a, b - a), a); }
  void emit_text_view(std::string_view data, std::size_t at) {
    if (!data.empty()) out_.push_back({Token::T::Text, std::string(data), line_at(at)});
  }

  // After a block/comment end: trim_blocks removes one newline unless '+'.
  std::size_t after_block_end(std::size_t pos, char mod) {
    if (mod == '-') {
      while (pos < s_.size() && is_ws(s_[pos])) ++pos;
    } else if (mod != '+') {
      if (pos < s_.size() && s_[pos] == '\n') ++pos;
    }
    return pos;
  }

  std::size_t lex_comment(std::size_t q, std::size_t start) {
    std::size_t e = s_.find("#}", q);
    if (e == std::string::npos) fail(start, "Missing end of comment tag");
    char mod = (e > q && (s_[e - 1] == '-' || s_[e - 1] == '+')) ? s_[e - 1] : '\0';
    return after_block_end(e + 2, mod);
  }

  // {% raw %}...{% endraw %}: returns the position after the end tag.
  std::optional<std::size_t> try_raw(std::size_t q, std::size_t start) {
    std::size_t i = q;
    while (i < s_.size() && is_ws(s_[i])) ++i;
    if (s_.compare(i, 3, "raw") != 0) return std::nullopt;
    i += 3;
    if (i < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i])) || s_[i] == '_')) return std::nullopt;
    while (i < s_.size() && is_ws(s_[i])) ++i;
    char mod = '\0';
    if (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) mod = s_[i++];
    if (s_.compare(i, 2, "%}") != 0) fail(start, "Expected end of statement block after 'raw'");
    std::size_t body = after_block_end(i + 2, mod);
    // Find {% endraw %}
    std::size_t search = body;
    while (true) {
      std::size_t p = s_.find("{%", search);
      if (p == std::string::npos) fail(start, "Missing end of raw directive");
      std::size_t j = p + 2;
      char emod = '\0';
      if (j < s_.size() && (s_[j] == '-' || s_[j] == '+')) emod = s_[j++];
      while (j < s_.size() && is_ws(s_[j])) ++j;
      if (s_.compare(j, 6, "endraw") == 0) {
        j += 6;
        while (j < s_.size() && is_ws(s_[j])) ++j;
        char cmod = '\0';
        if (j < s_.size() && (s_[j] == '-' || s_[j] == '+')) cmod = s_[j++];
        if (s_.compare(j, 2, "%}") == 0) {
          std::string_view data(s_.data() + body, p - body);
          if (emod == '-') {
            while (!data.empty() && is_ws(data.back())) data.remove_suffix(1);
          } else if (emod != '+') {
            std::size_t nl = data.rfind('\n');
            if (nl != std::string_view::npos) {
              std::string_view tail = data.substr(nl + 1);
              bool all_ws = !tail.empty();
              for (char c : tail)
                if (!is_ws(c)) all_ws = false;
              if (all_ws) data = data.substr(0, nl + 1);
            }
          }
          emit_text_view(data, body);
          return after_block_end(j + 2, cmod);
        }
      }
      search = p + 2;
    }
  }

  static std::string decode_string(std::string_view body) {
    std::string out;
    for (std::size_t i = 0; i < body.size(); ++i) {
      char c = body[i];
      if (c != '\\' || i + 1 >= body.size()) {
        out += c;
        continue;
      }
      char e = body[++i];
      auto hex = [&](int n) -> std::optional<char32_t> {
        if (i + n >= body.size()) return std::nullopt;
        char32_t v = 0;
        for (int k = 1; k <= n; ++k) {
          char h = body[i + k];
          int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                  : (h >= 'a' && h <= 'f')                    ? h - 'a' + 10
                  : (h >= 'A' && h <= 'F')                    ? h - 'A' + 10
                                                              : -1;
          if (d < 0) return std::nullopt;
          v = v * 16 + d;
        }
        i += n;
        return v;
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (auto cp = hex(n)) {
            utf8_append(out, *cp);
          } else {
            out += '\\';
            out += e;
          }
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = e - '0';
            for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
              v = v * 8 + (body[++i] - '0');
            utf8_append(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    return out;
  }

  std::size_t lex_tag(std::size_t pos, bool block) {
    int depth = 0;
    std::size_t start = pos;
    while (true) {
      while (pos < s_.size() && is_ws(s_[pos])) ++pos;
      if (pos >= s_.size()) fail(start, block ? "Unexpected end of template, expected '%}'" : "Unexpected end of template, expected '}}'");
      // End of tag
      if (depth == 0) {
        char mod = (s_[pos] == '-' || s_[pos] == '+') ? s_[pos] : '\0';
        std::size_t e = pos + (mod ? 1 : 0);
        if (block && s_.compare(e, 2, "%}") == 0) {
          out_.push_back({Token::T::BlockEnd, "", line_at(pos)});
          return after_block_end(e + 2, mod);
        }
        if (!block && s_.compare(e, 2, "}}") == 0 && mod != '+') {
          out_.push_back({Token::T::VarEnd, "", line_at(pos)});
          std::size_t r = e + 2;
          if (mod == '-')
            while (r < s_.size() && is_ws(s_[r])) ++r;
          return r;
        }
      }
      int ln = line_at(pos);
      char c = s_[pos];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t b = pos;
        while (pos < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos])) || s_[pos] == '_')) ++pos;
        out_.push_back({Token::T::Name, s_.substr(b, pos - b), ln});
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        std::size_t b = pos;
        bool is_float = false;
        while (pos < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos])) || s_[pos] == '_')) ++pos;
        if (pos + 1 < s_.size() && s_[pos] == '.' && std::isdigit(static_cast<unsigned char>(s_[pos + 1]))) {
          is_float = true;
          ++pos;
          while (pos < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos])) || s_[pos] == '_')) ++pos;
        }
        if (pos < s_.size() && (s_[pos] == 'e' || s_[pos] == 'E')) {
          std::size_t save = pos++;
          if (pos < s_.size() && (s_[pos] == '+' || s_[pos] == '-')) ++pos;
          if (pos < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos]))) {
            is_float = true;
            while (pos < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos]))) ++pos;
          } else {
            pos = save;
          }
        }
        std::string num;
        for (std::size_t k = b; k < pos; ++k)
          if (s_[k] != '_') num += s_[k];
        out_.push_back({is_float ? Token::T::Float : Token::T::Int, num, ln});
        continue;
      }
      if (c == '\'' || c == '"') {
        std::size_t b = ++pos;
        while (pos < s_.size() && s_[pos] != c) {
          if (s_[pos] == '\\') ++pos;
          ++pos;
        }
        if (pos >= s_.size()) fail(b, "unexpected end of string literal");
        out_.push_back({Token::T::String, decode_string(std::string_view(s_.data() + b, pos - b)), ln});
        ++pos;
        continue;
      }
      static const char* ops3[] = {"**", "//", "==", "!=", "<=", ">="};
      std::string op;
      for (const char* o : ops3)
        if (s_.compare(pos, 2, o) == 0) op = o;
      if (op.empty()) {
        if (std::string_view("+-*/%~()[]{},.:|=<>;!").find(c) == std::string_view::npos)
          fail(pos, std::string("unexpected char '") + c + "'");
        op = std::string(1, c);
      }
      if (op == "(" || op == "[" || op == "{") ++depth;
      if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
      pos += op.size();
      out_.push_back({Token::T::Op, op, ln});
    }
  }
};

// ------------------------------------------------------------------ parser
class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_all() {
    Body body = parse_body({});
    if (cur().t != Token::T::Eof) fail("unexpected token");
    return body;
  }

 private:
  std::vector<Token> t_;
  std::size_t i_ = 0;
  int depth_ = 0;

  [[noreturn]] void fail_nesting() const {
    fail("template nests expressions/blocks too deeply (nesting limit " + std::to_string(kMaxNesting) + ")");
  }

  // Bounds the parser's own recursion (parentheses, nested blocks, ...).
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.fail_nesting();
    }
    ~DepthGuard() { --p.depth_; }
  };

  // Every child is attached here so the tree's height is known as it grows.
  // Operator and postfix chains (`1 + 1 + ...`, `x.a.a...`, `x|f|f...`) are
  // parsed in loops, not by recursion, yet build a tree as deep as the chain;
  // the checks, the evaluator and even the destructor recurse once per level,
  // so 10^4 `+` would overflow the stack there. Refusing here keeps every tree
  // at most kMaxNesting high (also when destroyed during the throw).
  void adopt(Expr& parent, ExprPtr child) {
    if (child) parent.height = std::max(parent.height, child->height + 1);
    if (parent.height > kMaxNesting) fail_nesting();
    parent.children.push_back(std::move(child));
  }
  void adopt_kwarg(Expr& parent, std::string name, ExprPtr child) {
    parent.height = std::max(parent.height, child->height + 1);
    if (parent.height > kMaxNesting) fail_nesting();
    parent.kwargs.emplace_back(std::move(name), std::move(child));
  }

  const Token& cur() const { return t_[i_]; }
  const Token& peek(std::size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  [[noreturn]] void fail(const std::string& msg) const { throw TemplateError(cur().line, msg); }

  bool is_op(const char* op) const { return cur().t == Token::T::Op && cur().v == op; }
  bool is_name(const char* n) const { return cur().t == Token::T::Name && cur().v == n; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool accept_name(const char* n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  std::string describe() const {
    const Token& t = cur();
    if (t.t == Token::T::Name || t.t == Token::T::Op) return "'" + t.v + "'";
    return token_desc(t.t);
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "', got " + describe());
  }
  std::string expect_name() {
    if (cur().t != Token::T::Name) fail("expected a name, got " + describe());
    std::string v = cur().v;
    advance();
    return v;
  }
  void expect_block_end() {
    if (cur().t != Token::T::BlockEnd) fail("expected end of statement block, got " + describe());
    advance();
  }

  // Parses nodes until a block tag whose keyword is one of `ends` (not consumed:
  // cur() is then that keyword's Name token).
  Body parse_body(const std::vector<std::string>& ends) {
    DepthGuard g(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.t == Token::T::Eof) {
        if (!ends.empty()) {
          std::string list;
          for (const auto& e : ends) list += (list.empty() ? "'" : " or '") + e + "'";
          fail("unexpected end of template, expected " + list);
        }
        return body;
      }
      if (t.t == Token::T::Text) {
        auto n = std::make_unique<Node>(Node::K::Text, t.line);
        n->text = t.v;
        body.push_back(std::move(n));
        advance();
        continue;
      }
      if (t.t == Token::T::VarBegin) {
        int line = t.line;
        advance();
        auto n = std::make_unique<Node>(Node::K::Output, line);
        n->expr = parse_tuple(false);
        if (cur().t != Token::T::VarEnd) fail("expected end of print statement, got " + describe());
        advance();
        body.push_back(std::move(n));
        continue;
      }
      if (t.t == Token::T::BlockBegin) {
        advance();
        if (cur().t != Token::T::Name) fail("expected a statement name, got " + describe());
        for (const auto& e : ends)
          if (cur().v == e) return body;
        body.push_back(parse_statement());
        continue;
      }
      fail("unexpected " + describe());
    }
  }

  NodePtr parse_statement() {
    const std::string kw = cur().v;
    int line = cur().line;
    advance();
    if (kw == "if") return parse_if(line);
    if (kw == "for") return parse_for(line);
    if (kw == "set") return parse_set(line);
    if (kw == "macro") return parse_macro(line);
    if (kw == "call") return parse_call_block(line);
    if (kw == "filter") return parse_filter_block(line);
    if (kw == "with") return parse_with(line);
    if (kw == "break" || kw == "continue") {
      auto n = std::make_unique<Node>(kw == "break" ? Node::K::Break : Node::K::Continue, line);
      expect_block_end();
      return n;
    }
    if (kw == "generation") {
      expect_block_end();
      auto n = std::make_unique<Node>(Node::K::Scope, line);
      n->body = parse_body({"endgeneration"});
      advance();
      expect_block_end();
      return n;
    }
    throw TemplateError(line, "Encountered unknown tag '" + kw + "'");
  }

  NodePtr parse_if(int line) {
    auto n = std::make_unique<Node>(Node::K::If, line);
    ExprPtr cond = parse_expression(true);
    expect_block_end();
    while (true) {
      Body body = parse_body({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(body));
      std::string kw = cur().v;
      advance();
      if (kw == "elif") {
        cond = parse_expression(true);
        expect_block_end();
        continue;
      }
      if (kw == "else") {
        expect_block_end();
        n->else_body = parse_body({"endif"});
        advance();
      }
      expect_block_end();
      return n;
    }
  }

  NodePtr parse_for(int line) {
    auto n = std::make_unique<Node>(Node::K::For, line);
    do {
      n->targets.push_back(expect_name());
    } while (accept_op(","));
    if (!accept_name("in")) fail("expected 'in' in for loop, got " + describe());
    n->expr = parse_tuple(false, /*no_cond=*/true);
    if (accept_name("if")) n->cond = parse_expression(true);
    if (accept_name("recursive")) fail("recursive for loops are not supported");
    expect_block_end();
    n->body = parse_body({"endfor", "else"});
    if (cur().v == "else") {
      advance();
      expect_block_end();
      n->else_body = parse_body({"endfor"});
    }
    advance();
    expect_block_end();
    return n;
  }

  ExprPtr parse_assign_target() {
    int line = cur().line;
    std::string name = expect_name();
    if (accept_op(".")) {
      auto base = std::make_unique<Expr>(Expr::K::Name, line);
      base->name = name;
      auto a = std::make_unique<Expr>(Expr::K::Attr, line);
      a->name = expect_name();
      adopt(*a, std::move(base));
      return a;
    }
    auto nm = std::make_unique<Expr>(Expr::K::Name, line);
    nm->name = name;
    if (!is_op(",")) return nm;
    auto tup = std::make_unique<Expr>(Expr::K::Tuple, line);
    adopt(*tup, std::move(nm));
    while (accept_op(",")) {
      if (cur().t != Token::T::Name) break;
      auto e = std::make_unique<Expr>(Expr::K::Name, cur().line);
      e->name = expect_name();
      adopt(*tup, std::move(e));
    }
    return tup;
  }

  NodePtr parse_set(int line) {
    ExprPtr target = parse_assign_target();
    if (accept_op("=")) {
      auto n = std::make_unique<Node>(Node::K::Set, line);
      n->target = std::move(target);
      n->expr = parse_tuple(false);
      expect_block_end();
      return n;
    }
    if (target->k != Expr::K::Name) fail("block set needs a simple name");
    auto n = std::make_unique<Node>(Node::K::SetBlock, line);
    n->target = std::move(target);
    if (is_op("|")) n->filter = parse_filters(nullptr);
    expect_block_end();
    n->body = parse_body({"endset"});
    advance();
    expect_block_end();
    return n;
  }

  void parse_params(std::vector<std::pair<std::string, ExprPtr>>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string name = expect_name();
      ExprPtr def;
      if (accept_op("=")) def = parse_expression(true);
      params.emplace_back(std::move(name), std::move(def));
    }
    expect_op(")");
  }

  NodePtr parse_macro(int line) {
    auto n = std::make_unique<Node>(Node::K::Macro, line);
    n->name = expect_name();
    parse_params(n->params);
    expect_block_end();
    n->body = parse_body({"endmacro"});
    advance();
    if (cur().t == Token::T::Name) advance();  // {% endmacro name %}
    expect_block_end();
    return n;
  }

  NodePtr parse_call_block(int line) {
    auto n = std::make_unique<Node>(Node::K::CallBlock, line);
    if (is_op("(")) parse_params(n->params);
    n->expr = parse_expression(true);
    if (n->expr->k != Expr::K::Call) fail("expected call");
    expect_block_end();
    n->body = parse_body({"endcall"});
    advance();
    expect_block_end();
    return n;
  }

  NodePtr parse_filter_block(int line) {
    auto n = std::make_unique<Node>(Node::K::FilterBlock, line);
    n->filter = parse_filters(nullptr, /*first_without_pipe=*/true);
    expect_block_end();
    n->body = parse_body({"endfilter"});
    advance();
    expect_block_end();
    return n;
  }

  NodePtr parse_with(int line) {
    auto n = std::make_unique<Node>(Node::K::With, line);
    while (cur().t != Token::T::BlockEnd) {
      if (!n->params.empty()) expect_op(",");
      std::string name = expect_name();
      expect_op("=");
      n->params.emplace_back(std::move(name), parse_expression(true));
    }
    expect_block_end();
    n->body = parse_body({"endwith"});
    advance();
    expect_block_end();
    return n;
  }

  // ---------------------------------------------------------- expressions
  ExprPtr parse_tuple(bool simplified, bool no_cond = false) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!accept_op(",")) break;
        is_tuple = true;
      }
      if (cur().t == Token::T::BlockEnd || cur().t == Token::T::VarEnd || is_op(")") ||
          (no_cond && (is_name("if") || is_name("recursive"))) || (!items.empty() && is_name("in")))
        break;
      items.push_back(simplified ? parse_primary_postfix() : parse_expression(!no_cond));
    }
    if (!is_tuple) {
      if (items.empty()) fail("Expected an expression, got " + describe());
      return std::move(items[0]);
    }
    auto t = std::make_unique<Expr>(Expr::K::Tuple, line);
    for (auto& item : items) adopt(*t, std::move(item));
    return t;
  }

  ExprPtr parse_primary_postfix() {
    ExprPtr e = parse_primary();
    return parse_postfix(std::move(e));
  }

  ExprPtr parse_expression(bool with_cond = true) {
    DepthGuard g(*this);
    if (!with_cond) return parse_or();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      int line = cur().line;
      advance();
      ExprPtr cond = parse_or();
      ExprPtr otherwise;
      if (accept_name("else")) otherwise = parse_expression(true);
      auto c = std::make_unique<Expr>(Expr::K::Cond, line);
      adopt(*c, std::move(e));
      adopt(*c, std::move(cond));
      adopt(*c, std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(Expr::K k, std::string op, ExprPtr a, ExprPtr b, int line) {
    auto e = std::make_unique<Expr>(k, line);
    e->op = std::move(op);
    adopt(*e, std::move(a));
    adopt(*e, std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      advance();
      e = binary(Expr::K::Or, "or", std::move(e), parse_and(), line);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      advance();
      e = binary(Expr::K::And, "and", std::move(e), parse_not(), line);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      int line = cur().line;
      advance();
      auto e = std::make_unique<Expr>(Expr::K::Unary, line);
      e->op = "not";
      adopt(*e, parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (cur().t == Token::T::Op &&
          (cur().v == "==" || cur().v == "!=" || cur().v == "<" || cur().v == "<=" || cur().v == ">" || cur().v == ">=")) {
        op = cur().v;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().t == Token::T::Name && peek().v == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = std::make_unique<Expr>(Expr::K::Compare, line);
        adopt(*cmp, std::move(first));
      }
      cmp->ops.push_back(op);
      adopt(*cmp, parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().v;
      int line = cur().line;
      advance();
      e = binary(Expr::K::Binary, op, std::move(e), parse_concat(), line);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      int line = cur().line;
      advance();
      e = binary(Expr::K::Binary, "~", std::move(e), parse_math2(), line);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().v;
      int line = cur().line;
      advance();
      e = binary(Expr::K::Binary, op, std::move(e), parse_pow(), line);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      advance();
      e = binary(Expr::K::Binary, "**", std::move(e), parse_unary(true), line);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      auto u = std::make_unique<Expr>(Expr::K::Unary, cur().line);
      u->op = cur().v;
      advance();
      adopt(*u, parse_unary(false));
      e = std::move(u);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    DepthGuard g(*this);
    const Token& t = cur();
    int line = t.line;
    switch (t.t) {
      case Token::T::Name: {
        std::string v = t.v;
        advance();
        auto e = std::make_unique<Expr>(Expr::K::Literal, line);
        if (v == "true" || v == "True") e->literal = Value(true);
        else if (v == "false" || v == "False") e->literal = Value(false);
        else if (v == "none" || v == "None") e->literal = Value::none();
        else {
          e->k = Expr::K::Name;
          e->name = v;
        }
        return e;
      }
      case Token::T::String: {
        std::string s;
        while (cur().t == Token::T::String) {
          s += cur().v;
          advance();
        }
        auto e = std::make_unique<Expr>(Expr::K::Literal, line);
        e->literal = Value(std::move(s));
        return e;
      }
      case Token::T::Int: {
        auto e = std::make_unique<Expr>(Expr::K::Literal, line);
        std::int64_t v = 0;
        auto r = std::from_chars(t.v.data(), t.v.data() + t.v.size(), v);
        if (r.ec != std::errc()) e->literal = Value(std::stod(t.v));
        else e->literal = Value(v);
        advance();
        return e;
      }
      case Token::T::Float: {
        auto e = std::make_unique<Expr>(Expr::K::Literal, line);
        e->literal = Value(std::stod(t.v));
        advance();
        return e;
      }
      case Token::T::Op: {
        if (t.v == "(") {
          advance();
          if (accept_op(")")) {
            auto e = std::make_unique<Expr>(Expr::K::Tuple, line);
            return e;
          }
          ExprPtr first = parse_expression(true);
          if (accept_op(")")) return first;
          auto tup = std::make_unique<Expr>(Expr::K::Tuple, line);
          adopt(*tup, std::move(first));
          while (accept_op(",")) {
            if (is_op(")")) break;
            adopt(*tup, parse_expression(true));
          }
          expect_op(")");
          return tup;
        }
        if (t.v == "[") {
          advance();
          auto e = std::make_unique<Expr>(Expr::K::List, line);
          while (!is_op("]")) {
            if (!e->children.empty()) expect_op(",");
            if (is_op("]")) break;
            adopt(*e, parse_expression(true));
          }
          expect_op("]");
          return e;
        }
        if (t.v == "{") {
          advance();
          auto e = std::make_unique<Expr>(Expr::K::Dict, line);
          while (!is_op("}")) {
            if (!e->children.empty()) expect_op(",");
            if (is_op("}")) break;
            adopt(*e, parse_expression(true));
            expect_op(":");
            adopt(*e, parse_expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      }
      default:
        break;
    }
    fail("Expected an expression, got " + describe());
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      int line = cur().line;
      if (is_op(".")) {
        advance();
        if (cur().t == Token::T::Name) {
          auto a = std::make_unique<Expr>(Expr::K::Attr, line);
          a->name = cur().v;
          advance();
          adopt(*a, std::move(e));
          e = std::move(a);
        } else if (cur().t == Token::T::Int) {
          auto idx = std::make_unique<Expr>(Expr::K::Literal, line);
          idx->literal = Value(static_cast<std::int64_t>(std::stoll(cur().v)));
          advance();
          e = binary(Expr::K::Item, "", std::move(e), std::move(idx), line);
        } else {
          fail("expected name or number after '.', got " + describe());
        }
      } else if (is_op("[")) {
        advance();
        e = parse_subscript(std::move(e), line);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr base, int line) {
    // base[ ... ]  with slices
    ExprPtr parts[3];
    bool is_slice = false;
    if (!is_op(":")) parts[0] = parse_expression(true);
    if (accept_op(":")) {
      is_slice = true;
      if (!is_op("]") && !is_op(":")) parts[1] = parse_expression(true);
      if (accept_op(":")) {
        if (!is_op("]")) parts[2] = parse_expression(true);
      }
    } else if (is_op(",")) {
      auto tup = std::make_unique<Expr>(Expr::K::Tuple, line);
      adopt(*tup, std::move(parts[0]));
      while (accept_op(",")) {
        if (is_op("]")) break;
        adopt(*tup, parse_expression(true));
      }
      parts[0] = std::move(tup);
    }
    expect_op("]");
    if (!is_slice) return binary(Expr::K::Item, "", std::move(base), std::move(parts[0]), line);
    auto s = std::make_unique<Expr>(Expr::K::Slice, line);
    adopt(*s, std::move(base));
    for (auto& p : parts) adopt(*s, std::move(p));
    return s;
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (cur().t == Token::T::Name && peek().t == Token::T::Op && peek().v == "=") {
        std::string name = cur().v;
        advance();
        advance();
        adopt_kwarg(call, std::move(name), parse_expression(true));
      } else {
        if (!call.kwargs.empty()) fail("positional argument follows keyword argument");
        adopt(call, parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr fn) {
    auto c = std::make_unique<Expr>(Expr::K::Call, cur().line);
    adopt(*c, std::move(fn));
    parse_call_args(*c);
    return c;
  }

  // `node | f(args) | g ...` ; node may be null (block filters).
  ExprPtr parse_filters(ExprPtr node, bool first_without_pipe = false) {
    bool first = true;
    while (true) {
      if (!(first && first_without_pipe)) {
        if (!accept_op("|")) break;
      }
      first = false;
      auto f = std::make_unique<Expr>(Expr::K::Filter, cur().line);
      f->name = expect_name();
      while (is_op(".") && peek().t == Token::T::Name) {
        advance();
        f->name += "." + cur().v;
        advance();
      }
      adopt(*f, std::move(node));
      if (is_op("(")) parse_call_args(*f);
      node = std::move(f);
    }
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filters(std::move(e));
      } else if (is_name("is")) {
        int line = cur().line;
        advance();
        auto t = std::make_unique<Expr>(Expr::K::Test, line);
        if (accept_name("not")) t->negated = true;
        t->name = expect_name();
        adopt(*t, std::move(e));
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().t == Token::T::Name || cur().t == Token::T::String || cur().t == Token::T::Int ||
                    cur().t == Token::T::Float || is_op("[") || is_op("{") || is_op("(")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") && !is_name("in") &&
                   !is_name("not")) {
          if (is_name("is")) fail("You cannot chain multiple tests with is");
          adopt(*t, parse_primary_postfix());
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }
};

}  // namespace

Body parse_template(const std::string& source) {
  // Normalise newlines and drop one trailing newline (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Lexer lexer(std::move(src));
  Parser parser(lexer.run());
  return parser.parse_all();
}

}  // namespace halo::text::jinja
