#pragma once
// A whole file as text, read safely whatever the path names: only a regular
// file is read (a FIFO, a device such as /dev/zero, a directory or a socket
// is refused, and opening never blocks), and its size is checked against
// `max_bytes` before anything is read. Errors are halo::Error naming the path:
//   "<path>: cannot be read: <reason>", "<path>: not a regular file",
//   "<path>: N bytes, more than the M taken".
// Used for every file of a model or adapter directory, which admin routes
// (adapter loads) take from clients. Safe from any thread.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/error.h"

namespace halo {

// Larger than any real tokenizer.json (Gemma 3's is 33 MB) or config.
inline constexpr size_t kMaxTextFileBytes = size_t{256} << 20;

inline std::string read_file_text(const std::filesystem::path& p, size_t max_bytes = kMaxTextFileBytes) {
  const std::string name = p.string();
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw Error(name + ": cannot be read: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(name + ": cannot be read: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(name + ": not a regular file");
  const auto size = static_cast<size_t>(st.st_size);
  if (size > max_bytes)
    throw Error(name + ": " + std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) +
                " taken");
  std::string text(size, '\0');
  size_t got = 0;
  while (got < size) {  // the file may shrink while read: keep what there is
    const ssize_t n = ::read(fd, text.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(name + ": cannot be read: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

}  // namespace halo
