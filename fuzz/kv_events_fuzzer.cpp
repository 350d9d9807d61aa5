// KV cache events' outside input: the --kv-events-config JSON (first byte
// even) and a replay request's frames off the network (first byte odd;
// frames split at NUL bytes).
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "serve/kv_event_publisher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    halo::fuzz::guarded([&] { (void)halo::serve::parse_kv_events_config(rest); });
    return 0;
  }
  std::vector<std::string> frames(1);
  for (char c : rest) {
    if (c == '\0')
      frames.emplace_back();
    else
      frames.back() += c;
  }
  (void)halo::serve::parse_replay_request(frames);
  return 0;
}
