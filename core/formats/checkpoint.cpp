// Single-file and sharded safetensors checkpoints.
#include "core/formats/checkpoint.h"
#include "core/formats/bounded_read.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/formats/error.h"

namespace difflens {

CheckpointFiles::CheckpointFiles(const std::filesystem::path& dir) {
  const std::filesystem::path single = dir / "model.safetensors";
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  std::map<std::string, std::string> expected_file;  // tensor -> shard named by the index
  if (std::filesystem::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single));
  } else if (std::filesystem::exists(index)) {
    // The index of a 405B-parameter checkpoint is about 100 KB: a far larger one is refused before its
    // parse tree is built (10^7 entries would take gigabytes).
    constexpr uintmax_t kMaxIndexBytes = uintmax_t{64} << 20;
    std::error_code ec;
    const uintmax_t index_bytes = std::filesystem::file_size(index, ec);
    if (!ec && index_bytes > kMaxIndexBytes)
      throw FormatError(index.string() + ": " + human_bytes(index_bytes) +
                        " is not a shard index (those are under 1 MB; this reader takes up to 64 MB)");
    const std::string index_text = read_bounded(index, "shard index", kMaxIndexBytes);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(index_text);
    } catch (const nlohmann::json::exception& e) {
      throw FormatError(index.string() + ": not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw FormatError(index.string() + ": no \"weight_map\" object");
    std::set<std::string> shard_names;
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string())
        throw FormatError(index.string() + ": weight_map[\"" + tensor + "\"] is not a file name");
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        throw FormatError(index.string() + ": shard name '" + f +
                          "' must be a plain file name in the directory");
      expected_file[tensor] = f;
      shard_names.insert(f);
    }
    if (shard_names.empty()) throw FormatError(index.string() + ": the weight_map is empty");
    for (const std::string& f : shard_names) {
      if (!std::filesystem::exists(dir / f))
        throw FormatError(index.string() + ": shard " + f + " is missing from " + dir.string());
      files_.push_back(std::make_unique<SafetensorsFile>(dir / f));
    }
  } else {
    std::string hint;
    for (const char* bin : {"pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt"})
      if (std::filesystem::exists(dir / bin))
        hint =
            std::string(" (found ") + bin + ": PyTorch pickles are not read; save the model as safetensors)";
    throw FormatError(dir.string() + ": no model.safetensors or model.safetensors.index.json" + hint);
  }
  for (const auto& f : files_)
    for (const TensorInfo& t : f->tensors()) {
      if (entries_.count(t.name))
        throw FormatError(f->path().string() + ": tensor '" + t.name + "' is also in " +
                          entries_[t.name].file->path().filename().string());
      if (!expected_file.empty()) {
        auto it = expected_file.find(t.name);
        if (it == expected_file.end())
          throw FormatError(f->path().string() + ": tensor '" + t.name + "' is not listed in the index");
        if (it->second != f->path().filename().string())
          throw FormatError(f->path().string() + ": tensor '" + t.name + "' should be in " + it->second +
                            " according to the index");
      }
      entries_[t.name] = {f.get(), &t};
    }
  for (const auto& [tensor, file] : expected_file)
    if (!entries_.count(tensor))
      throw FormatError(index.string() + ": tensor '" + tensor + "' is listed for " + file +
                        " but not in it");
}

CheckpointFiles::CheckpointFiles(const std::filesystem::path& file,
                                 const std::function<std::string(const std::string&)>& rename) {
  files_.push_back(std::make_unique<SafetensorsFile>(file));
  for (const TensorInfo& t : files_[0]->tensors()) {
    const std::string name = rename(t.name);
    if (name.empty()) continue;
    if (auto it = entries_.find(name); it != entries_.end())
      throw FormatError(file.string() + ": tensors '" + it->second.info->name + "' and '" + t.name +
                        "' both stand for '" + name + "'");
    entries_[name] = {files_[0].get(), &t};
  }
  if (entries_.empty()) throw FormatError(file.string() + ": no model tensors in it");
}

const CheckpointFiles::Entry* CheckpointFiles::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<std::string> CheckpointFiles::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

std::string CheckpointFiles::dtype_summary() const {
  std::map<std::string, uint64_t> by;
  for (const auto& [name, e] : entries_) by[e.info->dtype_name()] += e.info->end - e.info->begin;
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [d, b] : by) order.push_back({b, d});
  std::sort(order.rbegin(), order.rend());
  std::string s;
  for (const auto& [b, d] : order) s += (s.empty() ? "" : "+") + d;
  return s.empty() ? "none" : s;
}

uint64_t CheckpointFiles::bytes() const {
  uint64_t b = 0;
  for (const auto& [name, e] : entries_) b += e.info->end - e.info->begin;
  return b;
}

std::string CheckpointFiles::describe_source(const std::string& name) const {
  const Entry* e = find(name);
  return e ? e->file->path().string() : "(no file)";
}

uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

uint64_t process_memory_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == field) {
      uint64_t kb = 0;
      in >> kb;
      return kb;
    }
    std::getline(in, key);
  }
  return 0;
}

std::string human_bytes(uint64_t bytes) {
  char b[32];
  const double v = static_cast<double>(bytes);
  if (v >= 1e12)
    std::snprintf(b, sizeof b, "%.1f TB", v / 1e12);
  else if (v >= 1e9)
    std::snprintf(b, sizeof b, "%.1f GB", v / 1e9);
  else if (v >= 1e6)
    std::snprintf(b, sizeof b, "%.0f MB", v / 1e6);
  else
    std::snprintf(b, sizeof b, "%.0f KB", v / 1e3);
  return b;
}

}  // namespace difflens
