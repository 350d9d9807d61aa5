#pragma once
// A whole file as text, or halo::Error "<path>: cannot be read".
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/error.h"

namespace halo {

inline std::string read_file_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace halo
