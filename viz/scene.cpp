// Figure scenes drawn as rasters and as SVG (see scene.h).
#include "viz/scene.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/formats/error.h"
#include "viz/utf8.h"

namespace difflens::viz {

std::string svg_color(Rgb8 c) {
  char b[8];
  std::snprintf(b, sizeof b, "#%02x%02x%02x", c.r, c.g, c.b);
  return b;
}

Image colorize_map(const float* data, int64_t rows, int64_t cols, const MapRegion& region_in, int size,
                   Pooling pooling, const HeatmapStyle& style, bool causal) {
  if (size < 1) throw Error("map image: size must be positive");
  const MapRegion region = region_in.rows > 0 ? region_in : MapRegion{0, 0, rows, cols};
  const PooledMap p = pool_region(data, rows, cols, region, size, size, pooling, causal);
  const Colormap& cmap = style.range.diverging ? diverging_colormap() : sequential_colormap();
  Image img(size, size, style.masked);
  std::vector<int64_t> col_of(static_cast<size_t>(size));
  for (int x = 0; x < size; ++x)  // pixel centre → cell, as GL_NEAREST samples it
    col_of[static_cast<size_t>(x)] =
        std::min<int64_t>(p.cols - 1, static_cast<int64_t>((x + 0.5) / size * static_cast<double>(p.cols)));
  for (int y = 0; y < size; ++y) {
    const int64_t r =
        std::min<int64_t>(p.rows - 1, static_cast<int64_t>((y + 0.5) / size * static_cast<double>(p.rows)));
    for (int x = 0; x < size; ++x) {
      const float v = p.at(r, col_of[static_cast<size_t>(x)]);
      if (std::isnan(v)) continue;
      const Rgb8 c = cmap.at(colormap_coordinate(v, style.range, style.scale));
      uint8_t* px = &img.rgb[(static_cast<size_t>(y) * size + x) * 3];
      px[0] = c.r;
      px[1] = c.g;
      px[2] = c.b;
    }
  }
  return img;
}

double value_at_coordinate(double t, const ValueRange& range, ValueScale scale) {
  t = std::clamp(t, 0.0, 1.0);
  const double sign = range.diverging ? (t < 0.5 ? -1.0 : 1.0) : 1.0;
  const double f = range.diverging ? std::fabs(t - 0.5) * 2 : t;
  double x = f;
  if (scale == ValueScale::Sqrt) x = f * f;
  if (scale == ValueScale::Log) x = std::pow(10.0, f * kLogDecades - kLogDecades);
  return sign * x * range.hi;
}

void paint_scene(Image& img, const FigureScene& sc, const FigureFont& font) {
  for (const auto& r : sc.ramps) {
    const Colormap& cmap = r.diverging ? diverging_colormap() : sequential_colormap();
    for (int x = 0; x < r.w; ++x) img.fill(r.x + x, r.y, 1, r.h, cmap.at((x + 0.5) / r.w));
  }
  for (const auto& r : sc.rects) img.fill(r.x, r.y, r.w, r.h, r.color);
  for (const auto& t : sc.texts) font.draw(img, t.x, t.y, t.text, t.px, t.color, t.vertical);
}

std::string scene_svg(const FigureScene& sc, const FigureFont& font,
                      const std::function<void(std::string&)>& maps) {
  std::string o;
  char b[256];
  char size[96];
  if (sc.width_in > 0)  // a printed size: the viewBox's units scale to it
    std::snprintf(size, sizeof size, "width=\"%.4gin\" height=\"%.4gin\"", sc.width_in,
                  sc.width_in * sc.height / std::max(1, sc.width));
  else
    std::snprintf(size, sizeof size, "width=\"%d\" height=\"%d\"", sc.width, sc.height);
  std::snprintf(
      b, sizeof b,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
      "%s viewBox=\"0 0 %d %d\" "
      "font-family=\"DejaVu Sans, Verdana, sans-serif\" xml:space=\"preserve\" style=\"white-space:pre\">\n",
      size, sc.width, sc.height);
  o += b;
  o += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n<defs>\n";
  for (const bool diverging : {false, true}) {  // legend ramps as gradients, 33 stops
    const Colormap& cmap = diverging ? diverging_colormap() : sequential_colormap();
    o += std::string("<linearGradient id=\"") + (diverging ? "diverging" : "sequential") + "\">";
    for (int i = 0; i <= 32; ++i) {
      std::snprintf(b, sizeof b, "<stop offset=\"%.4f\" stop-color=\"%s\"/>", i / 32.0,
                    svg_color(cmap.at(i / 32.0)).c_str());
      o += b;
    }
    o += "</linearGradient>\n";
  }
  o += "</defs>\n";
  maps(o);
  for (const auto& r : sc.ramps) {
    std::snprintf(b, sizeof b,
                  "<rect class=\"legend\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"url(#%s)\"/>\n",
                  r.x, r.y, r.w, r.h, r.diverging ? "diverging" : "sequential");
    o += b;
  }
  for (const auto& r : sc.rects) {
    std::snprintf(b, sizeof b, "<rect%s x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n",
                  r.cell ? " class=\"cell\"" : "", r.x, r.y, r.w, r.h, svg_color(r.color).c_str());
    o += b;
  }
  for (const auto& t : sc.texts) {
    const float base = font.ascent(t.px);
    if (t.vertical)
      std::snprintf(b, sizeof b,
                    "<text transform=\"translate(%.1f,%d) rotate(-90)\" font-size=\"%.2f\" fill=\"%s\">",
                    t.x + base, t.y, font.em_size(t.px), svg_color(t.color).c_str());
    else
      std::snprintf(b, sizeof b, "<text x=\"%d\" y=\"%.1f\" font-size=\"%.2f\" fill=\"%s\">", t.x, t.y + base,
                    font.em_size(t.px), svg_color(t.color).c_str());
    o += b;
    o += xml_text(t.text);
    o += "</text>\n";
  }
  o += "</svg>\n";
  return o;
}

Image render_scene(const FigureScene& scene, const FigureFont& font) {
  if (scene.width < 16 || scene.height < 16 || scene.width > 8192 || scene.height > 8192)
    throw Error("figure: a scene of " + std::to_string(scene.width) + "x" + std::to_string(scene.height) +
                " pixels is outside 16..8192");
  Image img(scene.width, scene.height, Rgb8{255, 255, 255});
  paint_scene(img, scene, font);
  return img;
}

std::string scene_to_svg(const FigureScene& scene, const FigureFont& font) {
  return scene_svg(scene, font, [](std::string&) {});
}

SceneTextFaults scene_text_faults(const FigureScene& scene, const FigureFont& font) {
  struct Box {
    float x0, y0, x1, y1;
    const FigureScene::Text* text;
  };
  std::vector<Box> boxes;
  SceneTextFaults faults;
  auto example = [&](const std::string& what) {
    if (faults.examples.size() < 8) faults.examples.push_back(what);
  };
  for (const FigureScene::Text& t : scene.texts) {
    if (t.text.empty()) continue;
    const float w = static_cast<float>(font.text_width(t.text, t.px));
    // Horizontal: the line box right of x, below y. Vertical (reads upwards from y): px wide, w tall above y.
    const Box b = t.vertical ? Box{float(t.x), t.y - w, t.x + t.px, float(t.y), &t}
                             : Box{float(t.x), float(t.y), t.x + w, t.y + t.px, &t};
    if (b.x0 < -1 || b.y0 < -1 || b.x1 > scene.width + 1 || b.y1 > scene.height + 1) {
      ++faults.outside;
      example("'" + t.text + "' past the edge at " + std::to_string(t.x) + "," + std::to_string(t.y));
    }
    const float inset = t.px / 6;  // the line box's empty top and bottom
    boxes.push_back(t.vertical ? Box{b.x0 + inset, b.y0, b.x1 - inset, b.y1, &t}
                               : Box{b.x0, b.y0 + inset, b.x1, b.y1 - inset, &t});
  }
  std::sort(boxes.begin(), boxes.end(), [](const Box& p, const Box& q) { return p.x0 < q.x0; });
  for (size_t i = 0; i < boxes.size(); ++i)
    for (size_t j = i + 1; j < boxes.size() && boxes[j].x0 < boxes[i].x1; ++j) {
      const Box &p = boxes[i], &q = boxes[j];
      const float w = std::min(p.x1, q.x1) - std::max(p.x0, q.x0),
                  h = std::min(p.y1, q.y1) - std::max(p.y0, q.y0);
      if (w <= 0 || h <= 0) continue;
      const float smaller = std::min((p.x1 - p.x0) * (p.y1 - p.y0), (q.x1 - q.x0) * (q.y1 - q.y0));
      if (w * h <= 0.1f * smaller) continue;
      ++faults.overlaps;
      example("'" + p.text->text + "' over '" + q.text->text + "' at " + std::to_string(q.text->x) + "," +
              std::to_string(q.text->y));
    }
  return faults;
}

}  // namespace difflens::viz
