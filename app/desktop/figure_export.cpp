// A view as a figure (see figure_export.h).
#include "app/desktop/figure_export.h"

#include "app/reports/outlier_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "app/desktop/layout.h"
#include "app/desktop/panels.h"
#include "app/reports/head_figures.h"
#include "core/formats/atomic_file.h"
#include "core/formats/error.h"
#include "core/formats/trace_io.h"
#include "viz/chart.h"
#include "viz/export.h"
#include "viz/figure.h"

namespace difflens::app {

std::string model_name(const Trace& t) {
  return t.config.name.empty() ? to_string(t.config.attention) : t.config.name;
}

namespace {

// The Model view's grid: each model a block of layers x heads, its maps as the view colours them (one
// range per layer, the clamp percentile's), cells sized so the blocks fill the figure's width.
viz::MapGridFigure model_grid_figure(GuiState& state, int width, float font_px) {
  const RunResult& r = *state.shown;
  viz::MapGridFigure f;
  f.font_px = font_px;
  f.pooling = static_cast<viz::Pooling>(state.view.pooling);
  f.title = "Every head of every layer";
  int columns = 0;
  for (int s = 0; s < kSlots; ++s) {
    const auto& t = r.traces[s];
    if (!t) continue;
    viz::MapGridBlock b;
    b.title = model_name(*t) + (t->config.is_diff() ? ": A1 \xe2\x88\x92 \xce\xbb A2" : ": softmax A");
    b.diverging = t->config.is_diff();
    const std::vector<int> layers =
        parse_index_filter(state.view.layer_filter, static_cast<int>(t->layers.size()));
    const std::vector<int> heads =
        parse_index_filter(state.view.head_filter, static_cast<int>(t->config.map_heads()));
    for (int h : heads) b.col_labels.push_back("H" + std::to_string(h));
    for (int li : layers) {
      const LayerTrace& l = t->layers[static_cast<size_t>(li)];
      const bool pooled = l.pooled > 0;
      const FloatArray& grid = !pooled ? l.a : state.view.pooling == 0 ? l.a_max : l.a_mean;
      const int64_t side = pooled ? l.pooled : t->length();
      char label[64];
      if (t->config.is_diff_v2())
        std::snprintf(label, sizeof label, "L%d  mean \xce\xbb %.3f", l.index, l.lambda);
      else if (t->config.is_diff())
        std::snprintf(label, sizeof label, "L%d  \xce\xbb %.3f", l.index, l.lambda);
      else
        std::snprintf(label, sizeof label, "L%d", l.index);
      b.row_labels.push_back(label);
      viz::HeatmapStyle style;
      style.scale = static_cast<viz::ValueScale>(std::clamp(state.view.scale, 0, 2));
      if (!grid.empty())
        style.range = viz::value_range({grid.data.data()}, side * static_cast<int64_t>(l.heads.size()), side,
                                       state.view.clamp_percentile, t->config.is_diff(), false);
      for (int h : heads) {
        const auto it = std::find(l.heads.begin(), l.heads.end(), h);
        const float* map = grid.empty() || it == l.heads.end()
                               ? nullptr
                               : grid.data.data() + static_cast<int64_t>(it - l.heads.begin()) * side * side;
        b.maps.push_back(map);
        b.styles.push_back(style);
      }
      b.tokens = side;
    }
    char pct[32];
    std::snprintf(pct, sizeof pct, "p%g", state.view.clamp_percentile);
    b.ramp_high = std::string(b.diverging ? "+" : "") + pct + " of the layer";
    b.ramp_low = b.diverging ? std::string("\xe2\x88\x92") + pct : "0";
    columns += static_cast<int>(b.col_labels.size());
    f.blocks.push_back(std::move(b));
  }
  if (f.blocks.empty()) throw Error("no model has a run on screen");
  // Cells that fill the width left by the labels (about 14 font heights a block).
  const float px = font_px > 0 ? font_px : 14;
  const int labels = static_cast<int>(f.blocks.size()) * static_cast<int>(px * 12);
  f.cell = std::clamp((width - labels) / std::max(1, columns) - 4, 16, 1024);
  f.footnote = "Each layer's maps share one colour range, its " +
               std::to_string(state.view.clamp_percentile).substr(0, 4) +
               "th percentile of |value| (larger values take the end colour). DIFF: blue > 0, red < 0.";
  return f;
}

std::vector<viz::HistogramFigure> outlier_figures(GuiState& state, int width, int height) {
  const RunResult& r = *state.shown;
  std::vector<viz::HistogramFigure> out;
  for (const bool logits : {true, false}) {
    viz::HistogramFigure h;
    const int layer = state.view.outlier_layer;
    const std::string where = layer < 0 ? "all layers pooled" : "layer " + std::to_string(layer);
    h.title = (logits ? "|attention logits|, " : "|hidden states|, ") + where;
    h.x_label = logits ? "|q k / sqrt(d)|" : "|hidden state|";
    h.x0 = LogHistogram::kLogMin;
    h.bin_width = 1.0 / LogHistogram::kBinsPerDecade;
    h.width = width;
    h.height = height;
    std::string readout;  // each model's top-k and median, as the outliers report's figures carry them
    for (int s = 0; s < kSlots; ++s) {
      const auto& t = r.traces[s];
      if (!t) continue;
      ValueStats logit_st, hidden_st;
      if (!outlier_stats(*t, layer, logit_st, hidden_st)) continue;
      const ValueStats& st = logits ? logit_st : hidden_st;
      h.series.push_back({model_name(*t), viz::model_colour(static_cast<size_t>(s)),
                          std::vector<double>(st.histogram.counts.begin(), st.histogram.counts.end())});
      readout += (readout.empty() ? "" : "\n") + top_k_line(model_name(*t), st);
    }
    if (h.series.empty()) throw Error("no model has layer " + std::to_string(layer));
    // The view's caveat travels with the figure: the card's line (over the haystack) and this prompt's, then
    // the readout.
    h.footnote = card_view_text(state, "outliers");
    const std::string mine = outlier_prompt_line(state);
    if (!mine.empty()) h.footnote += (h.footnote.empty() ? "" : "\n") + mine;
    h.footnote += (h.footnote.empty() ? "" : "\n") + readout;
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace

std::string run_interventions(const RunResult& r) {
  std::string lists[kSlots];
  int slots = 0;
  for (int s = 0; s < kSlots; ++s) {
    const auto& t = r.traces[static_cast<size_t>(s)];
    if (!t) continue;
    ++slots;
    lists[s] = t->written_interventions();
  }
  if (lists[0].empty() && lists[1].empty()) return "";
  if (slots < 2 || lists[0] == lists[1] || lists[1].empty() || lists[0].empty())
    return lists[0].empty() ? lists[1] : lists[0];
  return "left: " + lists[0] + "; right: " + lists[1];
}

std::string intervention_file_tag(const RunResult& r) {
  std::vector<std::string> specs;  // every slot's, each once, in order
  for (const auto& t : r.traces)
    if (t)
      for (const auto& iv : t->interventions)
        if (std::find(specs.begin(), specs.end(), iv.first) == specs.end()) specs.push_back(iv.first);
  std::string tag;
  for (const std::string& s : specs) tag += (tag.empty() ? "-under-" : "+") + s;
  return file_safe(tag);  // "-under-lambda_0"
}

std::string intervention_title_tag(const RunResult& r) {
  const std::string list = run_interventions(r);
  return list.empty() ? "" : "  (INTERVENED: " + list + ")";
}

std::filesystem::path free_path(const std::filesystem::path& dir, const std::string& stem,
                                const std::vector<std::string>& exts) {
  for (int k = 1;; ++k) {
    const std::string name = k == 1 ? stem : stem + "-" + std::to_string(k);
    bool taken = false;
    for (const std::string& ext : exts) {
      std::error_code ec;
      taken |= std::filesystem::exists(dir / (name + ext), ec);
    }
    if (!taken) return dir / name;
  }
}

std::vector<std::string> export_view_figure(GuiState& state) {
  if (!state.shown) throw Error("nothing to export yet: no run on screen");
  const int W = std::clamp(state.view.figure_width, 200, 8192),
            H = std::clamp(state.view.figure_height, 200, 8192);
  const float px = state.view.figure_text_px;
  const std::filesystem::path dir(state.view.export_dir);
  std::filesystem::create_directories(dir);
  std::string prefix;  // the models and the layer, so a folder of exports reads
  for (const auto& t : state.shown->traces)
    if (t) prefix += model_name(*t) + "-";
  const std::string layer = "L" + std::to_string(std::max(0, state.view.layer));
  std::vector<std::string> files;
  // A run under interventions names them in every figure's title and file name.
  const std::string file_tag = intervention_file_tag(*state.shown),
                    title_tag = intervention_title_tag(*state.shown);
  auto write = [&](const std::string& base, const viz::Image& img, const std::string& svg) {
    const std::filesystem::path p = free_path(dir, file_safe(base) + file_tag, {".png", ".svg"});
    viz::write_png(p.string() + ".png", img.rgb, img.width, img.height);
    write_file_atomically(p.string() + ".svg", svg);
    files.push_back(p.string() + ".png");
    files.push_back(p.string() + ".svg");
  };
  switch (state.layout.view) {
    case View::QueryRow: {
      viz::ChartFigure f = figure1_chart(state, W, H, px);
      f.title += title_tag;
      write(prefix + layer + "-query" + std::to_string(state.selection.query) + "-figure1",
            viz::render_chart_figure(f), viz::chart_figure_svg(f));
      break;
    }
    case View::Lambda: {
      viz::ChartFigure f = lambda_chart(state, W, H, px);
      f.title += title_tag;
      write(prefix + "lambda", viz::render_chart_figure(f), viz::chart_figure_svg(f));
      break;
    }
    case View::Noise: {
      viz::ChartFigure f = noise_chart(state, W, H, px);
      f.title += title_tag;
      write(prefix + "noise", viz::render_chart_figure(f), viz::chart_figure_svg(f));
      break;
    }
    case View::Outliers: {
      std::vector<viz::HistogramFigure> figs = outlier_figures(state, W, H);
      for (auto& fig : figs) fig.title += title_tag;
      write(prefix + "outliers-logits", viz::render_histogram_figure(figs[0]),
            viz::histogram_figure_svg(figs[0]));
      write(prefix + "outliers-hidden", viz::render_histogram_figure(figs[1]),
            viz::histogram_figure_svg(figs[1]));
      break;
    }
    case View::Models: {
      viz::MapGridFigure f = model_grid_figure(state, W, px);
      f.title += title_tag;
      write(prefix + "models", viz::render_map_grid_figure(f), viz::map_grid_figure_svg(f));
      break;
    }
    case View::Why: {
      viz::ChartFigure f = why_lens_chart(state, W, H, px);
      f.title += title_tag;
      write(prefix + "why-lens", viz::render_chart_figure(f), viz::chart_figure_svg(f));
      for (viz::GridFigure& g : why_share_grids(state, px)) {
        const std::string model = g.title.substr(0, g.title.find(':'));
        g.title += title_tag;
        write(model + "-why-shares", viz::render_grid_figure(g), viz::grid_figure_svg(g));
      }
      break;
    }
    case View::Maps:
      state.export_head_views = true;  // the head views write their labelled PNG and SVG this frame
      return files;
    default:
      throw Error(std::string("this view (") + view_title(state.layout.view) +
                  ") has its own export (the Text view: File > Export page; Explain: Export steps; "
                  "the Lab: Export results)");
  }
  return files;
}

std::vector<std::string> save_run_bundles(GuiState& state) {
  if (!state.shown || first_trace_slot(*state.shown) < 0)
    throw Error("nothing to save yet: no run on screen");
  const std::filesystem::path dir(state.view.export_dir);
  std::filesystem::path run;
  run = free_path(dir, "run" + intervention_file_tag(*state.shown), {""});  // never into an earlier save
  std::vector<std::string> out;
  for (int s = 0; s < kSlots; ++s) {
    const auto& t = state.shown->traces[s];
    if (!t) continue;
    const std::filesystem::path bundle =
        run / file_safe(std::string(s == 0 ? "left-" : "right-") + model_name(*t));
    write_trace_bundle(*t, bundle);
    out.push_back(bundle.string());
  }
  return out;
}

}  // namespace difflens::app
