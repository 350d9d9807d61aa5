#pragma once
// Where a model's tokenizer and chat template come from: tokenizer.json and
// tokenizer_config.json of a tokenizer directory, or, for a GGUF model (a
// .gguf file, or a directory holding one and no tokenizer.json), the
// tokenizer.ggml.* and tokenizer.chat_template keys of the file's metadata.
// One rule for halo serve, generate and bench.
#include <filesystem>
#include <optional>

#include "text/jinja/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace halo::serve {

// Throws halo::Error naming the file when neither source exists.
text::Tokenizer load_tokenizer(const std::filesystem::path& dir_or_gguf);

// tokenizer_config.json's chat_template or the GGUF's; throws halo::Error
// (naming where it looked) when there is none.
text::ChatTemplate load_chat_template(const std::filesystem::path& dir_or_gguf);

}  // namespace halo::serve
