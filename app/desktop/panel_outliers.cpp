// The Outliers tab: the paper's Table 5 readout for the prompt on screen (largest |attention logit| and
// |hidden state| per model) and their log-binned histograms.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "app/desktop/panels.h"
#include "app/desktop/plot.h"

namespace difflens::app {
namespace {

// Two models' |value| histograms on the same log10 axis (bins merged to 4 per decade), log-count bars,
// each model in its identity colour (viz::kModelColours), side by side in each bin.
// `with_top`: each name followed by its largest value (lecture mode, where the tables are left out).
void draw_histograms(const char* title, const ValueStats* stats[kSlots], const char* names[kSlots],
                     ImVec2 size, bool with_top) {
  constexpr int kMerge = LogHistogram::kBinsPerDecade / 4;
  constexpr int kBins = LogHistogram::kBins / kMerge;
  double counts[kSlots][kBins] = {};
  int first = kBins, last = -1;
  double peak = 1;
  for (int s = 0; s < kSlots; ++s) {
    if (!stats[s]) continue;
    for (int b = 0; b < LogHistogram::kBins; ++b)
      counts[s][b / kMerge] += static_cast<double>(stats[s]->histogram.counts[b]);
    for (int b = 0; b < kBins; ++b)
      if (counts[s][b] > 0) {
        first = std::min(first, b);
        last = std::max(last, b);
        peak = std::max(peak, counts[s][b]);
      }
  }
  ImGui::TextUnformatted(title);
  for (int s = 0; s < kSlots; ++s)  // each name in its bars' colour
    if (stats[s]) {
      ImGui::SameLine();
      if (with_top && !stats[s]->top.empty())
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(model_ink(s)), "%s top-1 %.1f", names[s],
                           stats[s]->top[0]);
      else
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(model_ink(s)), "%s", names[s]);
    }
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::Dummy(size);
  if (last < first) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(p, ImVec2(p.x + size.x, p.y + size.y), IM_COL32(255, 255, 255, 255));
  const float label_h = 2 * ImGui::GetTextLineHeight();  // decade ticks, then the axis title
  const float plot_h = size.y - label_h;
  const int n = last - first + 1;
  const float bw = size.x / static_cast<float>(n);
  for (int b = first; b <= last; ++b)
    for (int s = 0; s < kSlots; ++s) {
      if (!stats[s] || counts[s][b] <= 0) continue;
      const float h =
          plot_h * static_cast<float>(std::log10(1 + counts[s][b]) / std::log10(1 + peak));  // log count
      const float x0 = p.x + bw * static_cast<float>(b - first) + bw * 0.5f * static_cast<float>(s);
      dl->AddRectFilled(ImVec2(x0, p.y + plot_h - h), ImVec2(x0 + bw * 0.5f, p.y + plot_h),
                        model_ink(s, false, 230));
    }
  // Decade ticks on the |value| axis.
  for (int b = first; b <= last + 1; ++b) {
    const double lower = LogHistogram::bin_lower(b * kMerge);
    if (std::fabs(std::log10(lower) - std::round(std::log10(lower))) > 1e-6) continue;
    const float x = p.x + bw * static_cast<float>(b - first);
    dl->AddLine(ImVec2(x, p.y), ImVec2(x, p.y + plot_h), IM_COL32(0, 0, 0, 60));
    char t[16];
    std::snprintf(t, sizeof t, "1e%d", static_cast<int>(std::round(std::log10(lower))));
    // Right of its tick, or left of it where the label would run past the plot's right edge.
    const float w = ImGui::CalcTextSize(t).x;
    dl->AddText(ImVec2(x + 2 + w > p.x + size.x ? x - 2 - w : x + 2, p.y + plot_h), IM_COL32(60, 60, 60, 255),
                t);
  }
  const char* x_title = "|value| (log scale)";
  dl->AddText(ImVec2(p.x + size.x - ImGui::CalcTextSize(x_title).x - 2, p.y + plot_h + label_h / 2),
              IM_COL32(60, 60, 60, 255), x_title);
  char peak_text[48];  // the count axis: log scale, its top is the largest bin
  std::snprintf(peak_text, sizeof peak_text, "count (log): top %.0f", peak);
  dl->AddText(ImVec2(p.x + 4, p.y + 2), IM_COL32(60, 60, 60, 255), peak_text);
}

// The paper's Table 5 readout: k-th largest |value| and the median, both models side by side.
void draw_outlier_table(const char* id, const ValueStats* stats[kSlots], const char* names[kSlots]) {
  if (!ImGui::BeginTable(id, 7, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) return;
  for (const char* h : {"model", "top-1", "top-2", "top-3", "top-10", "top-100", "median"})
    ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  for (int s = 0; s < kSlots; ++s) {
    if (!stats[s]) continue;
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(names[s]);
    for (int k : {1, 2, 3, 10, 100}) {
      ImGui::TableNextColumn();
      ImGui::Text("%.3f", stats[s]->top_k(k));
    }
    ImGui::TableNextColumn();
    ImGui::Text("%.3f", stats[s]->median);
  }
  ImGui::EndTable();
}

}  // namespace

bool outlier_stats(const Trace& t, int layer, ValueStats& logits, ValueStats& hidden) {
  if (layer < 0) {
    logits = pooled_logit_stats(t);
    hidden = pooled_hidden_stats(t);
    return true;
  }
  if (layer >= static_cast<int>(t.layers.size())) return false;
  logits = t.layers[static_cast<size_t>(layer)].logit_stats;
  hidden = t.layers[static_cast<size_t>(layer)].hidden_stats;
  return true;
}

std::string outlier_prompt_line(const GuiState& state) {
  if (!state.shown) return "";
  const RunResult& r = *state.shown;
  const int layer = state.view.outlier_layer;
  float logit[kSlots] = {0, 0}, hidden[kSlots] = {0, 0};
  std::string names[kSlots];
  for (int s = 0; s < kSlots; ++s) {
    const auto& t = r.traces[static_cast<size_t>(s)];
    if (!t) return "";
    names[s] = t->config.name.empty() ? to_string(t->config.attention) : t->config.name;
    ValueStats l, h;
    if (!outlier_stats(*t, layer, l, h)) return "";
    logit[s] = l.top_k(1);
    hidden[s] = h.top_k(1);
  }
  auto word = [](float a, float b) { return a > b ? "larger" : a < b ? "smaller" : "equal"; };
  char line[512];
  if (state.lecture) {  // the slide's line: the numbers, and where they go against the cards
    std::snprintf(line, sizeof line,
                  "This prompt, %s vs %s: largest |logit| %.1f vs %.1f, |hidden| %.1f vs %.1f",
                  names[0].c_str(), names[1].c_str(), logit[0], logit[1], hidden[0], hidden[1]);
    std::string out = line;
    const std::string larger = logit[0] > logit[1] && hidden[0] > hidden[1] ? "both larger"
                               : logit[0] > logit[1]                        ? "|logit| larger"
                               : hidden[0] > hidden[1]                      ? "|hidden| larger"
                                                                            : "";
    if (!larger.empty())
      out += " (" + larger + " here: one prompt can go against the cards' haystack figures)";
    return out;
  }
  std::snprintf(line, sizeof line,
                "This prompt (%s): largest |attention logit| %s %.1f vs %s %.1f (%s), |hidden state| %.1f vs "
                "%.1f (%s)",
                layer < 0 ? "all layers pooled" : ("layer " + std::to_string(layer)).c_str(),
                names[0].c_str(), logit[0], names[1].c_str(), logit[1], word(logit[0], logit[1]), hidden[0],
                hidden[1], word(hidden[0], hidden[1]));
  std::string out = line;
  if (logit[0] > logit[1] || hidden[0] > hidden[1])
    out +=
        ": the card's line is over the whole haystack, and one prompt can go the other way, as this one "
        "does";
  return out;
}

void draw_outlier_panel(GuiState& state) {
  const RunResult& r = *state.shown;
  int& layer_choice = state.view.outlier_layer;
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  int layers = 0;
  for (const auto& t : r.traces)
    if (t) layers = std::max(layers, static_cast<int>(t->layers.size()));
  ImGui::SliderInt("layer (-1: all layers pooled)", &layer_choice, -1, layers - 1);
  ValueStats logits[kSlots], hidden[kSlots];
  const ValueStats* lp[kSlots] = {nullptr, nullptr};
  const ValueStats* hp[kSlots] = {nullptr, nullptr};
  const char* names[kSlots] = {"", ""};
  for (int s = 0; s < kSlots; ++s) {
    const auto& t = r.traces[s];
    if (!t) continue;
    names[s] = t->config.name.empty() ? to_string(t->config.attention) : t->config.name.c_str();
    if (!outlier_stats(*t, layer_choice, logits[s], hidden[s])) continue;
    lp[s] = &logits[s];
    hp[s] = &hidden[s];
  }
  draw_card_view_lines(state, state.lecture ? "outliers-brief" : "outliers");
  // What this prompt shows, in words, so that the card's haystack figure never stands unexplained above a
  // prompt that goes the other way.
  if (const std::string mine = outlier_prompt_line(state); !mine.empty()) {
    ImGui::PushTextWrapPos(ImGui::GetContentRegionMax().x);
    ImGui::TextUnformatted(mine.c_str());
    ImGui::PopTextWrapPos();
  }
  // Side by side where both tables fit (seven columns each), else one above the other. The histograms take
  // the height the titles, the tables (header and two models) and the note leave.
  const ImVec2 room = ImGui::GetContentRegionAvail();
  const bool stacked = room.x < ImGui::GetFontSize() * 72;
  const float w = stacked ? room.x : room.x / 2 - ImGui::GetStyle().ItemSpacing.x;
  const ImGuiStyle& st = ImGui::GetStyle();
  const float line = ImGui::GetTextLineHeightWithSpacing();
  const float table = 3 * (ImGui::GetTextLineHeight() + 2 * st.CellPadding.y) + st.ItemSpacing.y + 2;
  // In lecture mode the histograms are the slide: their tables are left out (each name carries its top-1).
  const bool tables = !state.lecture;
  const float group = line + (tables ? table : 0.0f) + st.ItemSpacing.y;  // a histogram's title and table
  // Two pixels kept free: a view one pixel taller than its room grows a scrollbar, which narrows it under the
  // histograms sized for its whole width (the layout check caught that at 1280x800 in lecture mode).
  const float rest =
      room.y - line /* the note */ - (stacked ? 2 : 1) * group - (stacked ? st.ItemSpacing.y : 0) - 2;
  const float h = std::max(ImGui::GetTextLineHeight() * (state.lecture ? 3 : 7), stacked ? rest / 2 : rest);
  ImGui::BeginGroup();
  draw_histograms("|attention logits| (DIFF: both components pooled; log count)", lp, names, ImVec2(w, h),
                  !tables);
  state.drawn.note("outliers.logits", ImGui::GetItemRectMin().x, ImGui::GetItemRectMin().y,
                   ImGui::GetItemRectMax().x, ImGui::GetItemRectMax().y);
  if (tables) draw_outlier_table("logit_table", lp, names);
  ImGui::EndGroup();
  if (!stacked) ImGui::SameLine();
  ImGui::BeginGroup();
  draw_histograms("|hidden states| at layer outputs (log count)", hp, names, ImVec2(w, h), !tables);
  state.drawn.note("outliers.hidden", ImGui::GetItemRectMin().x, ImGui::GetItemRectMin().y,
                   ImGui::GetItemRectMax().x, ImGui::GetItemRectMax().y);
  if (tables) draw_outlier_table("hidden_table", hp, names);
  ImGui::EndGroup();
  if (layer_choice < 0)
    ImGui::TextDisabled("pooled over layers: top-k exact; median from the log histogram (within 3.7 %%)");
}

}  // namespace difflens::app
