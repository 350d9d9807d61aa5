#pragma once
// The responses the Responses API keeps (store: true, OpenAI's default), for
// previous_response_id and GET/DELETE /v1/responses/{id}: each is its
// response object and the conversation it ended, as chat messages (the
// input turns before it and its own answer; instructions are not carried
// over, as in OpenAI's API).
//
// In memory and bounded: past `max_entries` responses or `max_bytes` of
// their JSON text, the least recently stored or read go first. A server
// restart forgets them all.
//
// Threads: every method may be called from any thread (one mutex). Entries
// are immutable once stored; get() hands out shared ownership.
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "serve/api_common.h"

namespace halo::serve {

class ResponseStore {
 public:
  struct Entry {
    ojson response;      // the response object as GET returns it
    ojson conversation;  // chat messages: the turns so far, this answer last
  };

  explicit ResponseStore(size_t max_entries = 1000, size_t max_bytes = size_t(64) << 20);
  ResponseStore(const ResponseStore&) = delete;
  ResponseStore& operator=(const ResponseStore&) = delete;

  // Keeps `e` under `id` (replacing one stored before), dropping the oldest past the bounds.
  void put(const std::string& id, Entry e);
  // The entry, or null when it was never stored, was deleted or was dropped.
  std::shared_ptr<const Entry> get(const std::string& id);
  // Whether there was one to delete.
  bool erase(const std::string& id);
  size_t size() const;

 private:
  struct Slot {
    std::string id;
    std::shared_ptr<const Entry> entry;
    size_t bytes = 0;
  };
  void drop(std::list<Slot>::iterator it);  // with mu_ held

  const size_t max_entries_, max_bytes_;
  mutable std::mutex mu_;
  std::list<Slot> order_;  // most recent first
  std::unordered_map<std::string, std::list<Slot>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace halo::serve
