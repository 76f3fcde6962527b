// The "Figure 1" view: for each model, the selected query's attention over every key it sees as bars (the
// paper's Figure 1: DIFF's row lands on the answer, the baseline's spreads over the context), the answer
// span in its own colour, the shares of the answer and of the noise written on the chart, token labels
// under the bars where they fit, and the model's next-token top 5 beside it.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "app/panels.h"
#include "app/plot.h"
#include "core/metrics.h"
#include "core/tiles.h"
#include "viz/token_text.h"

namespace difflens::app {
namespace {

struct QueryRow {
  std::vector<float> values;  // keys 0..q
  std::string what;           // "A1 - lambda A2" or "A"
  std::string error;
};

// The selected query's row of the selected head's map (a long prompt's row is recomputed exactly).
QueryRow query_row(const GuiState& state, const Trace& t, int head, int q) {
  QueryRow r;
  const int layer = state.view.layer;
  if (layer < 0 || layer >= static_cast<int>(t.layers.size())) return r;
  const LayerTrace& l = t.layers[static_cast<size_t>(layer)];
  const auto it = std::find(l.heads.begin(), l.heads.end(), head);
  if (it == l.heads.end() || (l.a.empty() && l.pooled == 0)) {
    r.error = "this trace kept no map of layer " + std::to_string(layer) + " head " + std::to_string(head);
    return r;
  }
  const int64_t T = t.length(), h = it - l.heads.begin();
  r.what = t.config.is_diff() ? "A1 \xe2\x88\x92 \xce\xbb A2" : "A";
  try {
    if (l.pooled > 0) {
      const AttentionTile tile = attention_tile(t, layer, head, q, 1, 0, q + 1);
      r.values = tile.a;
    } else {
      const float* row = l.a.data.data() + (h * T + q) * T;
      r.values.assign(row, row + q + 1);
    }
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

// The model's next-token top 5 after the prompt's last token (the only position whose distribution the trace
// keeps): said so when the query is another token.
void draw_next_tokens(const Trace& t, int query, ImVec2 at, float width) {
  // Drawn into its column and cut at the column's edge (a narrow view keeps the chart's width).
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float line = ImGui::GetTextLineHeightWithSpacing();
  const int last = static_cast<int>(t.length()) - 1;
  const std::string head = query == last ? "next token" : "after token " + std::to_string(last);
  const size_t n = std::min<size_t>(5, t.next_token.size());
  dl->PushClipRect(at, ImVec2(at.x + width, at.y + line * static_cast<float>(n + 1)), true);
  dl->AddText(at, ImGui::GetColorU32(ImGuiCol_TextDisabled), head.c_str());
  for (size_t i = 0; i < n; ++i) {
    char text[160];
    std::snprintf(text, sizeof text, "%5.1f %%  %s", 100.0 * t.next_token[i].probability,
                  viz::display_token(t.next_token[i].text, viz::Spaces::Visible).c_str());
    dl->AddText(ImVec2(at.x, at.y + line * static_cast<float>(i + 1)), ImGui::GetColorU32(ImGuiCol_Text),
                text);
  }
  dl->PopClipRect();
  if (query != last && ImGui::IsMouseHoveringRect(at, ImVec2(at.x + width, at.y + line)))
    ImGui::SetTooltip(
        "The next-token distribution is kept for the prompt's last token (%d) only,\nnot for the "
        "selected query (%d).",
        last, query);
}

// One model's chart in [min, max]; the y range is [lo, hi].
void draw_row_chart(GuiState& state, const Trace& t, int slot, const QueryRow& row, int q, ImVec2 min,
                    ImVec2 max, double lo, double hi) {
  const SelectionState& sel = state.selection;
  const std::string name = t.config.name.empty() ? to_string(t.config.attention) : t.config.name;
  const std::vector<std::string>& labels = state.shown->labels[static_cast<size_t>(slot)];
  char title[256];
  std::snprintf(title, sizeof title, "%s  L%d H%d   query %d '%s':  %s over keys 0-%d", name.c_str(),
                state.view.layer, state.view.head[slot], q, labels[static_cast<size_t>(q)].c_str(),
                row.what.c_str(), q);
  const PlotArea a = draw_plot_frame(min, max, lo, hi, "%.2f", true, title);
  state.drawn.note("chart." + std::to_string(slot), a.min.x, a.min.y, a.max.x, a.max.y);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const int n = q + 1;
  const float bw = (a.max.x - a.min.x) / static_cast<float>(n);
  const bool answer_marked = sel.answer_begin >= 0 && sel.answer_end > sel.answer_begin;
  auto in_answer = [&](int j) { return answer_marked && j >= sel.answer_begin && j < sel.answer_end; };
  const float zero = a.y(0);
  for (int j = 0; j < n; ++j) {
    const float v = row.values[static_cast<size_t>(j)];
    const ImU32 col = in_answer(j)           ? IM_COL32(20, 160, 60, 255)
                      : j == q               ? IM_COL32(240, 130, 0, 255)
                      : j == sel.hovered_key ? IM_COL32(230, 0, 150, 255)
                      : v < 0                ? IM_COL32(200, 90, 90, 255)
                                             : IM_COL32(50, 110, 180, 255);
    const float x0 = a.min.x + bw * static_cast<float>(j), x1 = std::max(x0 + 1.0f, x0 + bw * 0.85f);
    const float y = std::clamp(a.y(v), a.min.y, a.max.y);
    dl->AddRectFilled(ImVec2(x0, std::min(y, zero)), ImVec2(x1, std::max(y, zero)), col);
  }
  if (answer_marked) {  // a band under the answer's keys, so a small share is still seen
    const float x0 = a.min.x + bw * static_cast<float>(std::min(sel.answer_begin, n)),
                x1 = a.min.x + bw * static_cast<float>(std::min(sel.answer_end, n));
    if (x1 > x0)
      dl->AddRectFilled(ImVec2(x0, a.max.y - 3), ImVec2(std::max(x1, x0 + 2), a.max.y),
                        IM_COL32(20, 160, 60, 255));
  }
  // Token labels under the bars, where they fit: the answer's and the query's first, then left to right.
  const float th = ImGui::GetTextLineHeight();
  std::vector<std::pair<float, float>> used;
  auto try_label = [&](int j, ImU32 col) {
    const std::string& s = labels[static_cast<size_t>(j)];
    const float w = ImGui::CalcTextSize(s.c_str()).x;
    const float cx = a.min.x + bw * (static_cast<float>(j) + 0.5f);
    const float x0 = std::clamp(cx - w / 2, a.min.x, a.max.x - w), x1 = x0 + w;
    for (const auto& u : used)
      if (x0 < u.second + 4 && x1 > u.first - 4) return;
    used.push_back({x0, x1});
    dl->AddText(ImVec2(x0, a.max.y + 2), col, s.c_str());
  };
  if (answer_marked)
    for (int j = sel.answer_begin; j < std::min(sel.answer_end, n); ++j)
      try_label(j, IM_COL32(10, 120, 40, 255));
  try_label(q, IM_COL32(200, 100, 0, 255));
  if (bw * 2.5f >= th)
    for (int j = 0; j < n; ++j) try_label(j, ImGui::GetColorU32(ImGuiCol_TextDisabled));
  // The shares, at the right end of the title line (over the title's end where the chart is narrow).
  if (answer_marked) {
    const AttentionShare share = query_row_share(row.values.data(), q, {sel.answer_begin, sel.answer_end});
    char text[160];
    std::snprintf(text, sizeof text, "to the answer %.3f   noise %.3f", share.answer, share.noise);
    if (ImGui::CalcTextSize(text).x > (max.x - min.x) * 0.6f)
      std::snprintf(text, sizeof text, "answer %.3f  noise %.3f", share.answer, share.noise);
    const ImVec2 ts = ImGui::CalcTextSize(text);
    const ImVec2 p(std::max(min.x, max.x - ts.x), min.y);
    dl->AddRectFilled(ImVec2(p.x - th * 0.6f, p.y), ImVec2(max.x, p.y + ts.y),
                      ImGui::GetColorU32(ImGuiCol_WindowBg));
    dl->AddText(p, IM_COL32(10, 110, 40, 255), text);
    if (ImGui::IsMouseHoveringRect(p, ImVec2(max.x, p.y + ts.y)))
      ImGui::SetTooltip("%s.\nThe query's own token is neither answer nor noise.", kAttentionShareDefinition);
  }
  // Hover: the bar's key and value.
  ImGui::SetCursorScreenPos(a.min);
  ImGui::InvisibleButton(("##bars" + std::to_string(slot)).c_str(),
                         ImVec2(std::max(1.0f, a.max.x - a.min.x), std::max(1.0f, a.max.y - a.min.y)));
  if (ImGui::IsItemHovered()) {
    const int j = std::clamp(static_cast<int>((ImGui::GetIO().MousePos.x - a.min.x) / bw), 0, n - 1);
    state.selection.hovered_next = j;
    ImGui::SetTooltip("key %d  %s\n%s = %.5f", j, labels[static_cast<size_t>(j)].c_str(), row.what.c_str(),
                      row.values[static_cast<size_t>(j)]);
  }
}

}  // namespace

void draw_query_row_view(GuiState& state) {
  const RunResult& r = *state.shown;
  int slots[kSlots], n = 0;
  for (int s = 0; s < kSlots; ++s)
    if (r.traces[s]) slots[n++] = s;
  if (n == 0) return;
  ImGui::Checkbox("one y scale", &state.layout.shared_rows_scale);
  if (state.selection.answer_begin >= 0) {
    flow_next(ImGui::CalcTextSize("answer").x);
    ImGui::TextColored(ImVec4(0.08f, 0.55f, 0.22f, 1), "answer");
  }
  flow_next(ImGui::CalcTextSize("query").x);
  ImGui::TextColored(ImVec4(0.85f, 0.45f, 0.0f, 1), "query");
  const char* hint = state.selection.answer_begin >= 0 ? "(click a token: the query)"
                                                       : "(right-drag over tokens: an answer span)";
  flow_next(ImGui::CalcTextSize(hint).x);
  ImGui::TextDisabled("%s", hint);
  QueryRow rows[kSlots];
  double lo = 0, hi = 0;  // over both rows (the shared scale)
  for (int k = 0; k < n; ++k) {
    const Trace& t = *r.traces[slots[k]];
    rows[k] = query_row(state, t, state.view.head[slots[k]],
                        std::clamp(state.selection.query, 0, static_cast<int>(t.length()) - 1));
    for (float v : rows[k].values)
      lo = std::min(lo, static_cast<double>(v)), hi = std::max(hi, static_cast<double>(v));
  }
  const ImVec2 origin = ImGui::GetCursorScreenPos(), room = ImGui::GetContentRegionAvail();
  const float gap = ImGui::GetFontSize() * 0.6f;
  const float next_w = std::min(ImGui::GetFontSize() * 9, room.x * 0.2f);
  const float chart_h = (room.y - gap * static_cast<float>(n - 1)) / static_cast<float>(n);
  for (int k = 0; k < n; ++k) {
    const Trace& t = *r.traces[slots[k]];
    const ImVec2 min(origin.x, origin.y + static_cast<float>(k) * (chart_h + gap));
    const ImVec2 max(origin.x + room.x - next_w - gap, min.y + chart_h);
    if (!rows[k].error.empty() || rows[k].values.empty()) {
      ImGui::SetCursorScreenPos(min);
      ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s",
                         rows[k].error.empty() ? "no row" : rows[k].error.c_str());
      continue;
    }
    double klo = lo, khi = hi;
    if (!state.layout.shared_rows_scale) {
      klo = khi = 0;
      for (float v : rows[k].values)
        klo = std::min(klo, static_cast<double>(v)), khi = std::max(khi, static_cast<double>(v));
    }
    if (khi <= klo) khi = klo + 1;
    const int qk = std::clamp(state.selection.query, 0, static_cast<int>(t.length()) - 1);
    draw_row_chart(state, t, slots[k], rows[k], qk, min, max, klo, khi + (khi - klo) * 0.08);
    draw_next_tokens(t, qk, ImVec2(max.x + gap, min.y), next_w);
  }
  ImGui::SetCursorScreenPos(origin);
  ImGui::Dummy(room);
}

}  // namespace difflens::app
