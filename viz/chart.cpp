// Bar charts as figures (see chart.h).
#include "viz/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/formats/error.h"
#include "viz/export.h"
#include "viz/text_shade.h"
#include "viz/ticks.h"

namespace difflens::viz {
namespace {

constexpr Rgb8 kInk{25, 25, 25}, kGrid{228, 228, 228}, kAxis{110, 110, 110}, kAnswerInk{20, 110, 40};

std::string value_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  if (std::string(b) == "-0.000") return "0.000";
  return b;
}

}  // namespace

// (chart.h) `text` broken at spaces into lines no wider than `width` (a word wider than the line stays
// whole); a line feed starts a new line.
std::vector<std::string> wrap_words(const FigureFont& font, const std::string& text, float px, int width) {
  std::vector<std::string> lines;
  std::string line, word;
  auto flush_word = [&] {
    if (word.empty()) return;
    const std::string joined = line.empty() ? word : line + " " + word;
    if (!line.empty() && font.text_width(joined, px) > width) {
      lines.push_back(line);
      line = word;
    } else {
      line = joined;
    }
    word.clear();
  };
  for (char c : text) {
    if (c == ' ' || c == '\n') {
      flush_word();
      if (c == '\n') {  // a line of its own from here
        lines.push_back(line);
        line.clear();
      }
    } else {
      word += c;
    }
  }
  flush_word();
  if (!line.empty()) lines.push_back(line);
  return lines;
}

FigureScene layout_chart_figure(const ChartFigure& f, const FigureFont& font) {
  if (f.width < 200 || f.height < 200 || f.width > 8192 || f.height > 8192)
    throw Error("chart figure: the size must be between 200 and 8192 pixels a side");
  if (f.font_px != 0 && (f.font_px < 6 || f.font_px > 200))
    throw Error("chart figure: the font size must be between 6 and 200 pixels");
  if (f.panels.empty()) throw Error("chart figure: no panels");
  for (const ChartPanel& p : f.panels) {
    const int G = static_cast<int>(p.groups.size());
    if (G == 0) throw Error("chart figure: a panel without groups");
    for (const ChartSeries& s : p.series) {
      if (static_cast<int>(s.values.size()) != G)
        throw Error("chart figure: series '" + s.name + "' has " + std::to_string(s.values.size()) +
                    " values for " + std::to_string(G) + " groups");
      if ((!s.low.empty() || !s.high.empty()) &&
          (static_cast<int>(s.low.size()) != G || static_cast<int>(s.high.size()) != G))
        throw Error("chart figure: series '" + s.name + "' needs one interval (low and high) per group");
    }
    for (const auto& [b, e] : p.bands)
      if (b < 0 || e > G || b >= e) throw Error("chart figure: a band outside the groups");
    if (p.mark >= G) throw Error("chart figure: the mark is outside the groups");
    for (int g : p.labelled)
      if (g < 0 || g >= G) throw Error("chart figure: a labelled group outside the groups");
    if (!p.label_end.empty() && p.label_end.size() != static_cast<size_t>(G))
      throw Error("chart figure: label_end must hold one entry per group");
  }
  const float px = f.font_px > 0 ? f.font_px : std::clamp(f.height / 40.0f, 11.0f, 40.0f);
  const int margin = static_cast<int>(px * 0.8f);
  FigureScene sc;
  sc.width = f.width;
  sc.height = f.height;
  auto text = [&](int x, int y, const std::string& t, float size, Rgb8 c = kInk, bool vertical = false) {
    sc.texts.push_back({x, y, t, size, c, vertical});
  };
  auto rect = [&](int x, int y, int w, int h, Rgb8 c) {
    if (w > 0 && h > 0) sc.rects.push_back({x, y, w, h, c, false});
  };

  // The y ranges (shared, or each panel's), with room for the values written beyond the bars' ends.
  auto range_of = [&](const std::vector<const ChartPanel*>& panels) {
    double lo = 0, hi = 0;
    bool labels = false;
    for (const ChartPanel* p : panels) {
      labels = labels || p->value_labels;
      for (const ChartSeries& s : p->series)
        for (const std::vector<double>* vs : {&s.values, &s.low, &s.high})
          for (double v : *vs)
            if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
    if (f.lo < f.hi) return std::pair{f.lo, f.hi};
    if (!(hi > lo)) hi = lo + 1;
    if (labels) {
      const double room = (hi - lo) * 0.1;
      if (hi > 0) hi += room;
      if (lo < 0) lo -= room;
    }
    return std::pair{lo, hi};
  };
  std::vector<std::pair<double, double>> ranges;
  {
    std::vector<const ChartPanel*> all;
    for (const ChartPanel& p : f.panels) all.push_back(&p);
    const auto shared = range_of(all);
    for (const ChartPanel& p : f.panels) ranges.push_back(f.shared_y ? shared : range_of({&p}));
  }

  // The frame: the title, the legend, then the panels; the x title and the footnote at the bottom.
  int y = margin;
  if (!f.title.empty()) {
    text(margin, y, f.title, px * 1.25f);
    y += static_cast<int>(px * 1.25f * 1.45f);
  }
  {  // the legend: each named series once, swatch and name, wrapping at the right edge
    int x = margin;
    bool any = false;
    std::vector<std::pair<std::string, Rgb8>> seen;
    for (const ChartPanel& p : f.panels)
      for (const ChartSeries& s : p.series) {
        if (s.name.empty()) continue;
        const bool dup = std::any_of(seen.begin(), seen.end(), [&](const auto& e) {
          return e.first == s.name && e.second.r == s.color.r && e.second.g == s.color.g &&
                 e.second.b == s.color.b;
        });
        if (dup) continue;
        seen.push_back({s.name, s.color});
        const int w = static_cast<int>(px * 1.4f) + font.text_width(s.name, px);
        if (x > margin && x + w > f.width - margin) {
          x = margin;
          y += static_cast<int>(px * 1.4f);
        }
        if (s.signed_colors) {  // the sign colours: half blue, half red
          rect(x, y + static_cast<int>(px * 0.2f), static_cast<int>(px * 0.5f), static_cast<int>(px * 0.7f),
               kTextPositive);
          rect(x + static_cast<int>(px * 0.5f), y + static_cast<int>(px * 0.2f), static_cast<int>(px * 0.5f),
               static_cast<int>(px * 0.7f), kTextNegative);
        } else {
          rect(x, y + static_cast<int>(px * 0.2f), static_cast<int>(px), static_cast<int>(px * 0.7f),
               s.color);
        }
        text(x + static_cast<int>(px * 1.3f), y, s.name, px);
        x += w + static_cast<int>(px * 1.2f);
        any = true;
      }
    if (any) y += static_cast<int>(px * 1.6f);
  }
  std::vector<std::string> foot;
  if (!f.footnote.empty()) foot = wrap_words(font, f.footnote, px * 0.9f, f.width - 2 * margin);
  const int foot_h = static_cast<int>(static_cast<float>(foot.size()) * px * 0.9f * 1.3f);
  const int x_title_h = f.x_title.empty() ? 0 : static_cast<int>(px * 1.5f);
  const int bottom = f.height - margin - foot_h - x_title_h;
  // Left: the y title (vertical) and the widest tick label of any panel.
  int tick_w = 0;
  const int n = static_cast<int>(f.panels.size());
  const float panel_title_h = px * 1.45f, labels_h = px * 2.7f, gap = px * 0.7f;
  // A panel whose title and note do not fit one line gives the note a line of its own (never a title cut).
  auto note_below = [&](const ChartPanel& p, int room) {
    return !p.note.empty() && !p.title.empty() &&
           font.text_width(p.title, px) + font.text_width(p.note, px) + static_cast<int>(px) > room;
  };
  int title_lines = 0;
  for (const ChartPanel& p : f.panels) title_lines += 1 + (note_below(p, f.width - 2 * margin) ? 1 : 0);
  const float ph =
      (static_cast<float>(bottom - y) - title_lines * panel_title_h - n * labels_h - (n - 1) * gap) / n;
  if (ph < px * 3) throw Error("chart figure: too small for its panels and labels (make it taller)");
  std::vector<std::vector<double>> ticks;
  std::vector<std::string> formats;
  for (int i = 0; i < n; ++i) {
    ticks.push_back(nice_ticks(ranges[static_cast<size_t>(i)].first, ranges[static_cast<size_t>(i)].second,
                               std::max(2, static_cast<int>(ph / (px * 2.2f)))));
    formats.push_back(tick_label_format(ticks.back(), "%.2f"));
    for (double t : ticks.back()) {
      char b[32];
      std::snprintf(b, sizeof b, formats.back().c_str(), t);
      tick_w = std::max(tick_w, font.text_width(b, px));
    }
  }
  const int y_title_w = f.y_title.empty() ? 0 : static_cast<int>(px * 1.5f);
  const int left = margin + y_title_w + tick_w + static_cast<int>(px * 0.6f);
  const int pw = f.width - margin - left;
  if (pw < px * 6) throw Error("chart figure: too narrow for its labels (make it wider)");
  const int plots_top = y;

  for (int i = 0; i < n; ++i) {
    const ChartPanel& p = f.panels[static_cast<size_t>(i)];
    const auto [lo, hi] = ranges[static_cast<size_t>(i)];
    const int G = static_cast<int>(p.groups.size()), S = std::max<int>(1, static_cast<int>(p.series.size()));
    // The panel's line: its title left, its note right; the note on a line of its own when both do not fit
    // (the title cut short only where it alone is wider than the figure).
    const int note_w = p.note.empty() ? 0 : font.text_width(p.note, px);
    const bool below = note_below(p, f.width - 2 * margin);
    if (!p.title.empty()) {
      std::string t = p.title;
      const int room = f.width - margin - left - (below ? 0 : note_w + static_cast<int>(px));
      while (!t.empty() && font.text_width(t, px) > room) t.pop_back();
      text(left, y, t, px);
    }
    if (below) y += static_cast<int>(panel_title_h);
    if (!p.note.empty()) text(std::max(left, f.width - margin - note_w), y, p.note, px, p.note_color);
    y += static_cast<int>(panel_title_h);
    const int top = y, h = static_cast<int>(ph);
    auto Y = [&](double v) { return top + h - static_cast<int>(std::lround((v - lo) / (hi - lo) * h)); };
    auto X = [&](double g) { return left + static_cast<int>(std::lround(g * pw / G)); };
    for (const auto& [b, e] : p.bands) rect(X(b), top, std::max(1, X(e) - X(b)), h, p.band_color);
    for (double t : ticks[static_cast<size_t>(i)]) {
      const int ty = Y(t);
      if (ty < top - 1 || ty > top + h + 1) continue;
      rect(left, ty, pw, 1, t == 0 ? kAxis : kGrid);
      char b[32];
      std::snprintf(b, sizeof b, formats[static_cast<size_t>(i)].c_str(), t);
      text(left - static_cast<int>(px * 0.4f) - font.text_width(b, px), ty - static_cast<int>(px / 2), b, px);
    }
    rect(left, top, 1, h, kAxis);
    const double gw = static_cast<double>(pw) / G, bw = gw * 0.8 / S;
    const float value_px = px * 0.75f;
    for (int s = 0; s < static_cast<int>(p.series.size()); ++s) {
      const ChartSeries& ser = p.series[static_cast<size_t>(s)];
      for (int g = 0; g < G; ++g) {
        const double v = ser.values[static_cast<size_t>(g)];
        if (!std::isfinite(v)) continue;
        const int x0 = left + static_cast<int>(gw * g + gw * 0.1 + bw * s);
        const int x1 =
            std::max(x0 + 1, left + static_cast<int>(gw * g + gw * 0.1 + bw * (s + 1)) - (bw > 3 ? 1 : 0));
        const int y0 = Y(std::max(v, 0.0)), y1 = Y(std::min(v, 0.0));
        bool in_band = false;
        for (const auto& [b, e] : p.bands) in_band = in_band || (g >= b && g < e);
        const Rgb8 c = p.color_marked_bars && in_band       ? p.band_bar_color
                       : p.color_marked_bars && g == p.mark ? p.mark_color
                       : ser.signed_colors                  ? (v < 0 ? kTextNegative : kTextPositive)
                                                            : ser.color;
        rect(x0, y0, x1 - x0, std::max(1, y1 - y0), c);
        if (!ser.low.empty() && std::isfinite(ser.low[static_cast<size_t>(g)]) &&
            std::isfinite(ser.high[static_cast<size_t>(g)])) {  // the interval: a whisker with caps
          const int cx = (x0 + x1) / 2, cap = std::max(2, (x1 - x0) / 4);
          const int ya = Y(ser.high[static_cast<size_t>(g)]), yb = Y(ser.low[static_cast<size_t>(g)]);
          const int lw = std::max(1, static_cast<int>(px / 12));
          rect(cx - lw / 2, ya, lw, std::max(1, yb - ya), kInk);
          rect(cx - cap, ya, 2 * cap + 1, lw, kInk);
          rect(cx - cap, yb, 2 * cap + 1, lw, kInk);
        }
        if (p.value_labels) {
          const std::string vt = value_text(v);
          const int w = font.text_width(vt, value_px);
          if (w <= (x1 - x0) + static_cast<int>(bw * 0.25)) {
            const int ty =
                v >= 0 ? y0 - static_cast<int>(value_px * 1.15f) : y1 + static_cast<int>(value_px * 0.1f);
            text((x0 + x1) / 2 - w / 2, ty, vt, value_px);
          }
        }
      }
    }
    // Under the axis: the query's mark, then the group labels in up to two rows, colliding ones dropped.
    const int axis_y = top + h;
    if (p.mark >= 0)
      rect(X(p.mark), axis_y + 2, std::max(3, X(p.mark + 1) - X(p.mark)), static_cast<int>(px * 0.3f),
           p.mark_color);
    std::vector<int> order = p.labelled;
    if (order.empty())
      for (int g = 0; g < G; ++g) order.push_back(g);
    std::vector<std::pair<int, int>> taken[2];
    const int pad = static_cast<int>(px * 0.4f);
    for (int g : order) {
      const std::string& label = p.groups[static_cast<size_t>(g)];
      if (label.empty()) continue;
      const int w = font.text_width(label, px);
      const int end =
          static_cast<size_t>(g) < p.label_end.size() && p.label_end[static_cast<size_t>(g)] > g + 1
              ? std::min(p.label_end[static_cast<size_t>(g)], G)
              : g + 1;
      const int cx = (X(g) + X(end)) / 2;
      const int lx = std::clamp(cx - w / 2, left - tick_w, f.width - margin - w);
      for (int row = 0; row < 2; ++row) {
        auto& t = taken[row];
        if (std::any_of(t.begin(), t.end(),
                        [&](const auto& e) { return lx < e.second + pad && lx + w + pad > e.first; }))
          continue;
        t.push_back({lx, lx + w});
        bool in_band = false;
        for (const auto& [b, e] : p.bands) in_band = in_band || (g >= b && g < e);
        const Rgb8 c = g == p.mark ? p.mark_color : in_band ? kAnswerInk : kInk;
        const int ly = axis_y + static_cast<int>(px * (0.45f + 1.15f * row));
        text(lx, ly, label, px, c);
        // Not under its own bars (moved in from the edge): a leader from the label to them (first row only:
        // a leader to the second would cross the first's labels).
        if (row == 0 && (cx < lx || cx > lx + w)) {
          const int from = std::clamp(cx, lx, lx + w);
          const int x0 = std::min(from, cx), x1 = std::max(from, cx);
          rect(x0, ly - 2, std::max(1, x1 - x0), 1, Rgb8{150, 150, 150});
          rect(cx, axis_y + 1, 1, std::max(1, ly - 2 - axis_y - 1), Rgb8{150, 150, 150});
        }
        break;
      }
    }
    y = top + h + static_cast<int>(labels_h + gap);
  }
  if (!f.y_title.empty()) {
    const int w = font.text_width(f.y_title, px);
    text(margin, (plots_top + bottom) / 2 + w / 2, f.y_title, px, kInk, true);
  }
  if (!f.x_title.empty())
    text(left + (pw - font.text_width(f.x_title, px)) / 2, bottom + static_cast<int>(px * 0.2f), f.x_title,
         px);
  int fy = bottom + x_title_h;
  for (const std::string& line : foot) {
    text(margin, fy, line, px * 0.9f, Rgb8{90, 90, 90});
    fy += static_cast<int>(px * 0.9f * 1.3f);
  }
  return sc;
}

Image render_chart_figure(const ChartFigure& figure, const FigureFont& font) {
  return render_scene(layout_chart_figure(figure, font), font);
}

std::string chart_figure_svg(const ChartFigure& figure, const FigureFont& font) {
  return scene_to_svg(layout_chart_figure(figure, font), font);
}

namespace {

// The map of scene map entry `k`: its block and cell.
struct GridPlace {
  size_t block, cell;
};

std::vector<GridPlace> grid_places(const MapGridFigure& f) {
  std::vector<GridPlace> out;
  for (size_t b = 0; b < f.blocks.size(); ++b)
    for (size_t c = 0; c < f.blocks[b].maps.size(); ++c)
      if (f.blocks[b].maps[c]) out.push_back({b, c});
  return out;
}

}  // namespace

FigureScene layout_map_grid_figure(const MapGridFigure& f, const FigureFont& font) {
  if (f.blocks.empty()) throw Error("map grid figure: no models");
  if (f.cell < 16 || f.cell > 1024) throw Error("map grid figure: the cell size must be between 16 and 1024");
  for (const MapGridBlock& b : f.blocks) {
    if (b.row_labels.empty() || b.col_labels.empty() ||
        b.maps.size() != b.row_labels.size() * b.col_labels.size() || b.styles.size() != b.maps.size())
      throw Error("map grid figure: '" + b.title + "' has " + std::to_string(b.maps.size()) + " maps for " +
                  std::to_string(b.row_labels.size()) + " x " + std::to_string(b.col_labels.size()) +
                  " labels");
    if (b.tokens < 1) throw Error("map grid figure: '" + b.title + "' has no tokens");
  }
  const float px = f.font_px > 0 ? f.font_px : std::clamp(f.cell / 5.0f, 11.0f, 36.0f);
  const int margin = static_cast<int>(px), gap = std::max(2, f.cell / 16),
            block_gap = static_cast<int>(px * 2);
  FigureScene sc;
  auto text = [&](int x, int y, const std::string& t, float size, Rgb8 c = kInk) {
    sc.texts.push_back({x, y, t, size, c, false});
  };
  int y0 = margin;
  if (!f.title.empty()) {
    text(margin, y0, f.title, px * 1.2f);
    y0 += static_cast<int>(px * 1.2f * 1.5f);
  }
  int x = margin, bottom = y0;
  size_t panel = 0;
  for (const MapGridBlock& b : f.blocks) {
    int label_w = 0;
    for (const std::string& l : b.row_labels) label_w = std::max(label_w, font.text_width(l, px));
    label_w += static_cast<int>(px * 0.6f);
    const int C = static_cast<int>(b.col_labels.size()), R = static_cast<int>(b.row_labels.size());
    const int grid_w = C * f.cell + (C - 1) * gap;
    int y = y0;
    text(x, y, b.title, px);
    y += static_cast<int>(px * 1.5f);
    for (int c = 0; c < C; ++c) {
      const std::string& l = b.col_labels[static_cast<size_t>(c)];
      text(x + label_w + c * (f.cell + gap) + (f.cell - font.text_width(l, px)) / 2, y, l, px,
           Rgb8{110, 110, 110});
    }
    y += static_cast<int>(px * 1.4f);
    for (int r = 0; r < R; ++r) {
      const int ry = y + r * (f.cell + gap);
      text(x, ry + (f.cell - static_cast<int>(px)) / 2, b.row_labels[static_cast<size_t>(r)], px);
      for (int c = 0; c < C; ++c) {
        const size_t k = static_cast<size_t>(r * C + c);
        if (!b.maps[k]) continue;
        sc.maps.push_back({x + label_w + c * (f.cell + gap), ry, f.cell, panel++});
      }
    }
    y += R * (f.cell + gap) + static_cast<int>(px * 0.5f);
    const int ramp_w = std::min(grid_w, static_cast<int>(px * 14)), ramp_h = static_cast<int>(px * 0.8f);
    sc.ramps.push_back({x + label_w, y, ramp_w, ramp_h, b.diverging});
    y += ramp_h + static_cast<int>(px * 0.2f);
    text(x + label_w, y, b.ramp_low, px * 0.85f);
    text(x + label_w + ramp_w - font.text_width(b.ramp_high, px * 0.85f), y, b.ramp_high, px * 0.85f);
    y += static_cast<int>(px * 1.3f);
    bottom = std::max(bottom, y);
    x += std::max(label_w + grid_w, font.text_width(b.title, px)) + block_gap;
  }
  int width = x - block_gap + margin;
  std::vector<std::string> foot;
  if (!f.footnote.empty())
    foot = wrap_words(font, f.footnote, px * 0.85f, std::max(width - 2 * margin, static_cast<int>(px * 30)));
  for (const std::string& line : foot)
    width = std::max(width, 2 * margin + font.text_width(line, px * 0.85f));
  for (const std::string& line : foot) {
    text(margin, bottom, line, px * 0.85f, Rgb8{90, 90, 90});
    bottom += static_cast<int>(px * 0.85f * 1.3f);
  }
  sc.width = width;
  sc.height = bottom + margin;
  if (sc.width > 16384 || sc.height > 16384)
    throw Error("map grid figure: larger than 16384 pixels (a smaller cell)");
  return sc;
}

Image render_map_grid_figure(const MapGridFigure& f, const FigureFont& font) {
  const FigureScene sc = layout_map_grid_figure(f, font);
  const std::vector<GridPlace> places = grid_places(f);
  Image img(sc.width, sc.height, {255, 255, 255});
  for (const auto& m : sc.maps) {
    const GridPlace& g = places[m.panel];
    const MapGridBlock& b = f.blocks[g.block];
    img.blit(colorize_map(b.maps[g.cell], b.tokens, b.tokens, {}, m.size, f.pooling, b.styles[g.cell]), m.x,
             m.y);
  }
  paint_scene(img, sc, font);
  return img;
}

std::string map_grid_figure_svg(const MapGridFigure& f, const FigureFont& font) {
  const FigureScene sc = layout_map_grid_figure(f, font);
  const std::vector<GridPlace> places = grid_places(f);
  // Each map as the PNG draws it, embedded as an image (a grid of dozens of maps as cells would be
  // megabytes): the same pixels in the SVG as in the PNG.
  return scene_svg(sc, font, [&](std::string& o) {
    for (const auto& m : sc.maps) {
      const GridPlace& g = places[m.panel];
      const MapGridBlock& b = f.blocks[g.block];
      const Image img =
          colorize_map(b.maps[g.cell], b.tokens, b.tokens, {}, m.size, f.pooling, b.styles[g.cell]);
      o += "<image class=\"map\" x=\"" + std::to_string(m.x) + "\" y=\"" + std::to_string(m.y) +
           "\" width=\"" + std::to_string(m.size) + "\" height=\"" + std::to_string(m.size) +
           "\" style=\"image-rendering:pixelated\" href=\"data:image/png;base64," +
           base64(png_bytes(img.rgb, img.width, img.height)) + "\"/>\n";
    }
  });
}

}  // namespace difflens::viz
