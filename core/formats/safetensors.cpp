// safetensors I/O: header validation, mmap, dtype conversion.
#include "core/formats/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/formats/atomic_file.h"
#include "core/formats/error.h"

namespace difflens {
namespace {

using nlohmann::json;

// A header larger than this is not a real model header (HF caps it at 100 MB too).
constexpr uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;
// Nor one with more tensors than this (a 405B-parameter checkpoint has about 1,100).
constexpr size_t kMaxTensors = 1000000;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw FormatError(path.string() + ": " + what);
}

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "F32")
    *out = DType::F32;
  else if (s == "F16")
    *out = DType::F16;
  else if (s == "BF16")
    *out = DType::BF16;
  else
    return false;
  return true;
}

// Bytes per element of the safetensors dtypes DiffLens skips (0: not a safetensors dtype).
size_t other_dtype_size(const std::string& s) {
  static const std::map<std::string, size_t> kSizes = {
      {"F64", 8}, {"I64", 8}, {"U64", 8},  {"I32", 4},     {"U32", 4},     {"I16", 2},  {"U16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"E8M0", 1}, {"F8_E8M0", 1}};
  auto it = kSizes.find(s);
  return it == kSizes.end() ? 0 : it->second;
}

}  // namespace

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  return dtype == DType::F32 ? 4 : 2;
}

std::string TensorInfo::dtype_name() const {
  return other_dtype.empty() ? to_string(dtype) : other_dtype;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float bfloat16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0);  // inf / nan
  if (abs >= 0x477ff000u) return sign | 0x7c00u;                                     // overflow → inf
  if (abs < 0x38800000u) {                                                           // subnormal or 0
    if (abs < 0x33000000u) return sign;
    const uint32_t e = abs >> 23, m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 + (113 - e) - 1
    uint32_t r = m >> (shift), rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) ++r;
  return sign | static_cast<uint16_t>(r);
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open (") + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  map_size_ = static_cast<size_t>(st.st_size);
  if (map_size_ < 8) {
    ::close(fd);
    fail(path, "file is " + std::to_string(map_size_) + " bytes, too short for a safetensors header");
  }
  void* m = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) fail(path, std::string("mmap failed (") + std::strerror(errno) + ")");
  map_ = static_cast<const uint8_t*>(m);
  mapped_ = true;
  try {
    parse();
  } catch (...) {
    ::munmap(const_cast<uint8_t*>(map_), map_size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile SafetensorsFile::view(const void* data, size_t size, const std::filesystem::path& name) {
  SafetensorsFile f;
  f.path_ = name;
  if (size < 8) fail(name, std::to_string(size) + " bytes, too short for a safetensors header");
  f.map_ = static_cast<const uint8_t*>(data);
  f.map_size_ = size;
  f.parse();
  return f;
}

void SafetensorsFile::parse() {
  const std::filesystem::path& path = path_;
  {
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | map_[i];
    if (header_len == 0 || header_len > kMaxHeaderBytes || header_len > map_size_ - 8)
      fail(path, "header length " + std::to_string(header_len) + " is invalid for a file of " +
                     std::to_string(map_size_) + " bytes (truncated or not a safetensors file)");
    const char* hbegin = reinterpret_cast<const char*>(map_ + 8);
    data_begin_ = map_ + 8 + header_len;
    const uint64_t data_size = map_size_ - 8 - header_len;

    // Reject duplicate top-level names (nlohmann would silently keep the last one), and stop reading a
    // header that lists more tensors than any checkpoint has before its parse tree takes gigabytes.
    std::set<std::string> seen;
    std::string duplicate;
    json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && depth == 1) {
        const std::string key = parsed.get<std::string>();
        if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
        if (seen.size() > kMaxTensors)
          fail(path, "the header lists more than " + std::to_string(kMaxTensors) + " tensors (in its first " +
                         std::to_string(header_len) + " bytes); no checkpoint has that many");
      }
      return true;
    };
    json header;
    try {
      header = json::parse(hbegin, hbegin + header_len, cb);
    } catch (const json::exception& e) {
      fail(path, std::string("header is not valid JSON (") + e.what() + ")");
    }
    if (!duplicate.empty()) fail(path, "tensor '" + duplicate + "' appears twice in the header");
    if (!header.is_object()) fail(path, "header must be a JSON object");

    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      const json& v = it.value();
      if (name == "__metadata__") {
        if (!v.is_object()) fail(path, "__metadata__ must be an object of strings");
        for (auto m2 = v.begin(); m2 != v.end(); ++m2) {
          if (!m2.value().is_string()) fail(path, "__metadata__ value '" + m2.key() + "' is not a string");
          metadata_[m2.key()] = m2.value().get<std::string>();
        }
        continue;
      }
      const std::string where = "tensor '" + name + "': ";
      if (!v.is_object()) fail(path, where + "entry is not an object");
      TensorInfo info;
      info.name = name;
      auto dt = v.find("dtype");
      if (dt == v.end() || !dt->is_string()) fail(path, where + "missing dtype");
      size_t element = 0;
      if (parse_dtype(dt->get<std::string>(), &info.dtype)) {
        element = dtype_size(info.dtype);
      } else {
        element = other_dtype_size(dt->get<std::string>());
        if (element == 0)
          fail(path,
               where + "dtype " + dt->get<std::string>() +
                   " is not a safetensors dtype (F32, F16, BF16 are read; F64, I64, U64, I32, U32, I16, "
                   "U16, I8, U8, BOOL and the F8 types are skipped)");
        info.other_dtype = dt->get<std::string>();
      }
      auto sh = v.find("shape");
      if (sh == v.end() || !sh->is_array()) fail(path, where + "missing shape");
      uint64_t numel = 1;
      for (const json& d : *sh) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0)
          fail(path, where + "shape has a negative or non-integer entry");
        const uint64_t dim = d.get<uint64_t>();
        if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / dim) {
          std::string shown = sh->dump();
          if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
          fail(path, where + "shape " + shown + " has more than 2^60 elements (its product overflows)");
        }
        numel *= dim;
        info.shape.push_back(static_cast<int64_t>(dim));
      }
      auto off = v.find("data_offsets");
      if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
          !(*off)[1].is_number_unsigned())
        fail(path, where + "data_offsets must be two non-negative integers");
      info.begin = (*off)[0].get<uint64_t>();
      info.end = (*off)[1].get<uint64_t>();
      if (info.begin > info.end) fail(path, where + "data_offsets are reversed");
      if (info.end > data_size)
        fail(path, where + "data_offsets [" + std::to_string(info.begin) + "," + std::to_string(info.end) +
                       "] run past the end of the data (" + std::to_string(data_size) +
                       " bytes; file truncated?)");
      if (info.end - info.begin != numel * element)
        fail(path, where + "holds " + std::to_string(info.end - info.begin) + " bytes but " +
                       info.dtype_name() + " " + shape_string(info.shape) + " needs " +
                       std::to_string(numel * element));
      index_[name] = tensors_.size();
      tensors_.push_back(std::move(info));
    }

    std::vector<const TensorInfo*> by_offset;
    for (const auto& t : tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
    for (size_t i = 1; i < by_offset.size(); ++i)
      if (by_offset[i]->begin < by_offset[i - 1]->end && by_offset[i]->begin != by_offset[i]->end)
        fail(path, "tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name + "' overlap");
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ && mapped_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept {
  *this = std::move(o);
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    if (map_ && mapped_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
    path_ = std::move(o.path_);
    map_ = o.map_;
    mapped_ = o.mapped_;
    map_size_ = o.map_size_;
    data_begin_ = o.data_begin_;
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
    o.map_ = nullptr;
    o.map_size_ = 0;
  }
  return *this;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::at(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) fail(path_, "tensor '" + name + "' is missing");
  return *t;
}

const uint8_t* SafetensorsFile::data(const TensorInfo& info) const {
  return data_begin_ + info.begin;
}

std::vector<float> SafetensorsFile::read_f32(const TensorInfo& info) const {
  std::vector<float> out(static_cast<size_t>(info.numel()));
  read_f32(info, out.data());
  return out;
}

void SafetensorsFile::read_f32(const TensorInfo& info, float* out) const {
  if (!info.other_dtype.empty())
    fail(path_,
         "tensor '" + info.name + "': dtype " + info.other_dtype + " is not supported (F32, F16, BF16 are)");
  const size_t n = static_cast<size_t>(info.numel());
  const uint8_t* p = data(info);
  switch (info.dtype) {
    case DType::F32:
      if (n > 0) std::memcpy(out, p, n * 4);  // host is little-endian (x86-64, aarch64)
      break;
    case DType::F16:
      for (size_t i = 0; i < n; ++i)
        out[i] = half_to_float(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
      break;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i)
        out[i] = bfloat16_to_float(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
      break;
  }
}

namespace {

// The header and data of a safetensors file, written to `out`; `path` names it in messages.
// Writes the header and data through `write(bytes, n)`; returns the total size. With no `write`, only
// checks and counts.
uint64_t serialize(const std::function<void(const char*, size_t)>& write, const std::filesystem::path& path,
                   const std::vector<TensorToWrite>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      throw FormatError(path.string() + ": invalid tensor name '" + t.name + "'");
    if (!names.insert(t.name).second)
      throw FormatError(path.string() + ": tensor '" + t.name + "' written twice");
    uint64_t numel = 1;
    for (int64_t s : t.shape) {
      if (s < 0) throw FormatError(path.string() + ": tensor '" + t.name + "' has a negative dimension");
      numel *= static_cast<uint64_t>(s);
    }
    if (numel > 0 && !t.data) throw FormatError(path.string() + ": tensor '" + t.name + "' has no data");
    const uint64_t bytes = numel * dtype_size(t.dtype);
    header[t.name] = {
        {"dtype", to_string(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  // Metadata may carry text from elsewhere (token strings): invalid UTF-8 is replaced, not refused.
  std::string h = header.dump(-1, ' ', false, json::error_handler_t::replace);
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');  // keep the data buffer 8-byte aligned
  const uint64_t total = 8 + h.size() + offset;
  if (!write) return total;
  uint8_t len[8];
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  write(reinterpret_cast<const char*>(len), 8);
  write(h.data(), h.size());
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (int64_t s : t.shape) numel *= static_cast<uint64_t>(s);
    if (!numel) continue;
    if (t.dtype == DType::F32) {
      write(reinterpret_cast<const char*>(t.data), numel * 4);
      continue;
    }
    std::vector<uint16_t> half(numel);
    for (uint64_t i = 0; i < numel; ++i)
      half[i] = t.dtype == DType::F16 ? float_to_half(t.data[i]) : float_to_bfloat16(t.data[i]);
    write(reinterpret_cast<const char*>(half.data()), numel * 2);
  }
  return total;
}

}  // namespace

std::string safetensors_bytes(const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  // Sized first, written once: a trace's reply is tens of MB, and every copy of it costs page faults.
  std::string out;
  out.reserve(serialize({}, "(in memory)", tensors, metadata));
  serialize([&](const char* p, size_t n) { out.append(p, n); }, "(in memory)", tensors, metadata);
  return out;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Streamed (checkpoints are large) into a temporary beside it, renamed over it once whole: a failed write
  // leaves an earlier file intact and no temporary behind.
  const std::filesystem::path tmp = temporary_beside(path);
  auto fail = [&](const std::string& why) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw Error(path.string() + ": cannot write (" + why + "); an earlier file there is left as it was");
  };
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot create " + tmp.filename().string());
    try {
      serialize([&](const char* p, size_t n) { out.write(p, static_cast<std::streamsize>(n)); }, path,
                tensors, metadata);
    } catch (...) {
      out.close();
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw;
    }
    out.flush();
    if (!out) fail("the write failed: disk full or over a file-size limit?");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail(ec.message());
}

}  // namespace difflens
