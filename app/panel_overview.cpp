// The first tab, "Query row, lambda, next token": the selected query's row of each model's map, λ per layer
// of the DIFF model, and each model's next-token probabilities.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "app/panels.h"
#include "core/metrics.h"
#include "core/tiles.h"

namespace difflens::app {
namespace {

// The selected query's attention over its keys, as bars, for one trace.
void draw_row_view(const GuiState& state, const Trace& t, int head) {
  const int layer = state.view.layer;
  if (layer < 0 || layer >= static_cast<int>(t.layers.size())) return;
  const LayerTrace& l = t.layers[static_cast<size_t>(layer)];
  auto it = std::find(l.heads.begin(), l.heads.end(), head);
  if (it == l.heads.end() || (l.a.empty() && l.pooled == 0)) return;
  const int64_t T = t.length(), h = it - l.heads.begin();
  const int q = std::clamp(state.selection.query, 0, static_cast<int>(T) - 1);
  // Long prompts keep no full rows: the selected row is recomputed exactly (one 1 x T tile).
  std::vector<float> tile_row;
  if (l.pooled > 0) tile_row = attention_tile(t, layer, head, q, 1, 0, T).a;
  const float* row = l.pooled > 0 ? tile_row.data() : l.a.data.data() + (h * T + q) * T;
  float lo = 0, hi = 0;
  for (int j = 0; j <= q; ++j) {
    lo = std::min(lo, row[j]);
    hi = std::max(hi, row[j]);
  }
  char overlay[160];
  std::snprintf(overlay, sizeof overlay, "%s, query %d '%s': %s over keys 0..%d", t.config.name.c_str(), q,
                t.tokens[static_cast<size_t>(q)].c_str(), t.config.is_diff() ? "A1 - lambda A2" : "A", q);
  ImGui::TextUnformatted(overlay);  // above the bars, not over them
  ImGui::PlotHistogram(("##row" + t.config.name).c_str(), row, q + 1, 0, nullptr, lo, hi > lo ? hi : lo + 1,
                       ImVec2(ImGui::GetContentRegionAvail().x, ImGui::GetTextLineHeight() * 3.5f));
}

// λ per layer of a DIFF trace: the chart and the numbers (λ = exp1 - exp2 + λ_init).
void draw_lambda_panel(const Trace& t) {
  std::vector<float> lambdas, inits;
  for (const auto& l : t.layers) {
    lambdas.push_back(static_cast<float>(l.lambda));
    inits.push_back(static_cast<float>(l.lambda_init));
  }
  ImGui::Text("lambda per layer (%s)", t.config.name.c_str());
  ImGui::PlotLines("##lambda", lambdas.data(), static_cast<int>(lambdas.size()), 0, "lambda", -0.2f, 1.2f,
                   ImVec2(ImGui::GetContentRegionAvail().x, ImGui::GetTextLineHeight() * 3));
  if (ImGui::BeginTable("lambda", 5, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    for (const char* h : {"layer", "lambda", "exp(q1.k1)", "exp(q2.k2)", "lambda_init"})
      ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (const auto& l : t.layers) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%d", l.index);
      for (double v : {l.lambda, l.lambda_exp1, l.lambda_exp2, l.lambda_init}) {
        ImGui::TableNextColumn();
        ImGui::Text("%.4f", v);
      }
    }
    ImGui::EndTable();
  }
}

void draw_next_tokens(const Trace& t) {
  ImGui::Text("next token (%s)", t.config.name.c_str());
  for (size_t i = 0; i < std::min<size_t>(5, t.next_token.size()); ++i)
    ImGui::Text("%5.1f %%  %s", 100.0 * t.next_token[i].probability, t.next_token[i].text.c_str());
}

}  // namespace

// The first tab: each model's row of the selected query, then λ per layer and next-token panels.
void draw_overview_tab(const GuiState& state) {
  // Row view for both models, then λ and next-token panels side by side.
  const float col = ImGui::GetContentRegionAvail().x / 2 - ImGui::GetStyle().ItemSpacing.x;
  for (int s = 0; s < kSlots; ++s) {
    if (s) ImGui::SameLine();
    ImGui::BeginChild(s == 0 ? "row0" : "row1", ImVec2(col, ImGui::GetTextLineHeight() * 5.5f));
    if (const auto& t = state.shown->traces[s]) draw_row_view(state, *t, state.view.head[s]);
    ImGui::EndChild();
  }
  ImGui::BeginChild("lambda", ImVec2(col, 0));
  for (int s = 0; s < kSlots; ++s)
    if (const auto& t = state.shown->traces[s]; t && t->config.is_diff()) draw_lambda_panel(*t);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("next", ImVec2(col, 0));
  for (int s = 0; s < kSlots; ++s)
    if (const auto& t = state.shown->traces[s]) draw_next_tokens(*t);
  ImGui::EndChild();
}

}  // namespace difflens::app
