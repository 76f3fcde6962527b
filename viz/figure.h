// Figures composed on the CPU (no GL, so they render headless and in tests): a head's maps with token labels
// on both axes, titles and colour legends with numbered ticks; tables as heatmaps; overlaid histograms. Each
// is laid out once as a FigureScene (scene.h) that becomes a PNG raster or an SVG; text is drawn with
// FigureFont (font.h). Used for "export head view", the needle and outlier reports and paper figures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "viz/colormap.h"
#include "viz/font.h"
#include "viz/map_view.h"
#include "viz/scene.h"

namespace difflens::viz {

struct FigurePanel {
  std::string title;            // e.g. "A1 (softmax 1)"
  const float* data = nullptr;  // T × T, row-major
  HeatmapStyle style;           // range, scale, masked colour
};

// A head view: panels side by side sharing their token axes (queries down the left, keys under each
// panel), a title line, and a legend with ticks under each panel.
struct HeadFigure {
  std::string title;
  std::vector<FigurePanel> panels;
  std::vector<std::string> tokens;  // T pieces as the tokenizer spells them; drawn as display_tokens()
  MapRegion region;                 // rows == 0: the whole map
  int panel_size = 512;             // pixels per map side
  Pooling pooling = Pooling::Max;
  // Marks, in map units (tokens, or a pooled map's cells): the answer's keys [answer_begin, answer_end)
  // (a green band under each map, their labels green) and the query's row (an orange mark left of each
  // map, its label orange); -1: none.
  int64_t answer_begin = -1, answer_end = -1, query = -1;
  float label_px = 0;          // token labels and ticks, pixels (0: from the cell size, 9 to 28)
  bool axis_titles = true;     // "queries" down the left, "keys" under each map
  std::string note;            // a line under the legends (e.g. the colour scale's kind and ends)
  bool position_ticks = true;  // token positions (0, 50, 100, ...) above each map and right of the last
  double width_in = 0;         // > 0: printed this wide (size_for_print); the SVG says so in inches
};

// A map's side and a label's line height, pixels: what layout_head_figure draws.
constexpr int kMinPanelPx = 64, kMaxPanelPx = 8192;
constexpr float kMinLabelPx = 6.0f, kMaxLabelPx = 200.0f;

// Sizes `figure` for print: `width_in` inches wide at `dpi` pixels an inch (the PNG's pixels; the SVG says
// inches), every text at least `font_pt` points there (labels, ticks, titles, legends, the note). Sets
// panel_size, label_px and width_in. Throws Error when that text cannot fit (maps under 64 pixels), when a
// map would be over 8192 pixels, or when the font's line is outside 6-200 pixels at that dpi.
void size_for_print(HeadFigure& figure, const FigureFont& font, double width_in, double font_pt,
                    int dpi = 300);

// Throws Error for an empty figure, a panel without data, no tokens, a region outside the map or a panel
// size outside 64..8192.
// What a figure's title adds for a zoomed region: "" for the whole map, else the rows (queries) and keys
// actually drawn, in tokens, e.g. "(rows [24, 40), keys [0, 16))" (token_range's convention). A pooled map's
// region is in cells: `cell_starts` (P + 1 token positions, cell c = [starts[c], starts[c+1])) turns it
// into tokens.
std::string region_caption(const MapRegion& region, int64_t map_size,
                           const std::vector<int64_t>& cell_starts = {});

FigureScene layout_head_figure(const HeadFigure& figure, const FigureFont& font);

// How an SVG holds a map's cells: Raster, one embedded PNG per map (<image class="map-cells">, one pixel per
// displayed cell, drawn pixelated: a 251-token four-map figure is ~0.2 MB and opens at once), inside vector
// axes, labels and legends; Vector, one <rect class="cell"> per displayed cell (editable, but 250,000 rects
// for four 251-token maps: 22 MB, seconds to draw).
enum class SvgCells { Raster, Vector };

// The figure as SVG: labels and tick numbers as <text>, legends as gradients, the cells as `cells` says,
// pooled like the PNG to at most `max_cells` per side. Text is escaped for XML; invalid UTF-8 becomes U+FFFD.
std::string head_figure_svg(const HeadFigure& figure, const FigureFont& font, int max_cells = 256,
                            SvgCells cells = SvgCells::Raster);

// Where render_head_figure put things (pixels): each map's top-left corner; maps are panel_size square.
struct HeadFigureLayout {
  std::vector<std::pair<int, int>> maps;
  int legend_top = 0;
};

// The figure as a PNG-ready raster; errors as layout_head_figure.
Image render_head_figure(const HeadFigure& figure, const FigureFont& font = FigureFont::standard(),
                         HeadFigureLayout* layout = nullptr);

// A table of numbers as a heatmap with the value printed in each cell (e.g. needle accuracy by depth ×
// length): rows top to bottom, columns left to right, sequential colormap over [lo, hi].
struct GridFigure {
  std::string title;
  std::string row_title, col_title;  // axis names, e.g. "depth", "context length"
  std::vector<std::string> row_labels, col_labels;
  std::vector<double> values;  // rows × cols, row-major; NaN cells are drawn empty ("n/a")
  double lo = 0, hi = 1;
  // Values of both signs (DIFF's shares): the sign scale around 0 (blue above, red below) spanning
  // ±max(|lo|, |hi|), as every view colours signed weights; else sequential over [lo, hi].
  bool diverging = false;
  int cell = 72;  // pixels per cell side
  std::string format = "%.2f";
};

// A table cell's colour as layout_grid_figure gives it (the app's lab grids use the same).
Rgb8 grid_cell_colour(double v, double lo, double hi, bool diverging);
// Throws Error when the values do not match the labels or the cell size is outside 16..512.
FigureScene layout_grid_figure(const GridFigure& figure, const FigureFont& font);
Image render_grid_figure(const GridFigure& figure, const FigureFont& font = FigureFont::standard());
// The same figure as SVG: one <rect class="cell"> per value, its number as text, the legend as a gradient.
std::string grid_figure_svg(const GridFigure& figure, const FigureFont& font = FigureFont::standard());

// Histograms of |values| on a log10 axis, several series overlaid as step lines with log-scaled counts
// (the paper's outlier view): bin b of every series covers [10^(x0 + b·w), 10^(x0 + (b+1)·w)).
struct HistogramSeries {
  std::string name;
  Rgb8 color;
  std::vector<double> counts;
};

struct HistogramFigure {
  std::string title;
  std::string x_label = "|value|";
  double x0 = -8, bin_width = 1.0 / 64;  // log10 of the first bin's lower edge; bin width in decades
  std::vector<HistogramSeries> series;
  int width = 1000, height = 520;
  std::string footnote;  // lines under the plot (e.g. what the bundled models' card says, and this prompt)
};

// The x axis spans the decades where some series has counts. Throws Error when no series has any count,
// the series differ in length, or the size is outside 200..8192. The PNG and the SVG come from one scene
// (grid, axes, step lines and legend swatches as rectangles; labels as text).
FigureScene layout_histogram_figure(const HistogramFigure& figure, const FigureFont& font);
Image render_histogram_figure(const HistogramFigure& figure, const FigureFont& font = FigureFont::standard());
std::string histogram_figure_svg(const HistogramFigure& figure,
                                 const FigureFont& font = FigureFont::standard());

}  // namespace difflens::viz
