// One model's head view: the selected layer and head's maps (A1, A2, A1 − λA2 or A) with zoom, hover,
// query row, exact tiles of long prompts and exports; and the maps row of both slots.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "app/desktop/figure_export.h"
#include "app/desktop/panel_maps.h"
#include "app/reports/head_figures.h"
#include "core/formats/atomic_file.h"
#include "core/formats/tiles.h"
#include "viz/export.h"
#include "viz/figure.h"
#include "viz/token_text.h"

namespace difflens::app {

// Writes one map as PNG (rendered from the data at the export size), NPY and CSV; reports in the message.
void export_map(GuiState& state, const std::string& model, int layer, int head, const std::string& which,
                const viz::MapSource& src, const viz::HeatmapStyle& style,
                const std::vector<std::string>& tokens, const viz::HeatmapRenderer& renderer) {
  try {
    std::filesystem::create_directories(state.view.export_dir);
    const std::filesystem::path base = free_path(
        state.view.export_dir,
        file_safe(model + "-L" + std::to_string(layer) + "-H" + std::to_string(head) + "-" + which) +
            (state.shown ? intervention_file_tag(*state.shown) : ""),
        {".png", ".npy", ".csv"});
    const int size = std::clamp(state.view.export_size, 8, 16384);
    viz::write_png(base.string() + ".png",
                   viz::render_map(renderer, src, size, static_cast<viz::Pooling>(state.view.pooling), style),
                   size, size);
    viz::write_npy(base.string() + ".npy", src.data, src.rows, src.cols);
    viz::write_csv(base.string() + ".csv", src.data, src.rows, src.cols, tokens, tokens);
    state.message = "exported " + base.string() + ".png/.npy/.csv";
  } catch (const std::exception& e) {
    state.message = std::string("export failed: ") + e.what();
  }
}

// The legend's bar and its labels: %.3g writes at most "-1.23e-05" (a long prompt's maps reach 1e-5), so
// that much room is kept and no label is cut at the panel's edge.
float legend_width() {
  return ImGui::GetFontSize() * 1.1f + ImGui::CalcTextSize("-1.23e-05").x;
}

// A note above the maps, wrapped to the panel's width (a long prompt's notes are wider than a narrow panel,
// and an unwrapped line made the maps' window clip its contents).
void note_line(const ImVec4& color, const char* format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  ImGui::PushStyleColor(ImGuiCol_Text, color);
  ImGui::TextWrapped("%s", line);
  ImGui::PopStyleColor();
}

// The query axis' room: as many digits as the largest token index.
float map_axis_width(int64_t tokens) {
  const std::string widest(std::to_string(std::max<int64_t>(tokens - 1, 0)).size(), '0');
  return ImGui::CalcTextSize(widest.c_str()).x + ImGui::GetFontSize() * 0.4f;
}

// Token indices along a map's left edge (queries) and under it (keys) at round steps, for the visible
// span of map units from (r0, c0); `to_token` turns a map unit (a pooled cell) into its first token.
void draw_map_axes(ImVec2 o, float mw, float mh, int64_t r0, int64_t c0, int64_t span,
                   const std::function<int(int64_t)>& to_token) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 col = ImGui::GetColorU32(ImGuiCol_TextDisabled);
  const float th = ImGui::GetTextLineHeight();
  auto ticks = [&](int64_t first, float length, float spacing) {
    return axis_ticks(first, span, std::max(2, static_cast<int>(length / spacing)),
                      [&](int64_t u) { return static_cast<int64_t>(to_token(u)); });
  };
  const float cw = mw / static_cast<float>(span), ch = mh / static_cast<float>(span);
  // A label that would touch the one before it is left out (its tick stays): labels never run together.
  float last = -FLT_MAX;
  for (const AxisTick& t : ticks(r0, mh, th * 2.5f)) {
    const std::string s = std::to_string(t.token);
    const float y = o.y + static_cast<float>(t.at - static_cast<double>(r0)) * ch;
    dl->AddLine(ImVec2(o.x - 3, y), ImVec2(o.x, y), col);
    const float y0 = std::clamp(y - th / 2, o.y - th / 2, o.y + mh - th / 2);
    if (y0 < last + th * 0.2f) continue;
    last = y0 + th;
    dl->AddText(ImVec2(o.x - 4 - ImGui::CalcTextSize(s.c_str()).x, y0), col, s.c_str());
  }
  last = -FLT_MAX;
  // Key labels never run together: at least their widest label and a gap apart.
  const std::string widest = std::to_string(to_token(c0 + span) - 1);
  for (const AxisTick& t : ticks(c0, mw, ImGui::CalcTextSize((widest + "00").c_str()).x * 1.3f)) {
    const std::string s = std::to_string(t.token);
    const float x = o.x + static_cast<float>(t.at - static_cast<double>(c0)) * cw;
    dl->AddLine(ImVec2(x, o.y + mh), ImVec2(x, o.y + mh + 3), col);
    const float w = ImGui::CalcTextSize(s.c_str()).x;
    const float x0 = std::clamp(x - w / 2, o.x, std::max(o.x, o.x + mw - w));
    if (x0 < last + ImGui::GetFontSize() * 0.5f) continue;
    last = x0 + w;
    dl->AddText(ImVec2(x0, o.y + mh + 2), col, s.c_str());
  }
}

// Draws a vertical colour legend (high at the top) at `p`, with its values beside it.
void draw_legend(const viz::Colormap& cmap, const viz::ValueRange& range, viz::ValueScale scale, ImVec2 p,
                 float height) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float bar = ImGui::GetFontSize() * 0.7f;
  constexpr int kSegments = 48;
  for (int i = 0; i < kSegments; ++i) {
    // Segment i spans the ramp from 1 - i/n (top) to 1 - (i+1)/n.
    const viz::Rgb8 a = cmap.at(1.0 - static_cast<double>(i) / kSegments),
                    b = cmap.at(1.0 - static_cast<double>(i + 1) / kSegments);
    dl->AddRectFilledMultiColor(ImVec2(p.x, p.y + height * i / kSegments),
                                ImVec2(p.x + bar, p.y + height * (i + 1) / kSegments),
                                IM_COL32(a.r, a.g, a.b, 255), IM_COL32(a.r, a.g, a.b, 255),
                                IM_COL32(b.r, b.g, b.b, 255), IM_COL32(b.r, b.g, b.b, 255));
  }
  dl->AddRect(p, ImVec2(p.x + bar, p.y + height), IM_COL32(120, 120, 120, 255));
  // Labels are the values at the ramp's ends and middle under the chosen scale (sqrt: hi/4 in the middle;
  // log: the low end holds everything below hi·1e-4).
  // A clamped end (values beyond it exist: they take its colour) reads "≥ hi" (and "≤ −hi" for a diverging
  // map); the scale's line under the bar then names the percentile, and hovering the bar gives the largest.
  const bool log_low = scale == viz::ValueScale::Log && !range.diverging;
  const bool clamped = range.clamped();
  char lo[32], mid[32], hi[32];
  std::snprintf(lo, sizeof lo, "%s%.3g", log_low || (clamped && range.diverging) ? "\xe2\x89\xa4" : "",
                viz::value_at_coordinate(0, range, scale));
  std::snprintf(mid, sizeof mid, "%.3g", range.diverging ? 0.0 : viz::value_at_coordinate(0.5, range, scale));
  std::snprintf(hi, sizeof hi, "%s%.3g", clamped ? "\xe2\x89\xa5" : "", range.hi);
  const float x = p.x + bar + ImGui::GetFontSize() * 0.45f, th = ImGui::GetTextLineHeight();
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  dl->AddText(ImVec2(x, p.y), text, hi);
  if (height > 4 * th) dl->AddText(ImVec2(x, p.y + height / 2 - th / 2), text, mid);
  dl->AddText(ImVec2(x, p.y + height - th), text, lo);
  static const char* kScales[] = {"linear", "sqrt", "log"};  // the colour scale, under the bar
  char under[48];
  std::snprintf(under, sizeof under, clamped ? "%s p%g" : "%s",
                kScales[std::clamp(static_cast<int>(scale), 0, 2)], range.percentile);
  dl->AddText(ImVec2(p.x, p.y + height + 2), ImGui::GetColorU32(ImGuiCol_TextDisabled), under);
  if (ImGui::IsMouseHoveringRect(p, ImVec2(x + ImGui::CalcTextSize(hi).x, p.y + height)) &&
      ImGui::IsWindowHovered()) {
    if (clamped)
      ImGui::SetTooltip(
          "Colours end at the %gth percentile of |value| (%.3g); the largest is %.3g: values beyond\n"
          "the end take its colour. The clamp: View > clamp percentile (100: none).",
          range.percentile, range.hi, range.max_abs);
    else
      ImGui::SetTooltip("Colours span every value shown (the largest |value| is %.3g).", range.hi);
  }
  for (float f : {0.0f, 0.5f, 1.0f})
    dl->AddLine(ImVec2(p.x + bar, p.y + height * f), ImVec2(p.x + bar + 3, p.y + height * f), text);
}

void HeadView::draw_notes(GuiState& state, const std::vector<MapSpec>& maps) {
  tile_ = nullptr;
  if (maps.empty() || maps[0].pooled_from <= 0) return;
  // Pooled maps (long prompts): the axes are cells of several tokens; selection and hover stay in tokens.
  const int64_t pooled_from = maps[0].pooled_from;
  const ImVec4 muted = ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled);
  if (trace_) {  // what this model keeps for the prompt, so the budget setting can be judged
    const Trace::KeptBytes k = trace_->kept_bytes();
    note_line(
        muted,
        "%s: %lld tokens pooled to %lld x %lld cells (%s per cell; hover a cell for its tokens); kept %.0f "
        "MB of pooled maps (budget %.0f MB) + %.0f MB for exact tiles + %.0f MB of values",
        model_name_.c_str(), static_cast<long long>(pooled_from), static_cast<long long>(maps[0].T),
        static_cast<long long>(maps[0].T), state.view.pooling == 0 ? "largest entry" : "mean",
        k.pooled_maps / 1048576.0, trace_->pooled_budget / 1048576.0, k.tile_inputs / 1048576.0,
        k.values / 1048576.0);
  } else {
    note_line(muted, "%s: %lld tokens pooled to %lld x %lld cells (%s per cell; hover a cell for its tokens)",
              model_name_.c_str(), static_cast<long long>(pooled_from), static_cast<long long>(maps[0].T),
              static_cast<long long>(maps[0].T), state.view.pooling == 0 ? "largest entry" : "mean");
  }
  if (!trace_) return;
  // Zoomed into a long prompt's pooled map far enough (at most kTileTokens per side): the exact values of
  // the visible tokens, recomputed off the UI thread, replace the pooled cells. The zoom is kept in tokens.
  const ViewState& v = state.view;
  const int64_t n = pooled_from;
  const int64_t tspan = std::clamp<int64_t>(std::llround(v.zoom_span > 0 ? v.zoom_span : double(n)), 1, n);
  const int64_t tr0 = std::clamp<int64_t>(std::llround(v.zoom_row0), 0, n - tspan), tr1 = tr0 + tspan;
  const int64_t tc0 = std::clamp<int64_t>(std::llround(v.zoom_col0), 0, n - tspan), tc1 = tc0 + tspan;
  constexpr int64_t kTileTokens = 1024;
  if (tr1 - tr0 <= kTileTokens && tc1 - tc0 <= kTileTokens) {
    tile_ = tiles_.get(trace_, {trace_.get(), layer_, head_, tr0, tr1 - tr0, tc0, tc1 - tc0});
    if (!tile_)
      note_line(muted, "computing the exact values of query tokens %s x key tokens %s ...",
                viz::token_range(tr0, tr1).c_str(), viz::token_range(tc0, tc1).c_str());
    else
      note_line(ImVec4(0.1f, 0.5f, 0.1f, 1), "exact values: query tokens %s, key tokens %s",
                viz::token_range(tr0, tr1).c_str(), viz::token_range(tc0, tc1).c_str());
    if (!tiles_.error().empty()) note_line(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", tiles_.error().c_str());
  } else {
    note_line(muted, "zoom in to %lld tokens or fewer per side for exact values",
              static_cast<long long>(kTileTokens));
  }
}

bool HeadView::draw(GuiState& state, const std::vector<MapSpec>& maps,
                    const std::vector<std::string>& token_text, const std::vector<std::string>& shown_tokens,
                    const viz::HeatmapRenderer& renderer, const MapGrid& grid, int first_cell, ImVec2 origin,
                    float gap) {
  if (maps.empty()) return false;
  const int64_t pooled_from = maps[0].pooled_from;
  const std::vector<int64_t> starts =
      pooled_from > 0 ? cell_starts(pooled_from, maps[0].T) : std::vector<int64_t>{};
  const std::vector<std::string> cell_text =
      pooled_from > 0 ? cell_labels(shown_tokens, maps[0].T) : std::vector<std::string>{};
  const std::vector<std::string>& tokens = pooled_from > 0 ? cell_text : shown_tokens;
  auto to_map = [&](int t) -> int64_t { return pooled_from > 0 ? cell_of(starts, t) : t; };
  auto to_token = [&](int64_t m) -> int {
    return static_cast<int>(pooled_from > 0 ? starts[static_cast<size_t>(m)] : m);
  };
  const AttentionTile* tile = tile_;
  // Value ranges: sequential maps share one range when asked; the difference map has its own
  // symmetric range (it is on another scale: it can be negative).
  std::vector<const float*> shared;
  uint64_t shared_versions = 0;
  for (const auto& m : maps)
    if (!m.diverging) {
      shared.push_back(m.data);
      shared_versions = shared_versions * 31 + m.version;
    }
  const int64_t T = maps[0].T;
  const float pct = state.view.clamp_percentile;
  // The zoom lives in tokens (shared by both models); a pooled map converts it to its cells. The colours
  // span what the zoom shows (a 16 x 16 corner is not coloured by the whole map's clamp).
  ViewState& v = state.view;
  const double n_tokens = pooled_from > 0 ? static_cast<double>(pooled_from) : static_cast<double>(T);
  const double u = static_cast<double>(T) / n_tokens;  // map units per token
  if (v.zoom_span <= 0 || v.zoom_span > n_tokens) v.zoom_span = n_tokens, v.zoom_row0 = v.zoom_col0 = 0;
  const int64_t span = std::clamp<int64_t>(std::llround(v.zoom_span * u), 1, T);
  const int64_t r0 = std::clamp<int64_t>(std::llround(v.zoom_row0 * u), 0, T - span);
  const int64_t c0 = std::clamp<int64_t>(std::llround(v.zoom_col0 * u), 0, T - span);
  const viz::MapRegion shown{r0, c0, span, span};
  const auto zoom_key = static_cast<uint64_t>((r0 * 1000003 + c0) * 1000003 + span);
  const viz::ValueRange shared_range = ranges_.get({shared_versions, 1, zoom_key}, pct, false, [&] {
    return viz::value_range(shared, T, T, shown, pct, false, true);
  });
  viz::HeadFigure figure;  // the same maps, styles and zoom, for "Export head view"
  figure.tokens = pooled_from > 0 ? cell_text : token_text;
  // A new tile (or none) means new textures and ranges.
  const uint64_t tile_state = tile ? tiles_.generation() * 2 + 1 : 0;
  if (tile_state != last_tile_state_) {
    last_tile_state_ = tile_state;
    ++tile_version_;
  }
  // The tile's maps with hidden keys as NaN (drawn masked), in the order of `maps`.
  std::vector<std::vector<float>> tile_maps;
  if (tile) {
    const std::vector<float>* parts[3] = {&tile->a1, &tile->a2, &tile->a};
    for (size_t i = 0; i < maps.size(); ++i) {
      const std::vector<float>& src = maps.size() == 1 ? tile->a : *parts[i];
      std::vector<float> m = src;
      for (int64_t r = 0; r < tile->rows; ++r)
        for (int64_t c = 0; c < tile->cols; ++c)
          if (tile->col0 + c > tile->row0 + r) m[static_cast<size_t>(r * tile->cols + c)] = std::nanf("");
      tile_maps.push_back(std::move(m));
    }
  }
  bool export_figure = state.export_head_views;
  const float title_h = ImGui::GetTextLineHeight() + 6;
  const float axis_w = map_axis_width(pooled_from > 0 ? pooled_from : maps[0].T);
  for (size_t i = 0; i < maps.size(); ++i) {
    const MapSpec& m = maps[i];
    const int cell = first_cell + static_cast<int>(i);
    const ImVec2 cell_min(origin.x + static_cast<float>(cell % grid.columns) * (grid.cell_w + gap),
                          origin.y + static_cast<float>(cell / grid.columns) * (grid.cell_h + gap));
    const float mw = grid.map_w, mh = grid.map_h;
    // Title: model, layer, head and which map, clipped to the cell.
    ImDrawList* dl = ImGui::GetWindowDrawList();
    // The longest title that fits the cell: model, layer and head, then which map; or less of it.
    const std::string where = "L" + std::to_string(layer_) + " H" + std::to_string(head_);
    // A long prompt's exact tile is no longer the pooled [max] or [mean] map its title names.
    std::string map_title = m.title;
    if (const size_t b = map_title.rfind(" ["); tile && b != std::string::npos)
      map_title = map_title.substr(0, b) + " [exact]";
    std::string title = model_name_ + "  " + where + "   " + map_title;
    if (ImGui::CalcTextSize(title.c_str()).x > grid.cell_w) title = model_name_ + "  " + map_title;
    if (ImGui::CalcTextSize(title.c_str()).x > grid.cell_w) title = map_title;
    dl->PushClipRect(cell_min, ImVec2(cell_min.x + grid.cell_w, cell_min.y + title_h), true);
    dl->AddText(cell_min, ImGui::GetColorU32(ImGuiCol_Text), title.c_str());
    dl->PopClipRect();
    viz::HeatmapStyle style;
    style.scale = static_cast<viz::ValueScale>(state.view.scale);
    style.range =
        m.diverging || !state.view.shared_scale
            ? ranges_.get({m.version, 2, zoom_key}, pct, m.diverging,
                          [&] { return viz::value_range({m.data}, T, T, shown, pct, m.diverging, true); })
            : shared_range;
    if (tile) {  // the exact tile gets the colour range of its own values (the pooled map's is far wider)
      std::vector<const float*> group;
      if (m.diverging || !state.view.shared_scale) {
        group.push_back(tile_maps[i].data());
      } else {
        for (size_t j = 0; j < maps.size(); ++j)
          if (!maps[j].diverging) group.push_back(tile_maps[j].data());
      }
      style.range = ranges_.get(
          {tile_version_ * 16 + (m.diverging || !state.view.shared_scale ? i : 15), 3}, pct, m.diverging,
          [&] { return viz::value_range(group, tile->rows, tile->cols, pct, m.diverging, false); });
    }
    viz::HeatmapView& view = views_[i];
    const int pw = std::max(16, static_cast<int>(mw)), ph = std::max(16, static_cast<int>(mh));
    view.update({m.data, T, T, m.version, true, {r0, c0, span, span}}, pw, ph,
                static_cast<viz::Pooling>(v.pooling), style, renderer);
    viz::HeatmapView& tview = tile_views_[i];
    if (tile)
      tview.update({tile_maps[i].data(), tile->rows, tile->cols, tile_version_ * 8 + i, false, {}}, pw, ph,
                   static_cast<viz::Pooling>(v.pooling), style, renderer);
    figure.panels.push_back({m.title, m.data, style});
    figure.region = {r0, c0, span, span};
    const ImVec2 o(cell_min.x + axis_w, cell_min.y + title_h);
    ImGui::SetCursorScreenPos(o);
    ImGui::Image(
        reinterpret_cast<ImTextureID>(static_cast<intptr_t>((tile ? tview : view).target().texture())),
        ImVec2(mw, mh), ImVec2(0, 1), ImVec2(1, 0));  // the target is bottom-up: flip once, here
    state.drawn.note("map." + std::to_string(cell), o.x, o.y, o.x + mw, o.y + mh);
    const bool hovered = ImGui::IsItemHovered();
    if (ImGui::BeginPopupContextItem(("map-menu" + std::to_string(i)).c_str())) {
      if (ImGui::MenuItem("Export this map (PNG, NPY, CSV)"))
        export_map(state, model_name_, layer_, head_, m.export_name, {m.data, T, T, m.version, true, {}},
                   style, figure.tokens, renderer);
      if (ImGui::MenuItem("Export the head view (labelled PNG + SVG)")) export_figure = true;
      if (ImGui::MenuItem("Reset the zoom")) v.zoom_span = 0;
      ImGui::EndPopup();
    }
    // Linked selection: the answer span's columns, the selected query's row and the hovered key's column,
    // in every map.
    const float cw = mw / static_cast<float>(span), ch = mh / static_cast<float>(span);
    dl->PushClipRect(ImVec2(o.x, o.y - 5), ImVec2(o.x + mw, o.y + mh), true);
    const SelectionState& sel = state.selection;
    if (sel.answer_begin >= 0 && sel.answer_end > sel.answer_begin) {
      const int64_t a0 = to_map(sel.answer_begin), a1 = to_map(sel.answer_end - 1) + 1;
      if (a1 > c0 && a0 < c0 + span) {
        const float x0 = o.x + cw * static_cast<float>(std::max(a0, c0) - c0),
                    x1 = std::max(x0 + 2, o.x + cw * static_cast<float>(std::min(a1, c0 + span) - c0));
        dl->AddRectFilled(ImVec2(x0, o.y - 5), ImVec2(x1, o.y - 1),
                          IM_COL32(20, 160, 60, 255));  // above the map
        dl->AddRect(ImVec2(x0, o.y), ImVec2(x1, o.y + mh), IM_COL32(20, 170, 60, 150), 0, 0, 1.0f);
      }
    }
    const int64_t q_sel = sel.query >= 0 ? to_map(sel.query) : -1;
    if (q_sel >= r0 && q_sel < r0 + span)
      dl->AddRect(ImVec2(o.x, o.y + ch * static_cast<float>(q_sel - r0)),
                  ImVec2(o.x + mw, o.y + std::max(ch * static_cast<float>(q_sel - r0 + 1),
                                                  ch * static_cast<float>(q_sel - r0) + 2)),
                  IM_COL32(255, 140, 0, 255), 0, 0, 2.0f);
    const int64_t k_hov = sel.hovered_key >= 0 ? to_map(sel.hovered_key) : -1;
    if (k_hov >= c0 && k_hov < c0 + span)
      dl->AddRect(ImVec2(o.x + cw * static_cast<float>(k_hov - c0), o.y),
                  ImVec2(o.x + cw * static_cast<float>(k_hov - c0 + 1), o.y + mh), IM_COL32(255, 0, 160, 200),
                  0, 0, 1.0f);
    dl->PopClipRect();
    if (hovered) {
      ImGuiIO& io = ImGui::GetIO();
      const ImVec2 mouse = io.MousePos;
      const double fx = (mouse.x - o.x) / mw, fy = (mouse.y - o.y) / mh;  // 0..1 in the view
      const int64_t q = std::clamp<int64_t>(r0 + static_cast<int64_t>(fy * span), 0, T - 1);
      // The hovered query's row, faintly (the key's column is outlined in every map below).
      dl->AddRect(ImVec2(o.x, o.y + ch * static_cast<float>(q - r0)),
                  ImVec2(o.x + mw, o.y + std::max(ch * static_cast<float>(q - r0 + 1),
                                                  ch * static_cast<float>(q - r0) + 1)),
                  IM_COL32(255, 0, 160, 120), 0, 0, 1.0f);
      const int64_t k = std::clamp<int64_t>(c0 + static_cast<int64_t>(fx * span), 0, T - 1);
      state.selection.hovered_next = to_token(k);
      state.drawn.note("hover." + std::to_string(cell) + " query " + std::to_string(to_token(q)) + " key " +
                           std::to_string(to_token(k)),
                       mouse.x, mouse.y, mouse.x, mouse.y);
      if (io.MouseWheel != 0) {  // zoom around the cursor (in tokens)
        const double new_span =
            std::clamp(v.zoom_span * std::pow(0.8, io.MouseWheel), std::min(8.0, n_tokens), n_tokens);
        v.zoom_row0 = (r0 + fy * span) / u - fy * new_span;
        v.zoom_col0 = (c0 + fx * span) / u - fx * new_span;
        v.zoom_span = new_span;
      }
      if (ImGui::IsMouseDragging(ImGuiMouseButton_Left)) {  // pan
        v.zoom_row0 = (r0 - io.MouseDelta.y / mh * span) / u;
        v.zoom_col0 = (c0 - io.MouseDelta.x / mw * span) / u;
      } else if (ImGui::IsMouseReleased(ImGuiMouseButton_Left) &&
                 ImGui::GetMouseDragDelta(ImGuiMouseButton_Left, 0).x == 0 &&
                 ImGui::GetMouseDragDelta(ImGuiMouseButton_Left, 0).y == 0) {
        state.selection.query = to_token(q);
      }
      if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) v.zoom_span = 0;  // reset
      ImGui::BeginTooltip();
      if (tile) {  // exact: the token under the cursor
        const int64_t tq = std::clamp<int64_t>(tile->row0 + static_cast<int64_t>(fy * tile->rows), tile->row0,
                                               tile->row0 + tile->rows - 1);
        const int64_t tk = std::clamp<int64_t>(tile->col0 + static_cast<int64_t>(fx * tile->cols), tile->col0,
                                               tile->col0 + tile->cols - 1);
        state.selection.hovered_next = static_cast<int>(tk);
        ImGui::Text("query %lld  %s", static_cast<long long>(tq),
                    shown_tokens[static_cast<size_t>(tq)].c_str());
        ImGui::Text("key   %lld  %s", static_cast<long long>(tk),
                    shown_tokens[static_cast<size_t>(tk)].c_str());
        if (tk > tq)
          ImGui::TextUnformatted("masked (future key)");
        else
          for (size_t mi = 0; mi < maps.size(); ++mi)
            ImGui::Text(
                "%s = %.5f (exact)", maps[mi].title.c_str(),
                tile_maps[mi][static_cast<size_t>((tq - tile->row0) * tile->cols + (tk - tile->col0))]);
      } else {
        if (pooled_from > 0) {
          ImGui::Text("queries %s", tokens[static_cast<size_t>(q)].c_str());
          ImGui::Text("keys    %s", tokens[static_cast<size_t>(k)].c_str());
        } else {
          ImGui::Text("query %lld  %s", static_cast<long long>(q),
                      q < static_cast<int64_t>(tokens.size()) ? tokens[static_cast<size_t>(q)].c_str() : "");
          ImGui::Text("key   %lld  %s", static_cast<long long>(k),
                      k < static_cast<int64_t>(tokens.size()) ? tokens[static_cast<size_t>(k)].c_str() : "");
        }
        if (k > q)
          ImGui::TextUnformatted("masked (future key)");
        else
          for (const auto& other : maps) ImGui::Text("%s = %.5f", other.title.c_str(), other.data[q * T + k]);
        if (span < T)
          ImGui::TextDisabled("zoom: %s %s (double-click resets)", pooled_from > 0 ? "cells" : "rows",
                              viz::token_range(r0, r0 + span).c_str());
      }
      ImGui::TextDisabled("right-click: export");
      ImGui::EndTooltip();
    }
    draw_legend(m.diverging ? viz::diverging_colormap() : viz::sequential_colormap(), style.range,
                style.scale, ImVec2(o.x + mw + ImGui::GetFontSize() * 0.4f, o.y), mh);
    draw_map_axes(o, mw, mh, r0, c0, span, to_token);
    if (state.export_all)
      export_map(state, model_name_, layer_, head_, m.export_name, {m.data, T, T, m.version, true, {}}, style,
                 figure.tokens, renderer);
  }
  if (export_figure || state.export_all)
    export_head_figure(state, figure, static_cast<viz::Pooling>(state.view.pooling));
  return tile != nullptr;
}
void HeadView::export_head_figure(GuiState& state, viz::HeadFigure& figure, viz::Pooling pooling) const {
  try {
    // A pooled map's figure has a label per cell: the title counts tokens, its region says tokens.
    const int64_t cells = static_cast<int64_t>(figure.tokens.size());
    const int64_t T = trace_ ? trace_->length() : cells;
    figure.title = model_name_ + "   layer " + std::to_string(layer_) + "   head " + std::to_string(head_) +
                   "   " + std::to_string(T) + " tokens";
    const std::string region =
        viz::region_caption(figure.region, cells, T > cells ? cell_starts(T, cells) : std::vector<int64_t>{});
    if (!region.empty()) figure.title += "   " + region;
    figure.panel_size = std::clamp(state.view.export_size, 64, 8192);
    figure.pooling = pooling;
    if (state.shown) figure.title += intervention_title_tag(*state.shown);
    std::filesystem::create_directories(state.view.export_dir);
    std::filesystem::path path = free_path(
        state.view.export_dir,
        file_safe(model_name_ + "-L" + std::to_string(layer_) + "-H" + std::to_string(head_) + "-headview") +
            (state.shown ? intervention_file_tag(*state.shown) : ""),
        {".png", ".svg"});
    path += ".png";
    const viz::Image img = viz::render_head_figure(figure);
    viz::write_png(path, img.rgb, img.width, img.height);
    std::filesystem::path svg = path;
    svg.replace_extension(".svg");
    write_file_atomically(svg, viz::head_figure_svg(figure, viz::FigureFont::standard()));
    state.message = "exported " + path.string() + " and .svg (" + std::to_string(img.width) + "x" +
                    std::to_string(img.height) + ")";
  } catch (const std::exception& e) {
    state.message = std::string("head view export failed: ") + e.what();
  }
}
// Maps of the selected layer/head of one slot's trace; empty when the trace kept none.
std::vector<MapSpec> maps_of(const Trace& t, int layer, int head, uint64_t request, int slot,
                             bool max_pooled) {
  std::vector<MapSpec> out;
  const uint64_t base = (request << 24) ^ (static_cast<uint64_t>(slot) << 20) ^
                        (static_cast<uint64_t>(layer) << 12) ^ (static_cast<uint64_t>(head) << 4) ^
                        (max_pooled ? (uint64_t{1} << 60) : 0);  // pooled traces: mean and max are two maps
  uint64_t k = t.config.is_diff() ? 1 : 4;  // map versions: A1, A2, A = 1, 2, 3; baseline A = 4
  for (const HeadMap& m : head_maps(t, layer, head, max_pooled))
    out.push_back({m.title, m.export_name, m.data, m.T, m.diverging, base + k++, m.pooled_from});
  return out;
}

MapGrid plan_head_views(int maps, int64_t tokens, ImVec2 room, bool square) {
  // Beside each map: its query axis (left) and legend (right); above: its title; below: its key axis, in
  // the gap to the next row (and under the last row).
  const float gap = ImGui::GetTextLineHeight() + 6, title_h = ImGui::GetTextLineHeight() + 6;
  const float legend_w = legend_width() + ImGui::GetFontSize() * 0.4f + map_axis_width(tokens);
  const float axis_h = ImGui::GetTextLineHeight() + 4;
  return plan_map_grid(maps, room.x, room.y - axis_h, legend_w, title_h, gap, square);
}

void draw_head_views(GuiState& state, HeadView head_views[kSlots], const viz::HeatmapRenderer& renderer) {
  // Each slot's maps, or why it has none (one line each above the grid).
  std::vector<MapSpec> maps[kSlots];
  for (int s = 0; s < kSlots; ++s) {
    const auto& t = state.shown->traces[s];
    if (!t && state.shown->errors[s].empty()) {
      ImGui::TextDisabled("%s model: none loaded", s == 0 ? "left" : "right");
      continue;
    }
    if (!t) {  // which side failed, then why
      ImGui::PushTextWrapPos(0);
      ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s model: %s", s == 0 ? "left" : "right",
                         state.shown->errors[s].c_str());
      ImGui::PopTextWrapPos();
      continue;
    }
    const std::string name = t->config.name.empty() ? to_string(t->config.attention) : t->config.name;
    head_views[s].set_subject(name, state.view.layer, state.view.head[s], t);
    maps[s] =
        maps_of(*t, state.view.layer, state.view.head[s], state.shown->request, s, state.view.pooling == 0);
    if (maps[s].empty()) ImGui::TextDisabled("%s kept no maps of layer %d", name.c_str(), state.view.layer);
    if (t->logit_bits > 0)
      ImGui::TextColored(ImVec4(0.75f, 0.35f, 0.0f, 1), "%s: attention logits quantized to %d bits",
                         name.c_str(), t->logit_bits);
    head_views[s].draw_notes(state, maps[s]);
  }
  int n = 0;
  for (const auto& m : maps) n += static_cast<int>(m.size());
  if (n == 0) return;
  const ImVec2 top_left = ImGui::GetCursorScreenPos(), room = ImGui::GetContentRegionAvail();
  const float gap = ImGui::GetTextLineHeight() + 6;      // holds the key axis of the row above
  const float title_h = ImGui::GetTextLineHeight() + 6;  // the title, then the answer's mark
  int64_t tokens = 0;
  for (const auto& m : maps)
    for (const MapSpec& spec : m) tokens = std::max(tokens, spec.pooled_from > 0 ? spec.pooled_from : spec.T);
  const float legend_w = legend_width() + ImGui::GetFontSize() * 0.4f + map_axis_width(tokens);
  const float axis_h = ImGui::GetTextLineHeight() + 4;
  MapGrid grid = plan_head_views(n, tokens, room, state.layout.square_maps);
  // Cells as large as their maps (rows packed), the grid centred across the width left over.
  grid.cell_w = grid.map_w + legend_w;
  grid.cell_h = grid.map_h + title_h;
  const float used_w =
      grid.cell_w * static_cast<float>(grid.columns) + gap * static_cast<float>(grid.columns - 1);
  const ImVec2 origin(top_left.x + std::max(0.0f, (room.x - used_w) / 2), top_left.y);
  state.drawn.note("maps.grid", origin.x, origin.y, origin.x + used_w,
                   origin.y + grid.cell_h * static_cast<float>(grid.rows) +
                       gap * static_cast<float>(grid.rows - 1) + axis_h);
  int first = 0;
  for (int s = 0; s < kSlots; ++s) {
    if (maps[s].empty()) continue;
    state.exact_tile_shown[s] =
        head_views[s].draw(state, maps[s], state.shown->traces[s]->tokens, state.shown->labels[s], renderer,
                           grid, first, origin, gap);
    first += static_cast<int>(maps[s].size());
  }
  // Keep the window's content extent to what the grid used (the images were placed by position).
  ImGui::SetCursorScreenPos(top_left);
  ImGui::Dummy(ImVec2(std::min(room.x, used_w),
                      std::min(room.y, grid.cell_h * static_cast<float>(grid.rows) +
                                           gap * static_cast<float>(grid.rows - 1) + axis_h)));
}

}  // namespace difflens::app
