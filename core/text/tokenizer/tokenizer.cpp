#include "text/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <functional>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/file_text.h"
#include "text/tokenizer/bpe.h"
#include "text/tokenizer/regex.h"
#include "text/tokenizer/unicode.h"

namespace halo::text {

using nlohmann::json;

namespace detail {

namespace {

// ---------------------------------------------------------------- helpers


json parse_json(const std::filesystem::path& path) {
  const std::string text = read_file_text(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed JSON: {}", path.string(), e.what()));
  }
}

// tokenizer.json is parsed with a SAX handler: model.vocab and model.merges
// (hundreds of thousands of entries) go straight into vectors instead of a
// DOM; everything else is built as a normal DOM (where those two keys are null).
// Largest vocabulary accepted (as for config.json's vocab_size): the id table
// is allocated up to the largest id, so {"a": 2000000000} must not pass.
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

struct TokenizerJson {
  json rest;
  std::vector<std::pair<std::string, int64_t>> vocab;
  bool has_vocab = false;
  std::vector<std::pair<std::string, std::string>> merges;
  bool has_merges = false;
  std::string bad_merge;  // first malformed vocab or merge entry, for the error message
};

class TokenizerSax final : public nlohmann::json_sax<json> {
 public:
  explicit TokenizerSax(TokenizerJson& out) : out_(out), dom_(out.rest) {}

  bool null() override { return mode_ == Mode::Dom ? dom_.null() : bad("null"); }
  bool boolean(bool v) override { return mode_ == Mode::Dom ? dom_.boolean(v) : bad(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::Vocab) return vocab_value(v, std::to_string(v));
    return mode_ == Mode::Dom ? dom_.number_integer(v) : bad(std::to_string(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::Vocab)
      return vocab_value(v > static_cast<number_unsigned_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v), std::to_string(v));
    return mode_ == Mode::Dom ? dom_.number_unsigned(v) : bad(std::to_string(v));
  }
  bool number_float(number_float_t v, const string_t& s) override {
    if (mode_ == Mode::Vocab) return vocab_value(-1, s);  // 1e12, 3.0: ids are written as integers
    return mode_ == Mode::Dom ? dom_.number_float(v, s) : bad(s);
  }
  bool string(string_t& v) override {
    switch (mode_) {
      case Mode::Dom: return dom_.string(v);
      case Mode::Vocab: return vocab_value(-1, json(v).dump());
      case Mode::Merges: {
        if (depth_ == special_depth_) {
          const auto sp = v.find(' ');
          if (sp == std::string::npos) return bad(v);
          out_.merges.emplace_back(v.substr(0, sp), v.substr(sp + 1));
        } else {
          pair_.push_back(std::move(v));
        }
        return true;
      }
    }
    return true;
  }
  bool binary(binary_t& v) override { return mode_ == Mode::Dom ? dom_.binary(v) : bad("binary"); }
  bool start_object(std::size_t n) override {
    ++depth_;
    if (mode_ == Mode::Dom) {
      if (pending_ == Mode::Vocab) {
        pending_ = Mode::Dom;
        mode_ = Mode::Vocab;
        special_depth_ = depth_;
        out_.has_vocab = true;
        return dom_.null();
      }
      pending_ = Mode::Dom;
      if (depth_ == 2 && top_key_ == "model") in_model_ = true;
      return dom_.start_object(n);
    }
    return bad("{");
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::Vocab) {
      key_ = std::move(k);
      return true;
    }
    if (mode_ != Mode::Dom) return bad(k);
    if (depth_ == 1) top_key_ = k;
    pending_ = Mode::Dom;
    if (depth_ == 2 && in_model_) {
      if (k == "vocab") pending_ = Mode::Vocab;
      if (k == "merges") pending_ = Mode::Merges;
    }
    return dom_.key(k);
  }
  bool end_object() override {
    --depth_;
    if (mode_ == Mode::Vocab && depth_ + 1 == special_depth_) {
      mode_ = Mode::Dom;
      return true;
    }
    if (mode_ != Mode::Dom) return bad("}");
    if (depth_ == 1) in_model_ = false;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) override {
    ++depth_;
    if (mode_ == Mode::Merges) {
      if (depth_ != special_depth_ + 1) return bad("[");
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::Dom) return bad("[");
    if (pending_ == Mode::Merges) {
      pending_ = Mode::Dom;
      mode_ = Mode::Merges;
      special_depth_ = depth_;
      out_.has_merges = true;
      return dom_.null();
    }
    pending_ = Mode::Dom;
    return dom_.start_array(n);
  }
  bool end_array() override {
    --depth_;
    if (mode_ == Mode::Merges) {
      if (depth_ + 1 == special_depth_) {
        mode_ = Mode::Dom;
        return true;
      }
      if (pair_.size() != 2) return bad("merge with " + std::to_string(pair_.size()) + " parts");
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      return true;
    }
    if (mode_ != Mode::Dom) return bad("]");
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string& tok, const nlohmann::detail::exception& e) override {
    return dom_.parse_error(pos, tok, e);
  }

 private:
  enum class Mode { Dom, Vocab, Merges };
  // Ids index the id -> token table, which is sized by the largest id.
  bool vocab_value(int64_t v, const std::string& shown) {
    if (v < 0 || v >= kMaxTokenId) {
      bad_ = "model.vocab token " + json(key_).dump() + " has id " + shown + " (ids are integers from 0 to " +
             std::to_string(kMaxTokenId - 1) + ")";
      out_.bad_merge = bad_;
      return false;
    }
    out_.vocab.emplace_back(std::move(key_), v);
    return true;
  }
  bool bad(const std::string& what) {
    bad_ = mode_ == Mode::Vocab ? "unexpected " + what + " in model.vocab" : "bad model.merges entry near " + what;
    out_.bad_merge = bad_;
    return false;
  }

  TokenizerJson& out_;
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  Mode mode_ = Mode::Dom, pending_ = Mode::Dom;
  int depth_ = 0, special_depth_ = 0;
  bool in_model_ = false;
  std::string top_key_, key_, bad_;
  std::vector<std::string> pair_;
};

TokenizerJson parse_tokenizer_json(const std::filesystem::path& path) {
  const std::string text = read_file_text(path);
  TokenizerJson out;
  TokenizerSax sax(out);
  bool ok = false;
  try {
    ok = json::sax_parse(text, &sax);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed JSON: {}", path.string(), e.what()));
  }
  if (!ok) {
    throw Error(fmt::format("{}: {}", path.string(),
                            out.bad_merge.empty() ? std::string("malformed JSON") : out.bad_merge));
  }
  return out;
}

// An already parsed tokenizer.json -> the form parse_tokenizer_json gives
// (model.vocab and model.merges moved into vectors, null in `rest`), with the
// same checks.
TokenizerJson tokenizer_json_from_dom(json j, const std::string& what) {
  TokenizerJson out;
  if (j.is_object()) {
    const auto m = j.find("model");
    if (m != j.end() && m->is_object()) {
      if (const auto v = m->find("vocab"); v != m->end() && v->is_object()) {
        out.has_vocab = true;
        out.vocab.reserve(v->size());
        for (auto& [tok, id] : v->items()) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenId)
            throw Error(
                fmt::format("{}: model.vocab token {} has id {} (ids are integers from 0 to {})",
                            what, json(tok).dump(), id.dump(), kMaxTokenId - 1));
          out.vocab.emplace_back(tok, id.get<int64_t>());
        }
        *v = nullptr;
      }
      if (const auto mg = m->find("merges"); mg != m->end() && mg->is_array()) {
        out.has_merges = true;
        out.merges.reserve(mg->size());
        for (auto& e : *mg) {
          if (e.is_string()) {
            auto& s = e.get_ref<std::string&>();
            const auto sp = s.find(' ');
            if (sp == std::string::npos)
              throw Error(fmt::format("{}: bad model.merges entry near {}", what, s));
            out.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
          } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
            out.merges.emplace_back(std::move(e[0].get_ref<std::string&>()),
                                    std::move(e[1].get_ref<std::string&>()));
          } else {
            throw Error(fmt::format("{}: bad model.merges entry near {}", what, e.dump()));
          }
        }
        *mg = nullptr;
      }
    }
  }
  out.rest = std::move(j);
  return out;
}

const json* find_key(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json& j, const char* key, bool def) {
  const json* v = find_key(j, key);
  return v && v->is_boolean() ? v->get<bool>() : def;
}

std::string get_string(const json& j, const char* key, const std::string& what) {
  const json* v = find_key(j, key);
  if (!v || !v->is_string()) throw Error(fmt::format("{}: missing string '{}' in {}", what, key, j.dump().substr(0, 200)));
  return v->get<std::string>();
}

// A token in tokenizer_config.json: "x" or {"content": "x", ...}.
std::string token_string(const json* v) {
  if (!v) return {};
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) {
    const json* c = find_key(*v, "content");
    if (c && c->is_string()) return c->get<std::string>();
  }
  return {};
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos).append(to);
    pos = hit + from.size();
  }
  if (pos == 0) return;
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// A "pattern" object: {"String": "..."} or {"Regex": "..."}.
struct Pattern {
  std::string literal;
  std::unique_ptr<Regex> regex;

  Pattern(const json& j, const std::string& what) {
    if (const json* s = find_key(j, "String"); s && s->is_string()) {
      literal = s->get<std::string>();
      if (literal.empty()) throw Error(what + ": empty String pattern");
    } else if (const json* r = find_key(j, "Regex"); r && r->is_string()) {
      regex = std::make_unique<Regex>(r->get<std::string>(), what);
    } else {
      throw Error(fmt::format("{}: unsupported pattern {}", what, j.dump()));
    }
  }
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const {
    if (regex) return regex->find_all(text);
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (std::size_t pos = text.find(literal); pos != std::string_view::npos; pos = text.find(literal, pos + literal.size())) {
      out.emplace_back(pos, pos + literal.size());
    }
    return out;
  }
  void replace(std::string& s, std::string_view content) const {
    if (!regex) return replace_all(s, literal, content);
    const auto matches = regex->find_all(s);
    if (matches.empty()) return;
    std::string out;
    std::size_t pos = 0;
    for (const auto& [b, e] : matches) {
      out.append(s, pos, b - pos).append(content);
      pos = e;
    }
    out.append(s, pos, std::string::npos);
    s = std::move(out);
  }
};

// ---------------------------------------------------------------- normalizers

struct Normalizer {
  virtual ~Normalizer() = default;
  virtual void apply(std::string& s) const = 0;
};

struct UnicodeNorm final : Normalizer {
  unicode::NormForm form;
  explicit UnicodeNorm(unicode::NormForm f) : form(f) {}
  void apply(std::string& s) const override { s = unicode::normalize(s, form); }
};
struct LowercaseNorm final : Normalizer {
  void apply(std::string& s) const override { s = unicode::lowercase(s); }
};
struct PrependNorm final : Normalizer {
  std::string prepend;
  void apply(std::string& s) const override {
    if (!s.empty()) s.insert(0, prepend);
  }
};
struct ReplaceNorm final : Normalizer {
  Pattern pattern;
  std::string content;
  ReplaceNorm(const json& j, const std::string& what)
      : pattern(j.at("pattern"), what), content(get_string(j, "content", what)) {}
  void apply(std::string& s) const override { pattern.replace(s, content); }
};
struct StripNorm final : Normalizer {
  bool left = true, right = true;
  void apply(std::string& s) const override {
    std::size_t b = 0, e = s.size();
    if (left) {
      while (b < e) {
        char32_t cp;
        const std::size_t n = unicode::decode_at(s, b, cp);
        if (!unicode::is_whitespace(cp)) break;
        b += n;
      }
    }
    if (right) {
      while (e > b) {
        std::size_t p = e - 1;
        while (p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
        char32_t cp;
        unicode::decode_at(s, p, cp);
        if (!unicode::is_whitespace(cp)) break;
        e = p;
      }
    }
    s = s.substr(b, e - b);
  }
};
struct SequenceNorm final : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> items;
  void apply(std::string& s) const override {
    for (const auto& n : items) n->apply(s);
  }
};

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& what) {
  const std::string type = get_string(j, "type", what);
  const std::string where = what + ": normalizer " + type;
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceNorm>();
    for (const auto& item : j.at("normalizers")) seq->items.push_back(make_normalizer(item, what));
    return seq;
  }
  if (type == "NFC") return std::make_unique<UnicodeNorm>(unicode::NormForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNorm>(unicode::NormForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNorm>(unicode::NormForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNorm>(unicode::NormForm::NFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNorm>();
  if (type == "Prepend") {
    auto p = std::make_unique<PrependNorm>();
    p->prepend = get_string(j, "prepend", where);
    return p;
  }
  if (type == "Replace") return std::make_unique<ReplaceNorm>(j, where);
  if (type == "Strip") {
    auto p = std::make_unique<StripNorm>();
    p->left = get_bool(j, "strip_left", true);
    p->right = get_bool(j, "strip_right", true);
    return p;
  }
  throw Error(fmt::format("{}: unsupported normalizer type '{}'", what, type));
}

// ---------------------------------------------------------------- pre-tokenizers

struct Piece {
  std::string text;
  bool at_origin;  // starts at offset 0 of the text given to encode()
};

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const json& j, const std::string& what) {
  const std::string b = get_string(j, "behavior", what);
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  throw Error(fmt::format("{}: unsupported split behavior '{}'", what, b));
}

// Splits `piece` given the sorted, non-overlapping delimiter ranges, the way
// tokenizers' NormalizedString::split does.
void split_piece(const Piece& piece, const std::vector<std::pair<std::size_t, std::size_t>>& matches,
                 Behavior behavior, bool invert, std::vector<Piece>& out) {
  struct Seg {
    std::size_t b, e;
    bool delim;
  };
  std::vector<Seg> segs;
  std::size_t pos = 0;
  for (const auto& [b, e] : matches) {
    if (b > pos) segs.push_back({pos, b, invert});
    segs.push_back({b, e, !invert});
    pos = e;
  }
  if (pos < piece.text.size()) segs.push_back({pos, piece.text.size(), invert});

  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  switch (behavior) {
    case Behavior::Removed:
      for (const auto& s : segs)
        if (!s.delim) ranges.emplace_back(s.b, s.e);
      break;
    case Behavior::Isolated:
      for (const auto& s : segs) ranges.emplace_back(s.b, s.e);
      break;
    case Behavior::Contiguous:
      for (std::size_t i = 0; i < segs.size(); ++i) {
        if (segs[i].delim && !ranges.empty() && i > 0 && segs[i - 1].delim) {
          ranges.back().second = segs[i].e;
        } else {
          ranges.emplace_back(segs[i].b, segs[i].e);
        }
      }
      break;
    case Behavior::MergedWithPrevious:
      for (std::size_t i = 0; i < segs.size(); ++i) {
        if (segs[i].delim && !ranges.empty() && i > 0 && !segs[i - 1].delim) {
          ranges.back().second = segs[i].e;
        } else {
          ranges.emplace_back(segs[i].b, segs[i].e);
        }
      }
      break;
    case Behavior::MergedWithNext: {
      bool prev_delim = false;
      for (std::size_t i = 0; i < segs.size(); ++i) {
        if (!segs[i].delim && prev_delim && !ranges.empty()) {
          ranges.back().second = segs[i].e;
        } else {
          ranges.emplace_back(segs[i].b, segs[i].e);
        }
        prev_delim = segs[i].delim;
      }
      break;
    }
  }
  for (const auto& [b, e] : ranges) {
    if (e > b) out.push_back(Piece{piece.text.substr(b, e - b), piece.at_origin && b == 0});
  }
}

struct PreTokenizer {
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces) const = 0;
};

struct SplitPre final : PreTokenizer {
  Pattern pattern;
  Behavior behavior;
  bool invert;
  SplitPre(const json& j, const std::string& what)
      : pattern(j.at("pattern"), what), behavior(parse_behavior(j, what)), invert(get_bool(j, "invert", false)) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const auto& p : pieces) split_piece(p, pattern.find_all(p.text), behavior, invert, out);
    pieces = std::move(out);
  }
};

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteLevelPre final : PreTokenizer {
  bool add_prefix_space;
  std::unique_ptr<Regex> regex;
  ByteLevelPre(const json& j, const std::string& what) : add_prefix_space(get_bool(j, "add_prefix_space", true)) {
    if (get_bool(j, "use_regex", true)) regex = std::make_unique<Regex>(kGpt2Pattern, what);
  }
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> split;
    for (auto& p : pieces) {
      if (add_prefix_space && (p.text.empty() || p.text[0] != ' ')) p.text = " " + p.text;
      if (regex) {
        split_piece(p, regex->find_all(p.text), Behavior::Isolated, false, split);
      } else {
        split.push_back(std::move(p));
      }
    }
    const auto& map = unicode::byte_level_map();
    for (auto& p : split) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (char c : p.text) mapped += map.byte_to_utf8[static_cast<unsigned char>(c)];
      p.text = std::move(mapped);
    }
    pieces = std::move(split);
  }
};

enum class PrependScheme { Always, First, Never };

struct MetaspacePre final : PreTokenizer {
  std::string replacement;
  PrependScheme scheme = PrependScheme::Always;
  bool split = true;
  MetaspacePre(const json& j, const std::string& what) {
    replacement = get_string(j, "replacement", what);
    split = get_bool(j, "split", true);
    if (const json* s = find_key(j, "prepend_scheme"); s && s->is_string()) {
      const auto v = s->get<std::string>();
      scheme = v == "first" ? PrependScheme::First : v == "never" ? PrependScheme::Never : PrependScheme::Always;
    } else if (!get_bool(j, "add_prefix_space", true)) {
      scheme = PrependScheme::Never;
    }
  }
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (auto& p : pieces) {
      replace_all(p.text, " ", replacement);
      const bool starts = p.text.compare(0, replacement.size(), replacement) == 0;
      if (!starts && (scheme == PrependScheme::Always || (scheme == PrependScheme::First && p.at_origin))) {
        p.text.insert(0, replacement);
      }
      if (!split) {
        out.push_back(std::move(p));
        continue;
      }
      std::vector<std::pair<std::size_t, std::size_t>> matches;
      for (std::size_t pos = p.text.find(replacement); pos != std::string::npos;
           pos = p.text.find(replacement, pos + replacement.size())) {
        matches.emplace_back(pos, pos + replacement.size());
      }
      split_piece(p, matches, Behavior::MergedWithNext, false, out);
    }
    pieces = std::move(out);
  }
};

struct DigitsPre final : PreTokenizer {
  bool individual;
  explicit DigitsPre(bool ind) : individual(ind) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const auto& p : pieces) {
      std::vector<std::pair<std::size_t, std::size_t>> matches;
      for (std::size_t i = 0; i < p.text.size();) {
        char32_t cp;
        const std::size_t n = unicode::decode_at(p.text, i, cp);
        if (unicode::is_numeric(cp)) matches.emplace_back(i, i + n);
        i += n;
      }
      split_piece(p, matches, individual ? Behavior::Isolated : Behavior::Contiguous, false, out);
    }
    pieces = std::move(out);
  }
};

struct WhitespaceSplitPre final : PreTokenizer {
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const auto& p : pieces) {
      std::vector<std::pair<std::size_t, std::size_t>> matches;
      for (std::size_t i = 0; i < p.text.size();) {
        char32_t cp;
        const std::size_t n = unicode::decode_at(p.text, i, cp);
        if (unicode::is_whitespace(cp)) matches.emplace_back(i, i + n);
        i += n;
      }
      split_piece(p, matches, Behavior::Removed, false, out);
    }
    pieces = std::move(out);
  }
};

struct SequencePre final : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> items;
  void apply(std::vector<Piece>& pieces) const override {
    for (const auto& p : items) p->apply(pieces);
  }
};

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& what) {
  const std::string type = get_string(j, "type", what);
  const std::string where = what + ": pre_tokenizer " + type;
  if (type == "Sequence") {
    auto seq = std::make_unique<SequencePre>();
    for (const auto& item : j.at("pretokenizers")) seq->items.push_back(make_pre_tokenizer(item, what));
    return seq;
  }
  if (type == "Split") return std::make_unique<SplitPre>(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPre>(j, where);
  if (type == "Metaspace") return std::make_unique<MetaspacePre>(j, where);
  if (type == "Digits") return std::make_unique<DigitsPre>(get_bool(j, "individual_digits", false));
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPre>();
  throw Error(fmt::format("{}: unsupported pre_tokenizer type '{}'", what, type));
}

// ---------------------------------------------------------------- decoders

struct DecodeCtx {
  bool at_start;
  bool stable_only;
  bool fused = false;  // tokens[0] holds all text decoded so far
  bool raw = false;    // keep bytes that are not valid UTF-8 (Tokenizer::token_bytes)
};

struct Decoder {
  virtual ~Decoder() = default;
  virtual void apply(std::vector<std::string>& tokens, DecodeCtx& ctx) const = 0;
};

struct ReplaceDec final : Decoder {
  Pattern pattern;
  std::string content;
  ReplaceDec(const json& j, const std::string& what)
      : pattern(j.at("pattern"), what), content(get_string(j, "content", what)) {}
  void apply(std::vector<std::string>& tokens, DecodeCtx&) const override {
    for (auto& t : tokens) pattern.replace(t, content);
  }
};

// <0xNN> -> byte value, or -1.
int byte_token_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int h = hex(t[3]), l = hex(t[4]);
  return h < 0 || l < 0 ? -1 : h * 16 + l;
}

struct ByteFallbackDec final : Decoder {
  void apply(std::vector<std::string>& tokens, DecodeCtx& ctx) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes;
    std::size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      // tokenizers: a valid group becomes its text, an invalid one one U+FFFD per byte.
      if (ctx.raw || unicode::first_invalid_utf8(bytes) == std::string::npos) {
        out.push_back(bytes);
      } else {
        for (std::size_t i = 0; i < count; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      count = 0;
    };
    for (auto& t : tokens) {
      const int b = byte_token_value(t);
      if (b >= 0) {
        bytes.push_back(static_cast<char>(b));
        ++count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    if (!ctx.stable_only) flush();  // an unfinished group may still change
    tokens = std::move(out);
  }
};

struct FuseDec final : Decoder {
  void apply(std::vector<std::string>& tokens, DecodeCtx& ctx) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
    ctx.fused = true;
  }
};

struct StripDec final : Decoder {
  char32_t content;
  std::size_t start, stop;
  StripDec(const json& j, const std::string& what) {
    const std::string c = get_string(j, "content", what);
    char32_t cp = 0;
    if (c.empty() || unicode::decode_at(c, 0, cp) != c.size()) throw Error(what + ": Strip content must be one character, got '" + c + "'");
    content = cp;
    start = j.value("start", std::size_t{0});
    stop = j.value("stop", std::size_t{0});
  }
  void apply(std::vector<std::string>& tokens, DecodeCtx& ctx) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      std::size_t b = 0;
      if (!(i == 0 && ctx.fused && !ctx.at_start)) {
        for (std::size_t k = 0; k < start && b < t.size(); ++k) {
          char32_t cp;
          const std::size_t n = unicode::decode_at(t, b, cp);
          if (cp != content) break;
          b += n;
        }
      }
      std::size_t e = t.size();
      for (std::size_t k = 0; k < stop && e > b; ++k) {
        std::size_t p = e - 1;
        while (p > b && (static_cast<unsigned char>(t[p]) & 0xC0) == 0x80) --p;
        char32_t cp;
        unicode::decode_at(t, p, cp);
        if (cp != content) break;
        e = p;  // when fused and stable_only, these may not be trailing in the end: leave them out
      }
      t = t.substr(b, e - b);
    }
  }
};

struct ByteLevelDec final : Decoder {
  void apply(std::vector<std::string>& tokens, DecodeCtx& ctx) const override {
    const auto& map = unicode::byte_level_map();
    std::string bytes;
    for (const auto& t : tokens) {
      const std::size_t mark = bytes.size();
      bool ok = true;
      for (std::size_t i = 0; i < t.size();) {
        char32_t cp;
        i += unicode::decode_at(t, i, cp);
        if (cp >= map.cp_to_byte.size() || map.cp_to_byte[cp] < 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(map.cp_to_byte[cp]));
      }
      if (!ok) {  // not byte-level text: keep the token's own bytes
        bytes.resize(mark);
        bytes += t;
      }
    }
    if (ctx.stable_only) bytes.resize(bytes.size() - unicode::incomplete_utf8_tail(bytes));
    tokens.assign(1, ctx.raw ? bytes : unicode::utf8_lossy(bytes));
    ctx.fused = true;
  }
};

struct MetaspaceDec final : Decoder {
  std::string replacement;
  bool strip_first;
  MetaspaceDec(const json& j, const std::string& what) {
    replacement = get_string(j, "replacement", what);
    strip_first = true;
    if (const json* s = find_key(j, "prepend_scheme"); s && s->is_string()) {
      strip_first = s->get<std::string>() != "never";
    } else {
      strip_first = get_bool(j, "add_prefix_space", true);
    }
  }
  void apply(std::vector<std::string>& tokens, DecodeCtx& ctx) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const bool first = i == 0 && ctx.at_start && !ctx.fused;
      replace_all(tokens[i], replacement, first && strip_first ? "" : " ");
    }
  }
};

struct SequenceDec final : Decoder {
  std::vector<std::unique_ptr<Decoder>> items;
  void apply(std::vector<std::string>& tokens, DecodeCtx& ctx) const override {
    for (const auto& d : items) d->apply(tokens, ctx);
  }
};

std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& what, bool& has_byte_fallback) {
  const std::string type = get_string(j, "type", what);
  const std::string where = what + ": decoder " + type;
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceDec>();
    for (const auto& item : j.at("decoders")) seq->items.push_back(make_decoder(item, what, has_byte_fallback));
    return seq;
  }
  if (type == "Replace") return std::make_unique<ReplaceDec>(j, where);
  if (type == "ByteFallback") {
    has_byte_fallback = true;
    return std::make_unique<ByteFallbackDec>();
  }
  if (type == "Fuse") return std::make_unique<FuseDec>();
  if (type == "Strip") return std::make_unique<StripDec>(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDec>();
  if (type == "Metaspace") return std::make_unique<MetaspaceDec>(j, where);
  throw Error(fmt::format("{}: unsupported decoder type '{}'", what, type));
}

// transformers' clean_up_tokenization.
void clean_up_tokenization(std::string& s) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},     {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) replace_all(s, from, to);
}

// ---------------------------------------------------------------- added tokens

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, normalized = false, single_word = false;
};

// Leftmost-longest matcher over a set of added tokens.
class AddedMatcher {
 public:
  void add(const AddedToken* tok, std::string pattern) {
    if (pattern.empty()) return;
    by_first_[static_cast<unsigned char>(pattern[0])].push_back({std::move(pattern), tok});
  }
  void finish() {
    for (auto& v : by_first_)
      std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }
  bool empty() const {
    return std::all_of(by_first_.begin(), by_first_.end(), [](const auto& v) { return v.empty(); });
  }
  struct Split {
    std::size_t b, e;
    const AddedToken* token;  // nullptr: plain text
  };
  std::vector<Split> split(std::string_view s) const;

 private:
  std::array<std::vector<std::pair<std::string, const AddedToken*>>, 256> by_first_;
};

bool is_word_char(char32_t cp) {
  return cp == '_' || unicode::is_alphabetic_or_numeric(cp);
}

std::vector<AddedMatcher::Split> AddedMatcher::split(std::string_view s) const {
  std::vector<Split> out;
  std::size_t start_offset = 0;
  std::size_t i = 0;
  while (i < s.size()) {
    const auto& cands = by_first_[static_cast<unsigned char>(s[i])];
    const std::pair<std::string, const AddedToken*>* hit = nullptr;
    for (const auto& c : cands) {
      if (s.compare(i, c.first.size(), c.first) == 0) {
        hit = &c;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    std::size_t b = i, e = i + hit->first.size();
    i = e;
    const AddedToken& tok = *hit->second;
    if (tok.single_word) {
      bool ok = true;
      if (b > 0) {
        std::size_t p = b - 1;
        while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
        char32_t cp;
        unicode::decode_at(s, p, cp);
        ok = ok && !is_word_char(cp);
      }
      if (e < s.size()) {
        char32_t cp;
        unicode::decode_at(s, e, cp);
        ok = ok && !is_word_char(cp);
      }
      if (!ok) continue;
    }
    if (tok.lstrip) {
      while (b > start_offset) {
        std::size_t p = b - 1;
        while (p > start_offset && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
        char32_t cp;
        unicode::decode_at(s, p, cp);
        if (!unicode::is_whitespace(cp)) break;
        b = p;
      }
    }
    if (tok.rstrip) {
      while (e < s.size()) {
        char32_t cp;
        const std::size_t n = unicode::decode_at(s, e, cp);
        if (!unicode::is_whitespace(cp)) break;
        e += n;
      }
      i = e;
    }
    if (b > start_offset) out.push_back({start_offset, b, nullptr});
    out.push_back({b, e, &tok});
    start_offset = e;
  }
  if (start_offset < s.size()) out.push_back({start_offset, s.size(), nullptr});
  return out;
}

const std::set<std::string_view>& llama_classes() {
  static const std::set<std::string_view> k = {"LlamaTokenizer",     "LlamaTokenizerFast", "CodeLlamaTokenizer",
                                               "CodeLlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"};
  return k;
}

}  // namespace

// ---------------------------------------------------------------- data

struct TokenizerData {
  std::filesystem::path source;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Bpe> model;
  std::unique_ptr<Decoder> decoder;
  bool decoder_byte_fallback = false;
  std::vector<AddedToken> added;
  AddedMatcher raw_matcher, normalized_matcher;
  std::vector<int32_t> prefix_ids, suffix_ids;  // post-processor, single sequence

  std::vector<std::string> pieces;  // id -> token (added tokens override the model's)
  std::vector<uint8_t> flags;       // bit0: has token, bit1: special, bit2: byte-fallback token, bit3: added
  Vocab added_vocab;                // added token content -> id

  std::string bos, eos;
  bool clean_up = false;

  void encode_plain(std::string_view text, bool at_origin, std::vector<int32_t>& out) const {
    std::string normalized(text);
    if (normalizer) normalizer->apply(normalized);
    if (normalized.empty()) return;
    auto run = [&](std::string_view part, bool origin) {
      std::vector<Piece> pieces_{Piece{std::string(part), origin}};
      if (pre_tokenizer) pre_tokenizer->apply(pieces_);
      for (const auto& p : pieces_) model->encode_word(p.text, out);
    };
    if (normalized_matcher.empty()) return run(normalized, at_origin);
    for (const auto& sp : normalized_matcher.split(normalized)) {
      if (sp.token) {
        out.push_back(sp.token->id);
      } else {
        run(std::string_view(normalized).substr(sp.b, sp.e - sp.b), at_origin && sp.b == 0);
      }
    }
  }
};

}  // namespace detail

using detail::TokenizerData;

namespace {

// tokenizer.json's BPE model (its vocab and merges, already read into `tj`)
// -> d.model. Returns the largest vocab id.
int32_t load_bpe_model(detail::TokenizerJson& tj, const json& j, const std::string& what,
                       detail::TokenizerData& d) {
  using namespace detail;
  const json* m = find_key(j, "model");
  if (!m || !m->is_object()) throw Error(what + ": missing 'model' object");
  const std::string type = m->value("type", std::string("BPE"));
  if (type != "BPE")
    throw Error(fmt::format("{}: unsupported model type '{}' (only BPE is supported)", what, type));
  if (const json* p = find_key(*m, "continuing_subword_prefix");
      p && p->is_string() && !p->get<std::string>().empty())
    throw Error(
        fmt::format("{}: unsupported continuing_subword_prefix '{}'", what, p->get<std::string>()));
  if (const json* p = find_key(*m, "end_of_word_suffix");
      p && p->is_string() && !p->get<std::string>().empty())
    throw Error(
        fmt::format("{}: unsupported end_of_word_suffix '{}'", what, p->get<std::string>()));
  if (const json* p = find_key(*m, "dropout"); p && p->is_number() && p->get<double>() > 0.0)
    throw Error(fmt::format("{}: unsupported BPE dropout {}", what, p->get<double>()));
  if (!tj.has_vocab) throw Error(what + ": model.vocab is missing or not an object");
  Vocab vocab;
  vocab.reserve(tj.vocab.size());
  int32_t max_id = -1;
  for (auto& [tok, id] : tj.vocab) {
    const auto v = static_cast<int32_t>(id);
    vocab.insert(tok, v);
    max_id = std::max(max_id, v);
  }
  tj.vocab = {};
  const std::vector<std::pair<std::string, std::string>>& merges = tj.merges;
  Bpe::Options opt;
  if (const json* u = find_key(*m, "unk_token"); u && u->is_string())
    opt.unk_token = u->get<std::string>();
  opt.fuse_unk = get_bool(*m, "fuse_unk", false);
  opt.byte_fallback = get_bool(*m, "byte_fallback", false);
  opt.ignore_merges = get_bool(*m, "ignore_merges", false);
  d.model = std::make_unique<Bpe>(std::move(vocab), merges, opt, what);
  return max_id;
}

// added_tokens -> d.added (raising max_id to theirs) and the matchers that
// find them in the raw or the normalized text.
void load_added_tokens(const json& j, const std::string& what, detail::TokenizerData& d,
                       int32_t& max_id) {
  using namespace detail;
  if (const json* at = find_key(j, "added_tokens")) {
    for (const auto& e : *at) {
      AddedToken t;
      if (!e.is_object() || !e.contains("content") || !e["content"].is_string())
        throw Error(
            fmt::format("{}: added_tokens entry {} has no string 'content'", what, e.dump()));
      t.content = e.at("content").get<std::string>();
      const json* id = find_key(e, "id");
      if (!id || !id->is_number_integer() || id->get<int64_t>() < 0 ||
          id->get<int64_t>() >= kMaxTokenId)
        throw Error(fmt::format("{}: added token '{}' has id {} (ids are integers from 0 to {})",
                                what, t.content, id ? id->dump() : "null", kMaxTokenId - 1));
      t.id = static_cast<int32_t>(id->get<int64_t>());
      t.special = get_bool(e, "special", false);
      t.lstrip = get_bool(e, "lstrip", false);
      t.rstrip = get_bool(e, "rstrip", false);
      t.single_word = get_bool(e, "single_word", false);
      t.normalized = get_bool(e, "normalized", !t.special);
      max_id = std::max(max_id, t.id);
      d.added.push_back(std::move(t));
    }
  }
  for (const auto& t : d.added) {
    d.added_vocab.insert(t.content, t.id);
    if (t.normalized && d.normalizer) {
      std::string n = t.content;
      d.normalizer->apply(n);
      d.normalized_matcher.add(&t, std::move(n));
    } else {
      d.raw_matcher.add(&t, t.content);
    }
  }
  d.raw_matcher.finish();
  d.normalized_matcher.finish();
}

// The id -> piece table and the per-id flags (1 known, 2 special, 4 byte
// fallback token, 8 added), for ids up to max_id.
void build_id_table(const json& config, int32_t max_id, detail::TokenizerData& d) {
  using namespace detail;
  d.pieces.resize(static_cast<std::size_t>(max_id + 1));
  d.flags.assign(d.pieces.size(), 0);
  d.model->vocab().for_each([&](std::string_view tok, int32_t id) {
    d.pieces[id] = tok;
    d.flags[id] = 1;
    if (d.decoder_byte_fallback && detail::byte_token_value(tok) >= 0) d.flags[id] |= 4;
  });
  for (const auto& t : d.added) {
    d.pieces[t.id] = t.content;
    d.flags[t.id] = static_cast<uint8_t>(1 | 8 | (t.special ? 2 : 0));
  }
  if (const json* extra = find_key(config, "additional_special_tokens");
      extra && extra->is_array()) {
    for (const auto& e : *extra) {
      if (const auto id = d.added_vocab.find(token_string(&e))) d.flags[*id] |= 2;
    }
  }
}

// post_processor -> the ids put before and after an encoded sequence.
void load_post_processor(const json& j, const std::string& what, detail::TokenizerData& d) {
  using namespace detail;
  auto special_ids = [&](const json& pp, const std::string& name) {
    const json* st = find_key(pp, "special_tokens");
    const json* entry = st ? find_key(*st, name.c_str()) : nullptr;
    if (!entry)
      throw Error(fmt::format("{}: post_processor special token '{}' is not defined", what, name));
    return entry->at("ids").get<std::vector<int32_t>>();
  };
  std::function<void(const json&)> add_post = [&](const json& pp) {
    const std::string ptype = get_string(pp, "type", what + ": post_processor");
    if (ptype == "TemplateProcessing") {
      bool seen_a = false;
      for (const auto& item : pp.at("single")) {
        if (const json* sp = find_key(item, "SpecialToken")) {
          auto ids = special_ids(pp, get_string(*sp, "id", what));
          auto& dst = seen_a ? d.suffix_ids : d.prefix_ids;
          dst.insert(dst.end(), ids.begin(), ids.end());
        } else if (find_key(item, "Sequence")) {
          seen_a = true;
        }
      }
    } else if (ptype == "RobertaProcessing" || ptype == "BertProcessing") {
      d.prefix_ids.push_back(pp.at("cls").at(1).get<int32_t>());
      d.suffix_ids.push_back(pp.at("sep").at(1).get<int32_t>());
    } else if (ptype == "Sequence") {
      for (const auto& p : pp.at("processors")) add_post(p);
    } else if (ptype != "ByteLevel") {
      throw Error(fmt::format("{}: unsupported post_processor type '{}'", what, ptype));
    }
  };
  if (const json* pp = find_key(j, "post_processor")) add_post(*pp);
}

// transformers' LlamaTokenizerFast rebuilds the template from add_bos_token / add_eos_token.
void apply_llama_template(const json& config, const std::string& config_what,
                          detail::TokenizerData& d) {
  using namespace detail;
  if (const json* cls = find_key(config, "tokenizer_class");
      cls && cls->is_string() && detail::llama_classes().count(cls->get<std::string>())) {
    const bool add_bos = get_bool(config, "add_bos_token", true);
    const bool add_eos = get_bool(config, "add_eos_token", false);
    auto id_of = [&](const std::string& tok, const char* name) {
      if (const auto id = d.added_vocab.find(tok)) return *id;
      if (const auto id = d.model->vocab().find(tok)) return *id;
      throw Error(fmt::format("{}: {} '{}' is not a token", config_what, name, tok));
    };
    d.prefix_ids.clear();
    d.suffix_ids.clear();
    if (add_bos && !d.bos.empty()) d.prefix_ids.push_back(id_of(d.bos, "bos_token"));
    if (add_eos && !d.eos.empty()) d.suffix_ids.push_back(id_of(d.eos, "eos_token"));
  }
}

// The one loading path of from_files and from_json: `tj` is tokenizer.json
// (model.vocab and model.merges already taken out), `config`
// tokenizer_config.json (an empty object when there is none). `what` and
// `config_what` name them in messages.
std::shared_ptr<TokenizerData> load(detail::TokenizerJson tj, const json& config,
                                    const std::filesystem::path& source, const std::string& what,
                                    const std::string& config_what) {
  using namespace detail;
  auto d = std::make_shared<TokenizerData>();
  d->source = source;
  const json& j = tj.rest;
  if (!j.is_object()) throw Error(what + ": top level is not a JSON object");
  if (!config.is_object()) throw Error(config_what + ": top level is not a JSON object");

  try {
    int32_t max_id = load_bpe_model(tj, j, what, *d);

    // pipeline
    if (const json* n = find_key(j, "normalizer")) d->normalizer = make_normalizer(*n, what);
    if (const json* p = find_key(j, "pre_tokenizer")) d->pre_tokenizer = make_pre_tokenizer(*p, what);
    if (const json* dj = find_key(j, "decoder")) d->decoder = make_decoder(*dj, what, d->decoder_byte_fallback);

    load_added_tokens(j, what, *d, max_id);
    build_id_table(config, max_id, *d);

    // config
    d->bos = token_string(find_key(config, "bos_token"));
    d->eos = token_string(find_key(config, "eos_token"));
    d->clean_up = get_bool(config, "clean_up_tokenization_spaces", false);

    load_post_processor(j, what, *d);
    apply_llama_template(config, config_what, *d);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: unexpected content: {}", what, e.what()));
  }
  return d;
}

}  // namespace

// ---------------------------------------------------------------- Tokenizer

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerData> data) : d_(std::move(data)) {}
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_files(const std::filesystem::path& tokenizer_json,
                                const std::filesystem::path& tokenizer_config) {
  json config = json::object();
  if (!tokenizer_config.empty()) config = detail::parse_json(tokenizer_config);
  return Tokenizer(load(detail::parse_tokenizer_json(tokenizer_json), config, tokenizer_json,
                        tokenizer_json.string(), tokenizer_config.string()));
}

Tokenizer Tokenizer::from_json(nlohmann::json tokenizer_json, nlohmann::json tokenizer_config,
                               const std::string& source_name) {
  if (tokenizer_config.is_null()) tokenizer_config = json::object();
  return Tokenizer(load(detail::tokenizer_json_from_dom(std::move(tokenizer_json), source_name),
                        tokenizer_config, source_name, source_name,
                        source_name + " (tokenizer config)"));
}

Tokenizer Tokenizer::from_model_dir(const std::filesystem::path& dir) {
  const auto tj = dir / "tokenizer.json";
  if (!std::filesystem::exists(tj)) throw Error(fmt::format("tokenizer: '{}' does not exist", tj.string()));
  const auto tc = dir / "tokenizer_config.json";
  return from_files(tj, std::filesystem::exists(tc) ? tc : std::filesystem::path());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const auto bad = unicode::first_invalid_utf8(text); bad != std::string_view::npos) {
    throw Error(fmt::format("tokenizer: input text is not valid UTF-8 (byte {} at offset {})",
                            static_cast<unsigned>(static_cast<unsigned char>(text[bad])), bad));
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special_tokens) out.insert(out.end(), d_->prefix_ids.begin(), d_->prefix_ids.end());
  if (d_->raw_matcher.empty()) {
    d_->encode_plain(text, true, out);
  } else {
    for (const auto& sp : d_->raw_matcher.split(text)) {
      if (sp.token) {
        out.push_back(sp.token->id);
      } else {
        d_->encode_plain(text.substr(sp.b, sp.e - sp.b), sp.b == 0, out);
      }
    }
  }
  if (add_special_tokens) out.insert(out.end(), d_->suffix_ids.begin(), d_->suffix_ids.end());
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return decode(ids, skip_special_tokens, DecodeControl{});
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens, DecodeControl control) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= d_->pieces.size()) continue;
    const uint8_t f = d_->flags[static_cast<std::size_t>(id)];
    if (!(f & 1)) continue;
    if (skip_special_tokens && (f & 2)) continue;
    tokens.push_back(d_->pieces[static_cast<std::size_t>(id)]);
  }
  std::string text;
  if (d_->decoder) {
    detail::DecodeCtx ctx{control.at_sequence_start, control.stable_only};
    ctx.raw = control.raw_bytes;
    d_->decoder->apply(tokens, ctx);
    for (const auto& t : tokens) text += t;
  } else {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 || !control.at_sequence_start) text += ' ';
      text += tokens[i];
    }
  }
  if (d_->clean_up && !control.raw_bytes) {
    if (control.stable_only) {
      // A clean-up rule can only span a point whose preceding character is not
      // one of " 'nvr" (the non-final characters of the rules).
      std::size_t cut = text.size();
      while (cut > 0 && std::string_view(" 'nvr").find(text[cut - 1]) != std::string_view::npos) --cut;
      text.resize(cut);
    }
    detail::clean_up_tokenization(text);
  }
  return text;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  DecodeControl c;
  c.at_sequence_start = false;
  c.raw_bytes = true;
  return decode(std::span<const int32_t>(&id, 1), false, c);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(d_->pieces.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto id = d_->added_vocab.find(token)) return id;
  return d_->model->vocab().find(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= d_->pieces.size() || !(d_->flags[static_cast<std::size_t>(id)] & 1)) {
    throw Error(fmt::format("{}: token id {} is out of range (vocab_size {})", d_->source.string(), id, vocab_size()));
  }
  return d_->pieces[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < d_->flags.size() && (d_->flags[static_cast<std::size_t>(id)] & 2);
}

bool Tokenizer::is_added_token(int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < d_->flags.size() && (d_->flags[static_cast<std::size_t>(id)] & 8);
}

bool Tokenizer::is_byte_fallback_token(int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < d_->flags.size() && (d_->flags[static_cast<std::size_t>(id)] & 4);
}

std::optional<int32_t> Tokenizer::bos_token_id() const {
  return d_->bos.empty() ? std::nullopt : token_to_id(d_->bos);
}
std::optional<int32_t> Tokenizer::eos_token_id() const {
  return d_->eos.empty() ? std::nullopt : token_to_id(d_->eos);
}
const std::string& Tokenizer::bos_token() const { return d_->bos; }
const std::string& Tokenizer::eos_token() const { return d_->eos; }

bool Tokenizer::adds_bos() const {
  const auto bos = bos_token_id();
  return bos && std::find(d_->prefix_ids.begin(), d_->prefix_ids.end(), *bos) != d_->prefix_ids.end();
}
bool Tokenizer::adds_eos() const {
  const auto eos = eos_token_id();
  return eos && std::find(d_->suffix_ids.begin(), d_->suffix_ids.end(), *eos) != d_->suffix_ids.end();
}

const std::filesystem::path& Tokenizer::source() const { return d_->source; }

}  // namespace halo::text
