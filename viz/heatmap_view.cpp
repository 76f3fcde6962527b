// Cached map rendering.
#include "viz/heatmap_view.h"

namespace difflens::viz {

void HeatmapView::update(const MapSource& src, int width, int height, Pooling pooling, const HeatmapStyle& style,
                         const HeatmapRenderer& renderer) {
  const bool same_style = style.range.hi == style_.range.hi && style.range.diverging == style_.range.diverging &&
                          style.scale == style_.scale;
  const bool repool = src.version != version_ || width != width_ || height != height_ || pooling != pooling_;
  if (!repool && same_style && drawn_) return;
  if (repool) {
    pooled_ = pool_map(src.data, src.rows, src.cols, height, width, pooling, src.causal);
    texture_.upload(pooled_);
    version_ = src.version;
    width_ = width;
    height_ = height;
    pooling_ = pooling;
  }
  style_ = style;
  target_.resize(width, height);
  renderer.draw(texture_, style_, target_);
  drawn_ = true;
}

}  // namespace difflens::viz
