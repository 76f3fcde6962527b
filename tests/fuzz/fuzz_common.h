// Shared by the fuzz targets (tests/fuzz/README.md): a scratch directory per process, inputs written into
// it as files, and the split of one input into the several files a reader opens together.
// Each target defines LLVMFuzzerTestOneInput: it feeds the bytes to a reader and then uses what was read as
// the app would. A reader may refuse the input only with difflens::Error (a message for the user); any
// other exception escapes the target, and libFuzzer (or tests/fuzz/driver.cpp) reports it as a crash.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

// An invariant of what a reader accepted; a violation is reported like a crash.
#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace difflens::fuzz {

// /tmp/difflens-fuzz-PID: created on first use, removed when the process exits normally.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(base && *base ? base : "/tmp") /
                              ("difflens-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    static struct Cleanup {
      std::filesystem::path p;
      ~Cleanup() {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    } cleanup{d};
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The parts of an input separated by kSeparator (at most max_parts; the last part keeps the rest).
constexpr std::string_view kSeparator = "\n=====8<=====\n";
inline std::vector<std::string_view> split(const uint8_t* data, size_t size, size_t max_parts) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = rest.find(kSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(rest.substr(0, at));
    rest.remove_prefix(at + kSeparator.size());
  }
  parts.push_back(rest);
  return parts;
}

// A fresh, empty directory inside the scratch directory.
inline std::filesystem::path empty_dir(const std::string& name) {
  const std::filesystem::path d = scratch() / name;
  std::error_code ec;
  std::filesystem::remove_all(d, ec);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace difflens::fuzz
