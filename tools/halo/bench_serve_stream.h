#pragma once
// What `halo bench serve` reads from a server: the bytes of a streamed
// completion or chat completion (server-sent events), cut into events and
// read as OpenAI chunks. Pure: no I/O, so it can be fed any bytes in any
// pieces (fuzz/bench_input_fuzzer.cpp).
//
// Threads: one StreamReader per stream, used by one thread.
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace halo::tools {

using BenchClock = std::chrono::steady_clock;

// What one streamed request saw.
struct StreamResult {
  bool success = false;
  std::string error;            // why not, for a failed request
  BenchClock::time_point sent;  // when the request was handed to the connection
  BenchClock::time_point done;
  // Arrival of each event with new text (or of the finish of an answer without any).
  std::vector<BenchClock::time_point> chunks;
  std::string text;                    // the generated text (and reasoning text)
  long long usage_prompt_tokens = -1;  // the server's `usage`, when it sent one
  long long usage_completion_tokens = -1;
};

// The message of an error response's body: OpenAI's {"error": {"message"}},
// {"error": "..."}, else the body itself (its first 300 bytes).
std::string error_body_message(std::string_view body);

class StreamReader {
 public:
  // Bytes of the body as they arrive, at `now`; what they complete goes into `r`.
  void feed(std::string_view bytes, BenchClock::time_point now, StreamResult& r);

 private:
  void on_event(std::string_view data, BenchClock::time_point now, StreamResult& r);
  std::string pending_;  // bytes not yet ended by a newline
};

}  // namespace halo::tools
