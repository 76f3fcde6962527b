// safetensors reader (memory-mapped, F32/F16/BF16) and writer (F32), written for DiffLens.
// Format: 8-byte little-endian header length N, N bytes of JSON header, then the raw data buffer.
// Every header field is validated; errors are FormatError naming the file and the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace difflens {

enum class DType { F32, F16, BF16 };
const char* to_string(DType dtype);
size_t dtype_size(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data buffer
  uint64_t end = 0;
  // A safetensors dtype DiffLens does not read as numbers ("U64", "I32", "F64", "BOOL", ...; empty for F32,
  // F16 and BF16): the entry is checked like any other and its data never read (read_f32 refuses it by
  // name). diff-mlx's training files keep the optimizer's step as U64 beside the weights.
  std::string other_dtype;
  int64_t numel() const;
  std::string dtype_name() const;  // "F32", "BF16", ... or other_dtype
};

std::string shape_string(const std::vector<int64_t>& shape);

// Read-only, memory-mapped view of one .safetensors file. Not copyable; movable.
class SafetensorsFile {
 public:
  // Throws FormatError when the file is missing, truncated or has an invalid header.
  explicit SafetensorsFile(const std::filesystem::path& path);
  // The same checks over bytes already in memory (a network reply), borrowed: they must outlive the view.
  // `name` stands for the path in messages.
  static SafetensorsFile view(const void* data, size_t size, const std::filesystem::path& name);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorInfo* find(const std::string& name) const;  // nullptr when absent
  const TensorInfo& at(const std::string& name) const;    // FormatError when absent
  // Pointer to the tensor's bytes inside the mapping (valid while this object lives).
  const uint8_t* data(const TensorInfo& info) const;
  // Converts any supported dtype to F32 (into `out`: info.numel() floats).
  std::vector<float> read_f32(const TensorInfo& info) const;
  void read_f32(const TensorInfo& info, float* out) const;
  std::vector<float> read_f32(const std::string& name) const { return read_f32(at(name)); }

 private:
  SafetensorsFile() = default;
  void parse();  // reads and checks the header of map_[0, map_size_)
  std::filesystem::path path_;
  const uint8_t* map_ = nullptr;
  bool mapped_ = false;  // map_ is our mmap (else borrowed bytes)
  size_t map_size_ = 0;
  const uint8_t* data_begin_ = nullptr;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: borrowed F32 data with its shape.
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
  DType dtype = DType::F32;  // stored as; F16/BF16 round to nearest even
};

// Writes tensors in the given order. Throws FormatError on duplicate names or shape/data mismatch
// and Error when the file cannot be written.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The same file as bytes in memory (what a server sends).
std::string safetensors_bytes(const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

float half_to_float(uint16_t h);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_half(float f);      // round to nearest even; used by tests and converters
uint16_t float_to_bfloat16(float f);  // round to nearest even (NaN stays NaN)

}  // namespace difflens
