// Bar charts as figures (no GL): the app's Figure 1, λ per layer and Noise chart exported at any size as
// PNG and SVG from one FigureScene, with axis titles, round ticks, a legend, the answer's band and the
// query's mark. Plain data in, so the command line and the tests draw the same figures.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "viz/colormap.h"
#include "viz/font.h"
#include "viz/map_view.h"
#include "viz/scene.h"

namespace difflens::viz {

// One quantity across the groups: a bar per group in `color`, or, with signed_colors, blue above zero and
// red below (the sign convention of every view, core/FORMATS.md "Colours"). NaN: no bar.
struct ChartSeries {
  std::string name;  // the legend's entry ("": none)
  Rgb8 color;
  std::vector<double> values;
  bool signed_colors = false;
  // An interval per bar (e.g. 95 %), drawn as a whisker from low to high; empty: none (NaN: none for it).
  std::vector<double> low, high;
};

// A panel of grouped bars: the groups along x (a layer, a key token), each series' bar side by side in a
// group.
struct ChartPanel {
  std::string title;  // on the panel's first line, left
  std::string note;   // on the same line, right (e.g. "to the answer 0.116"), in note_color
  Rgb8 note_color{20, 110, 40};
  std::vector<std::string> groups;  // x labels, one per group
  // Groups whose labels are drawn, most important first (labels that would collide are dropped, later ones
  // first); empty: every group, thinned evenly when they do not fit.
  std::vector<int> labelled;
  // A label that stands for several groups (a word of several pieces, the answer's tokens): label_end[g] >
  // g + 1 centres group g's label under groups [g, label_end[g]) (empty, or <= g + 1: under g alone). A label
  // pushed aside by the figure's edge gets a leader to its groups.
  std::vector<int> label_end;
  std::vector<ChartSeries> series;
  std::vector<std::pair<int, int>> bands;  // [begin, end) groups shaded behind the bars (the answer)
  Rgb8 band_color{200, 235, 205};
  int mark = -1;  // a group marked under the axis (the query), in mark_color
  Rgb8 mark_color{240, 130, 0};
  // The bars in a band drawn in band_bar_color and the marked group's in mark_color (Figure 1: the answer
  // green, the query orange, as on screen), not in their series' colours.
  bool color_marked_bars = false;
  Rgb8 band_bar_color{20, 160, 60};
  bool value_labels = false;  // each bar's value (3 decimals) beyond its end
};

// `text` broken at spaces into lines no wider than `width` pixels at `px` (a word wider than a line stays
// whole); a line feed starts a new line.
std::vector<std::string> wrap_words(const FigureFont& font, const std::string& text, float px, int width);

struct ChartFigure {
  std::string title;
  std::string y_title, x_title;
  std::vector<ChartPanel> panels;  // stacked top to bottom
  bool shared_y = true;            // one y range for every panel (else each its own)
  double lo = 0, hi = 0;           // the y range; lo == hi: from the data, 0 included
  int width = 1600, height = 900;
  float font_px = 0;     // label size in pixels; 0: from the height (height / 40, 11 to 40)
  std::string footnote;  // a line under the chart (e.g. where the bundled models disagree with the paper)
};

// Throws Error for no panels, a panel whose series differ from its groups in length, a band or mark outside
// the groups, a size outside 200..8192 or a font size outside 6..200 px, or a figure too small for its text.
FigureScene layout_chart_figure(const ChartFigure& figure, const FigureFont& font = FigureFont::standard());
Image render_chart_figure(const ChartFigure& figure, const FigureFont& font = FigureFont::standard());
std::string chart_figure_svg(const ChartFigure& figure, const FigureFont& font = FigureFont::standard());

// Grids of maps, one block per model (the Model view: layers down, heads across), each map coloured on its
// own range (its style), the blocks side by side with their titles, row and column labels, and under each
// block its colour ramp with what its ends mean.
struct MapGridBlock {
  std::string title;
  std::vector<std::string> row_labels, col_labels;
  std::vector<const float*> maps;    // rows × cols, each tokens × tokens (nullptr: an empty cell)
  std::vector<HeatmapStyle> styles;  // one per map
  int64_t tokens = 0;
  std::string ramp_low, ramp_high;  // the ramp's end labels ("-p99.5", "+p99.5")
  bool diverging = false;
};
struct MapGridFigure {
  std::string title;
  std::vector<MapGridBlock> blocks;
  int cell = 96;      // pixels per map side (16..1024)
  float font_px = 0;  // 0: from the cell size
  std::string footnote;
  Pooling pooling = Pooling::Max;
};
// Throws Error for no blocks, maps that do not match the labels, or sizes out of range.
FigureScene layout_map_grid_figure(const MapGridFigure& figure,
                                   const FigureFont& font = FigureFont::standard());
Image render_map_grid_figure(const MapGridFigure& figure, const FigureFont& font = FigureFont::standard());
// SVG: each map embedded as the PNG's pixels (a data: URL image), the labels and ramps as vector.
std::string map_grid_figure_svg(const MapGridFigure& figure, const FigureFont& font = FigureFont::standard());

}  // namespace difflens::viz
