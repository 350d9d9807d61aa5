#include "text/guided/grammar.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <unordered_map>

#include "common/error.h"
#include "text/guided/utf8_ranges.h"

namespace halo::text::guided {

namespace {

constexpr int kMaxGrammarRepeat = 1000;
constexpr int kMaxNesting = 200;
constexpr size_t kMaxElems = 1'000'000;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

}  // namespace

// Parses GBNF straight into rules over bytes: groups, repetitions and
// multi-byte classes become helper rules named after the rule they appear in.
class GrammarBuilder {
 public:
  explicit GrammarBuilder(std::string_view text) : s_(text) {}

  Grammar build() {
    skip_ws();
    if (eof()) fail("the grammar is empty: it needs at least a 'root ::= ...' rule");
    while (!eof()) parse_rule();
    for (size_t r = 0; r < info_.size(); ++r)
      if (!info_[r].defined)
        fail_line(info_[r].used_at, "rule '" + info_[r].name + "' is used but never defined");
    const auto root = names_.find("root");
    if (root == names_.end()) fail_line(0, "the grammar has no 'root' rule (the start rule)");
    g_.root_ = root->second;
    prune_unproductive();
    check_left_recursion();
    return std::move(g_);
  }

 private:
  struct RuleInfo {
    std::string name;  // helpers carry the name of the rule they were written in
    bool defined = false;
    size_t used_at = 0;  // offset of the first use, for "never defined"
  };

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::string current_;  // the rule being parsed
  Grammar g_;
  std::vector<RuleInfo> info_;
  std::unordered_map<std::string, int32_t> names_;
  std::unordered_map<std::bitset<256>, Grammar::Elem> term_ids_;
  std::map<std::vector<uint32_t>, Grammar::Elem> class_rules_;  // class -> its helper rule
  size_t num_elems_ = 0;

  // ---- errors and lexing ----

  [[noreturn]] void fail_line(size_t at, const std::string& what) const {
    const auto line =
        1 + std::count(s_.begin(),
                       s_.begin() + static_cast<std::ptrdiff_t>(std::min(at, s_.size())), '\n');
    throw Error("grammar: line " + std::to_string(line) + ": " + what);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_line(pos_, what); }

  bool eof() const { return pos_ >= s_.size(); }
  char peek() const { return s_[pos_]; }

  void skip_ws() {
    while (!eof()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++pos_;
      } else if (c == '#') {
        while (!eof() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t start = pos_;
    while (!eof() && name_char(peek())) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }

  // Whether a `name ::=` starts here (where the current rule ends).
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < s_.size() && name_char(s_[p])) ++p;
    if (p == pos_) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\r' || s_[p] == '\n')) ++p;
    return s_.substr(p, 3) == "::=";
  }

  // ---- building blocks ----

  int32_t rule_id(const std::string& name, size_t used_at) {
    auto [it, fresh] = names_.try_emplace(name, static_cast<int32_t>(info_.size()));
    if (fresh) {
      info_.push_back({name, false, used_at});
      g_.rules_.emplace_back();
    }
    return it->second;
  }

  int32_t helper(std::vector<std::vector<Grammar::Elem>> alts) {
    const auto r = static_cast<int32_t>(info_.size());
    info_.push_back({current_, true, pos_});
    g_.rules_.emplace_back();
    set_alts(r, std::move(alts));
    return r;
  }

  void set_alts(int32_t rule, std::vector<std::vector<Grammar::Elem>> alts) {
    for (auto& a : alts) {
      num_elems_ += a.size() + 1;
      if (num_elems_ > kMaxElems)
        fail("the grammar is too large (over a million elements after expanding repetitions)");
      g_.rules_[static_cast<size_t>(rule)].push_back(static_cast<int32_t>(g_.alts_.size()));
      g_.alts_.push_back(std::move(a));
    }
  }

  Grammar::Elem term(const std::bitset<256>& bytes) {
    auto [it, fresh] = term_ids_.try_emplace(bytes, static_cast<Grammar::Elem>(g_.terms_.size()));
    if (fresh) g_.terms_.push_back(bytes);
    return it->second;
  }
  Grammar::Elem byte_range(uint8_t lo, uint8_t hi) {
    std::bitset<256> b;
    for (int c = lo; c <= hi; ++c) b.set(static_cast<size_t>(c));
    return term(b);
  }

  // One element standing for a sequence (a helper rule when it is not one already).
  Grammar::Elem unit(std::vector<Grammar::Elem> seq) {
    if (seq.size() == 1) return seq[0];
    return ~helper({std::move(seq)});
  }

  // ---- rules ----

  void parse_rule() {
    const size_t at = pos_;
    const std::string name = read_name();
    if (name.empty()) fail(std::string("expected a rule name, found '") + peek() + "'");
    skip_ws();
    if (s_.substr(pos_, 3) != "::=") fail("expected '::=' after the rule name '" + name + "'");
    pos_ += 3;
    const int32_t r = rule_id(name, at);
    if (info_[static_cast<size_t>(r)].defined)
      fail_line(at, "rule '" + name + "' is defined twice");
    info_[static_cast<size_t>(r)].defined = true;
    current_ = name;
    auto alts = parse_alternates();
    if (!eof() && !at_rule_start())
      fail(peek() == ')' ? "unbalanced ')'" : std::string("unexpected '") + peek() + "'");
    set_alts(r, std::move(alts));
  }

  std::vector<std::vector<Grammar::Elem>> parse_alternates() {
    std::vector<std::vector<Grammar::Elem>> alts{parse_sequence()};
    while (!eof() && peek() == '|') {
      ++pos_;
      alts.push_back(parse_sequence());
    }
    return alts;
  }

  std::vector<Grammar::Elem> parse_sequence() {
    std::vector<Grammar::Elem> seq;
    for (;;) {
      skip_ws();
      if (eof() || peek() == '|' || peek() == ')' || at_rule_start()) return seq;
      std::vector<Grammar::Elem> t = parse_term();
      skip_ws();
      if (!eof() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
        t = repeat(unit(std::move(t)));
        skip_ws();
        if (!eof() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{'))
          fail("repetition operators cannot follow each other: use parentheses");
      }
      seq.insert(seq.end(), t.begin(), t.end());
    }
  }

  std::vector<Grammar::Elem> parse_term() {
    const char c = peek();
    if (c == '"' || c == '\'') return parse_literal();
    if (c == '[') return {class_elem(parse_class())};
    if (c == '.') {
      ++pos_;
      return {class_elem({{0, kMaxCodePoint}})};
    }
    if (c == '(') {
      const size_t at = pos_;
      if (++depth_ > kMaxNesting) fail("groups nested deeper than 200");
      ++pos_;
      auto alts = parse_alternates();
      if (eof() || peek() != ')') fail_line(at, "unbalanced '(': no ')' closes it");
      ++pos_;
      --depth_;
      return {~helper(std::move(alts))};
    }
    if (name_char(c)) {
      const size_t at = pos_;
      return {~rule_id(read_name(), at)};
    }
    if (c == '<') fail("token references (<...>) are not supported: write the text as a literal");
    fail(std::string("unexpected '") + c + "'");
  }

  // ---- literals and classes ----

  uint32_t read_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      if (eof() || !std::isxdigit(static_cast<unsigned char>(peek())))
        fail("bad hex escape: expected " + std::to_string(digits) + " hex digits");
      const char h = peek();
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }

  // One character of a literal or class, escapes resolved.
  uint32_t read_char() {
    if (peek() != '\\') {
      uint32_t cp = 0;
      const int len = utf8_decode(s_, pos_, cp);
      if (len == 0) fail("invalid UTF-8");
      pos_ += static_cast<size_t>(len);
      return cp;
    }
    const size_t at = pos_++;
    if (eof()) fail("unterminated escape");
    const char e = s_[pos_++];
    uint32_t cp = 0;
    switch (e) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case '\\':
      case '"':
      case '\'':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
        return static_cast<uint32_t>(e);
      case 'x':
        cp = read_hex(2);
        break;
      case 'u':
        cp = read_hex(4);
        break;
      case 'U':
        cp = read_hex(8);
        break;
      default:
        fail_line(at, std::string("bad escape '\\") + e + "'");
    }
    if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF))
      fail_line(at, "escape is not a Unicode character");
    return cp;
  }

  std::vector<Grammar::Elem> parse_literal() {
    const size_t at = pos_;
    const char quote = s_[pos_++];
    std::vector<Grammar::Elem> seq;
    for (;;) {
      if (eof()) fail_line(at, "unterminated literal");
      if (peek() == quote) break;
      uint8_t bytes[4];
      const int n = utf8_encode(read_char(), bytes);
      for (int i = 0; i < n; ++i) seq.push_back(byte_range(bytes[i], bytes[i]));
    }
    ++pos_;
    return seq;
  }

  CpSet parse_class() {
    const size_t at = pos_++;
    const bool negate = !eof() && peek() == '^';
    if (negate) ++pos_;
    CpSet set;
    for (;;) {
      if (eof()) fail_line(at, "unterminated character class");
      if (peek() == ']') break;
      const uint32_t lo = read_char();
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && peek() == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        hi = read_char();
        if (hi < lo) fail_line(at, "character range out of order");
        if (pos_ + 1 < s_.size() && peek() == '-' && s_[pos_ + 1] != ']')
          fail("'-' right after a range: escape it as \\-");
      }
      set.push_back({lo, hi});
    }
    if (set.empty()) fail_line(at, "empty character class");
    ++pos_;
    return negate ? negated(set) : normalized(std::move(set));
  }

  // A class as one element: a byte set when it is ASCII, else a helper rule
  // with one alternative per UTF-8 byte-range sequence (shared by equal classes).
  Grammar::Elem class_elem(const CpSet& set) {
    if (set.empty() || set.back().hi < 0x80) {
      std::bitset<256> b;
      for (const CpRange& r : set)
        for (uint32_t c = r.lo; c <= r.hi; ++c) b.set(c);
      return term(b);  // empty: matches nothing (pruned as unproductive)
    }
    std::vector<uint32_t> key;
    for (const CpRange& r : set) key.insert(key.end(), {r.lo, r.hi});
    if (auto it = class_rules_.find(key); it != class_rules_.end()) return it->second;
    std::vector<ByteSeq> seqs;
    for (const CpRange& r : set) utf8_sequences(r.lo, r.hi, seqs);
    std::bitset<256> single;
    std::vector<std::vector<Grammar::Elem>> alts;
    for (const ByteSeq& q : seqs) {
      if (q.size() == 1) {
        for (int c = q[0].lo; c <= q[0].hi; ++c) single.set(static_cast<size_t>(c));
        continue;
      }
      std::vector<Grammar::Elem> a;
      for (const ByteRange& br : q) a.push_back(byte_range(br.lo, br.hi));
      alts.push_back(std::move(a));
    }
    if (single.any()) alts.insert(alts.begin(), {term(single)});
    const Grammar::Elem e = ~helper(std::move(alts));
    class_rules_[key] = e;
    return e;
  }

  // ---- repetition ----

  int read_count() {
    long long v = 0;
    const size_t start = pos_;
    while (!eof() && peek() >= '0' && peek() <= '9')
      v = std::min<long long>(v * 10 + (s_[pos_++] - '0'), 1'000'000);
    return pos_ > start ? static_cast<int>(v) : -1;
  }

  Grammar::Elem star(Grammar::Elem u) {
    const auto r = static_cast<int32_t>(info_.size());
    info_.push_back({current_, true, pos_});
    g_.rules_.emplace_back();
    set_alts(r, {{u, ~r}, {}});
    return ~r;
  }

  std::vector<Grammar::Elem> repeat(Grammar::Elem u) {
    const size_t at = pos_;
    const char op = s_[pos_++];
    if (op == '*') return {star(u)};
    if (op == '+') return {u, star(u)};
    if (op == '?') return {~helper({{u}, {}})};
    skip_ws();
    int min = read_count(), max = min;
    skip_ws();
    if (!eof() && peek() == ',') {
      ++pos_;
      skip_ws();
      max = read_count();  // -1: unbounded
      if (min < 0) min = 0;
      skip_ws();
    }
    if (eof() || peek() != '}' || (min < 0 && max < 0))
      fail_line(at, "bad repetition: expected {m}, {m,}, {m,n} or {,n}");
    ++pos_;
    if (min > kMaxGrammarRepeat || max > kMaxGrammarRepeat) fail_line(at, "repetition count above 1000");
    if (max >= 0 && max < min) fail_line(at, "repetition {m,n} with n < m");
    std::vector<Grammar::Elem> seq(static_cast<size_t>(min), u);
    if (max < 0) {
      seq.push_back(star(u));
    } else if (max > min) {
      // Nested optionals: x{0,2} = (x (x)?)?
      Grammar::Elem tail = ~helper({{u}, {}});
      for (int k = min + 1; k < max; ++k) tail = ~helper({{u, tail}, {}});
      seq.push_back(tail);
    }
    return seq;
  }

  // ---- analysis ----

  // Drops every alternative that can never complete; the root must keep one.
  void prune_unproductive() {
    const size_t nr = g_.rules_.size(), na = g_.alts_.size();
    std::vector<uint8_t> productive(nr, 0);
    std::vector<int32_t> pending(na, 0);          // elements not yet known productive
    std::vector<std::vector<int32_t>> users(nr);  // rule -> alternatives using it (with repeats)
    std::vector<int32_t> alt_rule(na, 0);
    for (size_t r = 0; r < nr; ++r)
      for (int32_t a : g_.rules_[r]) alt_rule[static_cast<size_t>(a)] = static_cast<int32_t>(r);
    std::vector<int32_t> done;  // productive alternatives to propagate
    for (size_t a = 0; a < na; ++a) {
      for (Grammar::Elem e : g_.alts_[a]) {
        if (Grammar::is_rule(e)) {
          ++pending[a];
          users[static_cast<size_t>(Grammar::rule_of(e))].push_back(static_cast<int32_t>(a));
        } else if (g_.terms_[static_cast<size_t>(e)].none()) {
          pending[a] = 1 << 30;  // an empty byte set never matches
        }
      }
      if (pending[a] == 0) done.push_back(static_cast<int32_t>(a));
    }
    while (!done.empty()) {
      const int32_t r = alt_rule[static_cast<size_t>(done.back())];
      done.pop_back();
      if (productive[static_cast<size_t>(r)]) continue;
      productive[static_cast<size_t>(r)] = 1;
      for (int32_t a : users[static_cast<size_t>(r)])
        if (--pending[static_cast<size_t>(a)] == 0) done.push_back(a);
    }
    if (!productive[static_cast<size_t>(g_.root_)])
      fail_line(0,
                "rule 'root' matches no text at all: every alternative needs a rule that never "
                "completes");
    for (auto& alts : g_.rules_)
      std::erase_if(alts, [&](int32_t a) { return pending[static_cast<size_t>(a)] != 0; });
  }

  std::vector<uint8_t> nullable_rules() const {
    std::vector<uint8_t> nullable(g_.rules_.size(), 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < g_.rules_.size(); ++r) {
        if (nullable[r]) continue;
        for (int32_t a : g_.rules_[r]) {
          const auto& elems = g_.alts_[static_cast<size_t>(a)];
          if (std::all_of(elems.begin(), elems.end(), [&](Grammar::Elem e) {
                return Grammar::is_rule(e) && nullable[static_cast<size_t>(Grammar::rule_of(e))];
              })) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    return nullable;
  }

  // A rule reachable from itself before any byte is read, through an edge
  // that is not a tail call, would grow the parse stack without end.
  void check_left_recursion() const {
    const auto nullable = nullable_rules();
    const size_t nr = g_.rules_.size();
    struct Edge {
      int32_t to;
      bool tail;
    };
    std::vector<std::vector<Edge>> edges(nr);
    for (size_t r = 0; r < nr; ++r)
      for (int32_t a : g_.rules_[r]) {
        const auto& elems = g_.alts_[static_cast<size_t>(a)];
        for (size_t k = 0; k < elems.size(); ++k) {
          if (!Grammar::is_rule(elems[k])) break;
          const int32_t to = Grammar::rule_of(elems[k]);
          edges[r].push_back({to, k + 1 == elems.size()});
          if (!nullable[static_cast<size_t>(to)]) break;
        }
      }
    const auto comp = components(edges);
    for (size_t r = 0; r < nr; ++r)
      for (const Edge& e : edges[r])
        if (!e.tail && comp[r] == comp[static_cast<size_t>(e.to)])
          fail_line(info_[r].used_at,
                    "rule '" + info_[r].name + "' is left-recursive (it can reach '" +
                        info_[static_cast<size_t>(e.to)].name +
                        "' again before reading any text): rewrite it with repetition, "
                        "e.g. expr ::= term (\"+\" term)*");
  }

  // Strongly connected components (Tarjan's, iterative): component id per rule.
  template <class Edges>
  static std::vector<int32_t> components(const Edges& edges) {
    const size_t n = edges.size();
    std::vector<int32_t> index(n, -1), low(n, 0), comp(n, -1);
    std::vector<uint8_t> on_stack(n, 0);
    std::vector<int32_t> stack;
    int32_t next_index = 0, next_comp = 0;
    std::vector<std::pair<int32_t, size_t>> call;  // (rule, next edge)
    for (size_t s = 0; s < n; ++s) {
      if (index[s] >= 0) continue;
      call.push_back({static_cast<int32_t>(s), 0});
      while (!call.empty()) {
        auto& [v, i] = call.back();
        const auto vs = static_cast<size_t>(v);
        if (i == 0 && index[vs] < 0) {
          index[vs] = low[vs] = next_index++;
          stack.push_back(v);
          on_stack[vs] = 1;
        }
        if (i < edges[vs].size()) {
          const auto w = static_cast<size_t>(edges[vs][i++].to);
          if (index[w] < 0) {
            call.push_back({static_cast<int32_t>(w), 0});
          } else if (on_stack[w]) {
            low[vs] = std::min(low[vs], index[w]);
          }
          continue;
        }
        if (low[vs] == index[vs]) {
          for (int32_t w = -1; w != v;) {
            w = stack.back();
            stack.pop_back();
            on_stack[static_cast<size_t>(w)] = 0;
            comp[static_cast<size_t>(w)] = next_comp;
          }
          ++next_comp;
        }
        const int32_t done = v;
        call.pop_back();
        if (!call.empty()) {
          const auto u = static_cast<size_t>(call.back().first);
          low[u] = std::min(low[u], low[static_cast<size_t>(done)]);
        }
      }
    }
    return comp;
  }
};

Grammar Grammar::compile(std::string_view gbnf) { return GrammarBuilder(gbnf).build(); }

// A depth-first walk of the rules from the root: a rule's longest text is its
// longest alternative, one byte per byte set plus the referenced rules'
// longest (saturating: nested counts can multiply past any size); a reference
// back into the walk's path is a cycle.
std::optional<size_t> Grammar::max_text_bytes() const {
  enum : uint8_t { kNew, kOnPath, kDone };
  constexpr size_t kCap = size_t{1} << 48;
  std::vector<uint8_t> mark(rules_.size(), kNew);
  std::vector<size_t> longest(rules_.size(), 0);
  struct Visit {
    int32_t rule;
    size_t alt = 0, elem = 0;  // the next element to look at
  };
  std::vector<Visit> path{{root_}};
  mark[static_cast<size_t>(root_)] = kOnPath;
  while (!path.empty()) {
    Visit& v = path.back();
    const auto& alts = alts_of(v.rule);
    if (v.alt == alts.size()) {
      size_t best = 0;
      for (int32_t a : alts) {
        size_t len = 0;
        for (Elem e : alt(a)) len = std::min(kCap, len + (is_rule(e) ? longest[static_cast<size_t>(rule_of(e))] : 1));
        best = std::max(best, len);
      }
      longest[static_cast<size_t>(v.rule)] = best;
      mark[static_cast<size_t>(v.rule)] = kDone;
      path.pop_back();
      continue;
    }
    const auto& elems = alt(alts[v.alt]);
    if (v.elem == elems.size()) {
      ++v.alt, v.elem = 0;
      continue;
    }
    const Elem e = elems[v.elem++];
    if (!is_rule(e)) continue;
    const int32_t t = rule_of(e);
    if (mark[static_cast<size_t>(t)] == kOnPath) return std::nullopt;
    if (mark[static_cast<size_t>(t)] == kNew) {
      mark[static_cast<size_t>(t)] = kOnPath;
      path.push_back({t});  // `v` is not used past this point
    }
  }
  return longest[static_cast<size_t>(root_)];
}

}  // namespace halo::text::guided
