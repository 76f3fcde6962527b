// The maps of one head of a Trace (DIFF: A1, A2, A1 − λA2; baseline: A) with their titles, and the head
// figure built from them with the GUI's styling rules — shared by the GUI's export and `difflens render`.
#pragma once

#include <string>
#include <vector>

#include "core/trace.h"
#include "viz/figure.h"

namespace difflens::app {

struct HeadMap {
  std::string title;        // "A1 (softmax 1)", "A1 - 0.549 A2", ...
  std::string export_name;  // A1, A2, A
  const float* data = nullptr;
  int64_t T = 0;
  bool diverging = false;
};

// Empty when the layer or head is out of range or its maps were not kept.
std::vector<HeadMap> head_maps(const Trace& trace, int layer, int head);

struct FigureOptions {
  int size = 1024;                               // pixels per map side
  viz::ValueScale scale = viz::ValueScale::Sqrt;
  viz::Pooling pooling = viz::Pooling::Max;
  double clamp_percentile = 99.5;
  bool shared_scale = true;  // sequential maps share one range
  viz::MapRegion region;     // rows == 0: the whole map
  std::string only;          // "": every map of the head; else A1, A2 or A
};

// Throws Error naming what is missing (layer, head, map, kept maps) or wrong (region, size).
viz::HeadFigure head_figure(const Trace& trace, int layer, int head, const FigureOptions& options);

// Model-view filters: "0-3,7" -> the listed indices below n, sorted; empty text -> all of 0..n-1.
// Parts that are not numbers or ranges are ignored.
std::vector<int> parse_index_filter(const std::string& text, int n);

}  // namespace difflens::app
