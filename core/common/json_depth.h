#pragma once
// JSON text from outside (a request body, JSON inside one of its strings, a
// file given to the server, a model's tool-call output) parsed under a nesting
// limit. nlohmann parses iteratively, but copying a value, dump() and every
// walk over it recurse: a value deeper than its limit is refused while it is
// parsed, before anything recurses over it.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/error.h"

namespace halo {

// The server's default limit (--max-request-json-depth), also the limit of
// JSON that is not a request's: a model's tool-call output, a schema as text.
constexpr int kDefaultMaxJsonDepth = 128;

// A container opened at depth max_depth or deeper.
class JsonTooDeep : public Error {
 public:
  explicit JsonTooDeep(int max_depth)
      : Error("nested deeper than " + std::to_string(max_depth) + " levels"),
        max_depth_(max_depth) {}
  int max_depth() const { return max_depth_; }

 private:
  int max_depth_;
};

// `text` as Json (nlohmann::json or ordered_json). Throws JsonTooDeep when a
// container opens `max_depth` levels deep (the top-level value is depth 0);
// text that is not JSON throws Json's parse_error, or, with
// allow_exceptions false, gives a discarded value. `last_key`, when given,
// holds the last object key read (it names the field of an error).
template <class Json = nlohmann::json>
Json parse_json_bounded(std::string_view text, int max_depth, bool allow_exceptions = true,
                        std::string* last_key = nullptr) {
  typename Json::parser_callback_t limit = [max_depth, last_key](int depth,
                                                                 typename Json::parse_event_t event,
                                                                 Json& parsed) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= max_depth)
      throw JsonTooDeep(max_depth);
    if (last_key != nullptr && event == Json::parse_event_t::key)
      *last_key = parsed.template get<std::string>();
    return true;
  };
  return Json::parse(text, limit, allow_exceptions);
}

}  // namespace halo
