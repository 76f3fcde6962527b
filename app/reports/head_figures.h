// The maps of one head of a Trace (DIFF: A1, A2, A1 − λA2; baseline: A) with their titles, and the head
// figure built from them with the GUI's styling rules — shared by the GUI's export and `difflens render`.
#pragma once

#include <string>
#include <vector>

#include "core/formats/trace.h"
#include "viz/figure.h"

namespace difflens::app {

struct HeadMap {
  std::string title;        // "A1 (softmax 1)", "A1 - 0.549 A2", ...
  std::string export_name;  // A1, A2, A
  const float* data = nullptr;
  int64_t T = 0;  // map side: tokens, or cells of a pooled map
  bool diverging = false;
  int64_t pooled_from = 0;  // > 0: a pooled map over this many tokens (cell c: tokens [c*n/T, (c+1)*n/T))
};

// Empty when the layer or head is out of range or its maps were not kept. Long-prompt traces give their
// pooled maps: the mean per cell, or (max_pooled) the entry of largest magnitude.
std::vector<HeadMap> head_maps(const Trace& trace, int layer, int head, bool max_pooled = false);

// The first token of each cell of a P-cell pooled axis over n tokens, and n at the end (P + 1 values).
std::vector<int64_t> cell_starts(int64_t n, int64_t P);
// The cell holding token t (cell_starts as given).
int64_t cell_of(const std::vector<int64_t>& starts, int64_t t);
// Axis labels of a P-cell pooled axis: "first-last" token indices (a one-token cell: its index and text).
std::vector<std::string> cell_labels(const std::vector<std::string>& tokens, int64_t P);

struct FigureOptions {
  int size = 1024;  // pixels per map side
  viz::ValueScale scale = viz::ValueScale::Sqrt;
  viz::Pooling pooling = viz::Pooling::Max;
  double clamp_percentile = 99.5;
  bool shared_scale = true;  // sequential maps share one range (compare_figure: both models' too)
  double vmax = 0;           // > 0: every scale ends here (signed maps at ±vmax), values beyond saturate
  viz::MapRegion region;     // rows == 0: the whole map
  std::string only;          // "": every map of the head; else A1, A2 or A
  // Marked on the figure, in tokens (-1: none): the answer's keys [answer_begin, answer_end) and the query.
  int64_t answer_begin = -1, answer_end = -1, query = -1;
  float label_px = 0;  // token labels and ticks (0: from the map size)
};

// Throws Error naming what is missing (layer, head, map, kept maps) or wrong (region, size, marks).
viz::HeadFigure head_figure(const Trace& trace, int layer, int head, const FigureOptions& options);
// Two models' heads on one prompt side by side (DIFF's A1, A2, A1 - lambda A2 beside the baseline's A),
// each map titled with its model; throws Error when the two traces are not of the same tokens.
viz::HeadFigure compare_figure(const Trace& left, int left_head, const Trace& right, int right_head,
                               int layer, const FigureOptions& options);

// Model-view filters: "0-3,7" -> the listed indices below n, sorted; empty text -> all of 0..n-1.
// Parts that are not numbers or ranges are ignored.
std::vector<int> parse_index_filter(const std::string& text, int n);

}  // namespace difflens::app
