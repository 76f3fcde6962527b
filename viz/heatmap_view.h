// One on-screen map: keeps its pooled texture and colormapped target, and re-renders only when the data,
// the display size or the style changes. UI thread only (owns GL objects).
#pragma once

#include <cstdint>

#include "viz/heatmap_renderer.h"

namespace difflens::viz {

struct MapSource {
  const float* data = nullptr;  // [rows, cols] row-major, owned by the caller's Trace
  int64_t rows = 0, cols = 0;
  uint64_t version = 0;  // changes whenever `data` holds a different map
  bool causal = true;
  MapRegion region;  // the visible part (zoom); rows == 0 means the whole map
};

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

}  // namespace difflens::viz
