// Whole-file reads that stop at a limit (see bounded_read.h).
#include "core/formats/bounded_read.h"

#include <cstdio>
#include <fstream>
#include <vector>

#include "core/formats/error.h"

namespace difflens {

std::string limit_text(uint64_t bytes) {
  char b[32];
  if (bytes >= (uint64_t{1} << 30))
    std::snprintf(b, sizeof b, "%.1f GB",
                  static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30));
  else if (bytes >= (uint64_t{1} << 20))
    std::snprintf(b, sizeof b, "%llu MB", static_cast<unsigned long long>(bytes >> 20));
  else
    std::snprintf(b, sizeof b, "%llu KB", static_cast<unsigned long long>((bytes + 1023) >> 10));
  return b;
}

std::string read_bounded(const std::filesystem::path& path, const std::string& what, uint64_t limit) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)  // a link loop, a link too deep, no permission
    throw Error(path.string() + ": cannot read the " + what + " (" + ec.message() + ")");
  if (fs::is_directory(st)) throw Error(path.string() + ": is a folder; the " + what + " must be a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open the " + what);
  // A regular file's size says at once; anything else (a device, a FIFO) is read up to the limit.
  if (fs::is_regular_file(st)) {
    const uintmax_t size = fs::file_size(path, ec);
    if (!ec && size > limit)
      throw Error(path.string() + ": the " + what + " is over the limit of " + limit_text(limit) + " (" +
                  limit_text(size) + ")");
  }
  std::string out;
  std::vector<char> chunk(1 << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0) break;
    if (out.size() + static_cast<uint64_t>(n) > limit)
      throw Error(
          path.string() + ": the " + what + " is over the limit of " + limit_text(limit) +
          (fs::is_regular_file(st) ? "" : " (it is not a regular file: a device or a pipe that goes on)"));
    out.append(chunk.data(), static_cast<size_t>(n));
  }
  if (in.bad()) throw Error(path.string() + ": reading the " + what + " failed");
  return out;
}

}  // namespace difflens
