#pragma once
// The one exception type the core throws (FieldError names a request field). Its message names what
// was wrong and the value seen ("config.json: num_key_value_heads=3 does not divide
// num_attention_heads=32"). It never crosses the plugin ABI.
#include <stdexcept>
#include <string>

namespace halo {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An Error about one named field of a request ("guided_grammar"), so a
// frontend can name it in its error (OpenAI's `param`).
class FieldError : public Error {
 public:
  FieldError(std::string field, const std::string& message)
      : Error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

}  // namespace halo
