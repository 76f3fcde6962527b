// A whole file read for the app, the commands and the worker.
#include "app/common/files.h"

#include <algorithm>
#include <string>

#include "core/formats/bounded_read.h"
#include "core/formats/checkpoint.h"
#include "core/formats/error.h"

namespace difflens::cli {

std::string read_file(const std::string& path, const char* what) {
  // Read whole, stopping at the text limit (a device or a pipe that goes on included) or at half the memory
  // available, whichever is less.
  const uint64_t have = available_memory_bytes();
  const uint64_t limit = have > 0 ? std::min<uint64_t>(kTextLimit, have / 2) : kTextLimit;
  return read_bounded(path, what, limit);
}

}  // namespace difflens::cli
