// What `halo bench serve` reads from outside: a server's streamed answer
// (server-sent events of OpenAI chunks, and error bodies) and its dataset
// files (ShareGPT JSON, prompts files). First byte: 0 the stream, 1 a
// ShareGPT file, 2 a prompts file; for the stream the second byte is where
// it is cut in two: fed whole or in two pieces, the reader must see the
// same events.
#include <cstring>

#include "bench_serve_data.h"
#include "bench_serve_stream.h"
#include "fuzz_util.h"

namespace {

using halo::tools::BenchClock;
using halo::tools::StreamReader;
using halo::tools::StreamResult;

void check_stream(std::string_view body, size_t cut) {
  const auto t = BenchClock::now();
  StreamResult whole, split;
  StreamReader a, b;
  a.feed(body, t, whole);
  cut = std::min(cut, body.size());
  b.feed(body.substr(0, cut), t, split);
  b.feed(body.substr(cut), t, split);
  if (whole.text != split.text || whole.chunks.size() != split.chunks.size() ||
      whole.error != split.error || whole.usage_completion_tokens != split.usage_completion_tokens)
    __builtin_trap();
  (void)halo::tools::error_body_message(body);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  if (size < 2) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (data[0] % 3 == 0) {
    check_stream(rest, data[1]);
    return 0;
  }
  static const auto tok = halo::text::Tokenizer::from_files(
      std::filesystem::path(HALO_SOURCE_DIR) / "fuzz/data/tiny_tokenizer.json", {});
  halo::tools::DatasetOptions o;
  o.name = data[0] % 3 == 1 ? "sharegpt" : "prompts";
  o.path = halo::fuzz::write_scratch("dataset", data + 2, size - 2).string();
  o.num_prompts = 1 + data[1] % 4;
  halo::fuzz::guarded([&] {
    auto prompts = halo::tools::make_bench_prompts(o, tok);
    if (static_cast<int>(prompts.size()) != o.num_prompts) __builtin_trap();
    for (const auto& p : prompts)
      if (p.output_len < 1) __builtin_trap();
  });
  return 0;
}
