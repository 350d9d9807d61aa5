#pragma once
// The one exception type the core throws. Its message names what was wrong
// and the value seen ("config.json: num_key_value_heads=3 does not divide
// num_attention_heads=32"). It never crosses the plugin ABI.
#include <stdexcept>
#include <string>

namespace halo {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace halo
