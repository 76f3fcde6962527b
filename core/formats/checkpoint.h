// The weight files of a checkpoint directory: one model.safetensors, or Hugging Face shards listed by
// model.safetensors.index.json. Memory-mapped, read tensor by tensor. No LibTorch here.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/formats/safetensors.h"

namespace difflens {

class CheckpointFiles {
 public:
  // Opens the weights of `dir`. Throws FormatError naming the file when the index is broken, a shard is
  // missing, a tensor is listed twice or lives elsewhere than its index says; a directory without
  // safetensors weights gets a message saying so (PyTorch .bin files are not read).
  explicit CheckpointFiles(const std::filesystem::path& dir);
  // One weights file whose tensors are named otherwise (diff-mlx): `rename` gives each tensor's DiffLens
  // name, "" to leave it out (optimizer state). Two tensors renamed alike are refused.
  CheckpointFiles(const std::filesystem::path& file,
                  const std::function<std::string(const std::string&)>& rename);

  struct Entry {
    const SafetensorsFile* file;
    const TensorInfo* info;
  };
  const Entry* find(const std::string& name) const;  // nullptr when absent
  std::vector<std::string> names() const;
  size_t shards() const { return files_.size(); }
  // "BF16", "F32", or e.g. "BF16+F32" when mixed (largest share first).
  std::string dtype_summary() const;
  uint64_t bytes() const;                                      // tensor bytes on disk
  std::string describe_source(const std::string& name) const;  // "DIR/model-00002-of-00002.safetensors"

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry> entries_;
};

// Bytes of memory the kernel says are available now (MemAvailable), or 0 when unknown.
uint64_t available_memory_bytes();
// A field of this process's /proc/self/status in KB ("VmRSS:" resident now, "VmHWM:" the peak so far); 0
// when unknown.
uint64_t process_memory_kb(const char* field);

// "1.2 GB", "830 MB", "12 KB".
std::string human_bytes(uint64_t bytes);

}  // namespace difflens
