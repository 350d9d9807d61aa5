// Tests of halo::text::guided::json_schema_to_regex: for each schema, conforming
// JSON texts (compact, and with the allowed spaces) match the compiled ByteDfa
// and non-conforming ones do not; unsupported keywords are refused by name.
#include "text/guided/json_schema_regex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "text/guided/regex_dfa.h"

using halo::text::guided::ByteDfa;
using halo::text::guided::json_schema_to_regex;
using halo::text::guided::json_value_regex;
using nlohmann::ordered_json;

namespace {

struct Case {
  std::string name;
  std::string schema;
  std::vector<std::string> valid, invalid;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"string",
       R"({"type": "string"})",
       {R"("")", R"("abc")", R"("a\"b")", R"("\u00e9\n\\")", R"("é中😀")", R"("a/b")"},
       {"abc", R"("a"b")", R"("\x")", "\"a\nb\"", R"("\u12")", R"("abc)", "\"\x01\""}},
      {"integer",
       R"({"type": "integer", "title": "n", "description": "ignored"})",
       {"0", "-12", "120", "9007199254740993"},
       {"01", "1.5", "-", "+1", "", "-0x1", "1e3"}},
      {"number",
       R"({"type": "number"})",
       {"1.5e10", "-0.5", "3", "0", "2E-3", "1e+9"},
       {".5", "1.", "1e", "--1", "01.5", "NaN"}},
      {"type list",
       R"({"type": ["string", "null", "boolean"]})",
       {R"("x")", "null", "true", "false"},
       {"1", "nul", "True", "[]"}},
      {"object with optional properties",
       R"({"type": "object",
           "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                          "email": {"type": "string", "format": "email"}},
           "required": ["name"]})",
       {R"({"name":"a"})", R"({"name":"a","age":3})",
        R"({"name": "a", "age": 3, "email": "x@y.com"})",
        R"({"name":"a","email":"first.last@mail.example.org"})"},
       {"{}", R"({"age":3})", R"({"age":3,"name":"a"})", R"({"name":"a",})",
        R"({"name":"a","zzz":1})", R"({"name":"a" ,"age":1})", R"({"name":"a",,"age":1})",
        R"({"name":"a","age":"3"})", R"({"name":"a","email":"nobody"})", R"({ "name":"a"})",
        R"({"name":  "a"})", R"({"name":"a","age":1,"age":1})"}},
      {"all properties optional",
       R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}})",
       {"{}", R"({"b":1})", R"({"a":1,"c":2})", R"({"a":1, "b":2, "c":3})", R"({"c":3})"},
       {R"({,"b":1})", R"({"a":1,})", R"({"b":1,"a":2})", R"({"d":1})"}},
      {"nested objects and arrays",
       R"({"type": "object", "additionalProperties": false,
           "properties": {
             "id": {"type": "integer"},
             "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
             "owner": {"type": "object", "properties": {"login": {"type": "string"},
                                                         "admin": {"type": "boolean"}},
                       "required": ["login", "admin"]}},
           "required": ["id", "owner"]})",
       {R"({"id":1,"owner":{"login":"x","admin":true}})",
        R"({"id":1, "tags":[], "owner":{"login":"x", "admin":false}})",
        R"({"id":1,"tags":["a", "b","c"],"owner":{"login":"x","admin":true}})"},
       {R"({"id":1,"tags":["a","b","c","d"],"owner":{"login":"x","admin":true}})",
        R"({"id":1,"owner":{"login":"x"}})", R"({"id":1,"owner":{"admin":true,"login":"x"}})",
        R"({"id":1,"tags":[1],"owner":{"login":"x","admin":true}})", R"({"id":1})"}},
      {"array bounds",
       R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})",
       {"[1,2]", "[1, 2, 3]", "[-1,0]"},
       {"[1]", "[1,2,3,4]", "[]", "[1,,2]", "[1 ,2]", "[1,2,]", "[ 1,2]"}},
      {"array unbounded",
       R"({"type": "array", "items": {"type": "number"}, "minItems": 1})",
       {"[1]", "[1,2.5,3,4,5,6,7,8,9,10,11]"},
       {"[]", "[1,]", "[\"a\"]"}},
      {"array of anything",
       R"({"type": "array"})",
       {"[]", R"([1,"a",null,[true],{"k":[]}])"},
       {"[", "{}", "[[[[1]]]]"}},
      {"enum",
       R"({"enum": ["red", "green", 1, null, true, "a\"b", "x.y*"]})",
       {R"("red")", "1", "null", "true", R"("a\"b")", R"("x.y*")"},
       {R"("blue")", "false", "2", R"("xxy*")", R"("x.yy")", "red"}},
      {"const",
       R"({"const": {"a": [1, 2]}})",
       {R"({"a":[1,2]})"},
       {R"({"a":[1,3]})", R"({"a":[1,2,3]})"}},
      {"anyOf and oneOf",
       R"({"anyOf": [{"type": "string", "maxLength": 2},
                     {"type": "array", "items": {"oneOf": [{"type": "integer"}, {"type": "null"}]}}]})",
       {R"("ab")", "[1,null,2]", "[]"},
       {R"("abc")", R"(["a"])", "1"}},
      {"$ref",
       R"({"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"},
                                                                 "y": {"$ref": "#/definitions/coord"}},
                               "required": ["x", "y"]}},
           "definitions": {"coord": {"type": "number"}},
           "type": "object",
           "properties": {"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}},
           "required": ["from", "to"]})",
       {R"({"from":{"x":1,"y":2},"to":{"x":-1.5,"y":0}})"},
       {R"({"from":{"x":1,"y":2}})", R"({"from":{"x":1,"y":"2"},"to":{"x":1,"y":2}})"}},
      {"formats",
       R"({"type": "object", "properties": {
             "d": {"type": "string", "format": "date"},
             "t": {"type": "string", "format": "date-time"},
             "u": {"type": "string", "format": "uuid"},
             "h": {"type": "string", "format": "time"}},
           "required": ["d", "t", "u", "h"]})",
       {R"({"d":"2024-02-29","t":"2024-01-01T12:00:00Z","u":"123e4567-e89b-12d3-a456-426614174000","h":"23:59:59.5+02:00"})"},
       {R"({"d":"2024-13-01","t":"2024-01-01T12:00:00Z","u":"123e4567-e89b-12d3-a456-426614174000","h":"23:59:59Z"})",
        R"({"d":"2024-01-01","t":"2024-01-01 12:00:00Z","u":"123e4567-e89b-12d3-a456-426614174000","h":"23:59:59Z"})",
        R"({"d":"2024-01-01","t":"2024-01-01T12:00:00Z","u":"123e4567e89b12d3a456426614174000","h":"23:59:59Z"})",
        R"({"d":"2024-01-01","t":"2024-01-01T12:00:00Z","u":"123e4567-e89b-12d3-a456-426614174000","h":"24:00:00Z"})",
        R"({"d":"2024-01-32","t":"2024-01-01T12:00:00Z","u":"123e4567-e89b-12d3-a456-426614174000","h":"23:59:59Z"})"}},
      {"string lengths",
       R"({"type": "string", "minLength": 2, "maxLength": 3})",
       {R"("ab")", R"("a\nb")", R"("é中😀")", R"("\u0041b")"},
       {R"("a")", R"("abcd")", R"("")"}},
      {"pattern",
       R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}\\d{3}$"},
                                            "free": {"type": "string", "pattern": "ab"}},
           "required": ["code", "free"]})",
       {R"({"code":"AB123","free":"ab"})", R"({"code":"XY000","free":"xxaby y"})"},
       {R"({"code":"AB12","free":"ab"})", R"({"code":"xAB123","free":"ab"})",
        R"({"code":"AB123","free":"ba"})"}},
      {"integer bounds",
       R"({"type": "integer", "minimum": -15, "exclusiveMaximum": 1235})",
       {"-15", "-1", "0", "7", "99", "1234"},
       {"-16", "1235", "-0", "01", "10000"}},
      {"additionalProperties schema",
       R"({"type": "object", "additionalProperties": {"type": "integer"}})",
       {"{}", R"({"a":1,"b":2})", R"({"a": 1, "a": 2})"},
       {R"({"a":"x"})", R"({"a":1,})"}},
      {"any object",
       R"({"type": "object"})",
       {"{}", R"({"a":{"b":1}, "c":[null,"x"]})"},
       {"[]", "1", R"({"a":{"b":{}}})"}},
      {"empty schema",
       R"({})",
       {"1", R"("x")", "[[[1]]]", R"({"a":[{"b":2}]})"},
       {"[[[[1]]]]", "", "tru"}},
  };
  return c;
}

TEST(JsonSchemaRegex, ValidAndInvalidDocuments) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto schema = ordered_json::parse(c.schema);
    const std::string regex = json_schema_to_regex(schema);
    const ByteDfa dfa = ByteDfa::compile(regex);
    for (const std::string& t : c.valid) EXPECT_TRUE(dfa.matches(t)) << "valid: " << t;
    for (const std::string& t : c.invalid) EXPECT_FALSE(dfa.matches(t)) << "invalid: " << t;
  }
}

TEST(JsonSchemaRegex, PlainJsonSortsProperties) {
  // nlohmann::json keeps object keys sorted: properties come in name order.
  const auto schema = nlohmann::json::parse(
      R"({"properties": {"z": {"type": "integer"}, "a": {"type": "integer"}}, "required": ["z", "a"]})");
  const ByteDfa dfa = ByteDfa::compile(json_schema_to_regex(schema));
  EXPECT_TRUE(dfa.matches(R"({"a":1,"z":2})"));
  EXPECT_FALSE(dfa.matches(R"({"z":2,"a":1})"));
  const ByteDfa ordered = ByteDfa::compile(json_schema_to_regex(ordered_json::parse(
      R"({"properties": {"z": {"type": "integer"}, "a": {"type": "integer"}}, "required": ["z", "a"]})")));
  EXPECT_TRUE(ordered.matches(R"({"z":2,"a":1})"));
  EXPECT_FALSE(ordered.matches(R"({"a":1,"z":2})"));
}

// Integer ranges: every integer near the bounds and around powers of ten.
TEST(JsonSchemaRegex, IntegerRanges) {
  std::mt19937_64 rng(7);
  std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, 0},
      {-5, 5},
      {1, 9},
      {10, 99},
      {7, 1234},
      {-1000, -7},
      {-999, 1000},
      {123, 45678},
      {19, 20},
      {100, 100000},
      {-9223372036854775807LL, 9223372036854775807LL}};
  for (int i = 0; i < 30; ++i) {
    std::uniform_int_distribution<int> digits(0, 12);
    auto rnd = [&] {
      int64_t m = 1;
      for (int d = digits(rng); d > 0; --d) m *= 10;
      const int64_t v = static_cast<int64_t>(rng() % static_cast<uint64_t>(m));
      return rng() % 3 == 0 ? -v : v;
    };
    int64_t a = rnd(), b = rnd();
    ranges.emplace_back(std::min(a, b), std::max(a, b));
  }
  for (auto [lo, hi] : ranges) {
    SCOPED_TRACE(std::to_string(lo) + ".." + std::to_string(hi));
    const ByteDfa dfa = ByteDfa::compile(json_schema_to_regex(
        nlohmann::json{{"type", "integer"}, {"minimum", lo}, {"maximum", hi}}));
    std::vector<int64_t> probes;
    for (int64_t p = 1; p <= 1'000'000'000'000'000LL; p *= 10) {
      for (int64_t d : {-1, 0, 1}) {
        probes.push_back(p + d);
        probes.push_back(-(p + d));
      }
    }
    for (int64_t base : {lo, hi}) {
      for (int64_t d = -12; d <= 12; ++d) {
        if ((d > 0 && base > INT64_MAX - d) || (d < 0 && base < INT64_MIN - d)) continue;
        probes.push_back(base + d);
      }
    }
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    for (int i = 0; i < 200 && span < 1'000'000'000'000ULL; ++i) {
      probes.push_back(lo + static_cast<int64_t>(rng() % (span + 1)));
    }
    for (int64_t v : probes) {
      EXPECT_EQ(dfa.matches(std::to_string(v)), v >= lo && v <= hi) << v;
    }
  }
  // One-sided bounds.
  const ByteDfa pos = ByteDfa::compile(
      json_schema_to_regex(nlohmann::json::parse(R"({"type": "integer", "exclusiveMinimum": 9})")));
  for (int64_t v = -200; v <= 20000; ++v) EXPECT_EQ(pos.matches(std::to_string(v)), v > 9) << v;
  EXPECT_TRUE(pos.matches("123456789012345678901234567890"));
  const ByteDfa neg = ByteDfa::compile(
      json_schema_to_regex(nlohmann::json::parse(R"({"type": "integer", "maximum": -3})")));
  for (int64_t v = -20000; v <= 200; ++v) EXPECT_EQ(neg.matches(std::to_string(v)), v <= -3) << v;
}

TEST(JsonSchemaRegex, AnyJsonValueByDepth) {
  const ByteDfa d0 = ByteDfa::compile(json_value_regex(0));
  EXPECT_TRUE(d0.matches("\"x\""));
  EXPECT_FALSE(d0.matches("[]"));
  const ByteDfa d2 = ByteDfa::compile(json_value_regex(2));
  EXPECT_TRUE(d2.matches(R"({"a": [1, 2], "b":{}})"));
  EXPECT_FALSE(d2.matches(R"({"a": [1, {}]})"));
  EXPECT_FALSE(d2.matches(R"({"a":[[1]]})"));
  EXPECT_FALSE(d2.matches(R"({"a" :1})"));
  EXPECT_FALSE(d2.matches(R"({"a":1 })"));
}

void expect_refused(const std::string& schema, const std::vector<std::string>& words) {
  try {
    const std::string re = json_schema_to_regex(ordered_json::parse(schema));
    ADD_FAILURE() << "accepted " << schema << " as " << re;
  } catch (const halo::Error& e) {
    const std::string msg = e.what();
    for (const std::string& w : words) {
      EXPECT_NE(msg.find(w), std::string::npos) << "'" << msg << "' lacks '" << w << "'";
    }
  }
}

TEST(JsonSchemaRegex, RefusesUnsupportedKeywords) {
  expect_refused(R"({"not": {"type": "string"}})", {"'not'", " at /"});
  expect_refused(R"({"properties": {"a": {"type": "array", "uniqueItems": true}}})",
                 {"'uniqueItems'", "/properties/a"});
  expect_refused(R"({"properties": {"a/b": {"items": {"type": "string", "if": {}}}}})",
                 {"'if'", "/properties/a~1b/items"});
  expect_refused(
      R"({"$defs": {"n": {"properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"})",
      {"recursive", "#/$defs/n", "/$defs/n/properties/next"});
  expect_refused(R"({"properties": {"a": {"type": "integer"}}, "additionalProperties": true})",
                 {"'additionalProperties'"});
  expect_refused(R"({"type": "string", "format": "ipv4"})", {"'format'", "ipv4"});
  expect_refused(R"({"type": "thing"})", {"'type'", "thing"});
  expect_refused(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", {"'allOf'"});
  expect_refused(R"({"properties": {"a": {}}, "required": ["b"]})", {"'required'", "'b'"});
  expect_refused(R"({"type": "number", "minimum": 0})", {"'minimum'"});
  expect_refused(R"({"type": "array", "maxItems": 5000})", {"'maxItems'"});
  expect_refused(R"({"$ref": "http://example.com/s.json"})", {"'$ref'"});
  expect_refused(R"({"$ref": "#/$defs/missing"})", {"'$ref'", "missing"});
  expect_refused(R"({"type": "array", "items": [{"type": "string"}]})", {"'items'"});
  expect_refused(R"({"patternProperties": {"^a": {}}})", {"'patternProperties'", " at /"});
  expect_refused(R"({"type": "integer", "minimum": 5, "maximum": 4})", {"'minimum'"});
  expect_refused(R"(false)", {"false"});
}

// Sizes and compile times of typical schemas (printed for the record).
TEST(JsonSchemaRegex, TypicalSizes) {
  const std::vector<std::pair<std::string, std::string>> schemas = {
      {"person",
       R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
                  "email":{"type":"string","format":"email"}},"required":["name","age"]})"},
      {"tool call",
       R"({"type":"object","properties":{"name":{"enum":["get_weather","search","calculator"]},
                  "arguments":{"type":"object","properties":{"location":{"type":"string"},
                  "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14}},
                  "required":["location"]}},"required":["name","arguments"]})"},
      {"array of events", R"({"type":"array","maxItems":10,"items":{"type":"object","properties":{
                  "id":{"type":"string","format":"uuid"},"at":{"type":"string","format":"date-time"},
                  "tags":{"type":"array","items":{"type":"string"}},"score":{"type":"number"}},
                  "required":["id","at"]}})"},
      {"json_object (any object)", R"({"type":"object"})"},
      {"any value depth 3", R"({})"},
  };
  for (const auto& [name, text] : schemas) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string re = json_schema_to_regex(ordered_json::parse(text));
    const ByteDfa dfa = ByteDfa::compile(re);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "[ sizes    ] " << name << ": regex " << re.size() << " chars, "
              << dfa.num_states() << " DFA states, " << ms << " ms\n";
    EXPECT_GT(dfa.num_states(), 1u);
    EXPECT_FALSE(dfa.accepting(dfa.start()));
  }
}

}  // namespace

// $defs that fan out, d_i = anyOf[$ref d_i+1, $ref d_i+1] for 30 levels (60 deep,
// within the depth rule, which refuses the 40 of the issue): a
// 1 KB schema whose regex doubles per level (40 levels grew the server to 5-9 GB).
// Refused once 32 MiB of regex have been made; 12 levels still convert.
TEST(JsonSchemaRegex, FanOutOfRefsIsBoundedByTheTextItMakes) {
  auto fan = [](int levels) {
    nlohmann::json defs = nlohmann::json::object();
    for (int i = 0; i < levels; ++i) {
      const std::string next = "#/$defs/d" + std::to_string(i + 1);
      defs["d" + std::to_string(i)] = {{"anyOf", {{{"$ref", next}}, {{"$ref", next}}}}};
    }
    defs["d" + std::to_string(levels)] = {{"type", "string"}, {"maxLength", 3}};
    return nlohmann::json{{"$defs", defs}, {"$ref", "#/$defs/d0"}};
  };
  EXPECT_FALSE(halo::text::guided::json_schema_to_regex(fan(12)).empty());
  try {
    halo::text::guided::json_schema_to_regex(fan(30));
    ADD_FAILURE() << "converted";
  } catch (const halo::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expands to more than 32 MiB of regex"), std::string::npos)
        << e.what();
  }
}
