// Whole-file reads with a limit checked as the bytes come, not after: a device (/dev/zero, /dev/urandom), a
// FIFO that does not end or a file of many gigabytes is refused by name with the limit instead of being read
// until memory runs out. Plain C++, no LibTorch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace difflens {

// Limits by kind of file (docs/robustness.md lists them).
inline constexpr uint64_t kTextLimit = uint64_t{1} << 30;       // prompts, haystacks, corpora: 1 GB
inline constexpr uint64_t kTokenizerLimit = uint64_t{1} << 29;  // tokenizer files: 512 MB
inline constexpr uint64_t kMetadataLimit = uint64_t{64} << 20;  // config.json, trace.json, cards, refs: 64 MB
inline constexpr uint64_t kScriptLimit = uint64_t{16} << 20;    // play scripts: 16 MB

// The bytes of `path` (links followed). Throws Error "PATH: the WHAT ..." when it is a folder, cannot be
// opened, or holds more than `limit` bytes (the read stops at limit + 1 bytes).
std::string read_bounded(const std::filesystem::path& path, const std::string& what, uint64_t limit);

// "1.0 GB", "512 MB", "64 KB": a limit as a person reads it.
std::string limit_text(uint64_t bytes);

}  // namespace difflens
