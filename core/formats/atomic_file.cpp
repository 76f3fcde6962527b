// Whole-or-nothing file writes (see atomic_file.h).
#include "core/formats/atomic_file.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/formats/error.h"

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
  // The folder is made when missing, as every command's output folder is (the path was checked before
  // the work: docs/commands.md); a file where a folder should be fails below with the system's reason.
  if (path.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
  }
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

namespace {
thread_local int remove_tree_errno = 0;  // nftw's callback has no context: the first failure, this thread's

int remove_entry(const char* entry, const struct stat*, int type, struct FTW*) {
  if (type == FTW_DNR) {  // a folder that cannot be read: its entries cannot be removed (rmdir would say
    remove_tree_errno = EACCES;  // "not empty", hiding the reason)
    return 1;
  }
  if (std::remove(entry) != 0 && errno != ENOENT) {
    remove_tree_errno = errno;
    return 1;  // stops the walk
  }
  return 0;
}
}  // namespace

bool remove_tree(const std::filesystem::path& path, std::error_code& ec) {
  ec.clear();
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return true;
    ec = std::error_code(errno, std::generic_category());
    return false;
  }
  remove_tree_errno = 0;
  // Children before their folder (FTW_DEPTH), links as links (FTW_PHYS), up to 32 descriptors open.
  if (::nftw(path.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS) != 0) {
    ec = std::error_code(remove_tree_errno ? remove_tree_errno : errno, std::generic_category());
    return false;
  }
  return true;
}

}  // namespace difflens
