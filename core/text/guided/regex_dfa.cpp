#include "text/guided/regex_dfa.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <string>
#include <utility>

#include "common/error.h"
#include "text/guided/utf8_ranges.h"

namespace halo::text::guided {

namespace {

constexpr int kMaxRepeat = 1000;
// Groups within groups: the parser and the NFA builder recurse once per level.
constexpr int kMaxGroupDepth = 1000;
constexpr size_t kMaxNfaStates = 4'000'000;

// A regex as errors quote it: by its start only, since one generated from a
// schema can be megabytes long.
std::string quoted(std::string_view pattern) {
  if (pattern.size() <= 200) return "'" + std::string(pattern) + "'";
  return "'" + std::string(pattern.substr(0, 200)) + "...' (" + std::to_string(pattern.size()) +
         " bytes)";
}

// ASCII classes of \d \w \s.
CpSet class_set(char c) {
  switch (c) {
    case 'd':
      return {{'0', '9'}};
    case 'w':
      return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    default:  // 's'
      return {{'\t', '\r'}, {' ', ' '}};
  }
}

// ---- parser -> syntax tree ----

struct Node {
  enum Kind { kEmpty, kSet, kConcat, kAlt, kRepeat } kind = kEmpty;
  CpSet set;              // kSet
  std::vector<int> kids;  // kConcat, kAlt, kRepeat (one)
  int min = 0, max = 0;   // kRepeat; max -1 = unbounded
};

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  std::vector<Node> nodes;

  int parse() {
    if (!p_.empty() && p_[0] == '^') pos_ = 1;
    end_ = p_.size();
    if (end_ > pos_ && p_[end_ - 1] == '$' && !escaped_at(end_ - 1)) --end_;
    const int root = parse_alt();
    if (pos_ < end_) fail(p_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    return root;
  }

  [[noreturn]] void fail(const std::string& what) const { fail_at(what, pos_); }
  [[noreturn]] void fail_at(const std::string& what, size_t at) const {
    throw Error("regex " + quoted(p_) + ": " + what + " at offset " + std::to_string(at));
  }

 private:
  std::string_view p_;
  size_t pos_ = 0, end_ = 0;
  int depth_ = 0;  // groups open

  // Whether the character at i is preceded by an odd number of backslashes.
  bool escaped_at(size_t i) const {
    size_t n = 0;
    while (i > n && p_[i - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }

  bool more() const { return pos_ < end_; }
  char peek() const { return p_[pos_]; }

  int add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<int>(nodes.size()) - 1;
  }
  int add_set(CpSet s) {
    Node n;
    n.kind = Node::kSet;
    n.set = normalized(std::move(s));
    return add(std::move(n));
  }

  int parse_alt() {
    std::vector<int> alts{parse_concat()};
    while (more() && peek() == '|') {
      ++pos_;
      alts.push_back(parse_concat());
    }
    if (alts.size() == 1) return alts[0];
    Node n;
    n.kind = Node::kAlt;
    n.kids = std::move(alts);
    return add(std::move(n));
  }

  int parse_concat() {
    std::vector<int> items;
    while (more() && peek() != '|' && peek() != ')') {
      const int atom = parse_atom();
      items.push_back(parse_quantifiers(atom));
    }
    if (items.empty()) return add(Node{});
    if (items.size() == 1) return items[0];
    Node n;
    n.kind = Node::kConcat;
    n.kids = std::move(items);
    return add(std::move(n));
  }

  bool read_int(int& v) {
    const size_t start = pos_;
    long long x = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      x = std::min<long long>(x * 10 + (peek() - '0'), 1'000'000'000);
      ++pos_;
    }
    v = static_cast<int>(x);
    return pos_ > start;
  }

  int parse_quantifiers(int atom) {
    if (!more()) return atom;
    const size_t at = pos_;
    int min = 0, max = -1;
    const char c = peek();
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      min = 1;
      ++pos_;
    } else if (c == '?') {
      max = 1;
      ++pos_;
    } else if (c == '{') {
      ++pos_;
      if (!read_int(min)) fail_at("bad quantifier", at);
      if (more() && peek() == ',') {
        ++pos_;
        if (!read_int(max)) max = -1;
      } else {
        max = min;
      }
      if (!more() || peek() != '}') fail_at("bad quantifier", at);
      ++pos_;
      if (min > kMaxRepeat || max > kMaxRepeat) fail_at("repeat count above 1000", at);
      if (max >= 0 && max < min) fail_at("quantifier {m,n} with n < m", at);
    } else {
      return atom;
    }
    if (more() && peek() == '?') ++pos_;  // lazy: same language
    if (more() && peek() == '+') fail("possessive quantifiers are not supported");
    Node n;
    n.kind = Node::kRepeat;
    n.kids = {atom};
    n.min = min;
    n.max = max;
    return add(std::move(n));
  }

  uint32_t read_utf8() {
    uint32_t cp = 0;
    const int len = utf8_decode(p_, pos_, cp);
    if (len == 0) fail("invalid UTF-8");
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  uint32_t read_hex(int digits, size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= end_ || !std::isxdigit(static_cast<unsigned char>(peek()))) {
        fail_at("bad hex escape", at);
      }
      const char h = peek();
      v = v * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      ++pos_;
    }
    return v;
  }

  // After a backslash: either a single code point (returns true, sets cp) or a
  // class (returns false, sets set).
  bool parse_escape(bool in_class, uint32_t& cp, CpSet& set) {
    const size_t at = pos_ - 1;
    if (!more()) fail_at("trailing backslash", at);
    const char c = peek();
    ++pos_;
    switch (c) {
      case 'd':
      case 'w':
      case 's':
        set = class_set(c);
        return false;
      case 'D':
      case 'W':
      case 'S':
        set = negated(class_set(static_cast<char>(c | 0x20)));
        return false;
      case 't':
        cp = '\t';
        return true;
      case 'n':
        cp = '\n';
        return true;
      case 'r':
        cp = '\r';
        return true;
      case 'f':
        cp = '\f';
        return true;
      case 'v':
        cp = '\v';
        return true;
      case '0':
        if (more() && peek() >= '0' && peek() <= '9')
          fail_at("octal escapes are not supported", at);
        cp = 0;
        return true;
      case 'x':
        cp = read_hex(2, at);
        return true;
      case 'u': {
        cp = read_hex(4, at);
        if (cp >= 0xD800 && cp <= 0xDBFF && pos_ + 1 < end_ && p_[pos_] == '\\' &&
            p_[pos_ + 1] == 'u') {
          pos_ += 2;
          const uint32_t low = read_hex(4, at);
          if (low < 0xDC00 || low > 0xDFFF) fail_at("unpaired surrogate in \\u escape", at);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if (cp >= 0xD800 && cp <= 0xDFFF) {
          fail_at("unpaired surrogate in \\u escape", at);
        }
        return true;
      }
      case 'b':
        if (in_class) {
          cp = '\b';
          return true;
        }
        fail_at("word boundaries are not supported", at);
      case 'B':
        fail_at("word boundaries are not supported", at);
      default:
        break;
    }
    if (c >= '1' && c <= '9') fail_at("backreferences are not supported", at);
    if (std::isalnum(static_cast<unsigned char>(c))) {
      fail_at(std::string("unknown escape \\") + c, at);
    }
    --pos_;
    cp = read_utf8();  // escaped punctuation (or any non-ASCII character): literal
    return true;
  }

  int parse_atom() {
    const size_t at = pos_;
    const char c = peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (more() && peek() == '?') {
          if (pos_ + 1 < end_ && p_[pos_ + 1] == ':') {
            pos_ += 2;
          } else if (pos_ + 1 < end_ &&
                     (p_[pos_ + 1] == '=' || p_[pos_ + 1] == '!' || p_[pos_ + 1] == '<')) {
            fail_at(
                p_[pos_ + 1] == '<' && pos_ + 2 < end_ && p_[pos_ + 2] != '=' && p_[pos_ + 2] != '!'
                    ? "named groups are not supported"
                    : "lookaround is not supported",
                at);
          } else {
            fail_at("unsupported (? group", at);
          }
        }
        // Parsing, and every walk of the tree after it, recurse per group.
        if (++depth_ > kMaxGroupDepth)
          fail_at("groups nested deeper than " + std::to_string(kMaxGroupDepth), at);
        const int inner = parse_alt();
        --depth_;
        if (!more() || peek() != ')') fail_at("unbalanced '('", at);
        ++pos_;
        return inner;
      }
      case '[':
        return parse_class();
      case '.':
        ++pos_;
        return add_set({{0, '\n' - 1}, {'\n' + 1, kMaxCodePoint}});
      case '\\': {
        ++pos_;
        uint32_t cp = 0;
        CpSet set;
        if (parse_escape(false, cp, set)) return add_set({{cp, cp}});
        return add_set(std::move(set));
      }
      case '*':
      case '+':
      case '?':
        fail_at("nothing to repeat", at);
      case '{': {
        int ignored = 0;
        ++pos_;
        if (read_int(ignored)) fail_at("nothing to repeat", at);
        --pos_;
        break;
      }
      case '^':
        fail_at("'^' is only taken at the start", at);
      case '$':
        fail_at("'$' is only taken at the end", at);
      default:
        break;
    }
    const uint32_t cp = read_utf8();
    return add_set({{cp, cp}});
  }

  int parse_class() {
    const size_t at = pos_;
    ++pos_;  // '['
    bool negate = false;
    if (more() && peek() == '^') {
      negate = true;
      ++pos_;
    }
    CpSet set;
    for (;;) {
      if (!more()) fail_at("unbalanced '['", at);
      if (peek() == ']') {
        ++pos_;
        break;
      }
      const size_t item_at = pos_;
      uint32_t lo = 0;
      CpSet cls;
      bool single = true;
      if (peek() == '\\') {
        ++pos_;
        single = parse_escape(true, lo, cls);
      } else {
        lo = read_utf8();
      }
      if (!single) {
        set.insert(set.end(), cls.begin(), cls.end());
        continue;
      }
      if (pos_ + 1 < end_ && peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = 0;
        if (peek() == '\\') {
          ++pos_;
          if (!parse_escape(true, hi, cls)) fail_at("class escape as a range bound", item_at);
        } else {
          hi = read_utf8();
        }
        if (hi < lo) fail_at("range out of order", item_at);
        set.push_back({lo, hi});
      } else {
        set.push_back({lo, lo});
      }
    }
    return add_set(negate ? negated(set) : std::move(set));
  }
};

// ---- Thompson NFA over byte ranges ----

struct NState {
  std::vector<int32_t> eps;
  int32_t to = -1;  // byte-range edge [lo, hi] -> to
  uint8_t lo = 0, hi = 0;
};

class NfaBuilder {
 public:
  NfaBuilder(const std::vector<Node>& nodes, const Parser& parser)
      : nodes_(nodes), parser_(parser) {}

  std::vector<NState> states;

  int32_t make() {
    if (states.size() >= kMaxNfaStates) parser_.fail_at("expression too large", 0);
    states.emplace_back();
    return static_cast<int32_t>(states.size()) - 1;
  }

  // Builds node `id`; returns {entry, exit}.
  std::pair<int32_t, int32_t> build(int id) {
    const Node& n = nodes_[static_cast<size_t>(id)];
    switch (n.kind) {
      case Node::kEmpty: {
        const int32_t s = make();
        return {s, s};
      }
      case Node::kSet: {
        const int32_t s = make(), e = make();
        std::vector<ByteSeq> seqs;
        for (const CpRange& r : n.set) utf8_sequences(r.lo, r.hi, seqs);
        for (const ByteSeq& seq : seqs) {
          int32_t cur = make();
          states[s].eps.push_back(cur);
          for (size_t i = 0; i < seq.size(); ++i) {
            const int32_t nxt = i + 1 == seq.size() ? e : make();
            states[cur].lo = seq[i].lo;
            states[cur].hi = seq[i].hi;
            states[cur].to = nxt;
            cur = nxt;
          }
        }
        return {s, e};
      }
      case Node::kConcat: {
        auto [s, e] = build(n.kids[0]);
        for (size_t i = 1; i < n.kids.size(); ++i) {
          auto [s2, e2] = build(n.kids[i]);
          states[e].eps.push_back(s2);
          e = e2;
        }
        return {s, e};
      }
      case Node::kAlt: {
        const int32_t s = make(), e = make();
        for (int kid : n.kids) {
          auto [ks, ke] = build(kid);
          states[s].eps.push_back(ks);
          states[ke].eps.push_back(e);
        }
        return {s, e};
      }
      case Node::kRepeat: {
        const int32_t s = make();
        int32_t e = s;
        for (int i = 0; i < n.min; ++i) {
          auto [ks, ke] = build(n.kids[0]);
          states[e].eps.push_back(ks);
          e = ke;
        }
        if (n.max < 0) {
          const int32_t loop = make(), out = make();
          auto [ks, ke] = build(n.kids[0]);
          states[e].eps.push_back(loop);
          states[loop].eps = {ks, out};
          states[ke].eps.push_back(loop);
          e = out;
        } else {
          for (int i = n.min; i < n.max; ++i) {
            auto [ks, ke] = build(n.kids[0]);
            const int32_t out = make();
            states[e].eps.push_back(ks);
            states[e].eps.push_back(out);
            states[ke].eps.push_back(out);
            e = out;
          }
        }
        return {s, e};
      }
    }
    return {0, 0};
  }

 private:
  const std::vector<Node>& nodes_;
  const Parser& parser_;
};

// Hopcroft's partition refinement: merges equivalent states. `table` has kDead
// for missing transitions (an implicit sink, here state n). Keeps start at 0.
// long: one algorithm whose partition, worklist and inverse transitions live
// across all of it; split into calls it would pass them all around.
void minimize(std::vector<int32_t>& table, std::vector<uint8_t>& accepting, int32_t start) {
  const auto n = static_cast<int32_t>(accepting.size());
  const int32_t total = n + 1;  // + sink
  auto delta = [&](int32_t s, int c) {
    if (s == n) return n;
    const int32_t t = table[static_cast<size_t>(s) * 256 + c];
    return t < 0 ? n : t;
  };
  // Inverse transitions, CSR keyed by target * 256 + byte.
  std::vector<int32_t> inv_start(static_cast<size_t>(total) * 256 + 1, 0);
  for (int32_t s = 0; s < total; ++s) {
    for (int c = 0; c < 256; ++c) ++inv_start[static_cast<size_t>(delta(s, c)) * 256 + c + 1];
  }
  for (size_t i = 1; i < inv_start.size(); ++i) inv_start[i] += inv_start[i - 1];
  std::vector<int32_t> inv(inv_start.back());
  {
    std::vector<int32_t> fill(inv_start.begin(), inv_start.end() - 1);
    for (int32_t s = 0; s < total; ++s) {
      for (int c = 0; c < 256; ++c) inv[fill[static_cast<size_t>(delta(s, c)) * 256 + c]++] = s;
    }
  }
  // Blocks are ranges of `elems`; the marked prefix of a block is being split off.
  std::vector<int32_t> elems, loc(total), blk(total);
  std::vector<int32_t> bstart, bend, bmark;
  for (int pass = 0; pass < 2; ++pass) {
    const size_t begin = elems.size();
    for (int32_t s = 0; s < total; ++s) {
      const bool acc = s < n && accepting[s];
      if (acc == (pass == 0)) {
        loc[s] = static_cast<int32_t>(elems.size());
        elems.push_back(s);
      }
    }
    if (elems.size() > begin) {
      for (size_t i = begin; i < elems.size(); ++i)
        blk[elems[i]] = static_cast<int32_t>(bstart.size());
      bstart.push_back(static_cast<int32_t>(begin));
      bend.push_back(static_cast<int32_t>(elems.size()));
      bmark.push_back(0);
    }
  }
  std::vector<std::array<uint64_t, 4>> in_work(bstart.size(), std::array<uint64_t, 4>{});
  std::vector<std::pair<int32_t, int>> work;
  auto push = [&](int32_t b, int c) {
    if (in_work[b][c >> 6] >> (c & 63) & 1) return;
    in_work[b][c >> 6] |= uint64_t{1} << (c & 63);
    work.emplace_back(b, c);
  };
  {
    int32_t smallest = 0;
    for (int32_t b = 1; b < static_cast<int32_t>(bstart.size()); ++b) {
      if (bend[b] - bstart[b] < bend[smallest] - bstart[smallest]) smallest = b;
    }
    for (int c = 0; c < 256; ++c) push(smallest, c);
  }
  std::vector<int32_t> xs, touched;
  while (!work.empty()) {
    const auto [a, c] = work.back();
    work.pop_back();
    in_work[a][c >> 6] &= ~(uint64_t{1} << (c & 63));
    xs.clear();
    for (int32_t i = bstart[a]; i < bend[a]; ++i) {
      const size_t key = static_cast<size_t>(elems[i]) * 256 + c;
      xs.insert(xs.end(), inv.begin() + inv_start[key], inv.begin() + inv_start[key + 1]);
    }
    touched.clear();
    for (int32_t p : xs) {
      const int32_t b = blk[p];
      const int32_t pos = loc[p], dst = bstart[b] + bmark[b];
      if (pos < dst) continue;  // already marked
      std::swap(elems[pos], elems[dst]);
      loc[elems[pos]] = pos;
      loc[elems[dst]] = dst;
      if (bmark[b]++ == 0) touched.push_back(b);
    }
    for (int32_t b : touched) {
      const int32_t marked = bmark[b];
      bmark[b] = 0;
      if (marked == bend[b] - bstart[b]) continue;
      const auto d = static_cast<int32_t>(bstart.size());
      bstart.push_back(bstart[b]);
      bend.push_back(bstart[b] + marked);
      bmark.push_back(0);
      in_work.push_back({});
      bstart[b] += marked;
      for (int32_t i = bstart[d]; i < bend[d]; ++i) blk[elems[i]] = d;
      const bool d_smaller = bend[d] - bstart[d] <= bend[b] - bstart[b];
      for (int k = 0; k < 256; ++k) {
        if (in_work[b][k >> 6] >> (k & 63) & 1) {
          push(d, k);
        } else {
          push(d_smaller ? d : b, k);
        }
      }
    }
  }
  // Renumber blocks: start's block first, the sink's block becomes kDead.
  const int32_t sink_block = blk[n];
  std::vector<int32_t> id(bstart.size(), ByteDfa::kDead);
  std::vector<int32_t> rep;
  auto assign = [&](int32_t s) {
    const int32_t b = blk[s];
    if (b == sink_block || id[b] != ByteDfa::kDead) return;
    id[b] = static_cast<int32_t>(rep.size());
    rep.push_back(s);
  };
  assign(start);
  for (int32_t s = 0; s < n; ++s) assign(s);
  if (blk[start] == sink_block) {  // empty language: one state, no transitions
    table.assign(256, ByteDfa::kDead);
    accepting.assign(1, 0);
    return;
  }
  std::vector<int32_t> out(rep.size() * 256);
  std::vector<uint8_t> acc(rep.size());
  for (size_t i = 0; i < rep.size(); ++i) {
    for (int c = 0; c < 256; ++c) out[i * 256 + c] = id[blk[delta(rep[i], c)]];
    acc[i] = accepting[rep[i]];
  }
  table = std::move(out);
  accepting = std::move(acc);
}
}  // namespace

bool ByteDfa::matches(std::string_view text) const {
  int32_t s = start_;
  for (char c : text) {
    s = next(s, static_cast<uint8_t>(c));
    if (s == kDead) return false;
  }
  return accepting(s);
}

// A depth-first walk of the states from start(); every state is live, so the
// longest text from a state is 0 past its last byte, or one byte more than
// the longest from its successors, and an edge back into the walk's path is a
// cycle.
std::optional<size_t> ByteDfa::max_text_bytes() const {
  enum : uint8_t { kNew, kOnPath, kDone };
  std::vector<uint8_t> mark(num_states(), kNew);
  std::vector<size_t> longest(num_states(), 0);
  std::vector<std::pair<int32_t, int>> path{{start_, 0}};  // (state, next byte to try)
  mark[static_cast<size_t>(start_)] = kOnPath;
  while (!path.empty()) {
    const int32_t s = path.back().first;
    const int b = path.back().second++;
    if (b == 256) {
      size_t best = 0;
      for (int c = 0; c < 256; ++c)
        if (const int32_t t = next(s, static_cast<uint8_t>(c)); t != kDead)
          best = std::max(best, 1 + longest[static_cast<size_t>(t)]);
      longest[static_cast<size_t>(s)] = best;
      mark[static_cast<size_t>(s)] = kDone;
      path.pop_back();
      continue;
    }
    const int32_t t = next(s, static_cast<uint8_t>(b));
    if (t == kDead) continue;
    if (mark[static_cast<size_t>(t)] == kOnPath) return std::nullopt;
    if (mark[static_cast<size_t>(t)] == kNew) {
      mark[static_cast<size_t>(t)] = kOnPath;
      path.push_back({t, 0});
    }
  }
  return longest[static_cast<size_t>(start_)];
}

// long: the subset construction, pruning of dead states and renumbering share
// the state sets and the table being built; each step is a commented block.
ByteDfa ByteDfa::compile(std::string_view pattern, size_t max_states, size_t max_work) {
  Parser parser(pattern);
  const int root = parser.parse();
  NfaBuilder nb(parser.nodes, parser);
  auto [nfa_start, nfa_accept] = nb.build(root);
  const std::vector<NState>& nfa = nb.states;

  // The work budget, counted as the automaton grows: NFA states visited by
  // closures, byte edges followed, NFA states held by the sets interned. A
  // few states of very large sets (".?" x 10,000) cost minutes and gigabytes
  // without it, and max_states alone never trips.
  size_t work = 0;
  auto spend = [&](size_t units) {
    work += units;
    if (work > max_work)
      throw Error("regex " + quoted(pattern) + ": building its automaton takes more than " +
                  std::to_string(max_work) +
                  " steps (bounded repetitions such as .{0,1000} or x? repeated thousands of times "
                  "multiply its size)");
  };

  // Epsilon closure, keeping only the states that matter for the future: those
  // with a byte edge, and the accepting one.
  std::vector<uint32_t> mark(nfa.size(), 0);
  uint32_t stamp = 0;
  std::vector<int32_t> stack;
  auto closure = [&](const std::vector<int32_t>& seeds) {
    ++stamp;
    std::vector<int32_t> out;
    stack.assign(seeds.begin(), seeds.end());
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (mark[s] == stamp) continue;
      mark[s] = stamp;
      spend(1);
      const NState& st = nfa[s];
      if (st.to >= 0 || s == nfa_accept) out.push_back(s);
      for (int32_t t : st.eps) {
        if (mark[t] != stamp) stack.push_back(t);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  };

  ByteDfa dfa;
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  auto intern = [&](std::vector<int32_t> set) {
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    spend(set.size());
    if (sets.size() >= max_states) {
      throw Error("regex " + quoted(pattern) + ": the DFA would exceed " +
                  std::to_string(max_states) + " states");
    }
    const auto id = static_cast<int32_t>(sets.size());
    ids.emplace(set, id);
    sets.push_back(std::move(set));
    return id;
  };
  intern(closure({nfa_start}));

  std::array<std::vector<int32_t>, 256> targets;
  for (size_t i = 0; i < sets.size(); ++i) {
    for (auto& t : targets) t.clear();
    for (int32_t s : sets[i]) {
      const NState& st = nfa[s];
      if (st.to < 0) continue;
      spend(static_cast<size_t>(st.hi - st.lo + 1));
      for (int b = st.lo; b <= st.hi; ++b) targets[b].push_back(st.to);
    }
    std::array<int32_t, 256> row;
    for (int b = 0; b < 256; ++b) {
      auto& t = targets[b];
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      if (t.empty()) {
        row[b] = kDead;
      } else if (b > 0 && t == targets[b - 1]) {
        row[b] = row[b - 1];
      } else {
        row[b] = intern(closure(t));
      }
    }
    dfa.table_.insert(dfa.table_.end(), row.begin(), row.end());
    dfa.accepting_.push_back(std::binary_search(sets[i].begin(), sets[i].end(), nfa_accept));
  }

  // Prune the states that cannot reach acceptance (reverse reachability).
  const size_t n = sets.size();
  std::vector<int32_t> pred_start(n + 1, 0), preds;
  for (size_t s = 0; s < n; ++s) {
    int32_t prev = kDead;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = dfa.table_[s * 256 + b];
      if (t != kDead && t != prev) ++pred_start[t + 1];
      prev = t;
    }
  }
  for (size_t i = 0; i < n; ++i) pred_start[i + 1] += pred_start[i];
  preds.resize(pred_start[n]);
  std::vector<int32_t> fill(pred_start.begin(), pred_start.end() - 1);
  for (size_t s = 0; s < n; ++s) {
    int32_t prev = kDead;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = dfa.table_[s * 256 + b];
      if (t != kDead && t != prev) preds[fill[t]++] = static_cast<int32_t>(s);
      prev = t;
    }
  }
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> queue;
  for (size_t s = 0; s < n; ++s) {
    if (dfa.accepting_[s]) {
      live[s] = 1;
      queue.push_back(static_cast<int32_t>(s));
    }
  }
  while (!queue.empty()) {
    const int32_t t = queue.back();
    queue.pop_back();
    for (int32_t k = pred_start[t]; k < pred_start[t + 1]; ++k) {
      if (!live[preds[k]]) {
        live[preds[k]] = 1;
        queue.push_back(preds[k]);
      }
    }
  }
  std::vector<int32_t> renum(n, kDead);
  int32_t kept = 0;
  for (size_t s = 0; s < n; ++s) {
    if (live[s] || s == 0) renum[s] = kept++;
  }
  std::vector<int32_t> table(static_cast<size_t>(kept) * 256);
  std::vector<uint8_t> accepting(static_cast<size_t>(kept));
  for (size_t s = 0; s < n; ++s) {
    if (renum[s] == kDead) continue;
    const size_t row = static_cast<size_t>(renum[s]) * 256;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = dfa.table_[s * 256 + b];
      table[row + b] = t == kDead || !live[t] ? kDead : renum[t];
    }
    accepting[renum[s]] = dfa.accepting_[s];
  }
  minimize(table, accepting, 0);
  dfa.table_ = std::move(table);
  dfa.accepting_ = std::move(accepting);
  dfa.start_ = 0;
  return dfa;
}

}  // namespace halo::text::guided
