#include "serve/tool_parsers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "common/error.h"
#include "text/guided/utf8_ranges.h"

namespace halo::serve {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_ident_start(char c) { return is_alpha(c) || c == '_'; }
bool is_ident(char c) { return is_ident_start(c) || is_digit(c); }

// The length of the longest prefix of `s` that does not end inside a UTF-8
// character (bytes that cannot start a character are passed on as they are).
size_t utf8_complete(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte
    size_t len = b < 0x80             ? 1
                 : (b & 0xE0) == 0xC0 ? 2
                 : (b & 0xF0) == 0xE0 ? 3
                 : (b & 0xF8) == 0xF0 ? 4
                                      : 1;
    return back < len ? n - back : n;
  }
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  uint8_t b[4];
  const int n = text::guided::utf8_encode(cp, b);
  out.append(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
}

// Python's json.dumps(ensure_ascii=False) of one character of a string.
void append_json_char(std::string& out, uint32_t cp) {
  switch (cp) {
    case '"':
      out += "\\\"";
      return;
    case '\\':
      out += "\\\\";
      return;
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    case '\b':
      out += "\\b";
      return;
    case '\f':
      out += "\\f";
      return;
    default:
      break;
  }
  if (cp < 0x20 || (cp >= 0xD800 && cp < 0xE000)) {  // a control, or a lone surrogate
    out += fmt::format("\\u{:04x}", cp);
  } else {
    append_utf8(out, cp);
  }
}

// Text that may hold markers: decides, byte by byte, which bytes are plain
// text and where a marker is complete, holding back a possible marker's start.
class MarkerScan {
 public:
  explicit MarkerScan(std::vector<std::string_view> markers) : markers_(std::move(markers)) {}

  // Adds `c`; the bytes it decides are text go to `text`. The index of the
  // marker it completes, or -1.
  int step(char c, std::string& text) {
    held_ += c;
    for (size_t k = 0; k < held_.size(); ++k) {
      std::string_view rest = std::string_view(held_).substr(k);
      for (size_t i = 0; i < markers_.size(); ++i) {
        if (rest == markers_[i]) {
          text.append(held_, 0, k);
          held_.clear();
          return static_cast<int>(i);
        }
      }
      for (auto m : markers_) {
        if (m.starts_with(rest)) {
          text.append(held_, 0, k);
          held_.erase(0, k);
          return -1;
        }
      }
    }
    text += held_;
    held_.clear();
    return -1;
  }
  const std::string& held() const { return held_; }
  std::string take_held() { return std::exchange(held_, {}); }

 private:
  std::vector<std::string_view> markers_;
  std::string held_;
};

// The text outside the calls of a marker format: markers found as MarkerScan
// finds them; after a call, whitespace is held until more text follows (it is
// dropped before another call and at the end).
class TextBetweenCalls {
 public:
  explicit TextBetweenCalls(std::vector<std::string_view> markers) : scan_(std::move(markers)) {}

  // Adds `c`; the content it decides is appended to `text`. The index of the
  // marker it completes, or -1 (marker 0 opens a call).
  int step(char c, std::string& text) {
    if (after_call_ && scan_.held().empty() && is_space(c)) {
      ws_ += c;
      return -1;
    }
    std::string t;
    const int m = scan_.step(c, t);
    if (!t.empty()) {
      if (after_call_) text += std::exchange(ws_, {});
      after_call_ = false;
      text += t;
    }
    if (m == 0) ws_.clear();
    return m;
  }
  void set_after_call(bool after) { after_call_ = after; }
  // The end of the output: text still held back (none unless a marker had begun).
  std::string flush() {
    if (scan_.held().empty()) return {};
    return ws_ + scan_.take_held();
  }

 private:
  MarkerScan scan_;
  std::string ws_;  // whitespace held after a call
  bool after_call_ = false;
};

// A JSON value read byte by byte, checked for syntax as it comes.
class JsonScanner {
 public:
  enum class Result {
    kMore,   // `c` is part of the value, which goes on
    kDone,   // `c` completes the value
    kEnded,  // the value (a number or literal) ended before `c`, which is not its own
    kError,  // `c` cannot come here
  };

  Result step(char c) {
    if (tok_ == Tok::kNumber || tok_ == Tok::kLiteral) {
      if (tok_ == Tok::kNumber
              ? (is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')
              : is_alpha(c)) {
        scalar_ += c;
        return Result::kMore;
      }
      bool ok = tok_ == Tok::kNumber
                    ? valid_number(scalar_)
                    : (scalar_ == "true" || scalar_ == "false" || scalar_ == "null");
      tok_ = Tok::kNone;
      if (!ok) return Result::kError;
      if (value_done()) return Result::kEnded;
      // `c` belongs to the enclosing container
    } else if (tok_ != Tok::kNone) {
      return string_step(c);
    }
    if (is_space(c)) return Result::kMore;
    Ctx ctx = stack_.empty() ? Ctx::kArrValue : stack_.back();
    if (stack_.empty() && started_) return Result::kError;
    switch (ctx) {
      case Ctx::kObjKeyOrEnd:
      case Ctx::kObjKey:
        if (c == '"') {
          tok_ = Tok::kString;
          key_ = true;
          return Result::kMore;
        }
        if (c == '}' && ctx == Ctx::kObjKeyOrEnd) return close();
        return Result::kError;
      case Ctx::kObjColon:
        if (c != ':') return Result::kError;
        stack_.back() = Ctx::kObjValue;
        return Result::kMore;
      case Ctx::kObjCommaOrEnd:
        if (c == ',') {
          stack_.back() = Ctx::kObjKey;
          return Result::kMore;
        }
        return c == '}' ? close() : Result::kError;
      case Ctx::kArrCommaOrEnd:
        if (c == ',') {
          stack_.back() = Ctx::kArrValue;
          return Result::kMore;
        }
        return c == ']' ? close() : Result::kError;
      case Ctx::kArrValueOrEnd:
        if (c == ']') return close();
        [[fallthrough]];
      case Ctx::kObjValue:
      case Ctx::kArrValue:
        return value_start(c);
    }
    return Result::kError;
  }

 private:
  enum class Ctx : uint8_t {
    kObjKeyOrEnd,
    kObjKey,
    kObjColon,
    kObjValue,
    kObjCommaOrEnd,
    kArrValueOrEnd,
    kArrValue,
    kArrCommaOrEnd
  };
  enum class Tok : uint8_t { kNone, kString, kEscape, kUnicode, kNumber, kLiteral };

  Result value_start(char c) {
    started_ = true;
    if (c == '{' || c == '[') {
      stack_.push_back(c == '{' ? Ctx::kObjKeyOrEnd : Ctx::kArrValueOrEnd);
      return Result::kMore;
    }
    if (c == '"') {
      tok_ = Tok::kString;
      key_ = false;
      return Result::kMore;
    }
    if (c == '-' || is_digit(c)) {
      tok_ = Tok::kNumber;
    } else if (c == 't' || c == 'f' || c == 'n') {
      tok_ = Tok::kLiteral;
    } else {
      return Result::kError;
    }
    scalar_.assign(1, c);
    return Result::kMore;
  }

  Result string_step(char c) {
    switch (tok_) {
      case Tok::kEscape:
        if (c == 'u') {
          tok_ = Tok::kUnicode;
          hex_left_ = 4;
          return Result::kMore;
        }
        if (std::string_view("\"\\/bfnrt").find(c) == std::string_view::npos) {
          return Result::kError;
        }
        tok_ = Tok::kString;
        return Result::kMore;
      case Tok::kUnicode:
        if (!is_hex(c)) return Result::kError;
        if (--hex_left_ == 0) tok_ = Tok::kString;
        return Result::kMore;
      default:
        break;
    }
    if (c == '\\') {
      tok_ = Tok::kEscape;
      return Result::kMore;
    }
    if (static_cast<unsigned char>(c) < 0x20) return Result::kError;
    if (c != '"') return Result::kMore;
    tok_ = Tok::kNone;
    if (key_) {
      stack_.back() = Ctx::kObjColon;
      return Result::kMore;
    }
    return value_done() ? Result::kDone : Result::kMore;
  }

  Result close() {
    stack_.pop_back();
    return value_done() ? Result::kDone : Result::kMore;
  }

  // A value is complete; true when it is the outermost one.
  bool value_done() {
    started_ = true;
    if (stack_.empty()) return true;
    stack_.back() = stack_.back() == Ctx::kObjValue ? Ctx::kObjCommaOrEnd : Ctx::kArrCommaOrEnd;
    return false;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  static bool valid_number(std::string_view s) {
    size_t i = 0;
    auto digits = [&] {
      size_t from = i;
      while (i < s.size() && is_digit(s[i])) ++i;
      return i > from;
    };
    if (i < s.size() && s[i] == '-') ++i;
    if (i < s.size() && s[i] == '0') {
      ++i;
    } else if (!digits()) {
      return false;
    }
    if (i < s.size() && s[i] == '.') {
      ++i;
      if (!digits()) return false;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      if (!digits()) return false;
    }
    return i == s.size();
  }

  std::vector<Ctx> stack_;
  Tok tok_ = Tok::kNone;
  bool key_ = false;
  bool started_ = false;
  int hex_left_ = 0;
  std::string scalar_;
};

// The JSON formats' calls: an object {"name": N, "arguments"|"parameters":
// {...}, ...} (other keys are skipped). The call starts once its name is
// complete; its arguments object is passed on verbatim (held until the name
// when it comes first); a call without arguments gets "{}".
class JsonCallParser : public ToolCallParser {
 protected:
  enum class ObjResult { kMore, kDone, kError };

  void begin_object() {
    obj_ = Obj::kOpen;
    named_ = false;
    have_args_ = false;
    pending_args_.clear();
  }
  bool object_named() const { return named_; }

  // One byte of the object, whitespace before it included.
  ObjResult object_step(char c) {
    switch (obj_) {
      case Obj::kOpen:
        if (is_space(c)) return ObjResult::kMore;
        if (c != '{') return ObjResult::kError;
        obj_ = Obj::kKeyOrEnd;
        return ObjResult::kMore;
      case Obj::kKeyOrEnd:
      case Obj::kKey:
        if (is_space(c)) return ObjResult::kMore;
        if (c == '}' && obj_ == Obj::kKeyOrEnd) return close_object();
        if (c != '"') return ObjResult::kError;
        obj_ = Obj::kKeyString;
        scanner_ = JsonScanner();
        raw_.clear();
        return scan(c);
      case Obj::kKeyString:
        return scan(c);
      case Obj::kColon:
        if (is_space(c)) return ObjResult::kMore;
        if (c != ':') return ObjResult::kError;
        obj_ = Obj::kValueStart;
        return ObjResult::kMore;
      case Obj::kValueStart:
        if (is_space(c)) return ObjResult::kMore;
        if (key_ == "name") {
          if (named_ || c != '"') return ObjResult::kError;
          value_ = Value::kName;
        } else if (key_ == "arguments" || key_ == "parameters") {
          if (have_args_ || c != '{') return ObjResult::kError;
          have_args_ = true;
          value_ = Value::kArgs;
        } else {
          value_ = Value::kOther;
        }
        obj_ = Obj::kValue;
        scanner_ = JsonScanner();
        raw_.clear();
        return scan(c);
      case Obj::kValue:
        return scan(c);
      case Obj::kCommaOrEnd:
        if (is_space(c)) return ObjResult::kMore;
        if (c == ',') {
          obj_ = Obj::kKey;
          return ObjResult::kMore;
        }
        return c == '}' ? close_object() : ObjResult::kError;
    }
    return ObjResult::kError;
  }

 private:
  enum class Obj { kOpen, kKeyOrEnd, kKey, kKeyString, kColon, kValueStart, kValue, kCommaOrEnd };
  enum class Value { kName, kArgs, kOther };

  ObjResult scan(char c) {
    JsonScanner::Result r = scanner_.step(c);
    if (r == JsonScanner::Result::kError) return ObjResult::kError;
    if (r != JsonScanner::Result::kEnded) {
      if (obj_ == Obj::kValue && value_ == Value::kArgs) {
        if (named_) {
          arguments(std::string_view(&c, 1));
        } else {
          pending_args_ += c;
        }
      } else if (obj_ == Obj::kKeyString || value_ == Value::kName) {
        raw_ += c;
      }
      if (r == JsonScanner::Result::kMore) return ObjResult::kMore;
    }
    // the key or value is complete
    if (obj_ == Obj::kKeyString) {
      auto key = decode_string(raw_);
      if (!key) return ObjResult::kError;
      key_ = std::move(*key);
      obj_ = Obj::kColon;
      return ObjResult::kMore;
    }
    if (value_ == Value::kName) {
      auto name = decode_string(raw_);
      if (!name || name->empty()) return ObjResult::kError;
      named_ = true;
      start_call(std::move(*name));
      if (!pending_args_.empty()) arguments(std::exchange(pending_args_, {}));
    }
    obj_ = Obj::kCommaOrEnd;
    // a number or literal ends at the byte after it, which is the object's
    return r == JsonScanner::Result::kEnded ? object_step(c) : ObjResult::kMore;
  }

  ObjResult close_object() {
    if (!named_) return ObjResult::kError;
    if (!have_args_) arguments("{}");
    return ObjResult::kDone;
  }

  static std::optional<std::string> decode_string(const std::string& raw) {
    try {
      json j = json::parse(raw);
      if (j.is_string()) return j.get<std::string>();
    } catch (const std::exception&) {
    }
    return std::nullopt;
  }

  Obj obj_ = Obj::kOpen;
  Value value_ = Value::kOther;
  JsonScanner scanner_;
  std::string raw_;  // the key, or the name's JSON string
  std::string key_;
  bool named_ = false;
  bool have_args_ = false;
  std::string pending_args_;
};

// <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, any number.
class HermesParser final : public JsonCallParser {
  void step(char c) override {
    switch (state_) {
      case State::kGaveUp:
        content(std::string_view(&c, 1));
        return;
      case State::kText:
        text_step(c);
        return;
      case State::kCall: {
        raw_ += c;
        ObjResult r = object_step(c);
        if (r == ObjResult::kError) return give_up();
        if (r == ObjResult::kDone) {
          state_ = State::kAfterCall;
          close_.clear();
        }
        return;
      }
      case State::kAfterCall: {
        // whitespace, then </tool_call>; anything else is text again
        close_ += c;
        size_t ws = 0;
        while (ws < close_.size() && is_space(close_[ws])) ++ws;
        std::string_view rest = std::string_view(close_).substr(ws);
        if (rest == kClose) {
          state_ = State::kText;
          text_.set_after_call(true);
        } else if (!kClose.starts_with(rest)) {
          state_ = State::kText;
          text_.set_after_call(true);
          for (char b : std::exchange(close_, {})) text_step(b);
        }
        return;
      }
    }
  }

  // Outside calls (TextBetweenCalls); a stray </tool_call> is dropped.
  void text_step(char c) {
    std::string text;
    const int m = text_.step(c, text);
    content(text);
    if (m == 0) {
      raw_ = kOpen;
      state_ = State::kCall;
      begin_object();
    }
  }

  void give_up() {
    if (object_named()) drop_call();
    content(raw_);
    state_ = State::kGaveUp;
  }

  void end() override {
    if (state_ == State::kText) {
      content(text_.flush());
    } else if (state_ == State::kCall) {
      give_up();
    }
  }

  static constexpr std::string_view kOpen = "<tool_call>";
  static constexpr std::string_view kClose = "</tool_call>";
  enum class State { kText, kCall, kAfterCall, kGaveUp };
  State state_ = State::kText;
  TextBetweenCalls text_{{kOpen, kClose}};
  std::string raw_;    // the current call's text, from <tool_call>
  std::string close_;  // kAfterCall: what follows the JSON object
};

// [<|python_tag|>]{"name": N, "parameters": {...}}; {...} at the start.
class Llama3JsonParser final : public JsonCallParser {
  void step(char c) override {
    switch (state_) {
      case State::kStart: {
        held_ += c;
        size_t ws = 0;
        while (ws < held_.size() && is_space(held_[ws])) ++ws;
        std::string_view rest = std::string_view(held_).substr(ws);
        if (rest.empty() || (kTag.starts_with(rest) && rest != kTag)) return;
        if (rest == kTag) {
          held_.clear();
          state_ = State::kBeforeCall;
        } else if (rest == "{") {
          raw_ = std::exchange(held_, {});
          state_ = State::kCall;
          begin_object();
          object_step('{');
        } else {
          content(std::exchange(held_, {}));
          state_ = State::kContent;
        }
        return;
      }
      case State::kBeforeCall:
        if (is_space(c)) return;
        raw_.assign(1, c);
        if (c != '{') return give_up();
        state_ = State::kCall;
        begin_object();
        object_step(c);
        return;
      case State::kCall: {
        raw_ += c;
        ObjResult r = object_step(c);
        if (r == ObjResult::kError) return give_up();
        if (r == ObjResult::kDone) state_ = State::kAfterCall;
        return;
      }
      case State::kAfterCall:
        if (is_space(c)) return;
        if (c == ';') {
          state_ = State::kBeforeCall;
          return;
        }
        state_ = State::kContent;  // text after the calls
        [[fallthrough]];
      case State::kContent:
        content(std::string_view(&c, 1));
        return;
    }
  }

  void give_up() {
    if (state_ == State::kCall && object_named()) drop_call();
    content(raw_);
    state_ = State::kContent;
  }

  void end() override {
    if (state_ == State::kStart) {
      content(held_);
    } else if (state_ == State::kCall) {
      give_up();
    }
  }

  static constexpr std::string_view kTag = "<|python_tag|>";
  enum class State { kStart, kBeforeCall, kCall, kAfterCall, kContent };
  State state_ = State::kStart;
  std::string held_;  // kStart: whitespace and a possible <|python_tag|>
  std::string raw_;   // the current call's text
};

// [TOOL_CALLS][{"name": N, "arguments": {...}}, ...], or [TOOL_CALLS]N{...}
// and [TOOL_CALLS]N[ARGS]{...}, one call each.
class MistralParser final : public JsonCallParser {
  void step(char c) override {
    if (state_ != State::kText && state_ != State::kGaveUp) raw_ += c;
    switch (state_) {
      case State::kGaveUp:
        content(std::string_view(&c, 1));
        return;
      case State::kText:
        text_step(c);
        return;
      case State::kAfterMarker:
        if (is_space(c)) return;
        if (c == '[') {
          state_ = State::kArrayStart;
        } else if (c == '{') {
          single_ = true;
          state_ = State::kObject;
          begin_object();
          object_step(c);
        } else if (is_ident(c) || c == '-' || c == '.') {
          name_.assign(1, c);
          state_ = State::kName;
        } else {
          give_up();
        }
        return;
      case State::kArrayStart:
      case State::kArrayNext:
        if (is_space(c)) return;
        if (c == ']' && state_ == State::kArrayStart) {
          state_ = State::kText;
          text_.set_after_call(true);
          return;
        }
        if (c != '{') return give_up();
        single_ = false;
        state_ = State::kObject;
        begin_object();
        object_step(c);
        return;
      case State::kObject: {
        ObjResult r = object_step(c);
        if (r == ObjResult::kError) return give_up();
        if (r == ObjResult::kDone) {
          started_ = false;
          state_ = single_ ? State::kText : State::kArrayAfter;
          text_.set_after_call(single_);
        }
        return;
      }
      case State::kArrayAfter:
        if (is_space(c)) return;
        if (c == ',') {
          raw_.clear();
          state_ = State::kArrayNext;
        } else if (c == ']') {
          state_ = State::kText;
          text_.set_after_call(true);
        } else {
          raw_.assign(1, c);
          give_up();
        }
        return;
      case State::kName:
        if (is_ident(c) || c == '-' || c == '.') {
          name_ += c;
        } else if (c == '{') {
          begin_args(c);
        } else if (c == '[') {
          args_marker_.assign(1, c);
          state_ = State::kArgsMarker;
        } else {
          give_up();
        }
        return;
      case State::kArgsMarker:
        args_marker_ += c;
        if (args_marker_ == kArgs) {
          state_ = State::kArgsStart;
        } else if (!kArgs.starts_with(args_marker_)) {
          give_up();
        }
        return;
      case State::kArgsStart:
        if (is_space(c)) return;
        if (c != '{') return give_up();
        begin_args(c);
        return;
      case State::kArgs: {
        JsonScanner::Result r = args_.step(c);
        if (r == JsonScanner::Result::kError) return give_up();
        arguments(std::string_view(&c, 1));
        if (r == JsonScanner::Result::kDone) {
          started_ = false;
          state_ = State::kText;
          text_.set_after_call(true);
        }
        return;
      }
    }
  }

  void begin_args(char c) {
    start_call(std::exchange(name_, {}));
    started_ = true;
    args_ = JsonScanner();
    args_.step(c);
    arguments(std::string_view(&c, 1));
    state_ = State::kArgs;
  }

  // Outside calls (TextBetweenCalls).
  void text_step(char c) {
    std::string text;
    const int m = text_.step(c, text);
    content(text);
    if (m == 0) {
      raw_ = kMarker;
      state_ = State::kAfterMarker;
    }
  }

  void give_up() {
    if (started_ || (state_ == State::kObject && object_named())) drop_call();
    content(raw_);
    state_ = State::kGaveUp;
  }

  void end() override {
    switch (state_) {
      case State::kText:
        content(text_.flush());
        return;
      case State::kGaveUp:
      case State::kArrayAfter:
        return;
      case State::kArrayNext:
        if (raw_.find_first_not_of(" \t\r\n") == std::string::npos) return;
        [[fallthrough]];
      default:
        give_up();
    }
  }

  static constexpr std::string_view kMarker = "[TOOL_CALLS]";
  static constexpr std::string_view kArgs = "[ARGS]";
  enum class State {
    kText,
    kAfterMarker,
    kArrayStart,
    kArrayNext,
    kObject,
    kArrayAfter,
    kName,
    kArgsMarker,
    kArgsStart,
    kArgs,
    kGaveUp
  };
  State state_ = State::kText;
  TextBetweenCalls text_{{kMarker}};
  std::string raw_;       // the current call's text, from [TOOL_CALLS] or after the array's ','
  bool single_ = false;   // kObject: a lone object, not in an array
  bool started_ = false;  // kArgs: the N{...} call is in calls()
  std::string name_;
  std::string args_marker_;
  JsonScanner args_;
};

// [f(a=1, b="x"), g()] with Python literal arguments, at the start.
class PythonicParser final : public ToolCallParser {
  void step(char c) override {
    switch (state_) {
      case State::kContent:
        content(std::string_view(&c, 1));
        return;
      case State::kStart:
        raw_ += c;
        if (is_space(c)) return;
        if (c == '[') {
          state_ = State::kBeforeName;
        } else {
          content(std::exchange(raw_, {}));
          state_ = State::kContent;
        }
        return;
      case State::kAfterList:
        if (is_space(c)) return;
        state_ = State::kContent;
        content(std::string_view(&c, 1));
        return;
      default:
        break;
    }
    raw_ += c;
    if (!call_step(c)) give_up();
  }

  bool call_step(char c) {
    switch (state_) {
      case State::kBeforeName:
        if (is_space(c)) return true;
        if (!is_ident_start(c)) return false;
        name_.assign(1, c);
        state_ = State::kName;
        return true;
      case State::kName:
        if (is_ident(c)) {
          name_ += c;
          return true;
        }
        if (is_space(c)) {
          state_ = State::kAfterName;
          return true;
        }
        [[fallthrough]];
      case State::kAfterName:
        if (is_space(c)) return true;
        if (c != '(') return false;
        start_call(std::exchange(name_, {}));
        started_ = true;
        arguments("{");
        stack_.assign(1, {Kind::kCall, Phase::kFirst});
        state_ = State::kArgs;
        return true;
      case State::kArgs:
        return value_step(c);
      case State::kAfterCall:
        if (is_space(c)) return true;
        if (c == ',') {
          raw_.clear();
          state_ = State::kBeforeName;
          return true;
        }
        if (c == ']') {
          state_ = State::kAfterList;
          return true;
        }
        return false;
      default:
        return false;
    }
  }

  enum class Kind : uint8_t { kCall, kList, kTuple, kDict };
  enum class Phase : uint8_t {
    kFirst,  // just opened: an item or the end
    kItem,   // after ',': an item or the end
    kSep,    // after a key: ':' (dict) or '=' (call)
    kValue,  // after ':' / '=': a value
    kAfter,  // after an item: ',' or the end
  };
  struct Ctx {
    Kind kind;
    Phase phase;
  };
  enum class Tok : uint8_t { kNone, kString, kEscape, kHex, kNumber, kIdent };

  static char closer(Kind k) {
    return k == Kind::kCall ? ')' : k == Kind::kList ? ']' : k == Kind::kTuple ? ')' : '}';
  }
  bool key_position() const {
    const Ctx& t = stack_.back();
    return (t.kind == Kind::kDict || t.kind == Kind::kCall) &&
           (t.phase == Phase::kFirst || t.phase == Phase::kItem);
  }

  // The arguments, byte by byte, written out as JSON.
  bool value_step(char c) {
    if (tok_ != Tok::kNone && tok_ != Tok::kNumber && tok_ != Tok::kIdent) return string_step(c);
    if (tok_ == Tok::kNumber || tok_ == Tok::kIdent) {
      bool more =
          tok_ == Tok::kNumber
              ? (is_ident(c) || c == '.' ||
                 ((c == '+' || c == '-') && (scalar_.back() == 'e' || scalar_.back() == 'E') &&
                  !scalar_.starts_with("0x") && !scalar_.starts_with("0X")))
              : is_ident(c);
      if (more) {
        scalar_ += c;
        return true;
      }
      tok_ = Tok::kNone;
      if (!end_scalar()) return false;
    }
    if (is_space(c)) return true;
    Ctx& t = stack_.back();
    switch (t.phase) {
      case Phase::kSep:
        if (c != (t.kind == Kind::kDict ? ':' : '=')) return false;
        arguments(": ");
        t.phase = Phase::kValue;
        return true;
      case Phase::kAfter:
        if (c == ',') {
          t.phase = Phase::kItem;
          return true;
        }
        return c == closer(t.kind) && close();
      case Phase::kFirst:
      case Phase::kItem:
        if (c == closer(t.kind)) return close();
        if (t.phase == Phase::kItem) arguments(", ");
        if (t.kind == Kind::kCall) {  // a keyword
          if (!is_ident_start(c)) return false;
          tok_ = Tok::kIdent;
          scalar_.assign(1, c);
          return true;
        }
        return item_start(c);
      case Phase::kValue:
        return item_start(c);
    }
    return false;
  }

  bool item_start(char c) {
    bool key = key_position();
    if (c == '\'' || c == '"') {
      quote_ = c;
      tok_ = Tok::kString;
      arguments("\"");
      return true;
    }
    if (is_digit(c) || c == '-' || c == '+' || c == '.') {
      tok_ = Tok::kNumber;
      scalar_.assign(1, c);
      return true;
    }
    if (is_ident_start(c)) {
      tok_ = Tok::kIdent;
      scalar_.assign(1, c);
      return true;
    }
    if (key) return false;  // a container cannot be a key
    if (c == '[' || c == '(' || c == '{') {
      Kind k = c == '[' ? Kind::kList : c == '(' ? Kind::kTuple : Kind::kDict;
      arguments(k == Kind::kDict ? "{" : "[");
      stack_.push_back({k, Phase::kFirst});
      return true;
    }
    return false;
  }

  // A number or a name is complete.
  bool end_scalar() {
    std::string s = std::exchange(scalar_, {});
    bool key = key_position();
    std::optional<std::string> v;
    if (is_ident_start(s[0]) && key && stack_.back().kind == Kind::kCall) {  // a keyword
      arguments("\"" + s + "\"");
      return item_done();
    }
    if (is_ident_start(s[0])) {
      if (s == "True") v = "true";
      if (s == "False") v = "false";
      if (s == "None") v = "null";
    } else {
      v = py_number(s);
    }
    if (!v) return false;
    arguments(key ? "\"" + *v + "\"" : *v);
    return item_done();
  }

  bool item_done() {
    Ctx& t = stack_.back();
    t.phase = key_position() ? Phase::kSep : Phase::kAfter;
    return true;
  }

  bool close() {
    Kind k = stack_.back().kind;
    arguments(k == Kind::kCall || k == Kind::kDict ? "}" : "]");
    stack_.pop_back();
    if (!stack_.empty()) return item_done();
    started_ = false;
    state_ = State::kAfterCall;
    return true;
  }

  bool string_step(char c) {
    std::string out;
    if (tok_ == Tok::kHex) {
      if (!is_hex(c)) return false;
      hex_ += c;
      if (hex_.size() < hex_len_) return true;
      uint32_t cp = static_cast<uint32_t>(std::stoul(hex_, nullptr, 16));
      if (cp > 0x10FFFF) return false;
      append_json_char(out, cp);
      tok_ = Tok::kString;
    } else if (tok_ == Tok::kEscape) {
      tok_ = Tok::kString;
      switch (c) {
        case 'n':
          out = "\\n";
          break;
        case 't':
          out = "\\t";
          break;
        case 'r':
          out = "\\r";
          break;
        case 'b':
          out = "\\b";
          break;
        case 'f':
          out = "\\f";
          break;
        case 'a':
          out = "\\u0007";
          break;
        case 'v':
          out = "\\u000b";
          break;
        case '0':
          out = "\\u0000";
          break;
        case '\\':
          out = "\\\\";
          break;
        case '\'':
          out = "'";
          break;
        case '"':
          out = "\\\"";
          break;
        case '\n':
          break;  // a line continuation
        case 'x':
        case 'u':
        case 'U':
          tok_ = Tok::kHex;
          hex_.clear();
          hex_len_ = c == 'x' ? 2 : c == 'u' ? 4 : 8;
          return true;
        default:  // kept as written, as Python does
          if (static_cast<unsigned char>(c) < 0x20) return false;
          out = "\\\\";
          out += c;
      }
    } else if (c == '\\') {
      tok_ = Tok::kEscape;
      return true;
    } else if (c == quote_) {
      tok_ = Tok::kNone;
      arguments("\"");
      return item_done();
    } else if (c == '\n' || c == '\r') {
      return false;  // only a triple-quoted string spans lines
    } else if (static_cast<unsigned char>(c) < 0x80) {
      append_json_char(out, static_cast<unsigned char>(c));
    } else {
      out = c;  // UTF-8 passes through
    }
    arguments(out);
    return true;
  }

  // A Python number literal as JSON: underscores go, hex/octal/binary
  // integers become decimal, "5." and ".5" become "5.0" and "0.5". nullopt
  // for what is not a number (or is complex).
  static std::optional<std::string> py_number(std::string s) {
    std::string sign;
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
      if (s[0] == '-') sign = "-";
      s.erase(0, 1);
    }
    std::string t;
    for (char c : s) {
      if (c != '_') t += c;
    }
    if (t.empty()) return std::nullopt;
    if (t.size() > 2 && t[0] == '0' &&
        std::string_view("xXoObB").find(t[1]) != std::string_view::npos) {
      int base = (t[1] == 'x' || t[1] == 'X') ? 16 : (t[1] == 'o' || t[1] == 'O') ? 8 : 2;
      uint64_t v = 0;
      for (size_t i = 2; i < t.size(); ++i) {
        char c = t[i];
        int d = is_digit(c)              ? c - '0'
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                         : 99;
        if (d >= base ||
            v > (UINT64_MAX - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base)) {
          return std::nullopt;
        }
        v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
      }
      return sign + std::to_string(v);
    }
    size_t i = 0;
    std::string whole, frac, exp;
    while (i < t.size() && is_digit(t[i])) whole += t[i++];
    bool dot = i < t.size() && t[i] == '.';
    if (dot) {
      ++i;
      while (i < t.size() && is_digit(t[i])) frac += t[i++];
    }
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
      exp = "e";
      ++i;
      if (i < t.size() && (t[i] == '+' || t[i] == '-')) exp += t[i++];
      size_t from = i;
      while (i < t.size() && is_digit(t[i])) exp += t[i++];
      if (i == from) return std::nullopt;
    }
    if (i != t.size() || (whole.empty() && frac.empty())) return std::nullopt;
    size_t nz = whole.find_first_not_of('0');
    whole = nz == std::string::npos ? "0" : whole.substr(nz);
    std::string out = sign + whole;
    if (dot) out += "." + (frac.empty() ? std::string("0") : frac);
    return out + exp;
  }

  void give_up() {
    if (started_) drop_call();
    started_ = false;
    content(std::exchange(raw_, {}));
    state_ = State::kContent;
  }

  void end() override {
    switch (state_) {
      case State::kStart:
        content(raw_);
        return;
      case State::kContent:
      case State::kAfterCall:  // "[f()": f() stands
      case State::kAfterList:
        return;
      case State::kBeforeName:
        if (!calls().empty() && raw_.find_first_not_of(" \t\r\n") == std::string::npos) {
          return;  // "[f(), ": f() stands
        }
        [[fallthrough]];
      default:
        give_up();
    }
  }

  enum class State {
    kStart,
    kBeforeName,
    kName,
    kAfterName,
    kArgs,
    kAfterCall,
    kAfterList,
    kContent
  };
  State state_ = State::kStart;
  std::string raw_;  // the current call's text (with the '[' for the first)
  std::string name_;
  bool started_ = false;  // the current call is in calls()
  std::vector<Ctx> stack_;
  Tok tok_ = Tok::kNone;
  char quote_ = '"';
  std::string scalar_;
  std::string hex_;
  size_t hex_len_ = 0;
};

}  // namespace

const std::vector<std::string>& ToolCallParser::names() {
  static const std::vector<std::string> kNames = {"hermes", "llama3_json", "mistral", "pythonic"};
  return kNames;
}

std::unique_ptr<ToolCallParser> ToolCallParser::make(std::string_view name) {
  if (name == "hermes") return std::make_unique<HermesParser>();
  if (name == "llama3_json") return std::make_unique<Llama3JsonParser>();
  if (name == "mistral") return std::make_unique<MistralParser>();
  if (name == "pythonic") return std::make_unique<PythonicParser>();
  throw Error(
      fmt::format("unknown tool call parser '{}' (known: {})", name, fmt::join(names(), ", ")));
}

ToolParseDelta ToolCallParser::feed(std::string_view text) {
  for (char c : text) step(c);
  return take(false);
}

ToolParseDelta ToolCallParser::finish() {
  end();
  return take(true);
}

void ToolCallParser::start_call(std::string name) {
  if (!args_.empty() && !calls_.empty()) {
    deltas_.push_back({calls_.size() - 1, false, std::exchange(args_, {})});
  }
  args_.clear();
  deltas_.push_back({calls_.size(), true, name});
  calls_.push_back({std::move(name), ""});
}

void ToolCallParser::arguments(std::string_view s) {
  if (calls_.empty()) return;
  calls_.back().arguments += s;
  args_ += s;
}

void ToolCallParser::drop_call() {
  if (calls_.empty()) return;
  size_t index = calls_.size() - 1;
  calls_.pop_back();
  args_.clear();
  std::erase_if(deltas_, [&](const ToolCallDelta& d) { return d.index == index; });
}

ToolParseDelta ToolCallParser::take(bool all) {
  ToolParseDelta out;
  size_t n = all ? content_.size() : utf8_complete(content_);
  out.content = content_.substr(0, n);
  content_.erase(0, n);
  n = all ? args_.size() : utf8_complete(args_);
  if (n > 0) {
    deltas_.push_back({calls_.size() - 1, false, args_.substr(0, n)});
    args_.erase(0, n);
  }
  out.tool_calls = std::move(deltas_);
  deltas_.clear();
  return out;
}

namespace {
bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}
}  // namespace

std::string tool_parser_for_template(std::string_view t) {
  if (contains(t, "<tool_call>")) return "hermes";
  if (contains(t, "[TOOL_CALLS]")) return "mistral";
  if (contains(t, "[func_name1(")) return "pythonic";
  if (contains(t, "<|python_tag|>") || (contains(t, "ipython") && contains(t, "\"parameters\""))) {
    return "llama3_json";
  }
  return "";
}

}  // namespace halo::serve
