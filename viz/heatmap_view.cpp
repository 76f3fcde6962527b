// Cached map rendering.
#include "viz/heatmap_view.h"

#include "core/formats/error.h"

namespace difflens::viz {

void HeatmapView::update(const MapSource& src, int width, int height, Pooling pooling,
                         const HeatmapStyle& style, const HeatmapRenderer& renderer) {
  const bool same_style = style.range.hi == style_.range.hi &&
                          style.range.diverging == style_.range.diverging && style.scale == style_.scale;
  const MapRegion region = src.region.rows > 0 ? src.region : MapRegion{0, 0, src.rows, src.cols};
  const bool same_region = region.row0 == region_.row0 && region.col0 == region_.col0 &&
                           region.rows == region_.rows && region.cols == region_.cols;
  const bool repool =
      src.version != version_ || width != width_ || height != height_ || pooling != pooling_ || !same_region;
  if (!repool && same_style && drawn_) return;
  if (repool) {
    pooled_ = pool_region(src.data, src.rows, src.cols, region, height, width, pooling, src.causal);
    region_ = region;
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

std::vector<uint8_t> render_map(const HeatmapRenderer& renderer, const MapSource& source, int size,
                                Pooling pooling, const HeatmapStyle& style) {
  if (size < 8 || size > 16384) throw Error("export size must be between 8 and 16384 pixels");
  HeatmapView view;
  view.update(source, size, size, pooling, style, renderer);
  return view.target().read_rgb();
}

}  // namespace difflens::viz
