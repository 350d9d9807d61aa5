#include "ready_queue.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

namespace halo::python {

ReadyQueue::ReadyQueue() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

ReadyQueue::~ReadyQueue() { close(fd_); }

void ReadyQueue::mark(const std::string& id) {
  bool first = false;
  {
    std::lock_guard lk(mu_);
    if (ids_.insert(id).second) order_.push_back(id);
    first = order_.size() == 1;
  }
  if (first) {
    // One count per empty -> non-empty change: the reader resets it in take().
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof one);
    cv_.notify_all();
  }
}

std::vector<std::string> ReadyQueue::take() {
  std::vector<std::string> out;
  std::lock_guard lk(mu_);
  uint64_t count = 0;
  [[maybe_unused]] ssize_t n = read(fd_, &count, sizeof count);  // EAGAIN when already reset
  out.swap(order_);
  ids_.clear();
  return out;
}

bool ReadyQueue::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return !order_.empty(); });
}

}  // namespace halo::python
