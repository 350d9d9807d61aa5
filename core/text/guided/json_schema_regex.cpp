#include "text/guided/json_schema_regex.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "common/error.h"

namespace halo::text::guided {

namespace {

const std::string kStringChar = R"((?:[^"\\\x00-\x1F]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}))";
const std::string kString = "\"" + kStringChar + "*\"";
const std::string kInteger = "-?(?:0|[1-9][0-9]*)";
const std::string kNumber = kInteger + R"((?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)";
const std::string kColon = ": ?";
const std::string kComma = ", ?";
// Schemas within schemas, $ref chains included (json_schema_regex.h).
constexpr int kMaxSchemaDepth = 64;
// Regex text made by one conversion, each level's result counted (so about
// depth x the final size): far above an agent's largest tool set.
constexpr size_t kMaxProducedBytes = size_t{32} << 20;

const std::string kDate = "[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])";
const std::string kTime =
    R"((?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]))";
const std::string kUuid =
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
const std::string kEmailAtom = "[A-Za-z0-9_%+-]+";
const std::string kEmailLabel = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?";
const std::string kEmail =
    kEmailAtom + "(?:\\." + kEmailAtom + ")*@" + kEmailLabel + "(?:\\." + kEmailLabel + ")+";

std::string group(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out = "(?:";
  for (size_t i = 0; i < alts.size(); ++i) {
    if (i) out += '|';
    out += alts[i];
  }
  return out + ")";
}

// {lo,hi} (hi empty: unbounded) as a quantifier suffix.
std::string quantifier(uint64_t lo, std::optional<uint64_t> hi) {
  if (!hi && lo <= 1) return lo == 0 ? "*" : "+";
  if (hi && lo == *hi && lo == 1) return "";
  if (hi && lo == 0 && *hi == 1) return "?";
  std::string out = "{";
  out += std::to_string(lo);
  if (!hi || *hi != lo) out += ',';
  if (hi && *hi != lo) out += std::to_string(*hi);
  out += '}';
  return out;
}

std::string object_of(const std::string& value) {
  const std::string member = kString + kColon + value;
  return "\\{(?:" + member + "(?:" + kComma + member + ")*)?\\}";
}

// ---- integer ranges ----

std::string digit_class(char a, char b) {
  if (a == b) return std::string(1, a);
  return std::string("[") + a + "-" + b + "]";
}

std::string any_digits(size_t n) {
  if (n == 0) return "";
  return n == 1 ? "[0-9]" : "[0-9]{" + std::to_string(n) + "}";
}

// Decimal strings of equal length, x <= y: the regex of the strings between them.
std::string same_length_range(const std::string& x, const std::string& y) {
  if (x.empty()) return "";
  if (x[0] == y[0]) return x[0] + same_length_range(x.substr(1), y.substr(1));
  const size_t n = x.size() - 1;
  const std::string xs = x.substr(1), ys = y.substr(1);
  const bool x_low = xs == std::string(n, '0'), y_high = ys == std::string(n, '9');
  std::vector<std::string> alts;
  char lo_full = x[0], hi_full = y[0];
  if (!x_low) {
    alts.push_back(x[0] + same_length_range(xs, std::string(n, '9')));
    ++lo_full;
  }
  if (!y_high) --hi_full;
  if (lo_full <= hi_full) alts.push_back(digit_class(lo_full, hi_full) + any_digits(n));
  if (!y_high) alts.push_back(y[0] + same_length_range(std::string(n, '0'), ys));
  return group(alts);
}

// Non-negative integers in [a, b] (b empty: unbounded), without leading zeros.
std::string natural_range(uint64_t a, std::optional<uint64_t> b) {
  const size_t la = std::to_string(a).size();
  const size_t lb = b ? std::to_string(*b).size() : la;
  std::vector<std::string> alts;
  uint64_t pow = 1;  // 10^(L-1)
  for (size_t l = 1; l < la; ++l) pow *= 10;
  for (size_t l = la; l <= lb; ++l, pow *= 10) {
    const uint64_t lo = std::max(a, l == 1 ? uint64_t{0} : pow);
    const uint64_t top = pow * 10 - 1;  // fits: l <= 19
    const uint64_t hi = b ? std::min(*b, top) : top;
    if (lo <= hi) alts.push_back(same_length_range(std::to_string(lo), std::to_string(hi)));
  }
  if (!b) alts.push_back("[1-9][0-9]{" + std::to_string(la) + ",}");
  return group(alts);
}

// Integers in [lo, hi] (either may be empty: unbounded).
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  auto mag = [](int64_t v) { return v < 0 ? uint64_t(0) - static_cast<uint64_t>(v) : uint64_t(v); };
  if (!lo || *lo < 0) {  // negatives: '-' and the magnitudes
    const uint64_t a = hi && *hi < 0 ? mag(*hi) : 1;
    std::optional<uint64_t> b;
    if (lo) b = mag(*lo);
    alts.push_back(std::string(1, '-').append(natural_range(a, b)));
  }
  if (!hi || *hi >= 0) {
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    std::optional<uint64_t> b;
    if (hi) b = static_cast<uint64_t>(*hi);
    alts.push_back(natural_range(a, b));
  }
  return group(alts);
}

// ---- schema walk ----

const std::set<std::string> kIgnored = {"title", "description", "default", "examples",   "$schema",
                                        "$id",   "$comment",    "$defs",   "definitions"};
const std::set<std::string> kKnown = {"type",
                                      "properties",
                                      "required",
                                      "additionalProperties",
                                      "enum",
                                      "const",
                                      "anyOf",
                                      "oneOf",
                                      "allOf",
                                      "$ref",
                                      "items",
                                      "minItems",
                                      "maxItems",
                                      "minLength",
                                      "maxLength",
                                      "pattern",
                                      "format",
                                      "minimum",
                                      "maximum",
                                      "exclusiveMinimum",
                                      "exclusiveMaximum"};

std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

template <class Json>
class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  // Every schema inside another, and every $ref followed, is one level: the
  // conversion recurses, so its depth is bounded (a chain of 10,000 $defs is
  // refused, not a stack overflow).
  std::string convert(const Json& s, const std::string& ptr) {
    if (depth_ >= kMaxSchemaDepth)
      fail("nested deeper than " + std::to_string(kMaxSchemaDepth) +
               " schemas (each $ref counts as one)",
           ptr);
    ++depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    std::string r = convert_schema(s, ptr);
    // A schema reached by many paths ($defs that fan out: d_i = anyOf[d_i+1,
    // d_i+1]) is copied once per path: the text doubles per level, so count
    // all of it as it is made and stop early (40 levels grew to 5-9 GB).
    produced_ += r.size();
    if (produced_ > kMaxProducedBytes)
      fail("expands to more than " + std::to_string(kMaxProducedBytes >> 20) +
               " MiB of regex (a schema reached through many $ref paths is copied for each)",
           ptr);
    return r;
  }

 private:
  std::string convert_schema(const Json& s, const std::string& ptr) {
    if (s.is_boolean()) {
      if (s.template get<bool>()) return json_value_regex(3);
      fail("the schema false matches nothing", ptr);
    }
    if (!s.is_object()) fail("a schema must be an object or a boolean", ptr);
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!kKnown.count(it.key()) && !kIgnored.count(it.key())) {
        fail("unsupported keyword '" + it.key() + "'", ptr);
      }
    }
    if (s.contains("$ref")) {
      only_with(s, "$ref", ptr);
      return ref(s["$ref"], ptr);
    }
    if (s.contains("const")) {
      only_with(s, "const", ptr);
      return literal(s["const"]);
    }
    if (s.contains("enum")) {
      only_with(s, "enum", ptr);
      const Json& e = s["enum"];
      if (!e.is_array() || e.empty()) fail("'enum' must be a non-empty array", ptr);
      std::vector<std::string> alts;
      for (const Json& v : e) alts.push_back(literal(v));
      return group(alts);
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (!s.contains(key)) continue;
      only_with(s, key, ptr);
      const Json& list = s[key];
      if (!list.is_array() || list.empty()) {
        fail(std::string("'") + key + "' must be a non-empty array", ptr);
      }
      if (std::string(key) == "allOf" && list.size() != 1) {
        fail("unsupported keyword 'allOf' (with more than one schema)", ptr);
      }
      std::vector<std::string> alts;
      for (size_t i = 0; i < list.size(); ++i) {
        alts.push_back(convert(list[i], ptr + "/" + key + "/" + std::to_string(i)));
      }
      return group(alts);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.template get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& x : t) {
          if (!x.is_string()) fail("'type' must be a string or a list of strings", ptr);
          types.push_back(x.template get<std::string>());
        }
      } else {
        fail("'type' must be a string or a list of strings", ptr);
      }
    } else if (has_any(s, {"properties", "required", "additionalProperties"})) {
      types = {"object"};
    } else if (has_any(s, {"items", "minItems", "maxItems"})) {
      types = {"array"};
    } else if (has_any(s, {"minLength", "maxLength", "pattern", "format"})) {
      types = {"string"};
    } else if (has_any(s, {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) {
      types = {"number"};
    } else {
      return json_value_regex(3);
    }
    std::vector<std::string> alts;
    for (const std::string& t : types) {
      if (t == "string") {
        alts.push_back(string(s, ptr));
      } else if (t == "integer") {
        alts.push_back(integer(s, ptr));
      } else if (t == "number") {
        for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
          if (s.contains(k)) fail(std::string("unsupported keyword '") + k + "' on a number", ptr);
        }
        alts.push_back(kNumber);
      } else if (t == "boolean") {
        alts.push_back("(?:true|false)");
      } else if (t == "null") {
        alts.push_back("null");
      } else if (t == "object") {
        alts.push_back(object(s, ptr));
      } else if (t == "array") {
        alts.push_back(array(s, ptr));
      } else {
        fail("unsupported type '" + t + "' in keyword 'type'", ptr);
      }
    }
    return group(alts);
  }

 private:
  const Json& root_;
  std::vector<std::string> ref_stack_;
  int depth_ = 0;
  size_t produced_ = 0;  // bytes of regex made so far, nested results included

  [[noreturn]] static void fail(const std::string& what, const std::string& ptr) {
    throw Error("JSON schema: " + what + " at " + (ptr.empty() ? std::string("/") : ptr));
  }

  static bool has_any(const Json& s, std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
      if (s.contains(k)) return true;
    }
    return false;
  }

  // `key` is handled alone: any other constraining keyword beside it is refused.
  static void only_with(const Json& s, const std::string& key, const std::string& ptr) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != key && !kIgnored.count(it.key())) {
        fail("unsupported keyword '" + it.key() + "' beside '" + key + "'", ptr);
      }
    }
  }

  static std::string literal(const Json& v) { return regex_escape(v.dump()); }

  static std::optional<uint64_t> count(const Json& s, const char* key, const std::string& ptr) {
    if (!s.contains(key)) return std::nullopt;
    const Json& v = s[key];
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.template get<int64_t>() >= 0)) {
      fail(std::string("'") + key + "' must be a non-negative integer", ptr);
    }
    const auto n = v.template get<uint64_t>();
    if (n > 1000) fail(std::string("unsupported keyword '") + key + "' above 1000", ptr);
    return n;
  }

  std::string ref(const Json& r, const std::string& ptr) {
    if (!r.is_string()) fail("'$ref' must be a string", ptr);
    const auto target = r.template get<std::string>();
    if (target.rfind("#/", 0) != 0 && target != "#") {
      fail("unsupported keyword '$ref' to '" + target + "' (only #/... in this schema)", ptr);
    }
    if (std::find(ref_stack_.begin(), ref_stack_.end(), target) != ref_stack_.end()) {
      fail("unsupported keyword '$ref': recursive reference to '" + target + "'", ptr);
    }
    const Json* node = &root_;
    std::string rest = target.substr(1);
    while (!rest.empty()) {
      rest.erase(0, 1);  // '/'
      const size_t slash = rest.find('/');
      std::string tok = rest.substr(0, slash);
      rest = slash == std::string::npos ? "" : rest.substr(slash);
      std::string key;
      for (size_t i = 0; i < tok.size(); ++i) {
        if (tok[i] == '~' && i + 1 < tok.size()) {
          key += tok[i + 1] == '1' ? '/' : '~';
          ++i;
        } else {
          key += tok[i];
        }
      }
      if (node->is_object() && node->contains(key)) {
        node = &(*node)[key];
      } else if (node->is_array() && !key.empty() && key.size() <= 9 &&
                 key.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(key) < node->size()) {
        node = &(*node)[std::stoul(key)];
      } else {
        fail("'$ref' to '" + target + "' does not resolve", ptr);
      }
    }
    ref_stack_.push_back(target);
    std::string out = convert(*node, target.substr(1));
    ref_stack_.pop_back();
    return out;
  }

  std::string string(const Json& s, const std::string& ptr) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format")) {
      if (has_len || s.contains("pattern")) {
        fail("unsupported keyword 'format' together with a length or a pattern", ptr);
      }
      const Json& f = s["format"];
      const std::string name = f.is_string() ? f.template get<std::string>() : f.dump();
      std::string body;
      if (name == "date") {
        body = kDate;
      } else if (name == "time") {
        body = kTime;
      } else if (name == "date-time") {
        body = kDate + "T" + kTime;
      } else if (name == "uuid") {
        body = kUuid;
      } else if (name == "email") {
        body = kEmail;
      } else {
        fail("unsupported keyword 'format' value '" + name + "'", ptr);
      }
      return "\"" + body + "\"";
    }
    if (s.contains("pattern")) {
      if (has_len) fail("unsupported keyword 'pattern' together with a length", ptr);
      const Json& p = s["pattern"];
      if (!p.is_string()) fail("'pattern' must be a string", ptr);
      std::string pat = p.template get<std::string>();
      std::string prefix = kStringChar + "*", suffix = prefix;
      if (!pat.empty() && pat[0] == '^') {
        pat.erase(0, 1);
        prefix.clear();
      }
      size_t slashes = 0;
      while (pat.size() >= 2 + slashes && pat[pat.size() - 2 - slashes] == '\\') ++slashes;
      if (!pat.empty() && pat.back() == '$' && slashes % 2 == 0) {
        pat.pop_back();
        suffix.clear();
      }
      return "\"" + prefix + "(?:" + pat + ")" + suffix + "\"";
    }
    const uint64_t lo = count(s, "minLength", ptr).value_or(0);
    const std::optional<uint64_t> hi = count(s, "maxLength", ptr);
    if (hi && *hi < lo) fail("'maxLength' is below 'minLength'", ptr);
    return "\"" + kStringChar + quantifier(lo, hi) + "\"";
  }

  std::string integer(const Json& s, const std::string& ptr) {
    std::optional<int64_t> lo, hi;
    auto bound = [&](const char* key, bool is_min, bool exclusive) {
      if (!s.contains(key)) return;
      const Json& v = s[key];
      if (v.is_boolean()) return;  // draft 4 exclusive flags: handled below
      if (!v.is_number()) fail(std::string("'") + key + "' must be a number", ptr);
      const double d = v.template get<double>();
      if (!v.is_number_integer() && std::abs(d) > 9e18) {
        fail(std::string("unsupported keyword '") + key + "' beyond int64", ptr);
      }
      if (v.is_number_unsigned() && v.template get<uint64_t>() > uint64_t{INT64_MAX}) {
        fail(std::string("unsupported keyword '") + key + "' beyond int64", ptr);
      }
      int64_t b = v.is_number_integer()
                      ? v.template get<int64_t>()
                      : static_cast<int64_t>(is_min ? std::ceil(d) : std::floor(d));
      if (exclusive && (v.is_number_integer() || static_cast<double>(b) == d)) {
        if (b == (is_min ? INT64_MAX : INT64_MIN))
          fail(std::string("'") + key + "': no integer fits", ptr);
        b += is_min ? 1 : -1;
      }
      auto& slot = is_min ? lo : hi;
      slot = slot ? (is_min ? std::max(*slot, b) : std::min(*slot, b)) : b;
    };
    const bool ex_min4 = s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean() &&
                         s["exclusiveMinimum"].template get<bool>();
    const bool ex_max4 = s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean() &&
                         s["exclusiveMaximum"].template get<bool>();
    bound("minimum", true, ex_min4);
    bound("maximum", false, ex_max4);
    bound("exclusiveMinimum", true, true);
    bound("exclusiveMaximum", false, true);
    if (!lo && !hi) return kInteger;
    if (lo && hi && *lo > *hi) fail("'minimum' is above 'maximum': no integer fits", ptr);
    return integer_range(lo, hi);
  }

  std::string object(const Json& s, const std::string& ptr) {
    const bool has_props = s.contains("properties");
    if (has_props && !s["properties"].is_object()) fail("'properties' must be an object", ptr);
    std::set<std::string> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array()) fail("'required' must be an array", ptr);
      for (const Json& name : r) {
        if (!name.is_string()) fail("'required' must list strings", ptr);
        const auto n = name.template get<std::string>();
        if (!has_props || !s["properties"].contains(n)) {
          fail("unsupported keyword 'required': '" + n + "' is not in 'properties'", ptr);
        }
        required.insert(n);
      }
    }
    const bool has_ap = s.contains("additionalProperties");
    const bool ap_false = has_ap && s["additionalProperties"].is_boolean() &&
                          !s["additionalProperties"].template get<bool>();
    if (!has_props || s["properties"].empty()) {
      if (ap_false) return "\\{\\}";
      if (!has_ap || s["additionalProperties"].is_boolean()) return object_of(json_value_regex(1));
      return object_of(convert(s["additionalProperties"], ptr + "/additionalProperties"));
    }
    if (has_ap && !ap_false) {
      fail("unsupported keyword 'additionalProperties' (only false beside 'properties')", ptr);
    }
    struct Item {
      std::string re;
      bool required;
    };
    std::vector<Item> items;
    const Json& props = s["properties"];
    for (auto it = props.begin(); it != props.end(); ++it) {
      const std::string re = regex_escape(Json(it.key()).dump()) + kColon +
                             convert(it.value(), ptr + "/properties/" + pointer_token(it.key()));
      items.push_back({re, required.count(it.key()) > 0});
    }
    // tail[i]: items i.. when one item is already written (each preceded by a comma).
    std::vector<std::string> tail(items.size() + 1);
    for (size_t i = items.size(); i-- > 0;) {
      const std::string one = "(?:" + kComma + items[i].re + ")";
      tail[i] = one + (items[i].required ? "" : "?") + tail[i + 1];
    }
    // The first item written is i: every item before it is optional (skipped).
    std::vector<std::string> alts;
    bool all_optional = true;
    for (size_t i = 0; i < items.size(); ++i) {
      alts.push_back(items[i].re + tail[i + 1]);
      if (items[i].required) {
        all_optional = false;
        break;
      }
    }
    std::string body = group(alts);
    if (all_optional) body = "(?:" + body + ")?";
    return "\\{" + body + "\\}";
  }

  std::string array(const Json& s, const std::string& ptr) {
    if (s.contains("items") && s["items"].is_array()) {
      fail("unsupported keyword 'items' as a list (tuples)", ptr);
    }
    const std::string item =
        s.contains("items") ? convert(s["items"], ptr + "/items") : json_value_regex(2);
    const uint64_t lo = count(s, "minItems", ptr).value_or(0);
    const std::optional<uint64_t> hi = count(s, "maxItems", ptr);
    if (hi && *hi < lo) fail("'maxItems' is below 'minItems'", ptr);
    if (hi && *hi == 0) return "\\[\\]";
    std::optional<uint64_t> rest_hi;
    if (hi) rest_hi = *hi - 1;
    const std::string rest = "(?:" + kComma + item + ")" + quantifier(lo ? lo - 1 : 0, rest_hi);
    const std::string body = "(?:" + item + ")" + rest;
    return "\\[" + (lo == 0 ? "(?:" + body + ")?" : body) + "\\]";
  }
};

}  // namespace

std::string regex_escape(std::string_view text) {
  static const std::string kMeta = "\\^$.|?*+()[]{}/-";
  std::string out;
  for (char c : text) {
    if (kMeta.find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string json_value_regex(int depth) {
  const std::string scalar = group({kString, kNumber, "true", "false", "null"});
  if (depth <= 0) return scalar;
  const std::string inner = json_value_regex(depth - 1);
  const std::string array = "\\[(?:" + inner + "(?:" + kComma + inner + ")*)?\\]";
  return group({kString, kNumber, "true", "false", "null", object_of(inner), array});
}

std::string json_schema_to_regex(const nlohmann::json& schema) {
  return Converter<nlohmann::json>(schema).convert(schema, "");
}

std::string json_schema_to_regex(const nlohmann::ordered_json& schema) {
  return Converter<nlohmann::ordered_json>(schema).convert(schema, "");
}

}  // namespace halo::text::guided
