// Head maps and head figures from traces.
#include "app/reports/head_figures.h"

#include <algorithm>
#include <cstdio>

#include "core/formats/error.h"
#include "viz/token_text.h"

namespace difflens::app {

std::vector<int64_t> cell_starts(int64_t n, int64_t P) {
  std::vector<int64_t> s(static_cast<size_t>(P + 1));
  for (int64_t c = 0; c <= P; ++c) s[static_cast<size_t>(c)] = c * n / P;
  return s;
}

int64_t cell_of(const std::vector<int64_t>& starts, int64_t t) {
  const auto it = std::upper_bound(starts.begin(), starts.end() - 1, t);
  return std::max<int64_t>(0, (it - starts.begin()) - 1);
}

std::vector<std::string> cell_labels(const std::vector<std::string>& tokens, int64_t P) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const std::vector<int64_t> s = cell_starts(n, P);
  std::vector<std::string> out;
  for (int64_t c = 0; c < P; ++c) {
    const int64_t a = s[static_cast<size_t>(c)], b = s[static_cast<size_t>(c + 1)];
    out.push_back(b > a + 1 ? viz::token_range(a, b)
                            : std::to_string(a) + " " + tokens[static_cast<size_t>(a)]);
  }
  return out;
}

namespace {
// The title of a DIFF head's A: its λ (V1), or "λ(t)" (V2: λ differs from row to row).
std::string diff_title(const Trace& t, const LayerTrace& l) {
  if (t.config.is_diff_v2()) return "A1 - \xce\xbb(t) A2";
  char title[64];
  std::snprintf(title, sizeof title, "A1 - %.3f A2", l.lambda);
  return title;
}
}  // namespace

// The figure's note: the colour scale's kind and where its ends lie, so that a reader of the printed figure
// knows what a colour means ("colour: sqrt scale; unsigned maps 0 to 0.246 (p99.5 of their entries, one
// scale for all), signed ±0.952 (p99.5)").
std::string scale_note(const viz::HeadFigure& fig, viz::ValueScale scale, bool shared) {
  std::vector<viz::ValueRange> seq, div;
  for (const auto& p : fig.panels) (p.style.range.diverging ? div : seq).push_back(p.style.range);
  auto ends = [](const viz::ValueRange& r) {
    char b[64];
    if (r.fixed)
      std::snprintf(b, sizeof b, "%.3g (set by --vmax)", r.hi);
    else
      std::snprintf(b, sizeof b, "%.3g (p%g)", r.hi, r.percentile);
    return std::string(b);
  };
  std::string note = std::string("colour: ") +
                     (scale == viz::ValueScale::Linear ? "linear"
                      : scale == viz::ValueScale::Sqrt ? "sqrt"
                                                       : "log") +
                     " scale";
  if (!seq.empty()) {
    const bool one = std::all_of(seq.begin(), seq.end(), [&](const auto& r) { return r.hi == seq[0].hi; });
    note +=
        "; softmax maps 0 to " +
        (one ? ends(seq[0]) + (seq.size() > 1 && shared ? ", one scale for all" : "") : "each its own end");
  }
  if (!div.empty()) {
    const bool one = std::all_of(div.begin(), div.end(), [&](const auto& r) { return r.hi == div[0].hi; });
    note += "; A1 - \xce\xbb A2 \xc2\xb1" + (one ? ends(div[0]) : std::string("each its own end")) +
            " (blue +, red -)";
  }
  return note;
}

// A range that ends at `vmax` (render --vmax): values beyond it saturate and the legend says so.
viz::ValueRange fixed_range(const float* data, int64_t side, double vmax, bool diverging) {
  viz::ValueRange r = viz::value_range({data}, side, side, 100, diverging, true);
  r.hi = vmax;
  r.fixed = true;
  return r;
}

std::vector<HeadMap> head_maps(const Trace& t, int layer, int head, bool max_pooled) {
  std::vector<HeadMap> out;
  if (layer < 0 || layer >= static_cast<int>(t.layers.size())) return out;
  const LayerTrace& l = t.layers[static_cast<size_t>(layer)];
  auto it = std::find(l.heads.begin(), l.heads.end(), head);
  if (it == l.heads.end()) return out;
  if (l.pooled > 0) {
    const int64_t P = l.pooled, h = it - l.heads.begin(), n = t.length();
    auto ptr = [&](const FloatArray& mean, const FloatArray& mx) {
      return (max_pooled ? mx : mean).data.data() + h * P * P;
    };
    const std::string how = max_pooled ? " [max]" : " [mean]";
    if (t.config.is_diff()) {
      const std::string title = diff_title(t, l);
      out.push_back({"A1 (softmax 1)" + how, "A1", ptr(l.a1_mean, l.a1_max), P, false, n});
      out.push_back({"A2 (softmax 2)" + how, "A2", ptr(l.a2_mean, l.a2_max), P, false, n});
      out.push_back({title + how, "A", ptr(l.a_mean, l.a_max), P, true, n});
    } else {
      out.push_back({"A (softmax)" + how, "A", ptr(l.a_mean, l.a_max), P, false, n});
    }
    return out;
  }
  if (l.a.empty()) return out;
  const int64_t T = t.length(), h = it - l.heads.begin();
  auto ptr = [&](const FloatArray& a) { return a.data.data() + h * T * T; };
  if (t.config.is_diff()) {
    const std::string title = diff_title(t, l);
    out.push_back({"A1 (softmax 1)", "A1", ptr(l.a1), T, false});
    out.push_back({"A2 (softmax 2)", "A2", ptr(l.a2), T, false});
    out.push_back({title, "A", ptr(l.a), T, true});
  } else {
    out.push_back({"A (softmax)", "A", ptr(l.a), T, false});
  }
  return out;
}

viz::HeadFigure head_figure(const Trace& t, int layer, int head, const FigureOptions& o) {
  const int layers = static_cast<int>(t.layers.size());
  if (layer < 0 || layer >= layers)
    throw Error("layer " + std::to_string(layer) + " does not exist (the trace has " +
                std::to_string(layers) + " layers)");
  std::vector<HeadMap> maps = head_maps(t, layer, head);
  if (maps.empty()) {
    const auto& kept = t.layers[static_cast<size_t>(layer)].heads;
    std::string list;
    for (int h : kept) list += (list.empty() ? "" : ",") + std::to_string(h);
    throw Error("head " + std::to_string(head) + " of layer " + std::to_string(layer) +
                " has no maps in this trace (kept heads: " + (list.empty() ? "none" : list) + ")");
  }
  if (!o.only.empty()) {
    const auto keep =
        std::find_if(maps.begin(), maps.end(), [&](const HeadMap& m) { return m.export_name == o.only; });
    if (keep == maps.end())
      throw Error("map " + o.only + " does not exist for a " + to_string(t.config.attention) + " model (" +
                  (t.config.is_diff() ? "A1, A2 or A" : "A") + ")");
    maps = {*keep};
  }
  const int64_t T = t.length();
  const int64_t side = maps[0].T;  // the maps' side: T, or a pooled map's cells
  const std::vector<int64_t> starts =
      maps[0].pooled_from > 0 ? cell_starts(T, maps[0].T) : std::vector<int64_t>{};
  auto unit = [&](int64_t token) { return starts.empty() ? token : cell_of(starts, token); };
  // The zoom is given in tokens (render --zoom ROW,COL,N): inside the prompt, then in map units (the cells
  // that hold those tokens, for a pooled map).
  viz::MapRegion region = o.region;
  if (region.rows > 0) {
    if (region.row0 < 0 || region.col0 < 0 || region.row0 + region.rows > T || region.col0 + region.cols > T)
      throw Error("the zoom (rows " + std::to_string(region.row0) + "-" +
                  std::to_string(region.row0 + region.rows - 1) + ", keys " + std::to_string(region.col0) +
                  "-" + std::to_string(region.col0 + region.cols - 1) + ") reaches beyond the " +
                  std::to_string(T) + "-token prompt (tokens 0-" + std::to_string(T - 1) + ")");
    const int64_t r0 = unit(region.row0), r1 = unit(region.row0 + region.rows - 1) + 1;
    const int64_t c0 = unit(region.col0), c1 = unit(region.col0 + region.cols - 1) + 1;
    region = {r0, c0, r1 - r0, c1 - c0};
  }
  std::vector<const float*> sequential;
  for (const auto& m : maps)
    if (!m.diverging) sequential.push_back(m.data);
  const viz::ValueRange shared =
      viz::value_range(sequential, side, side, o.clamp_percentile, false, true);  // hi = 1 when empty
  viz::HeadFigure fig;
  fig.tokens = maps[0].pooled_from > 0 ? cell_labels(t.tokens, maps[0].T) : t.tokens;
  fig.region = region;
  fig.panel_size = o.size;
  fig.pooling = o.pooling;
  fig.title = (t.config.name.empty() ? std::string(to_string(t.config.attention)) : t.config.name) +
              "   layer " + std::to_string(layer) + "   head " + std::to_string(head) + "   " +
              std::to_string(T) + " tokens";
  const std::string caption = viz::region_caption(region, static_cast<int64_t>(fig.tokens.size()), starts);
  if (!caption.empty()) fig.title += "   " + caption;
  // The marks in map units (a pooled map's cells hold several tokens each).
  if (o.query >= T)
    throw Error("the query " + std::to_string(o.query) + " lies beyond the " + std::to_string(T) +
                "-token prompt");
  if (o.answer_begin >= 0 && (o.answer_end <= o.answer_begin || o.answer_end > T))
    throw Error("the answer [" + std::to_string(o.answer_begin) + ", " + std::to_string(o.answer_end) +
                ") is not a span of the " + std::to_string(T) + "-token prompt");
  if (o.query >= 0) fig.query = unit(o.query);
  if (o.answer_begin >= 0) {
    fig.answer_begin = unit(o.answer_begin);
    fig.answer_end = unit(o.answer_end - 1) + 1;
  }
  fig.label_px = o.label_px;
  fig.position_ticks = maps[0].pooled_from == 0;  // a pooled map's axis is in cells, not token positions
  for (const auto& m : maps) {
    viz::HeatmapStyle style;
    style.scale = o.scale;
    style.range = o.vmax > 0 ? fixed_range(m.data, side, o.vmax, m.diverging)
                  : m.diverging || !o.shared_scale
                      ? viz::value_range({m.data}, side, side, o.clamp_percentile, m.diverging, true)
                      : shared;
    fig.panels.push_back({m.title, m.data, style});
  }
  fig.note = scale_note(fig, o.scale, o.shared_scale);
  return fig;
}

viz::HeadFigure compare_figure(const Trace& left, int left_head, const Trace& right, int right_head,
                               int layer, const FigureOptions& o) {
  if (left.tokens != right.tokens)
    throw Error("the two traces are not of the same tokens (" + std::to_string(left.length()) + " and " +
                std::to_string(right.length()) + "): capture both models on one prompt with one tokenizer");
  viz::HeadFigure a = head_figure(left, layer, left_head, o);
  viz::HeadFigure b = head_figure(right, layer, right_head, o);
  // One scale for both models' softmax maps (and one for the signed maps), unless asked otherwise: two
  // scales make the flatter model's maps look saturated. Pooled maps of different sizes keep their own.
  if (o.shared_scale && o.vmax <= 0 && a.tokens.size() == b.tokens.size()) {
    const int64_t side = static_cast<int64_t>(a.tokens.size());
    for (bool diverging : {false, true}) {
      std::vector<const float*> maps;
      for (const viz::HeadFigure* f : {&a, &b})
        for (const auto& p : f->panels)
          if (p.style.range.diverging == diverging) maps.push_back(p.data);
      if (maps.size() < 2) continue;
      const viz::ValueRange r = viz::value_range(maps, side, side, o.clamp_percentile, diverging, true);
      for (viz::HeadFigure* f : {&a, &b})
        for (auto& p : f->panels)
          if (p.style.range.diverging == diverging) p.style.range = r;
    }
  }
  auto name = [](const Trace& t) {
    return t.config.name.empty() ? std::string(to_string(t.config.attention)) : t.config.name;
  };
  for (auto& p : a.panels) p.title = name(left) + "  " + p.title;
  for (auto p : b.panels) {
    p.title = name(right) + "  " + p.title;
    a.panels.push_back(p);
  }
  a.title = name(left) + " head " + std::to_string(left_head) + " and " + name(right) + " head " +
            std::to_string(right_head) + "   layer " + std::to_string(layer) + "   " +
            std::to_string(left.length()) + " tokens";
  const size_t cut = b.title.find("   (rows ");  // the zoom's caption, once
  if (cut != std::string::npos) a.title += b.title.substr(cut);
  a.note = scale_note(a, o.scale, o.shared_scale);
  return a;
}

std::vector<int> parse_index_filter(const std::string& text, int n) {
  std::vector<int> out;
  if (text.find_first_not_of(" ,") == std::string::npos) {
    for (int i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  std::vector<bool> on(static_cast<size_t>(std::max(0, n)), false);
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(start, end - start);
    int a = -1, b = -1;
    if (std::sscanf(part.c_str(), " %d - %d", &a, &b) == 2 ||
        (std::sscanf(part.c_str(), " %d", &a) == 1 && (b = a) >= 0))
      for (int i = std::max(0, a); i <= std::min(b, n - 1); ++i) on[static_cast<size_t>(i)] = true;
    start = end + 1;
  }
  for (int i = 0; i < n; ++i)
    if (on[static_cast<size_t>(i)]) out.push_back(i);
  return out;
}

}  // namespace difflens::app
