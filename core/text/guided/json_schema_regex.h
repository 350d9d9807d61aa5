#pragma once
// JSON Schema -> a regex (the syntax of regex_dfa.h) of the JSON texts that
// conform to it, for guided decoding of response_format json_schema.
//
// The texts are compact: no whitespace except one optional space after ':' and
// ','. Object properties come in the order the schema lists them.
//
// Schema subset taken:
//   true / {}                any JSON value (json_value_regex(3))
//   type                     string, integer, number, boolean, null, object, array, or a
//                            list of these (alternation; the other keywords apply to each)
//   properties, required     properties in the order written (ordered_json overload;
//                            nlohmann::json sorts them by name); required ones always
//                            present, optional ones present or absent; every name in
//                            `required` must be in `properties`
//   additionalProperties     false is the default here (only listed properties). With
//                            `properties`, only false is taken. Without `properties`:
//                            absent/true = any object (nesting depth <= 2), false = {},
//                            a schema = an object whose values all conform to it
//   enum, const              the compact JSON encodings of the values (any JSON values)
//   anyOf, oneOf             alternation (oneOf's exclusivity is not enforced)
//   allOf                    only with one element (inlined)
//   $ref                     "#/..." JSON pointers into the root (#/$defs/X,
//                            #/definitions/X); recursive references are refused
//   items                    one schema for every element (absent: any JSON value of
//                            depth 2); minItems, maxItems (<= 1000; absent max = unbounded)
//   minLength, maxLength     in characters (a JSON escape counts as one); <= 1000
//   pattern                  ECMAScript-like regex of regex_dfa.h; as in JSON Schema it is
//                            not anchored: a side without ^ / $ takes any string characters.
//                            It matches the JSON-encoded text of the string (escapes are
//                            not decoded), so a pattern should not itself match '"' or '\'
//   format                   date (YYYY-MM-DD, month 01-12, day 01-31), time (hh:mm:ss,
//                            optional fraction, required offset Z or +hh:mm/-hh:mm,
//                            RFC 3339), date-time (dateTtime), uuid (8-4-4-4-12 hex),
//                            email (approximation: dot-separated atoms of
//                            [A-Za-z0-9_%+-] @ dot-separated labels, at least one dot)
//   minimum, maximum,        integers only, any int64 bounds (a digit-range regex);
//   exclusiveMinimum/Maximum numbers (draft 6+); refused on type number
//   ignored                  title, description, default, examples, $schema, $id,
//                            $comment, $defs, definitions
// Schemas nest at most 64 deep, each $ref followed counting as one level
// (an agent's deepest tool schemas nest about 10).
// The regex made (each level's text counted) is at most 32 MiB: a definition
// reached through many $ref paths is copied for each path.
// Anything else throws halo::Error naming the keyword and its JSON pointer
// ("JSON schema: unsupported keyword 'not' at /properties/x").
//
// Pure functions: safe from any thread.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace halo::text::guided {

std::string json_schema_to_regex(const nlohmann::json& schema);
// The same keeping the order in which `properties` were written (nlohmann::json
// sorts object keys by name, so with it properties come in name order).
std::string json_schema_to_regex(const nlohmann::ordered_json& schema);

// Any JSON value with up to `depth` levels of nested objects/arrays (0: scalars only).
std::string json_value_regex(int depth = 3);

// `text` with every regex metacharacter escaped (a literal in the syntax of regex_dfa.h).
std::string regex_escape(std::string_view text);

}  // namespace halo::text::guided
