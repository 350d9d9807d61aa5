#pragma once
// The requests of `halo bench serve`, as vLLM's benchmark_serving makes them:
//   random    prompts of random tokens, input and output lengths drawn
//             around --random-input-len/--random-output-len (+/- the range ratio)
//   sharegpt  a ShareGPT JSON file: the first turn of each conversation is the
//             prompt, the reply's length (in tokens) the output length
//   prompts   a text file, one prompt per line (or JSON lines {"prompt": ...,
//             "output_len": N}), each asking for --output-len tokens
// Lengths are counted with the model's tokenizer; prompt lengths include the
// special tokens the tokenizer adds, as the server counts them.
#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace halo::tools {

struct BenchPrompt {
  std::string text;
  int prompt_len = 0;
  int output_len = 0;
};

struct DatasetOptions {
  std::string name = "random";  // random, sharegpt, prompts
  std::string path;             // the file of sharegpt and prompts
  int num_prompts = 1000;
  int random_input_len = 1024;
  int random_output_len = 128;
  double random_range_ratio = 0.0;
  int output_len = -1;  // sharegpt: instead of the reply's length; prompts: default 128
  uint64_t seed = 0;
};

// Throws halo::Error naming the file or option at fault.
std::vector<BenchPrompt> make_bench_prompts(const DatasetOptions& o, const text::Tokenizer& tok);

}  // namespace halo::tools
