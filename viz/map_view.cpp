// Pooling and value scaling of attention maps.
#include "viz/map_view.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace difflens::viz {

PooledMap pool_map(const float* map, int64_t R, int64_t C, int64_t max_rows, int64_t max_cols,
                   Pooling pooling, bool causal) {
  return pool_region(map, R, C, {0, 0, R, C}, max_rows, max_cols, pooling, causal);
}

PooledMap pool_region(const float* map, int64_t src_rows, int64_t src_cols, const MapRegion& region,
                      int64_t max_rows, int64_t max_cols, Pooling pooling, bool causal) {
  const int64_t R = region.rows, C = region.cols;
  if (region.row0 < 0 || region.col0 < 0 || R <= 0 || C <= 0 || region.row0 + R > src_rows ||
      region.col0 + C > src_cols)
    return PooledMap{1, 1, {std::numeric_limits<float>::quiet_NaN()}};
  PooledMap out;
  out.rows = std::max<int64_t>(1, std::min(R, max_rows));
  out.cols = std::max<int64_t>(1, std::min(C, max_cols));
  out.values.assign(static_cast<size_t>(out.rows * out.cols), std::numeric_limits<float>::quiet_NaN());
  for (int64_t r = 0; r < out.rows; ++r) {
    const int64_t r0 = r * R / out.rows, r1 = (r + 1) * R / out.rows;
    for (int64_t c = 0; c < out.cols; ++c) {
      const int64_t c0 = c * C / out.cols, c1 = (c + 1) * C / out.cols;
      double sum = 0;
      int64_t n = 0;
      float best = 0;
      for (int64_t i = r0; i < r1; ++i) {
        const int64_t qi = region.row0 + i;                                     // absolute query index
        const int64_t last = causal ? std::min(c1, qi + 1 - region.col0) : c1;  // keys ≤ query
        for (int64_t j = c0; j < last; ++j) {
          const float v = map[qi * src_cols + region.col0 + j];
          if (n == 0 || std::fabs(v) > std::fabs(best)) best = v;
          sum += v;
          ++n;
        }
      }
      if (n > 0)
        out.values[static_cast<size_t>(r * out.cols + c)] =
            pooling == Pooling::Max ? best : static_cast<float>(sum / n);
    }
  }
  return out;
}

ValueRange value_range(const std::vector<const float*>& maps, int64_t rows, int64_t cols, double percentile,
                       bool diverging, bool causal) {
  return value_range(maps, rows, cols, MapRegion{0, 0, rows, cols}, percentile, diverging, causal);
}

ValueRange value_range(const std::vector<const float*>& maps, int64_t rows, int64_t cols,
                       const MapRegion& region, double percentile, bool diverging, bool causal) {
  std::vector<float> mags;
  const int64_t r0 = std::clamp<int64_t>(region.row0, 0, rows),
                r1 = std::clamp<int64_t>(region.row0 + region.rows, r0, rows);
  const int64_t c0 = std::clamp<int64_t>(region.col0, 0, cols),
                c1 = std::clamp<int64_t>(region.col0 + region.cols, c0, cols);
  for (const float* m : maps)
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = c0; j < (causal ? std::min(c1, i + 1) : c1); ++j) {
        const float v = std::fabs(m[i * cols + j]);
        if (std::isfinite(v)) mags.push_back(v);
      }
  ValueRange r;
  r.diverging = diverging;
  r.percentile = std::clamp(percentile, 0.0, 100.0);
  if (mags.empty()) return r;
  r.max_abs = *std::max_element(mags.begin(), mags.end());
  // Nearest-rank percentile: the smallest value with at least p·n values at or below it.
  const double p = std::clamp(percentile, 0.0, 100.0) / 100.0;
  const auto rank = static_cast<int64_t>(std::ceil(p * static_cast<double>(mags.size())));
  const size_t k =
      static_cast<size_t>(std::clamp<int64_t>(rank - 1, 0, static_cast<int64_t>(mags.size()) - 1));
  std::nth_element(mags.begin(), mags.begin() + static_cast<std::ptrdiff_t>(k), mags.end());
  r.hi = mags[k] > 0 ? mags[k] : 1.0;
  return r;
}

double colormap_coordinate(double v, const ValueRange& range, ValueScale scale) {
  if (std::isnan(v)) return v;
  const double x = std::min(std::fabs(v) / range.hi, 1.0);  // magnitude in [0, 1]
  double f = x;
  if (scale == ValueScale::Sqrt) f = std::sqrt(x);
  if (scale == ValueScale::Log) f = x <= 0 ? 0 : std::max(0.0, (std::log10(x) + kLogDecades) / kLogDecades);
  if (!range.diverging) return v < 0 ? 0.0 : f;
  return 0.5 + (v < 0 ? -0.5 : 0.5) * f;
}

}  // namespace difflens::viz
