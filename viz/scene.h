// A figure as a display list (FigureScene: texts, rectangles, legend ramps, map places) and the two ways
// it is drawn, as a raster and as SVG, so a PNG and an SVG of one figure put everything in the same place;
// and the colouring of a map region into pixels exactly as the GL shader does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "viz/colormap.h"
#include "viz/font.h"
#include "viz/map_view.h"

namespace difflens::viz {

// Colours `region` of a rows × cols map into a size × size image: pooled (max or mean) when the region is
// larger than the image, each cell an exact block of pixels otherwise — the same pixels the GL path draws.
Image colorize_map(const float* data, int64_t rows, int64_t cols, const MapRegion& region, int size,
                   Pooling pooling, const HeatmapStyle& style, bool causal = true);

// The value at colormap position t in [0, 1] (the inverse of colormap_coordinate, for legend ticks).
double value_at_coordinate(double t, const ValueRange& range, ValueScale scale);

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
  double width_in = 0;  // > 0: the SVG's physical width in inches (its height in proportion)
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

// The scene's legend ramps, rectangles and texts onto `img` (maps are drawn by the caller first).
void paint_scene(Image& img, const FigureScene& scene, const FigureFont& font);
// The scene as SVG; `maps` appends the map groups, drawn under the legends, rectangles and texts.
std::string scene_svg(const FigureScene& scene, const FigureFont& font,
                      const std::function<void(std::string&)>& maps);
// "#rrggbb"
std::string svg_color(Rgb8 c);

// Texts a scene lays out badly: pairs drawn over each other (their line boxes, less a sixth of the line
// above and below, share more than a tenth of the smaller), and texts reaching past the scene's edges.
// `examples` names up to 8 of them ("'0.104' over '-0.104' at 120,340").
struct SceneTextFaults {
  int overlaps = 0, outside = 0;
  std::vector<std::string> examples;
  bool clean() const { return overlaps == 0 && outside == 0; }
};
SceneTextFaults scene_text_faults(const FigureScene& scene, const FigureFont& font = FigureFont::standard());

}  // namespace difflens::viz
