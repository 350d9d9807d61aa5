#include "engine/lora_registry.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/error.h"
#include "model/hf_hub.h"

namespace halo::engine {

LoraRegistry::LoraRegistry(model::ModelConfig base, int max_lora_rank, int max_cpu_loras)
    : base_(std::move(base)), max_lora_rank_(max_lora_rank), max_cpu_loras_(max_cpu_loras) {}

std::shared_ptr<const model::LoraAdapter> LoraRegistry::read(const std::string& name,
                                                             const std::string& source) const {
  try {
    return std::make_shared<const model::LoraAdapter>(
        model::LoraAdapter::load(model::resolve_adapter(source), base_, max_lora_rank_));
  } catch (const Error& e) {
    throw Error(fmt::format("LoRA adapter '{}': {}", name, e.what()));
  }
}

void LoraRegistry::check_free(const std::string& name) const {
  if (entries_.count(name))
    throw Error(fmt::format("LoRA adapter '{}' is already loaded (unload it first)", name));
}

void LoraRegistry::load(const std::string& name, const std::string& source) {
  if (name.empty()) throw Error("a LoRA adapter needs a name");
  {
    std::lock_guard lock(mu_);
    check_free(name);
  }
  auto adapter = read(name, source);  // outside the lock: requests keep flowing
  std::lock_guard lock(mu_);
  check_free(name);  // another load of the name may have won meanwhile
  const int n = loads_[name]++;
  Entry e;
  e.info = {name, source, next_id_++, adapter->max_rank()};
  e.cache_name = n == 0 ? name : fmt::format("{}@{}", name, n);
  e.loaded = make_request(e, std::move(adapter));
  e.last_used = ++clock_;
  spdlog::info("LoRA adapter '{}' (id {}) loaded from {}: rank {}, {} projections", name, e.info.id,
               source, e.info.max_rank, e.loaded->adapter->weights.size());
  entries_.emplace(name, std::move(e));
  drop_beyond_limit();
}

bool LoraRegistry::unload(const std::string& name) {
  std::lock_guard lock(mu_);
  if (entries_.erase(name) == 0) return false;
  spdlog::info("LoRA adapter '{}' unloaded", name);
  return true;
}

std::shared_ptr<const LoraRequest> LoraRegistry::make_request(
    const Entry& e, std::shared_ptr<const model::LoraAdapter> adapter) {
  auto r = std::make_shared<LoraRequest>();
  r->name = e.info.name;
  r->id = e.info.id;
  r->cache_name = e.cache_name;
  r->adapter = std::move(adapter);
  return r;
}

std::shared_ptr<const LoraRequest> LoraRegistry::use(std::unique_lock<std::mutex>& lock,
                                                     const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return nullptr;
  it->second.last_used = ++clock_;
  if (it->second.loaded) return it->second.loaded;
  // Dropped from host memory: read it again, outside the lock.
  const Info info = it->second.info;
  lock.unlock();
  auto adapter = read(info.name, info.source);
  lock.lock();
  it = entries_.find(name);
  if (it == entries_.end() || it->second.info.id != info.id) return nullptr;  // unloaded meanwhile
  if (!it->second.loaded) {
    it->second.loaded = make_request(it->second, std::move(adapter));
    drop_beyond_limit(name);
  }
  return it->second.loaded;
}

std::shared_ptr<const LoraRequest> LoraRegistry::find(const std::string& name) {
  std::unique_lock lock(mu_);
  return use(lock, name);
}

std::shared_ptr<const LoraRequest> LoraRegistry::find_id(int64_t id) {
  std::unique_lock lock(mu_);
  for (const auto& [name, e] : entries_)
    if (e.info.id == id) return use(lock, std::string(name));
  return nullptr;
}

void LoraRegistry::drop_beyond_limit(const std::string& keep) {
  if (max_cpu_loras_ <= 0) return;
  for (;;) {
    Entry* oldest = nullptr;
    int held = 0;
    for (auto& [name, e] : entries_) {
      if (!e.loaded) continue;
      ++held;
      if (name != keep && (!oldest || e.last_used < oldest->last_used)) oldest = &e;
    }
    if (held <= max_cpu_loras_ || !oldest) return;
    oldest->loaded.reset();  // requests in flight keep their copy
  }
}

bool LoraRegistry::has(const std::string& name) const {
  std::lock_guard lock(mu_);
  return entries_.count(name) > 0;
}

std::vector<LoraRegistry::Info> LoraRegistry::list() const {
  std::lock_guard lock(mu_);
  std::vector<Info> out;
  for (const auto& [name, e] : entries_) out.push_back(e.info);
  std::sort(out.begin(), out.end(), [](const Info& a, const Info& b) { return a.id < b.id; });
  return out;
}

}  // namespace halo::engine
