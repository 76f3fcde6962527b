// Figures composed on the CPU: a head's maps with token labels and legends, a table as a heatmap, and
// overlaid histograms, each laid out once as a FigureScene for both the PNG and the SVG.
#include "viz/figure.h"

#include "viz/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/formats/error.h"
#include "viz/export.h"
#include "viz/ticks.h"
#include "viz/token_text.h"
#include "viz/utf8.h"

namespace difflens::viz {
namespace {

std::string format_tick(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// A label no wider than `max_px`: cut with an ellipsis.
std::string fit(const FigureFont& font, const std::string& s, float px, int max_px) {
  if (font.text_width(s, px) <= max_px) return s;
  const std::vector<int> cps = code_points(s);
  std::string out;
  for (int cp : cps) {
    std::string next = out;
    append_utf8(next, cp);
    if (font.text_width(next + "\u2026", px) > max_px) break;
    out = next;
  }
  return out + "\u2026";
}

}  // namespace

std::string region_caption(const MapRegion& r, int64_t n, const std::vector<int64_t>& starts) {
  if (r.rows <= 0 || (r.row0 == 0 && r.col0 == 0 && r.rows >= n && r.cols >= n)) return "";
  auto token = [&](int64_t cell) {
    return starts.empty() ? cell : starts[static_cast<size_t>(std::clamp<int64_t>(cell, 0, n))];
  };
  return "(rows " + token_range(token(r.row0), token(r.row0 + r.rows)) + ", keys " +
         token_range(token(r.col0), token(r.col0 + r.cols)) + ")";
}

namespace {
// A round step (1, 2, 5, 10, 20, 50, ...) for position ticks whose labels do not crowd: each label's width
// and a space fit between two ticks. 0 for a region of fewer than 8 positions (every one is labelled).
int64_t position_step(int64_t span, int64_t last, int P, float label_px, const FigureFont& font) {
  if (span < 8) return 0;
  const double room = font.text_width(std::to_string(last), label_px) + label_px * 1.5;  // the widest label
  const double per_position = static_cast<double>(P) / static_cast<double>(span);
  for (int64_t decade = 1;; decade *= 10)
    for (int64_t m : {1, 2, 5})
      if (static_cast<double>(m * decade) * per_position >= room) return m * decade;
}
}  // namespace

void size_for_print(HeadFigure& fig, const FigureFont& font, double width_in, double font_pt, int dpi) {
  if (!(width_in > 0) || !(font_pt > 0) || dpi < 72)
    throw Error("figure: give a positive width in inches and font size in points");
  const double target = width_in * dpi;
  // A text's px is its line height; its size in points is its em (what an SVG's font-size says).
  const float em = static_cast<float>(font_pt * dpi / 72.0);
  const auto number = [](double v) {  // 8, 7.5, 0.25: as a user would type it
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  const float label_px = em * 100.0f / font.em_size(100.0f);
  // Smaller than the smallest line drawn: drawn at that (still at least font_pt); larger: refused, never
  // drawn smaller than asked.
  if (label_px > kMaxLabelPx)
    throw Error("figure: " + number(font_pt) + " pt at " + std::to_string(dpi) + " dpi is a " +
                number(std::round(label_px)) + "-pixel line; labels are drawn at most " +
                number(kMaxLabelPx) + " pixels high (give a smaller --font-pt or --dpi)");
  fig.label_px = std::max(label_px, kMinLabelPx);
  fig.width_in = width_in;
  int panel = std::max(
      kMinPanelPx, static_cast<int>(target / static_cast<double>(std::max<size_t>(1, fig.panels.size()))));
  for (int i = 0; i < 8; ++i) {  // the panels' size from the width left beside the labels (gaps grow with it)
    if (panel > kMaxPanelPx) {   // past the largest map: refused only if the largest is still too narrow
      fig.panel_size = kMaxPanelPx;
      if (layout_head_figure(fig, font).width < target - 2) {
        const int n = static_cast<int>(fig.panels.size());
        throw Error("figure: " + number(width_in) + " in at " + std::to_string(dpi) + " dpi needs " +
                    (n == 1 ? std::string("a map") : "maps") + " over the " + std::to_string(kMaxPanelPx) +
                    " pixels a map may take (give a smaller --width-in or --dpi)");
      }
      panel = kMaxPanelPx;
    }
    fig.panel_size = panel;
    const int w = layout_head_figure(fig, font).width;
    if (std::abs(w - target) < 2) break;
    const int n = static_cast<int>(fig.panels.size());
    const double per_panel = static_cast<double>(n) * (1.0 + 1.0 / 16.0) + 1.0 / 32.0;
    panel = static_cast<int>(panel + (target - w) / per_panel);
    if (i == 7 && std::abs(layout_head_figure(fig, font).width - target) > target * 0.02)
      throw Error("figure: the layout did not settle at " + number(width_in) +
                  " in; give another --width-in");
    if (panel < kMinPanelPx)
      throw Error("figure: at " + number(font_pt) + " pt the labels leave no room for " + std::to_string(n) +
                  (n == 1 ? " map" : " maps") + " in " + number(width_in) +
                  " in (give a wider --width-in or a smaller --font-pt)");
  }
}

FigureScene layout_head_figure(const HeadFigure& fig, const FigureFont& font) {
  if (fig.panels.empty()) throw Error("figure: no maps to draw");
  if (fig.panel_size < kMinPanelPx || fig.panel_size > kMaxPanelPx)
    throw Error("figure: the map size must be between " + std::to_string(kMinPanelPx) + " and " +
                std::to_string(kMaxPanelPx) + " pixels");
  const int64_t T = static_cast<int64_t>(fig.tokens.size());
  if (T == 0) throw Error("figure: no tokens");
  for (const auto& p : fig.panels)
    if (!p.data) throw Error("figure: a panel has no data");
  const MapRegion region = fig.region.rows > 0 ? fig.region : MapRegion{0, 0, T, T};
  if (region.row0 < 0 || region.col0 < 0 || region.row0 + region.rows > T || region.col0 + region.cols > T)
    throw Error("figure: the region lies outside the map");

  FigureScene sc;
  sc.region = region;
  sc.width_in = fig.width_in;
  const int P = fig.panel_size;
  const Rgb8 ink{20, 20, 20}, grey{110, 110, 110};
  // Labels as large as a cell allows (every token labelled down to 9-pixel cells), at most P/40.
  const double min_cell = static_cast<double>(P) / static_cast<double>(std::max(region.rows, region.cols));
  const float label_px =
      fig.label_px > 0 ? std::clamp(fig.label_px, kMinLabelPx, kMaxLabelPx)
                       : std::clamp(std::min(P / 40.0f, static_cast<float>(min_cell * 0.8)), 9.0f, 28.0f);
  // Titles never smaller than the labels (a figure sized for print has large labels on small maps).
  const float title_px = std::max(std::clamp(P / 22.0f, 14.0f, 64.0f), label_px * 1.3f);
  const float sub_px = std::max(std::clamp(P / 28.0f, 12.0f, 48.0f), label_px * 1.15f);
  const Rgb8 answer_ink{20, 130, 50}, query_ink{220, 110, 0};
  const bool has_answer = fig.answer_begin >= 0 && fig.answer_end > fig.answer_begin;
  const int margin = std::max(8, P / 32), gap = std::max(12, P / 16);
  const int label_cap = P / 3;  // longest label box, pixels
  // Every stride-th token is labelled so labels never overlap.
  auto stride_for = [&](int64_t span) {
    const double cell = static_cast<double>(P) / static_cast<double>(span);
    return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(label_px * 1.15 / cell)));
  };
  const int64_t row_stride = stride_for(region.rows), col_stride = stride_for(region.cols);
  // Labels from the whole sequence, so a zoomed region that starts inside a byte-fallback character
  // still shows it as a continuation; a label of only spaces is drawn as "␣" so it can be seen.
  const std::vector<std::string> shown = display_tokens(fig.tokens, Spaces::Visible);
  // Every stride-th token, then the marked ones (the query's row, the answer's first key) in place of the
  // labels that would crowd them.
  auto labels = [&](int64_t first, int64_t count, int64_t stride, int64_t marked) {
    std::vector<std::pair<int64_t, std::string>> out;
    for (int64_t i = first; i < first + count; i += stride)
      if (marked < 0 || std::llabs(i - marked) >= stride || i == marked)
        out.push_back({i, fit(font, shown[static_cast<size_t>(i)], label_px, label_cap)});
    if (marked >= first && marked < first + count &&
        std::none_of(out.begin(), out.end(), [&](const auto& e) { return e.first == marked; }))
      out.push_back({marked, fit(font, shown[static_cast<size_t>(marked)], label_px, label_cap)});
    return out;
  };
  const auto row_labels = labels(region.row0, region.rows, row_stride, fig.query);
  const auto col_labels = labels(region.col0, region.cols, col_stride, has_answer ? fig.answer_begin : -1);
  auto in_answer = [&](int64_t k) { return has_answer && k >= fig.answer_begin && k < fig.answer_end; };
  int row_label_w = 0, col_label_h = 0;
  for (const auto& [i, s] : row_labels) row_label_w = std::max(row_label_w, font.text_width(s, label_px));
  for (const auto& [i, s] : col_labels) col_label_h = std::max(col_label_h, font.text_width(s, label_px));
  row_label_w += static_cast<int>(label_px / 2);
  col_label_h += static_cast<int>(label_px / 2);

  const int legend_h = std::max(8, P / 24);
  const int n = static_cast<int>(fig.panels.size());
  const int axis_title_w = fig.axis_titles ? static_cast<int>(label_px * 1.6f) : 0;
  const int keys_title_h = fig.axis_titles ? static_cast<int>(label_px * 1.5f) : 0;
  const int mark_w = fig.query >= 0 ? std::max(3, static_cast<int>(label_px / 3)) : 0;
  const int left = margin + axis_title_w + row_label_w + mark_w;
  // Position ticks: key positions above each map, query positions right of the last one, at round steps.
  const int64_t span = std::max(region.rows, region.cols);
  const int64_t tick_step =
      fig.position_ticks ? position_step(span, std::max(region.row0 + region.rows, region.col0 + region.cols),
                                         P, label_px, font)
                         : 0;
  const int tick_h = tick_step > 0 ? static_cast<int>(label_px * 1.4f) : 0;
  const int tick_w =
      tick_step > 0
          ? font.text_width(std::to_string(std::max(region.row0 + region.rows, region.col0 + region.cols)),
                            label_px) +
                static_cast<int>(label_px * 0.6f)
          : 0;
  sc.width = left + n * P + (n - 1) * gap + tick_w + margin;
  // A panel title wider than its map and the gap ("baseline-small  A (softmax)" over a small map printed
  // large) breaks at its double space into two lines (the model, then the map); else it stays one line.
  bool two_line_titles = false;
  for (const auto& panel : fig.panels)
    two_line_titles |= panel.title.find("  ") != std::string::npos &&
                       font.text_width(panel.title, sub_px) > P + gap - static_cast<int>(sub_px);
  const int title_h = static_cast<int>(title_px * 1.6f),
            sub_h = static_cast<int>(sub_px * 1.5f) * (two_line_titles ? 2 : 1);
  const int map_top = margin + title_h + sub_h + tick_h;
  sc.legend_top = map_top + P + col_label_h + keys_title_h + static_cast<int>(label_px / 2);
  sc.height = sc.legend_top + legend_h + static_cast<int>(label_px * 1.8f) + margin;
  if (!fig.note.empty()) {  // under the legends' tick labels, from the left edge of the first map, wrapped
    int y = sc.height - margin + static_cast<int>(label_px * 0.3f);
    for (const std::string& line :
         wrap_words(font, fig.note, label_px, std::max(64, sc.width - left - margin))) {
      sc.texts.push_back({left, y, line, label_px, grey, false});
      y += static_cast<int>(label_px * 1.3f);
      sc.height += static_cast<int>(label_px * 1.3f);
    }
    sc.height += static_cast<int>(label_px * 0.3f);
  }
  sc.texts.push_back({margin, margin, fig.title, title_px, ink, false});

  const double cell_y = static_cast<double>(P) / static_cast<double>(region.rows);
  const double cell_x = static_cast<double>(P) / static_cast<double>(region.cols);
  for (const auto& [i, s] : row_labels) {  // queries, right-aligned against the first map
    const int cy = map_top + static_cast<int>((static_cast<double>(i - region.row0) + 0.5) * cell_y);
    sc.texts.push_back({left - mark_w - static_cast<int>(label_px / 3) - font.text_width(s, label_px),
                        cy - static_cast<int>(label_px / 2), s, label_px, i == fig.query ? query_ink : ink,
                        false});
  }
  if (fig.axis_titles) {
    const std::string q = "queries";
    sc.texts.push_back({margin, map_top + P / 2 + font.text_width(q, label_px) / 2, q, label_px, grey, true});
  }
  for (int k = 0; k < n; ++k) {
    const FigurePanel& panel = fig.panels[static_cast<size_t>(k)];
    const int x0 = left + k * (P + gap);
    const size_t cut = two_line_titles ? panel.title.find("  ") : std::string::npos;
    if (cut == std::string::npos) {
      sc.texts.push_back({x0, margin + title_h, panel.title, sub_px, ink, false});
    } else {
      sc.texts.push_back({x0, margin + title_h, panel.title.substr(0, cut), sub_px, ink, false});
      sc.texts.push_back({x0, margin + title_h + static_cast<int>(sub_px * 1.5f), panel.title.substr(cut + 2),
                          sub_px, ink, false});
    }
    sc.maps.push_back({x0, map_top, P, static_cast<size_t>(k)});
    if (tick_step > 0) {  // key positions above the map; query positions right of the last map
      for (int64_t pos = (region.col0 + tick_step - 1) / tick_step * tick_step;
           pos < region.col0 + region.cols; pos += tick_step) {
        const int cx = x0 + static_cast<int>((static_cast<double>(pos - region.col0) + 0.5) * cell_x);
        const std::string s = std::to_string(pos);
        sc.rects.push_back(
            {cx, map_top - static_cast<int>(label_px * 0.3f), 1, static_cast<int>(label_px * 0.3f), grey});
        sc.texts.push_back(
            {std::clamp(cx - font.text_width(s, label_px) / 2, x0 - static_cast<int>(label_px), x0 + P),
             map_top - tick_h, s, label_px, grey, false});
      }
      if (k == n - 1)
        for (int64_t pos = (region.row0 + tick_step - 1) / tick_step * tick_step;
             pos < region.row0 + region.rows; pos += tick_step) {
          const int cy = map_top + static_cast<int>((static_cast<double>(pos - region.row0) + 0.5) * cell_y);
          sc.rects.push_back({x0 + P, cy, static_cast<int>(label_px * 0.3f), 1, grey});
          sc.texts.push_back({x0 + P + static_cast<int>(label_px * 0.45f),
                              cy - static_cast<int>(label_px / 2), std::to_string(pos), label_px, grey,
                              false});
        }
    }
    for (const auto& [i, s] : col_labels) {  // keys, vertical, under the map
      const int cx = x0 + static_cast<int>((static_cast<double>(i - region.col0) + 0.5) * cell_x);
      sc.texts.push_back({cx - static_cast<int>(label_px / 2),
                          map_top + P + static_cast<int>(label_px / 3) + font.text_width(s, label_px), s,
                          label_px, in_answer(i) ? answer_ink : ink, true});
    }
    if (fig.axis_titles) {
      const std::string keys = "keys";
      sc.texts.push_back({x0 + (P - font.text_width(keys, label_px)) / 2,
                          map_top + P + col_label_h + static_cast<int>(label_px * 0.2f), keys, label_px, grey,
                          false});
    }
    // The marks: the answer's keys as a band just under the map, the query's row beside its left edge.
    if (has_answer) {
      const int64_t b = std::max(fig.answer_begin, region.col0),
                    e = std::min(fig.answer_end, region.col0 + region.cols);
      if (e > b) {
        const int bx = x0 + static_cast<int>(static_cast<double>(b - region.col0) * cell_x);
        const int ex = x0 + static_cast<int>(static_cast<double>(e - region.col0) * cell_x);
        sc.rects.push_back({bx, map_top + P + 1, std::max(2, ex - bx),
                            std::max(2, static_cast<int>(label_px / 4)), answer_ink, false});
      }
    }
    if (fig.query >= region.row0 && fig.query < region.row0 + region.rows) {
      const int qy = map_top + static_cast<int>(static_cast<double>(fig.query - region.row0) * cell_y);
      sc.rects.push_back(
          {x0 - mark_w - 1, qy, mark_w, std::max(2, static_cast<int>(cell_y)), query_ink, false});
    }
    // Legend: the ramp, its ends labelled with the values they stand for (a clamped end marked "≥ ... (pP)"),
    // then round values inside (0.05, 0.1, ...; log: decades) where they stand under the scale.
    sc.ramps.push_back({x0, sc.legend_top, P, legend_h, panel.style.range.diverging});
    const ValueRange& range = panel.style.range;
    std::vector<std::pair<double, std::string>> ticks;  // (position on the ramp, label): ends first
    {
      std::string lo = format_tick(value_at_coordinate(0, range, panel.style.scale));
      std::string hi = format_tick(range.hi);
      if (panel.style.scale == ValueScale::Log && !range.diverging) lo = "\u2264" + lo;  // all below it
      if (range.clamped()) {
        hi = "\u2265" + hi + (range.fixed ? " (vmax)" : " (p" + format_tick(range.percentile) + ")");
        if (range.diverging) lo = "\u2264" + lo;
      }
      ticks.push_back({0.0, lo});
      ticks.push_back({1.0, hi});
      if (range.diverging) ticks.push_back({0.5, "0"});
      std::vector<double> values;
      if (panel.style.scale == ValueScale::Log) {
        for (int d = 1; d < static_cast<int>(kLogDecades); ++d)
          values.push_back(range.hi * std::pow(10.0, -d));
      } else {
        values = nice_ticks(0, range.hi, 5);
      }
      for (double v : values) {
        if (!(v > 0) || v >= range.hi * 0.999) continue;
        const double round_v = std::stod(format_tick(v));  // as labelled
        const double pos = colormap_coordinate(round_v, range, panel.style.scale);
        ticks.push_back({pos, format_tick(round_v)});
        if (range.diverging)
          ticks.push_back({colormap_coordinate(-round_v, range, panel.style.scale), format_tick(-round_v)});
      }
    }
    std::vector<std::pair<int, int>> taken;  // label extents, placed in order (ends first)
    for (const auto& [pos, s] : ticks) {
      const int tx = x0 + static_cast<int>(pos * (P - 1));
      const int w = font.text_width(s, label_px);
      const int lx = std::clamp(tx - w / 2, x0, x0 + P - w);
      const int pad = static_cast<int>(label_px / 2);
      if (std::any_of(taken.begin(), taken.end(),
                      [&](const auto& e) { return lx < e.second + pad && lx + w + pad > e.first; }))
        continue;  // would collide with a label already placed
      taken.push_back({lx, lx + w});
      sc.rects.push_back({tx, sc.legend_top + legend_h, 1, static_cast<int>(label_px / 3), grey});
      sc.texts.push_back(
          {lx, sc.legend_top + legend_h + static_cast<int>(label_px / 3), s, label_px, ink, false});
    }
  }
  return sc;
}

Image render_head_figure(const HeadFigure& fig, const FigureFont& font, HeadFigureLayout* layout) {
  const FigureScene sc = layout_head_figure(fig, font);
  const int64_t T = static_cast<int64_t>(fig.tokens.size());
  Image img(sc.width, sc.height, {255, 255, 255});
  for (const auto& m : sc.maps) {
    const FigurePanel& panel = fig.panels[m.panel];
    img.blit(colorize_map(panel.data, T, T, sc.region, m.size, fig.pooling, panel.style), m.x, m.y);
    if (layout) layout->maps.push_back({m.x, m.y});
  }
  if (layout) layout->legend_top = sc.legend_top;
  paint_scene(img, sc, font);
  return img;
}

Rgb8 grid_cell_colour(double v, double lo, double hi, bool diverging) {
  if (diverging) {
    const double m = std::max(std::fabs(lo), std::fabs(hi));
    return diverging_colormap().at(0.5 + 0.5 * std::clamp(v / (m > 0 ? m : 1), -1.0, 1.0));
  }
  return sequential_colormap().at(std::clamp((v - lo) / (hi > lo ? hi - lo : 1), 0.0, 1.0));
}

FigureScene layout_grid_figure(const GridFigure& g, const FigureFont& font) {
  const size_t R = g.row_labels.size(), C = g.col_labels.size();
  if (R == 0 || C == 0 || g.values.size() != R * C)
    throw Error("grid figure: " + std::to_string(g.values.size()) + " values for " + std::to_string(R) +
                " x " + std::to_string(C) + " labels");
  if (g.cell < 16 || g.cell > 512)
    throw Error("grid figure: the cell size must be between 16 and 512 pixels");
  if (!(g.hi > g.lo)) throw Error("grid figure: hi must be above lo");
  const Rgb8 ink{20, 20, 20}, white{255, 255, 255};
  const float px = std::clamp(g.cell / 4.5f, 9.0f, 40.0f), title_px = px * 1.3f;
  const int margin = static_cast<int>(px);
  int row_w = font.text_width(g.row_title, px);
  for (const auto& l : g.row_labels) row_w = std::max(row_w, font.text_width(l, px));
  const int left = margin + row_w + margin;
  // Title, column title, column labels, then the grid.
  const int top =
      margin + static_cast<int>(title_px * 1.6f) + static_cast<int>(px * 1.5f) + static_cast<int>(px * 1.5f);
  const int grid_w = static_cast<int>(C) * g.cell, grid_h = static_cast<int>(R) * g.cell;
  FigureScene sc;
  sc.legend_top = top + grid_h + static_cast<int>(px * 1.8f);
  sc.width = std::max(left + grid_w + margin, margin + font.text_width(g.title, title_px) + margin);
  sc.height = sc.legend_top + static_cast<int>(px * 0.8f) + static_cast<int>(px * 1.6f) + margin;
  auto text = [&](int x, int y, const std::string& t, float size, Rgb8 c) {
    FigureScene::Text tx;
    tx.x = x, tx.y = y, tx.text = t, tx.px = size, tx.color = c;
    sc.texts.push_back(tx);
  };
  text(margin, margin, g.title, title_px, ink);
  text(left, margin + static_cast<int>(title_px * 1.6f), g.col_title, px, ink);
  text(margin, top - static_cast<int>(px * 1.3f), g.row_title, px, ink);
  for (size_t r = 0; r < R; ++r) {
    const int y = top + static_cast<int>(r) * g.cell;
    text(left - margin / 2 - font.text_width(g.row_labels[r], px), y + (g.cell - static_cast<int>(px)) / 2,
         g.row_labels[r], px, ink);
    for (size_t c = 0; c < C; ++c) {
      const int x = left + static_cast<int>(c) * g.cell;
      const double v = g.values[r * C + c];
      char b[64];
      FigureScene::Rect cell;
      cell.x = x, cell.y = y, cell.w = g.cell - 1, cell.h = g.cell - 1, cell.cell = true;
      if (std::isnan(v)) {
        cell.color = {236, 236, 236};
        std::snprintf(b, sizeof b, "n/a");
      } else {
        cell.color = grid_cell_colour(v, g.lo, g.hi, g.diverging);
        std::snprintf(b, sizeof b, g.format.c_str(), v);
        // A value that rounds to zero reads "0.00", never "-0.00" (as the app's grids).
        if (b[0] == '-' && std::string(b + 1).find_first_not_of("0.") == std::string::npos)
          std::memmove(b, b + 1, std::strlen(b));
      }
      sc.rects.push_back(cell);
      const bool dark = !std::isnan(v) && oklab_lightness(cell.color) < 0.6;
      text(x + (g.cell - font.text_width(b, px)) / 2, y + (g.cell - static_cast<int>(px)) / 2, b, px,
           dark ? white : ink);
    }
  }
  for (size_t c = 0; c < C; ++c)  // column labels above the grid
    text(left + static_cast<int>(c) * g.cell + (g.cell - font.text_width(g.col_labels[c], px)) / 2,
         top - static_cast<int>(px * 1.3f), g.col_labels[c], px, ink);
  // Legend: the ramp from lo to hi under the grid.
  const int lh = static_cast<int>(px * 0.8f);
  sc.ramps.push_back({left, sc.legend_top, grid_w, lh, g.diverging});
  const double m = std::max(std::fabs(g.lo), std::fabs(g.hi));
  char lo[32], hi[32];
  std::snprintf(lo, sizeof lo, g.format.c_str(), g.diverging ? -m : g.lo);
  std::snprintf(hi, sizeof hi, g.format.c_str(), g.diverging ? m : g.hi);
  text(left, sc.legend_top + lh + 2, lo, px, ink);
  text(left + grid_w - font.text_width(hi, px), sc.legend_top + lh + 2, hi, px, ink);
  if (g.diverging) text(left + (grid_w - font.text_width("0", px)) / 2, sc.legend_top + lh + 2, "0", px, ink);
  return sc;
}

Image render_grid_figure(const GridFigure& g, const FigureFont& font) {
  const FigureScene sc = layout_grid_figure(g, font);
  Image img(sc.width, sc.height, {255, 255, 255});
  paint_scene(img, sc, font);
  return img;
}

std::string grid_figure_svg(const GridFigure& g, const FigureFont& font) {
  return scene_svg(layout_grid_figure(g, font), font, [](std::string&) {});
}

FigureScene layout_histogram_figure(const HistogramFigure& h, const FigureFont& font) {
  if (h.width < 200 || h.height < 200 || h.width > 8192 || h.height > 8192)
    throw Error("histogram figure: the size must be between 200 and 8192 pixels");
  if (h.series.empty()) throw Error("histogram figure: no series");
  const size_t bins = h.series[0].counts.size();
  size_t first = bins, last = 0;
  double top = 0;
  for (const auto& s : h.series) {
    if (s.counts.size() != bins) throw Error("histogram figure: the series have different bin counts");
    for (size_t b = 0; b < bins; ++b)
      if (s.counts[b] > 0)
        first = std::min(first, b), last = std::max(last, b), top = std::max(top, s.counts[b]);
  }
  if (first > last) throw Error("histogram figure: every series is empty");
  // Whole decades around the data.
  const double lo = std::floor(h.x0 + static_cast<double>(first) * h.bin_width);
  const double hi = std::ceil(h.x0 + static_cast<double>(last + 1) * h.bin_width);
  const double ytop = std::ceil(std::log10(top)) + (std::log10(top) == std::ceil(std::log10(top)) ? 1 : 0);
  const Rgb8 ink{20, 20, 20}, grid{225, 225, 225};
  const float px = std::clamp(h.height / 36.0f, 10.0f, 40.0f);
  const int left = static_cast<int>(px * 4.5f), right = static_cast<int>(px * 1.5f);
  const std::vector<std::string> foot =
      h.footnote.empty() ? std::vector<std::string>{}
                         : wrap_words(font, h.footnote, px * 0.9f, h.width - static_cast<int>(px * 1.0f));
  const int foot_h = static_cast<int>(static_cast<float>(foot.size()) * px * 0.9f * 1.3f);
  const int top_margin = static_cast<int>(px * 3.5f), bottom = static_cast<int>(px * 3.6f) + foot_h;
  const int pw = h.width - left - right, ph = h.height - top_margin - bottom;
  if (pw < 50 || ph < 50) throw Error("histogram figure: too small for its labels");
  FigureScene sc;
  sc.width = h.width;
  sc.height = h.height;
  auto text = [&](int x, int y, const std::string& t, float size, bool vertical = false) {
    sc.texts.push_back({x, y, t, size, ink, vertical});
  };
  auto rect = [&](int x, int y, int w, int hh, Rgb8 c) { sc.rects.push_back({x, y, w, hh, c, false}); };
  text(left, static_cast<int>(px * 0.5f), h.title, px * 1.2f);
  auto X = [&](double lg) { return left + static_cast<int>((lg - lo) / (hi - lo) * pw); };
  auto Y = [&](double count) {  // log10(count + 1) so that single counts show
    return top_margin + ph - static_cast<int>(std::log10(count + 1) / (ytop + 0.05) * ph);
  };
  for (double d = lo; d <= hi + 1e-9; d += 1) {  // decade grid and labels
    rect(X(d), top_margin, 1, ph, grid);
    char b[32];
    std::snprintf(b, sizeof b, "1e%+.0f", d);
    text(X(d) - font.text_width(b, px) / 2, top_margin + ph + static_cast<int>(px * 0.4f), b, px);
  }
  // The count axis is log10(count + 1) (a single count shows): grid lines at counts 1, 10, 100, ...; the
  // bottom (no count) is the axis itself, unlabelled ("0" there read as a decade below 1).
  auto count_label = [&](double count, const char* label) {
    const int y = Y(count);
    rect(left, y, pw, 1, grid);
    text(left - static_cast<int>(px * 0.4f) - font.text_width(label, px), y - static_cast<int>(px / 2), label,
         px);
  };
  for (int e = 0; e <= static_cast<int>(ytop); ++e) {
    char b[32];
    std::snprintf(b, sizeof b, e <= 2 ? "%.0f" : "1e%.0f",
                  e <= 2 ? std::pow(10.0, e) : static_cast<double>(e));
    if (std::log10(std::pow(10.0, e) + 1) <= ytop + 0.05) count_label(std::pow(10.0, e), b);
  }
  rect(left, top_margin + ph, pw, 1, ink);
  rect(left, top_margin, 1, ph, ink);
  text(left + (pw - font.text_width(h.x_label, px)) / 2, top_margin + ph + static_cast<int>(px * 1.8f),
       h.x_label, px);
  const std::string count_title = "count (log scale)";
  text(static_cast<int>(px * 0.3f), top_margin + ph / 2 + font.text_width(count_title, px) / 2, count_title,
       px, true);
  int fy = h.height - foot_h - static_cast<int>(px * 0.3f);
  for (const std::string& line : foot) {
    sc.texts.push_back({static_cast<int>(px * 0.5f), fy, line, px * 0.9f, Rgb8{90, 90, 90}, false});
    fy += static_cast<int>(px * 0.9f * 1.3f);
  }
  // Step lines, two pixels thick.
  for (const auto& s : h.series) {
    int prev_y = Y(0);
    for (size_t b = 0; b < bins; ++b) {
      const double l0 = h.x0 + static_cast<double>(b) * h.bin_width;
      if (l0 + h.bin_width < lo || l0 > hi) continue;
      const int x0 = X(l0), x1 = X(l0 + h.bin_width), y = Y(s.counts[b]);
      rect(x0, std::min(prev_y, y), 2, std::abs(prev_y - y) + 2, s.color);
      rect(x0, y, std::max(1, x1 - x0) + 1, 2, s.color);
      prev_y = y;
    }
  }
  // Legend: one line above the plot, right-aligned (inside the plot a curve ran through it).
  int lx = left + pw;
  const int ly = top_margin - static_cast<int>(px * 1.35f);
  for (auto it = h.series.rbegin(); it != h.series.rend(); ++it) {
    const int w = font.text_width(it->name, px);
    lx -= w + static_cast<int>(px * 2.0f);
    rect(lx, ly + static_cast<int>(px / 2), static_cast<int>(px * 1.6f), 3, it->color);
    text(lx + static_cast<int>(px * 2.0f), ly, it->name, px);
    lx -= static_cast<int>(px * 1.2f);
  }
  return sc;
}

Image render_histogram_figure(const HistogramFigure& h, const FigureFont& font) {
  return render_scene(layout_histogram_figure(h, font), font);
}

std::string histogram_figure_svg(const HistogramFigure& h, const FigureFont& font) {
  return scene_to_svg(layout_histogram_figure(h, font), font);
}

std::string head_figure_svg(const HeadFigure& fig, const FigureFont& font, int max_cells, SvgCells how) {
  if (max_cells < 1) throw Error("figure: max_cells must be positive");
  const FigureScene sc = layout_head_figure(fig, font);
  const int64_t T = static_cast<int64_t>(fig.tokens.size());
  return scene_svg(sc, font, [&](std::string& o) {
    char b[256];
    for (const auto& m : sc.maps) {
      const FigurePanel& panel = fig.panels[m.panel];
      const int64_t span = std::max(sc.region.rows, sc.region.cols);
      if (how == SvgCells::Raster) {  // one pixel per displayed cell, scaled up without smoothing
        const int px = static_cast<int>(std::min<int64_t>({span, m.size, max_cells}));
        const Image img = colorize_map(panel.data, T, T, sc.region, px, fig.pooling, panel.style);
        std::snprintf(b, sizeof b,
                      "<image class=\"map-cells\" data-panel=\"%zu\" data-cells=\"%d\" x=\"%d\" y=\"%d\" "
                      "width=\"%d\" height=\"%d\" preserveAspectRatio=\"none\" "
                      "style=\"image-rendering:pixelated\" href=\"data:image/png;base64,",
                      m.panel, px, m.x, m.y, m.size, m.size);
        o += b;
        o += base64(png_bytes(img.rgb, img.width, img.height));
        o += "\"/>\n";
        continue;
      }
      const int cells = std::min(m.size, max_cells);
      const PooledMap p = pool_region(panel.data, T, T, sc.region, cells, cells, fig.pooling, true);
      const Colormap& cmap = panel.style.range.diverging ? diverging_colormap() : sequential_colormap();
      const double cw = static_cast<double>(m.size) / static_cast<double>(p.cols);
      const double ch = static_cast<double>(m.size) / static_cast<double>(p.rows);
      std::snprintf(b, sizeof b,
                    "<g class=\"map\" data-panel=\"%zu\" data-rows=\"%lld\" data-cols=\"%lld\" "
                    "transform=\"translate(%d,%d)\" shape-rendering=\"crispEdges\">\n",
                    m.panel, static_cast<long long>(p.rows), static_cast<long long>(p.cols), m.x, m.y);
      o += b;
      for (int64_t r = 0; r < p.rows; ++r)
        for (int64_t c = 0; c < p.cols; ++c) {
          const float v = p.at(r, c);
          const Rgb8 col = std::isnan(v)
                               ? panel.style.masked
                               : cmap.at(colormap_coordinate(v, panel.style.range, panel.style.scale));
          std::snprintf(
              b, sizeof b,
              "<rect class=\"cell\" x=\"%.3f\" y=\"%.3f\" width=\"%.3f\" height=\"%.3f\" fill=\"%s\"/>\n",
              c * cw, r * ch, cw, ch, svg_color(col).c_str());
          o += b;
        }
      o += "</g>\n";
    }
  });
}

}  // namespace difflens::viz
