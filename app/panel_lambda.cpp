// The λ view: for each DIFF model, λ per layer as a plot (x = layer, y = λ with ticks, λ_init(l) as a
// second line, the selected layer marked, values on hover, a click selects the layer) beside the table of
// λ = exp(λq1·λk1) − exp(λq2·λk2) + λ_init.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "app/panels.h"
#include "app/plot.h"

namespace difflens::app {
namespace {

void draw_lambda_plot(GuiState& state, const Trace& t, int slot, ImVec2 min, ImVec2 max) {
  const int L = static_cast<int>(t.layers.size());
  double lo = 0, hi = 1;
  for (const auto& l : t.layers) {
    lo = std::min({lo, l.lambda, l.lambda_init});
    hi = std::max({hi, l.lambda, l.lambda_init});
  }
  const std::string title =
      (t.config.name.empty() ? std::string("DIFF") : t.config.name) + ":  \xce\xbb per layer";
  const PlotArea a = draw_plot_frame(min, max, lo, hi + (hi - lo) * 0.05, "%.2f", true, title);
  state.drawn.note("lambda." + std::to_string(slot), a.min.x, a.min.y, a.max.x, a.max.y);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float pad = ImGui::GetFontSize();
  const float k = ImGui::GetFontSize() / 16.0f;  // line widths and markers follow the text size
  auto x_of = [&](int i) {
    return L <= 1 ? (a.min.x + a.max.x) / 2
                  : a.min.x + pad +
                        (a.max.x - a.min.x - 2 * pad) * static_cast<float>(i) / static_cast<float>(L - 1);
  };
  // The selected layer, then the x ticks (every layer while they fit).
  const int sel = state.view.layer;
  if (sel >= 0 && sel < L)
    dl->AddRectFilled(ImVec2(x_of(sel) - 3 * k, a.min.y), ImVec2(x_of(sel) + 3 * k, a.max.y),
                      IM_COL32(255, 160, 40, 110));
  const int every =
      std::max(1, static_cast<int>(std::ceil(L * ImGui::CalcTextSize("000").x / (a.max.x - a.min.x))));
  for (int i = 0; i < L; i += every) {
    const std::string s = std::to_string(t.layers[static_cast<size_t>(i)].index);
    dl->AddLine(ImVec2(x_of(i), a.max.y), ImVec2(x_of(i), a.max.y + 4), IM_COL32(90, 90, 90, 255));
    dl->AddText(ImVec2(x_of(i) - ImGui::CalcTextSize(s.c_str()).x / 2, a.max.y + 3),
                ImGui::GetColorU32(ImGuiCol_Text), s.c_str());
  }
  // The key, in the plot's top left corner, and the x axis' title.
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  const float th = ImGui::GetTextLineHeight();
  ImVec2 key(a.min.x + th * 0.6f, a.min.y + th * 0.4f);
  dl->AddLine(ImVec2(key.x, key.y + th / 2), ImVec2(key.x + th * 1.5f, key.y + th / 2),
              IM_COL32(40, 100, 190, 255), 2.5f * k);
  dl->AddText(ImVec2(key.x + th * 2, key.y), text, "\xce\xbb (the selected layer orange)");
  key.y += th * 1.3f;
  for (int d = 0; d < 3; ++d)
    dl->AddLine(ImVec2(key.x + th * 0.5f * d, key.y + th / 2),
                ImVec2(key.x + th * 0.5f * d + th * 0.3f, key.y + th / 2), IM_COL32(120, 120, 120, 255),
                2.0f * k);
  dl->AddText(ImVec2(key.x + th * 2, key.y), text, "\xce\xbb_init(l)");
  // λ_init(l) dashed, λ solid with points.
  for (int i = 0; i + 1 < L; ++i) {
    const ImVec2 p0(x_of(i), a.y(t.layers[static_cast<size_t>(i)].lambda_init)),
        p1(x_of(i + 1), a.y(t.layers[static_cast<size_t>(i + 1)].lambda_init));
    constexpr int kDashes = 8;
    for (int d = 0; d < kDashes; d += 2)
      dl->AddLine(ImVec2(p0.x + (p1.x - p0.x) * d / kDashes, p0.y + (p1.y - p0.y) * d / kDashes),
                  ImVec2(p0.x + (p1.x - p0.x) * (d + 1) / kDashes, p0.y + (p1.y - p0.y) * (d + 1) / kDashes),
                  IM_COL32(120, 120, 120, 255), 2.0f * k);
    dl->AddLine(ImVec2(x_of(i), a.y(t.layers[static_cast<size_t>(i)].lambda)),
                ImVec2(x_of(i + 1), a.y(t.layers[static_cast<size_t>(i + 1)].lambda)),
                IM_COL32(40, 100, 190, 255), 2.5f * k);
  }
  for (int i = 0; i < L; ++i) {
    dl->AddCircleFilled(ImVec2(x_of(i), a.y(t.layers[static_cast<size_t>(i)].lambda)),
                        i == sel ? 6.0f * k : 4.0f * k,
                        i == sel ? IM_COL32(240, 130, 0, 255) : IM_COL32(40, 100, 190, 255));
    dl->AddCircleFilled(ImVec2(x_of(i), a.y(t.layers[static_cast<size_t>(i)].lambda_init)), 2.5f * k,
                        IM_COL32(120, 120, 120, 255));
  }
  ImGui::SetCursorScreenPos(a.min);
  ImGui::InvisibleButton(("##lambda" + std::to_string(slot)).c_str(),
                         ImVec2(std::max(1.0f, a.max.x - a.min.x), std::max(1.0f, a.max.y - a.min.y)));
  if (ImGui::IsItemHovered() && L > 0) {
    int best = 0;
    for (int i = 1; i < L; ++i)
      if (std::fabs(x_of(i) - ImGui::GetIO().MousePos.x) < std::fabs(x_of(best) - ImGui::GetIO().MousePos.x))
        best = i;
    const LayerTrace& l = t.layers[static_cast<size_t>(best)];
    ImGui::SetTooltip(
        "layer %d\n\xce\xbb = %.4f\n  = exp(q1.k1) %.4f - exp(q2.k2) %.4f + \xce\xbb_init %.4f\n(click: select the layer)",
        l.index, l.lambda, l.lambda_exp1, l.lambda_exp2, l.lambda_init);
    if (ImGui::IsItemClicked()) state.view.layer = l.index;
  }
}

void draw_lambda_table(const GuiState& state, const Trace& t) {
  if (!ImGui::BeginTable(("lambda-table" + t.config.name).c_str(), 5,
                         ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit |
                             ImGuiTableFlags_ScrollY))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  for (const char* h : {"layer", "\xce\xbb", "exp(\xce\xbbq1\xc2\xb7\xce\xbbk1)",
                        "exp(\xce\xbbq2\xc2\xb7\xce\xbbk2)", "\xce\xbb_init"})
    ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  for (const auto& l : t.layers) {
    ImGui::TableNextRow();
    if (l.index == state.view.layer)
      ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg1, IM_COL32(255, 200, 120, 120));
    ImGui::TableNextColumn();
    ImGui::Text("%d", l.index);
    for (double v : {l.lambda, l.lambda_exp1, l.lambda_exp2, l.lambda_init}) {
      ImGui::TableNextColumn();
      ImGui::Text("%.4f", v);
    }
  }
  ImGui::EndTable();
}

}  // namespace

void draw_lambda_view(GuiState& state) {
  const RunResult& r = *state.shown;
  int slots[kSlots], n = 0;
  for (int s = 0; s < kSlots; ++s)
    if (r.traces[s] && r.traces[s]->config.is_diff() && !r.traces[s]->layers.empty()) slots[n++] = s;
  if (n == 0) {
    ImGui::TextWrapped(
        "\xce\xbb exists only in DIFF models: neither slot holds one. Open a DIFF or DiffLlama model "
        "(File menu) to see it.");
    return;
  }
  const ImVec2 origin = ImGui::GetCursorScreenPos(), room = ImGui::GetContentRegionAvail();
  const float gap = ImGui::GetFontSize() * 0.8f;
  // The table beside the plot, or under it when the view is narrow.
  const float table_w = ImGui::GetFontSize() * 24;
  const bool below = room.x < table_w * 2.2f;
  const float h = (room.y - gap * static_cast<float>(n - 1)) / static_cast<float>(n);
  for (int k = 0; k < n; ++k) {
    const Trace& t = *r.traces[slots[k]];
    const ImVec2 min(origin.x, origin.y + static_cast<float>(k) * (h + gap));
    const float table_h =
        below ? std::min(h * 0.4f, ImGui::GetFrameHeightWithSpacing() * (t.layers.size() + 1.5f)) : h;
    draw_lambda_plot(state, t, slots[k], min,
                     below ? ImVec2(origin.x + room.x, min.y + h - table_h - gap)
                           : ImVec2(origin.x + room.x - table_w - gap, min.y + h));
    ImGui::SetCursorScreenPos(below ? ImVec2(origin.x, min.y + h - table_h)
                                    : ImVec2(origin.x + room.x - table_w, min.y));
    ImGui::BeginChild(("lambda-table-" + std::to_string(k)).c_str(),
                      ImVec2(below ? room.x : table_w, table_h));
    draw_lambda_table(state, t);
    ImGui::EndChild();
  }
  ImGui::SetCursorScreenPos(origin);
  ImGui::Dummy(room);
}

}  // namespace difflens::app
