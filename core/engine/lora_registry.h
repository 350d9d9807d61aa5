#pragma once
// The LoRA adapters a served model knows by name: those given at start
// (--lora-modules name=path) and those loaded at run time
// (POST /v1/load_lora_adapter). A request names one; the registry hands out
// a LoraRequest that holds the adapter's host copy, so unloading an adapter
// never breaks a request already running on it (that request finishes on
// the copy it holds; new requests no longer find the name).
//
// Host copies: at most max_cpu_loras adapters are kept in host memory, least
// recently used dropped first (requests in flight keep theirs alive); a
// dropped adapter is read again from its directory when a request names it.
//
// Thread-safe: every member may be called from any thread.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/lora.h"
#include "model/hf_config.h"

namespace halo::engine {

class LoraRegistry {
 public:
  // max_cpu_loras 0 = keep every adapter in host memory.
  LoraRegistry(model::ModelConfig base, int max_lora_rank, int max_cpu_loras);

  // Reads and checks the adapter at `source` (a directory or a Hugging Face
  // id) and registers it as `name`. Throws halo::Error naming the problem:
  // the name taken, a missing file, a rank above --max-lora-rank, a shape or
  // module the base model does not have.
  void load(const std::string& name, const std::string& source);
  // Forgets `name`; false when unknown.
  bool unload(const std::string& name);
  // The adapter registered as `name`, nullptr when none. Reads it again from
  // its source when its host copy was dropped (throws halo::Error if that
  // fails: the files changed or went away).
  std::shared_ptr<const LoraRequest> find(const std::string& name);
  // The adapter whose id is `id` (TensorRT-LLM's lora_task_id), nullptr when none.
  std::shared_ptr<const LoraRequest> find_id(int64_t id);

  struct Info {
    std::string name, source;
    int64_t id = 0;
    int max_rank = 0;
  };
  std::vector<Info> list() const;  // in load order
  bool has(const std::string& name) const;
  int max_lora_rank() const { return max_lora_rank_; }

 private:
  struct Entry {
    Info info;
    std::string cache_name;
    std::shared_ptr<const LoraRequest> loaded;  // null: dropped from host memory
    uint64_t last_used = 0;
  };
  std::shared_ptr<const model::LoraAdapter> read(const std::string& name,
                                                 const std::string& source) const;
  static std::shared_ptr<const LoraRequest> make_request(
      const Entry& e, std::shared_ptr<const model::LoraAdapter> adapter);
  void check_free(const std::string& name) const;  // under mu_
  // The entry's request, read again when dropped; under `lock` (released while reading).
  std::shared_ptr<const LoraRequest> use(std::unique_lock<std::mutex>& lock,
                                         const std::string& name);
  void drop_beyond_limit(const std::string& keep = {});  // under mu_

  const model::ModelConfig base_;
  const int max_lora_rank_;
  const int max_cpu_loras_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, int> loads_;  // per name: how many times loaded (cache_name)
  int64_t next_id_ = 1;
  uint64_t clock_ = 0;
};

}  // namespace halo::engine
