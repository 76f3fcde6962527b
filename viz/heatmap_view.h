// One on-screen map: keeps its pooled texture and colormapped target, and re-renders only when the data,
// the display size or the style changes. UI thread only (owns GL objects).
#pragma once

#include <cstdint>

#include "viz/heatmap_renderer.h"

namespace difflens::viz {

class HeatmapView {
 public:
  // Makes the target hold `source` at width×height pixels. Maps larger than the target are pooled
  // (max or mean) to at most one cell per pixel, never sampled.
  void update(const MapSource& source, int width, int height, Pooling pooling, const HeatmapStyle& style,
              const HeatmapRenderer& renderer);
  const RenderTarget& target() const { return target_; }
  const PooledMap& pooled() const { return pooled_; }

 private:
  MapTexture texture_;
  RenderTarget target_;
  PooledMap pooled_;
  uint64_t version_ = ~0ull;
  MapRegion region_;
  int width_ = 0, height_ = 0;
  Pooling pooling_ = Pooling::Max;
  HeatmapStyle style_;
  bool drawn_ = false;
};

// Renders `source` into a size×size image (GL; UI thread): pooled when the map is larger than the image,
// each cell an exact block of pixels when it is smaller. Returns RGB8 rows, top first.
std::vector<uint8_t> render_map(const HeatmapRenderer& renderer, const MapSource& source, int size,
                                Pooling pooling, const HeatmapStyle& style);

}  // namespace difflens::viz
