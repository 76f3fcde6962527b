// Display logic for one attention map, shared by the GL renderer and the exporters (no GL here):
// reduction to display size by max or mean pooling (never by sampling, which aliases) and mapping of
// values to colormap coordinates with linear/sqrt/log scales and percentile clamping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "viz/colormap.h"

namespace difflens::viz {

enum class Pooling { Max, Mean };
enum class ValueScale { Linear, Sqrt, Log };

// A map reduced to rows × cols cells, row-major. Cell (r, c) covers source rows [⌊r·R/rows⌋, ⌊(r+1)·R/rows⌋)
// and columns likewise: an exact partition, and an exact copy when the map fits (rows = R, cols = C).
// With `causal`, only entries with key ≤ query count; a cell with none holds NaN (drawn as "masked").
// Max pooling keeps the entry of largest magnitude with its sign (A1 − λA2 can be negative).
struct PooledMap {
  int64_t rows = 0, cols = 0;
  std::vector<float> values;
  float at(int64_t r, int64_t c) const { return values[static_cast<size_t>(r * cols + c)]; }
};

PooledMap pool_map(const float* map, int64_t src_rows, int64_t src_cols, int64_t max_rows, int64_t max_cols,
                   Pooling pooling, bool causal);

// The visible part of a map (zoom): source rows [row0, row0 + rows) and columns [col0, col0 + cols).
struct MapRegion {
  int64_t row0 = 0, col0 = 0, rows = 0, cols = 0;
};

// Pools only `region` of a src_rows × src_cols map; causality uses the absolute row/column indices.
PooledMap pool_region(const float* map, int64_t src_rows, int64_t src_cols, const MapRegion& region,
                      int64_t max_rows, int64_t max_cols, Pooling pooling, bool causal);

// The value range a colormap spans. Sequential maps: [0, hi]; diverging maps: [−hi, hi]. A range taken
// at a percentile keeps it and the largest |value| it saw, so a colour bar can mark a clamped end.
struct ValueRange {
  double hi = 1.0;
  bool diverging = false;
  double percentile = 100;  // hi is this percentile of |value|
  double max_abs = 0;       // the largest |value| the range was taken over (0: not known)
  bool fixed = false;       // hi was set by hand (render --vmax), not taken as a percentile
  // Values beyond hi exist and saturate the colour bar's end(s).
  bool clamped() const { return max_abs > hi * (1 + 1e-6); }
};

// hi = the `percentile` (0–100] of |value| over the causal entries of all `maps` (each R×C); 100 = max.
// Returns hi = 1 when every value is 0.
ValueRange value_range(const std::vector<const float*>& maps, int64_t rows, int64_t cols, double percentile,
                       bool diverging, bool causal);
// The same over `region` of the maps only (a zoom: the colours span what it shows).
ValueRange value_range(const std::vector<const float*>& maps, int64_t rows, int64_t cols,
                       const MapRegion& region, double percentile, bool diverging, bool causal);

// Position in [0, 1] along the colormap (diverging: 0.5 is zero). Log scale spans 4 decades below hi.
// NaN stays NaN (masked).
double colormap_coordinate(double value, const ValueRange& range, ValueScale scale);

constexpr double kLogDecades = 4.0;

// How values become colours: range, scale, and the colour of masked (causal-future) cells.
struct HeatmapStyle {
  ValueRange range;
  ValueScale scale = ValueScale::Linear;
  Rgb8 masked{236, 236, 236};  // the causal future
};

// A map as the caller holds it, for display or export.
struct MapSource {
  const float* data = nullptr;  // [rows, cols] row-major, owned by the caller's Trace
  int64_t rows = 0, cols = 0;
  uint64_t version = 0;  // changes whenever `data` holds a different map
  bool causal = true;
  MapRegion region;  // the visible part (zoom); rows == 0 means the whole map
};

}  // namespace difflens::viz
