// GPU rendering of attention maps: a pooled map becomes an R32F texture, the heatmap shader colormaps
// it into an offscreen target at exactly the size it will be shown or exported. Everything here needs a
// current GL 3.3 context and must run on the thread that owns it (the UI thread).
#pragma once

#include <cstdint>
#include <vector>

#include "viz/colormap.h"
#include "viz/gl.h"
#include "viz/map_view.h"

namespace difflens::viz {

// A pooled map uploaded as a float texture (NaN marks masked cells). Not copyable.
class MapTexture {
 public:
  MapTexture();
  ~MapTexture();
  MapTexture(const MapTexture&) = delete;
  MapTexture& operator=(const MapTexture&) = delete;
  void upload(const PooledMap& map);
  GLuint id() const { return id_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }

 private:
  GLuint id_ = 0;
  int64_t rows_ = 0, cols_ = 0;
};

// An RGBA8 colour texture with its framebuffer. Memory row 0 is the BOTTOM of the image (GL convention):
// show it with ImGui::Image(id, size, ImVec2(0, 1), ImVec2(1, 0)) and read it with read_rgb(), which
// returns rows top first.
class RenderTarget {
 public:
  RenderTarget() = default;
  ~RenderTarget();
  RenderTarget(const RenderTarget&) = delete;
  RenderTarget& operator=(const RenderTarget&) = delete;
  void resize(int width, int height);  // no-op when the size is unchanged
  GLuint texture() const { return texture_; }
  GLuint framebuffer() const { return fbo_; }
  int width() const { return width_; }
  int height() const { return height_; }
  std::vector<uint8_t> read_rgb() const;  // width·height·3 bytes, top row first

 private:
  GLuint fbo_ = 0, texture_ = 0;
  int width_ = 0, height_ = 0;
};

class HeatmapRenderer {
 public:
  HeatmapRenderer();  // compiles the embedded shaders; throws std::runtime_error with the GL log
  ~HeatmapRenderer();
  HeatmapRenderer(const HeatmapRenderer&) = delete;
  HeatmapRenderer& operator=(const HeatmapRenderer&) = delete;
  // Fills `target` with `map` colormapped; query rows run top to bottom, keys left to right.
  void draw(const MapTexture& map, const HeatmapStyle& style, RenderTarget& target) const;

 private:
  GLuint program_ = 0, vao_ = 0;
  GLuint sequential_ = 0, diverging_ = 0;  // 256×1 RGB8 colormap textures
};

}  // namespace difflens::viz
