// Whole-or-nothing file writes (see atomic_file.h).
#include "core/atomic_file.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace difflens {

std::filesystem::path temporary_beside(const std::filesystem::path& path) {
  static std::atomic<unsigned> counter{0};
  return path.string() + ".part-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

void write_file_atomically(const std::filesystem::path& path, const std::string& bytes) {
  const std::filesystem::path tmp = temporary_beside(path);
  auto fail = [&](const std::string& why) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw Error(path.string() + ": cannot write (" + why + "); an earlier file there is left as it was");
  };
  // C stdio, not a stream: its errors carry errno (EFBIG, ENOSPC, EACCES) for the message.
  errno = 0;
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(std::strerror(errno ? errno : EIO));
  const size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int write_errno = errno;
  const bool flushed = std::fflush(f) == 0;
  const int flush_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (written != bytes.size() || !flushed || !closed)
    fail(std::strerror(write_errno ? write_errno : flush_errno ? flush_errno : EIO));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail(ec.message());
}

}  // namespace difflens
