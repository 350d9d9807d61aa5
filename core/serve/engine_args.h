#pragma once
// vLLM's engine and server arguments as halo understands them: one table read
// by the command line (`halo serve --enforce-eager`), a Triton repository's
// model.json and the LMI options (option.trust_remote_code), so every place
// that takes a vLLM argument treats it the same way. Each argument is
//
//   kSetting   halo has it: it sets the halo setting `halo_key`
//   kNoEffect  accepted and without effect in halo (why says why); values
//              outside `fine` (when given) are refused instead
//   kRefused   halo cannot do what it asks; refused naming why, unless the
//              value is one of `fine` (the value that asks for nothing,
//              e.g. --pipeline-parallel-size 1)
//
// docs/serving.md carries the same table for users. The table is constant;
// every function here may be called from any thread.
#include <string>
#include <vector>

namespace halo::serve {

enum class ArgKind { kSetting, kNoEffect, kRefused };

struct VllmArg {
  std::string name;  // vLLM's spelling with underscores (enforce_eager)
  ArgKind kind;
  std::string halo_key;           // kSetting: the halo setting key it sets
  bool flag = false;              // a switch on the command line (takes no value)
  std::vector<std::string> fine;  // values accepted without effect
  std::string why;                // kNoEffect / kRefused: the reason, for logs and errors
};

const std::vector<VllmArg>& vllm_args();

// The entry for a name with dashes or underscores (--enforce-eager,
// enforce_eager), or nullptr.
const VllmArg* find_vllm_arg(const std::string& name);

// The halo setting key `value` of `arg` sets, or "" for an argument without
// effect (logged once at info). Throws halo::Error
// "<source>: <name>=<value>: <why>" when halo refuses it.
std::string vllm_arg_key(const VllmArg& arg, const std::string& value, const std::string& source);

}  // namespace halo::serve
