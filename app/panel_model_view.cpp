// The Model view tab: each model's layers x heads grid of maps (A1 − λA2 for DIFF, A for the baseline);
// a click selects the layer and head everywhere.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "app/figures.h"
#include "app/panel_maps.h"

namespace difflens::app {

void ModelView::draw(GuiState& state, const Trace& t, int slot, uint64_t request,
                     const viz::HeatmapRenderer& renderer, float thumb) {
  const int64_t T = t.length();
  ImGui::Text("%s: layers (rows) x heads (columns), %s", t.config.name.c_str(),
              t.config.is_diff() ? "A1 - lambda A2" : "softmax A");
  const std::vector<int> layers =
      parse_index_filter(state.view.layer_filter, static_cast<int>(t.layers.size()));
  const std::vector<int> heads =
      parse_index_filter(state.view.head_filter, static_cast<int>(t.config.map_heads()));
  const float label_w = ImGui::CalcTextSize("L00  lambda -0.000").x;
  for (int li : layers) {
    const LayerTrace& l = t.layers[static_cast<size_t>(li)];
    // Exact maps, or a long prompt's pooled ones (mean or largest entry, as the pooling menu says).
    const bool pooled = l.pooled > 0;
    const FloatArray& grid = !pooled ? l.a : state.view.pooling == 0 ? l.a_max : l.a_mean;
    const int64_t side = pooled ? l.pooled : T;
    if (grid.empty()) continue;
    const double top_logit = l.logit_stats.top.empty() ? 0.0 : l.logit_stats.top[0];
    const double top_hidden = l.hidden_stats.top.empty() ? 0.0 : l.hidden_stats.top[0];
    ImGui::BeginGroup();
    if (t.config.is_diff())
      ImGui::Text("L%d  lambda %.3f", l.index, l.lambda);
    else
      ImGui::Text("L%d", l.index);
    ImGui::TextDisabled("%.3g / %.3g", top_logit, top_hidden);
    ImGui::EndGroup();
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("layer %d%s\nlargest |attention logit| %.4g\nlargest |hidden state| %.4g", l.index,
                        t.config.is_diff() ? (" lambda " + std::to_string(l.lambda)).c_str() : "", top_logit,
                        top_hidden);
    ImGui::SameLine(label_w);
    const uint64_t layer_version = (request << 24) ^ (static_cast<uint64_t>(slot) << 20) ^
                                   (static_cast<uint64_t>(l.index) << 12) ^ 0x7 ^
                                   (pooled && state.view.pooling == 0 ? (uint64_t{1} << 60) : 0);
    const float pct = state.view.clamp_percentile;
    const viz::ValueRange range = ranges_.get({layer_version}, pct, t.config.is_diff(), [&] {
      return viz::value_range({grid.data.data()}, side * static_cast<int64_t>(l.heads.size()), side, pct,
                              t.config.is_diff(), false);
    });
    bool first = true;
    for (size_t h = 0; h < l.heads.size(); ++h) {
      if (!std::binary_search(heads.begin(), heads.end(), l.heads[h])) continue;
      if (!first) ImGui::SameLine();
      first = false;
      if (!ImGui::IsRectVisible(ImVec2(thumb, thumb))) {  // scrolled away: keep the space, skip the work
        ImGui::Dummy(ImVec2(thumb, thumb));
        continue;
      }
      viz::HeatmapStyle style;
      style.range = range;
      style.scale = static_cast<viz::ValueScale>(state.view.scale);
      viz::HeatmapView& v = views_[{l.index, l.heads[h]}];
      const uint64_t version = (request << 24) ^ (static_cast<uint64_t>(slot) << 20) ^
                               (static_cast<uint64_t>(l.index) << 12) ^
                               (static_cast<uint64_t>(l.heads[h]) << 4) ^ 0x9 ^
                               (pooled && state.view.pooling == 0 ? (uint64_t{1} << 60) : 0);
      v.update({grid.data.data() + static_cast<int64_t>(h) * side * side, side, side, version, true, {}},
               static_cast<int>(thumb), static_cast<int>(thumb),
               static_cast<viz::Pooling>(state.view.pooling), style, renderer);
      const ImVec2 p = ImGui::GetCursorScreenPos();
      ImGui::Image(reinterpret_cast<ImTextureID>(static_cast<intptr_t>(v.target().texture())),
                   ImVec2(thumb, thumb), ImVec2(0, 1), ImVec2(1, 0));
      const bool selected = l.index == state.view.layer && l.heads[h] == state.view.head[slot];
      if (selected)
        ImGui::GetWindowDrawList()->AddRect(p, ImVec2(p.x + thumb, p.y + thumb), IM_COL32(255, 140, 0, 255),
                                            0, 0, 3);
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("layer %d, head %d", l.index, l.heads[h]);
      if (ImGui::IsItemClicked()) {
        state.view.layer = l.index;
        state.view.head[slot] = l.heads[h];
      }
    }
    if (first) ImGui::NewLine();
  }
}

void draw_model_view_tab(GuiState& state, ModelView model_views[kSlots],
                         const viz::HeatmapRenderer& renderer) {
  const float fw = ImGui::GetFontSize() * 8;
  ImGui::SetNextItemWidth(fw);
  ImGui::InputTextWithHint("layers", "all, or 0-3,7", &state.view.layer_filter);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(fw);
  ImGui::InputTextWithHint("heads", "all, or 0-3,7", &state.view.head_filter);
  ImGui::SameLine();
  ImGui::TextDisabled("(scrolls when the grid is larger than the tab)");
  // Thumbnails as large as the tab allows: every shown layer's row fits the height, both grids the
  // width; at least 32 px (the grid scrolls beyond that).
  int rows = 1, cols = 0;
  for (int s = 0; s < kSlots; ++s)
    if (const auto& t = state.shown->traces[s]) {
      rows = std::max(
          rows, static_cast<int>(
                    parse_index_filter(state.view.layer_filter, static_cast<int>(t->layers.size())).size()));
      cols += static_cast<int>(
          parse_index_filter(state.view.head_filter, static_cast<int>(t->config.map_heads())).size());
    }
  ImGui::BeginChild("modelgrid", ImVec2(0, 0), false, ImGuiWindowFlags_HorizontalScrollbar);
  const ImVec2 room = ImGui::GetContentRegionAvail();
  const float pad = ImGui::GetStyle().ItemSpacing.x;
  const float label_w = ImGui::CalcTextSize("L00  lambda -0.000").x;
  const float thumb =
      std::clamp(std::min((room.y - 2 * ImGui::GetTextLineHeightWithSpacing()) / rows - pad,
                          (room.x - 3 * ImGui::GetFontSize() - kSlots * label_w) / std::max(1, cols) - pad),
                 32.0f, 320.0f);
  for (int s = 0; s < kSlots; ++s) {
    if (s) ImGui::SameLine(0, 3 * ImGui::GetFontSize());
    ImGui::BeginGroup();
    if (const auto& t = state.shown->traces[s])
      model_views[s].draw(state, *t, s, state.shown->request, renderer, thumb);
    ImGui::EndGroup();
  }
  ImGui::EndChild();
}

}  // namespace difflens::app
