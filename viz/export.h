// Exports of maps: raw numbers (NPY, CSV with token labels) and PNG files (no GL here; GL renders of a
// map are render_map() in heatmap_view.h). Errors are difflens::Error naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "viz/map_view.h"

namespace difflens::viz {

// NPY v1.0, little-endian float32, C order, shape (rows, cols).
void write_npy(const std::filesystem::path& path, const float* data, int64_t rows, int64_t cols);
std::vector<float> read_npy(const std::filesystem::path& path, int64_t* rows, int64_t* cols);

// CSV: a header row of key labels, then one row per query (its label first). Labels are quoted as
// needed; values use %.9g so they re-read to the same float.
void write_csv(const std::filesystem::path& path, const float* data, int64_t rows, int64_t cols,
               const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels);

// RGB8 rows top first → PNG.
void write_png(const std::filesystem::path& path, const std::vector<uint8_t>& rgb, int width, int height);
// RGB8 rows top first → the bytes of a PNG file (for an SVG's embedded image). Throws Error when it fails.
std::string png_bytes(const std::vector<uint8_t>& rgb, int width, int height);
// RFC 4648 base64 of `bytes` (data: URLs).
std::string base64(const std::string& bytes);
// RGBA8 rows top first (straight alpha) → PNG with transparency.
void write_png_rgba(const std::filesystem::path& path, const std::vector<uint8_t>& rgba, int width,
                    int height);

}  // namespace difflens::viz
