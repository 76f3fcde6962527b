// NPY/CSV/PNG writers.
#include "viz/export.h"

#include <stb_image_write.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/formats/atomic_file.h"
#include "core/formats/error.h"

namespace difflens::viz {
namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

void write_npy(const std::filesystem::path& path, const float* data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';  // pad so the data starts 64-byte aligned
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>(len >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(rows * cols) * sizeof(float));
  write_file_atomically(path, out);
}

std::vector<float> read_npy(const std::filesystem::path& path, int64_t* rows, int64_t* cols) {
  std::ifstream in(path, std::ios::binary);
  char magic[10];
  if (!in.read(magic, 10) || std::memcmp(magic, "\x93NUMPY\x01\x00", 8) != 0)
    throw Error(path.string() + ": not an NPY v1.0 file");
  const uint16_t len =
      static_cast<uint16_t>(static_cast<uint8_t>(magic[8]) | (static_cast<uint8_t>(magic[9]) << 8));
  std::string header(len, '\0');
  in.read(header.data(), len);
  if (header.find("'<f4'") == std::string::npos || header.find("'fortran_order': False") == std::string::npos)
    throw Error(path.string() + ": only little-endian float32 C-order arrays are read");
  long long r = 0, c = 0;
  const size_t s = header.find("'shape': (");
  if (s == std::string::npos || std::sscanf(header.c_str() + s + 10, "%lld, %lld", &r, &c) != 2 || r < 0 ||
      c < 0)
    throw Error(path.string() + ": expected a 2-D shape");
  std::vector<float> v(static_cast<size_t>(r * c));
  if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float))))
    throw Error(path.string() + ": truncated data");
  *rows = r;
  *cols = c;
  return v;
}

void write_csv(const std::filesystem::path& path, const float* data, int64_t rows, int64_t cols,
               const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels) {
  std::ostringstream out;
  out << "query\\key";
  for (int64_t j = 0; j < cols; ++j)
    out << ',' << csv_field(j < static_cast<int64_t>(col_labels.size()) ? col_labels[j] : std::to_string(j));
  out << '\n';
  char buf[32];
  for (int64_t i = 0; i < rows; ++i) {
    out << csv_field(i < static_cast<int64_t>(row_labels.size()) ? row_labels[i] : std::to_string(i));
    for (int64_t j = 0; j < cols; ++j) {
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(data[i * cols + j]));
      out << ',' << buf;
    }
    out << '\n';
  }
  write_file_atomically(path, out.str());
}

namespace {

std::string encode_png(const std::vector<uint8_t>& pixels, int width, int height, int channels,
                       const std::string& what) {
  std::string png;
  auto append = [](void* to, void* data, int size) {
    static_cast<std::string*>(to)->append(static_cast<const char*>(data), static_cast<size_t>(size));
  };
  if (width < 1 || height < 1 || pixels.size() < static_cast<size_t>(width) * height * channels ||
      !stbi_write_png_to_func(append, &png, width, height, channels, pixels.data(), width * channels))
    throw Error(what + ": cannot encode the PNG");
  return png;
}

void write_png_channels(const std::filesystem::path& path, const std::vector<uint8_t>& pixels, int width,
                        int height, int channels) {
  // Encoded in memory, then written whole (an earlier file survives a failed write).
  write_file_atomically(path, encode_png(pixels, width, height, channels, path.string()));
}

}  // namespace

std::string png_bytes(const std::vector<uint8_t>& rgb, int width, int height) {
  return encode_png(rgb, width, height, 3, "image");
}

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], k[v & 63]};
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    out += {k[v >> 18], k[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8);
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
  }
  return out;
}

void write_png(const std::filesystem::path& path, const std::vector<uint8_t>& rgb, int width, int height) {
  write_png_channels(path, rgb, width, height, 3);
}

void write_png_rgba(const std::filesystem::path& path, const std::vector<uint8_t>& rgba, int width,
                    int height) {
  write_png_channels(path, rgba, width, height, 4);
}

}  // namespace difflens::viz
