#include "serve/tokenizer_files.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/gguf.h"
#include "model/gguf_model.h"

namespace halo::serve {
namespace fs = std::filesystem;

namespace {
// The GGUF file to read the tokenizer from, when `path` is one (a directory
// with its own tokenizer.json wins over a .gguf file beside it).
std::optional<fs::path> gguf_source(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec) && fs::exists(path / "tokenizer.json", ec)) return std::nullopt;
  return model::find_gguf(path);
}
}  // namespace

text::Tokenizer load_tokenizer(const fs::path& dir_or_gguf) {
  if (std::optional<fs::path> gguf = gguf_source(dir_or_gguf)) {
    const model::GgufFile file(*gguf);
    return text::Tokenizer::from_gguf_metadata(file.metadata_json(), gguf->string());
  }
  return text::Tokenizer::from_model_dir(dir_or_gguf);
}

text::ChatTemplate load_chat_template(const fs::path& dir_or_gguf) {
  if (std::optional<fs::path> gguf = gguf_source(dir_or_gguf)) {
    const model::GgufFile file(*gguf);
    const nlohmann::json& meta = file.metadata_json();
    auto it = meta.find("tokenizer.chat_template");
    if (it == meta.end() || !it->is_string())
      throw Error(fmt::format("{}: no tokenizer.chat_template in the GGUF metadata", gguf->string()));
    return text::ChatTemplate(it->get<std::string>());
  }
  return text::ChatTemplate::from_tokenizer_config(dir_or_gguf / "tokenizer_config.json");
}

}  // namespace halo::serve
