// The window's division into views (see layout.h).
#include "app/desktop/layout.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace difflens::app {
namespace {

constexpr const char* kViewNames[kViews] = {"maps", "query-row", "models",  "lambda", "noise",
                                            "lab",  "outliers",  "explain", "text",   "why"};
constexpr const char* kViewTitles[kViews] = {"Maps",
                                             "Figure 1: query row",
                                             "Model view",
                                             "\xce\xbb per layer",
                                             "Attention noise",
                                             "Needle lab",
                                             "Outliers",
                                             "Explain",
                                             "Text: the prompt shaded",
                                             "Why: lens, attribution, interventions"};

bool read_float(const std::string& v, float lo, float hi, float& out) {
  char* end = nullptr;
  const float f = std::strtof(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(f >= lo && f <= hi)) return false;
  out = f;
  return true;
}

bool read_bool(const std::string& v, bool& out) {
  if (v != "0" && v != "1") return false;
  out = v == "1";
  return true;
}

std::string split_list(const LayoutState& l) {
  std::string out;
  for (int i = 0; i < kViews; ++i)
    if (l.split[static_cast<size_t>(i)]) out += std::string(out.empty() ? "" : ",") + kViewNames[i];
  return out;
}

constexpr float kMaxWide = 1.6f, kMaxTall = 1.4f;

}  // namespace

constexpr const char* kViewShortTitles[kViews] = {"Maps", "Figure 1", "Models",  "\xce\xbb", "Noise",
                                                  "Lab",  "Outliers", "Explain", "Text",     "Why"};

const char* view_name(View v) {
  return kViewNames[static_cast<int>(v)];
}
const char* view_short_title(View v) {
  return kViewShortTitles[static_cast<int>(v)];
}
const char* view_title(View v) {
  return kViewTitles[static_cast<int>(v)];
}

std::optional<View> parse_view(const std::string& name) {
  for (int i = 0; i < kViews; ++i)
    if (name == kViewNames[i]) return static_cast<View>(i);
  if (name == "overview" || name == "figure1") return View::QueryRow;  // the old tab's name
  return std::nullopt;
}

std::string view_names() {
  std::string out;
  for (int i = 0; i < kViews; ++i)
    out += std::string(i == 0 ? "" : i + 1 == kViews ? " or " : ", ") + kViewNames[i];
  return out;
}

std::string layout_settings_text(const LayoutState& l) {
  std::ostringstream o;
  o << "view=" << view_name(l.view) << "\n"
    << "split=" << split_list(l) << "\n"
    << "side_by_side=" << (l.side_by_side ? 1 : 0) << "\n"
    << "split_fraction=" << l.split_fraction << "\n"
    << "side_panel=" << (l.side_panel ? 1 : 0) << "\n"
    << "side_width_em=" << l.side_width_em << "\n"
    << "square_maps=" << (l.square_maps ? 1 : 0) << "\n"
    << "shared_rows_scale=" << (l.shared_rows_scale ? 1 : 0) << "\n";
  if (l.window_w > 0 && l.window_h > 0) o << "window=" << l.window_w << "x" << l.window_h << "\n";
  return o.str();
}

bool read_layout_setting(LayoutState& l, const std::string& line) {
  const size_t eq = line.find('=');
  if (eq == std::string::npos) return false;
  const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
  if (key == "view") {
    const auto v = parse_view(value);
    if (v) l.view = *v;
    return v.has_value();
  }
  if (key == "split") {  // the views split with the maps, "query-row,lambda" ("" : none)
    std::array<bool, kViews> split{};
    size_t at = 0;
    while (at < value.size()) {
      const size_t comma = std::min(value.find(',', at), value.size());
      const auto v = parse_view(value.substr(at, comma - at));
      if (!v) return false;
      split[static_cast<size_t>(*v)] = true;
      at = comma + 1;
    }
    l.split = split;
    return true;
  }
  if (key == "side_by_side") return read_bool(value, l.side_by_side);
  if (key == "split_fraction") return read_float(value, kMinSplit, kMaxSplit, l.split_fraction);
  if (key == "side_panel") return read_bool(value, l.side_panel);
  if (key == "side_width_em") return read_float(value, 8, 40, l.side_width_em);
  if (key == "square_maps") return read_bool(value, l.square_maps);
  if (key == "shared_rows_scale") return read_bool(value, l.shared_rows_scale);
  if (key == "window") {
    const size_t x = value.find('x');
    if (x == std::string::npos) return false;
    char* end = nullptr;
    const long w = std::strtol(value.c_str(), &end, 10);
    if (end != value.c_str() + x) return false;
    const long h = std::strtol(value.c_str() + x + 1, &end, 10);
    if (*end != '\0' || w < 320 || h < 240 || w > 16384 || h > 16384) return false;
    l.window_w = static_cast<int>(w);
    l.window_h = static_cast<int>(h);
    return true;
  }
  return false;
}

MapGrid plan_map_grid(int maps, float width, float height, float legend_w, float title_h, float gap,
                      bool square) {
  MapGrid best;
  maps = std::max(1, maps);
  float best_side = -1;
  for (int c = 1; c <= maps; ++c) {
    const int r = (maps + c - 1) / c;
    if (c > 1 && (maps + c - 2) / (c - 1) == r)
      continue;  // same rows with fewer columns: wider cells, same grid
    const float cell_w = (width - gap * static_cast<float>(c - 1)) / static_cast<float>(c);
    const float cell_h = (height - gap * static_cast<float>(r - 1)) / static_cast<float>(r);
    const float w = std::max(16.0f, cell_w - legend_w), h = std::max(16.0f, cell_h - title_h);
    const float side = std::min(w, h);
    if (side > best_side + 0.5f) {
      best_side = side;
      // Filling the cell, a map stays near square: wider keys help (the answer's columns), but a map three
      // times wider than tall, or much taller than wide, does not read as a map any more.
      const float fw = std::min(w, h * kMaxWide), fh = std::min(h, w * kMaxTall);
      best = {c, r, square ? side : fw, square ? side : fh, cell_w, cell_h};
    }
  }
  return best;
}

std::vector<LabelSpot> place_bar_labels(const std::vector<BarLabel>& labels, float line_h, float x_min,
                                        float x_max, float y_min, float y_max, int max_rows, float gap) {
  std::vector<LabelSpot> out(labels.size());
  struct Box {
    float x0, y0, x1, y1;
  };
  std::vector<Box> used;
  auto free = [&](const Box& b) {
    return std::none_of(used.begin(), used.end(), [&](const Box& u) {
      return b.x0 < u.x1 + gap && b.x1 > u.x0 - gap && b.y0 < u.y1 + gap * 0.5f && b.y1 > u.y0 - gap * 0.5f;
    });
  };
  for (size_t i = 0; i < labels.size(); ++i) {
    const BarLabel& l = labels[i];
    if (l.w > x_max - x_min) continue;
    const float x0 = std::clamp(l.x - l.w / 2, x_min, x_max - l.w);
    for (int side = 0; side < 2 && !out[i].placed; ++side) {
      const bool below = (side == 0) == l.below;
      for (int row = 0; row < std::max(1, max_rows); ++row) {
        const float y0 = below ? l.y_bottom + gap + static_cast<float>(row) * (line_h + gap)
                               : l.y_top - gap - line_h - static_cast<float>(row) * (line_h + gap);
        const Box b{x0, y0, x0 + l.w, y0 + line_h};
        if (y0 < y_min || y0 + line_h > y_max) break;  // further away only leaves the chart more
        if (free(b)) {
          used.push_back(b);
          out[i] = {true, x0, y0};
          break;
        }
      }
    }
  }
  return out;
}

std::vector<int> labelled_keys(const std::vector<float>& row, int q, int answer_begin, int answer_end,
                               int top) {
  q = std::min(q, static_cast<int>(row.size()) - 1);
  std::vector<int> out;
  if (q < 0) return out;
  std::vector<int> rest;
  for (int j = 0; j < q; ++j)
    if (answer_begin < 0 || j < answer_begin || j >= answer_end) rest.push_back(j);
  const size_t k = std::min(rest.size(), static_cast<size_t>(std::max(0, top)));
  std::partial_sort(
      rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(k), rest.end(), [&](int a, int b) {
        const float fa = std::fabs(row[static_cast<size_t>(a)]), fb = std::fabs(row[static_cast<size_t>(b)]);
        return fa > fb || (fa == fb && a < b);
      });
  out.insert(out.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(k));
  return out;
}

namespace {

// Whether a piece starts a word (see word_of).
bool starts_word(const std::string& p) {
  if (p.empty()) return true;
  if (p.rfind("\xE2\x96\x81", 0) == 0 || p.rfind("\xC4\xA0", 0) == 0) return true;  // ▁, Ġ
  const unsigned char c = static_cast<unsigned char>(p[0]);
  return !(std::isalnum(c) || c >= 0x80);
}

}  // namespace

std::pair<int, int> word_of(const std::vector<std::string>& pieces, int j) {
  const int n = static_cast<int>(pieces.size());
  if (j < 0 || j >= n) return {j, j + 1};
  int b = j, e = j + 1;
  while (b > 0 && j - b < 11 && !starts_word(pieces[static_cast<size_t>(b)])) --b;
  while (e < n && e - b < 12 && !starts_word(pieces[static_cast<size_t>(e)])) ++e;
  return {b, e};
}

std::vector<std::pair<int, int>> labelled_words(const std::vector<float>& row,
                                                const std::vector<std::string>& pieces, int q,
                                                int answer_begin, int answer_end, int top) {
  std::vector<std::pair<int, int>> words;
  for (int j : labelled_keys(row, q, answer_begin, answer_end, top)) {
    auto [b, e] = word_of(pieces, j);
    e = std::min(e, q);       // not over the query's own label
    if (answer_begin >= 0) {  // nor into the answer's
      if (j < answer_begin) e = std::min(e, answer_begin);
      if (j >= answer_end) b = std::max(b, answer_end);
    }
    if (b >= e ||
        std::any_of(words.begin(), words.end(), [&](const auto& w) { return b < w.second && e > w.first; }))
      continue;
    words.push_back({b, e});
  }
  return words;
}

std::string word_label(const std::vector<std::string>& labels, int begin, int end) {
  std::string out;
  for (int k = std::max(0, begin); k < std::min(end, static_cast<int>(labels.size())); ++k)
    out += labels[static_cast<size_t>(k)];
  for (const std::string mark : {" ", "\xE2\x90\xA3"})  // a space, or its visible mark ␣
    while (out.rfind(mark, 0) == 0 && out.size() > mark.size()) out.erase(0, mark.size());
  return out;
}

std::vector<AxisTick> axis_ticks(int64_t first, int64_t span, int max_ticks,
                                 const std::function<int64_t(int64_t)>& to_token) {
  std::vector<AxisTick> out;
  if (span <= 0) return out;
  const double t0 = static_cast<double>(to_token(first)),
               t1 = static_cast<double>(to_token(first + span) - 1);
  for (double t : nice_ticks(t0, std::max(t0, t1), max_ticks)) {
    if (t != std::floor(t) || t < t0 || t > std::max(t0, t1)) continue;
    int64_t lo = first, hi = first + span - 1;  // the last unit whose first token is at most t
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (static_cast<double>(to_token(mid)) <= t)
        lo = mid;
      else
        hi = mid - 1;
    }
    const double a = static_cast<double>(to_token(lo)), b = static_cast<double>(to_token(lo + 1));
    out.push_back({static_cast<double>(lo) + (t - a + 0.5) / std::max(1.0, b - a), static_cast<int64_t>(t)});
  }
  return out;
}

}  // namespace difflens::app
