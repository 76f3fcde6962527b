// Figures composed on the CPU (no GL, so they render headless and in tests): maps colormapped exactly as
// the GL shader does, token labels on both axes, titles and colour legends with numbered ticks, drawn
// with a TrueType font through stb_truetype. Used for "export head view" and for paper figures.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "viz/colormap.h"
#include "viz/map_view.h"

namespace difflens::viz {

// RGB8 raster, rows top first.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  Image() = default;
  Image(int w, int h, Rgb8 background);
  Rgb8 at(int x, int y) const;
  void fill(int x, int y, int w, int h, Rgb8 c);  // clipped to the image
  void blit(const Image& src, int x, int y);      // clipped to the image
};

// A TrueType font for figures. Text is UTF-8; invalid bytes draw as U+FFFD; characters the font lacks
// come from the fallback font when one is set and has them, else draw as the font's placeholder box.
class FigureFont {
 public:
  // Throws Error naming the file. `fallback` (optional) supplies the glyphs `ttf` lacks (CJK, ...).
  explicit FigureFont(const std::filesystem::path& ttf, const std::filesystem::path& fallback = {});
  // DejaVu Sans from the system (fonts-dejavu-core), with find_fallback_font() behind it when there is
  // one; throws Error saying what to install when DejaVu is absent.
  static const FigureFont& standard();
  int text_width(const std::string& utf8, float px) const;
  // Draws with the top of the line box at y. `vertical`: rotated 90° counter-clockwise (reads bottom to
  // top), with the end of the text at y and its line box spanning [x, x + px).
  void draw(Image& img, int x, int y, const std::string& utf8, float px, Rgb8 color,
            bool vertical = false) const;

 private:
  std::vector<unsigned char> data_, fallback_data_;
  std::vector<unsigned char> info_,
      fallback_info_;  // stbtt_fontinfo, kept opaque here (fallback: empty if none)

 public:
  // Distance from the top of the line box to the baseline at `px` (for SVG text anchors).
  float ascent(float px) const;
  // The em size (CSS/SVG font-size) of text drawn at line height `px`.
  float em_size(float px) const;
};

// The font DiffLens uses (DejaVu Sans), or empty: first under $DIFFLENS_FONT_DIR (recursively) when that
// is set, then in the system's font folders.
std::filesystem::path find_system_font();
// A font with CJK and other scripts DejaVu lacks (fonts-droid-fallback, else Noto CJK or WenQuanYi when
// installed; searched like find_system_font); empty when none is.
std::filesystem::path find_fallback_font();

// The figure as SVG (vector: one <rect class="cell"> per displayed cell, cells pooled like the PNG to at
// most `max_cells` per side; labels and tick numbers as <text>; legends as gradients). Text is escaped
// for XML; invalid UTF-8 becomes U+FFFD.
struct HeadFigure;
std::string head_figure_svg(const HeadFigure& figure, const FigureFont& font, int max_cells = 256);

// Colours `region` of a rows × cols map into a size × size image: pooled (max or mean) when the region is
// larger than the image, each cell an exact block of pixels otherwise — the same pixels the GL path draws.
Image colorize_map(const float* data, int64_t rows, int64_t cols, const MapRegion& region, int size,
                   Pooling pooling, const HeatmapStyle& style, bool causal = true);

// The value at colormap position t in [0, 1] (the inverse of colormap_coordinate, for legend ticks).
double value_at_coordinate(double t, const ValueRange& range, ValueScale scale);

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
};

// A figure as a display list in pixels, shared by the PNG and SVG writers so both put every label, map
// and legend in the same place. Text positions follow FigureFont::draw.
struct FigureScene {
  struct Text {
    int x = 0, y = 0;
    std::string text;
    float px = 12;
    Rgb8 color;
    bool vertical = false;
  };
  struct Rect {
    int x = 0, y = 0, w = 0, h = 0;
    Rgb8 color;
    bool cell = false;  // a data cell (SVG class "cell"), not decoration
  };
  struct Map {
    int x = 0, y = 0, size = 0;
    size_t panel = 0;
  };
  struct Ramp {
    int x = 0, y = 0, w = 0, h = 0;
    bool diverging = false;
  };
  int width = 0, height = 0, legend_top = 0;
  MapRegion region;
  std::vector<Text> texts;
  std::vector<Rect> rects;
  std::vector<Map> maps;
  std::vector<Ramp> ramps;
};

// A scene of legend ramps, rectangles and texts without maps (e.g. the Explain view's slides), as a raster
// on white and as SVG with the same elements in the same places. Throws Error for a size outside 16..8192.
Image render_scene(const FigureScene& scene, const FigureFont& font = FigureFont::standard());
std::string scene_to_svg(const FigureScene& scene, const FigureFont& font = FigureFont::standard());

// Throws Error for an empty figure, a panel without data, no tokens, a region outside the map or a panel
// size outside 64..8192.
FigureScene layout_head_figure(const HeadFigure& figure, const FigureFont& font);

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
  int cell = 72;  // pixels per cell side
  std::string format = "%.2f";
};

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
};

// The x axis spans the decades where some series has counts. Throws Error when no series has any count,
// the series differ in length, or the size is outside 200..8192. The PNG and the SVG come from one scene
// (grid, axes, step lines and legend swatches as rectangles; labels as text).
FigureScene layout_histogram_figure(const HistogramFigure& figure, const FigureFont& font);
Image render_histogram_figure(const HistogramFigure& figure, const FigureFont& font = FigureFont::standard());
std::string histogram_figure_svg(const HistogramFigure& figure,
                                 const FigureFont& font = FigureFont::standard());

}  // namespace difflens::viz
