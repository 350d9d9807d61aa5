#include "serve/response_store.h"

namespace halo::serve {

ResponseStore::ResponseStore(size_t max_entries, size_t max_bytes)
    : max_entries_(max_entries), max_bytes_(max_bytes) {}

void ResponseStore::put(const std::string& id, Entry e) {
  const size_t bytes = id.size() + dump(e.response).size() + dump(e.conversation).size();
  auto entry = std::make_shared<const Entry>(std::move(e));
  std::lock_guard lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) drop(it->second);
  if (bytes > max_bytes_ || max_entries_ == 0) return;  // could never fit
  order_.push_front(Slot{id, std::move(entry), bytes});
  index_[id] = order_.begin();
  bytes_ += bytes;
  while (order_.size() > max_entries_ || bytes_ > max_bytes_) drop(std::prev(order_.end()));
}

std::shared_ptr<const ResponseStore::Entry> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second);  // read: recent again
  return it->second->entry;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  drop(it->second);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mu_);
  return order_.size();
}

void ResponseStore::drop(std::list<Slot>::iterator it) {
  bytes_ -= it->bytes;
  index_.erase(it->id);
  order_.erase(it);
}

}  // namespace halo::serve
