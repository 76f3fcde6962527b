// The λ view. For each DIFF V1 model, λ per layer as a plot (x = layer, y = λ with ticks, λ_init(l) as a
// second line, the selected layer marked, values on hover, a click selects the layer) beside the table of
// λ = exp(λq1·λk1) − exp(λq2·λk2) + λ_init. For each DIFF V2 model, the selected layer's λ(token, head) =
// σ(x_t · w_λ,h) as a heatmap (tokens along x, heads down, hover gives the value and its logit, a click
// selects the head and the query token) beside every layer's λ distribution (range, 10-90% box, median).
#include <imgui.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "app/desktop/panels.h"
#include "app/desktop/plot.h"
#include "core/formats/error.h"
#include "viz/chart.h"
#include "viz/colormap.h"

namespace difflens::app {
namespace {

// "  (INTERVENED: lambda=0; the table's parts are the learned λ's)" when the run set λ, else "".
std::string lambda_set_note(const Trace& t) {
  std::string specs;
  for (const auto& iv : t.interventions)
    if (iv.first.rfind("lambda", 0) == 0) specs += (specs.empty() ? "" : ", ") + iv.first;
  return specs.empty() ? ""
                       : "  (INTERVENED: " + specs + "; the parts in the table are the learned \xce\xbb's)";
}

void draw_lambda_plot(GuiState& state, const Trace& t, int slot, ImVec2 min, ImVec2 max) {
  const int L = static_cast<int>(t.layers.size());
  double lo = 0, hi = 1;
  for (const auto& l : t.layers) {
    lo = std::min({lo, l.lambda, l.lambda_init});
    hi = std::max({hi, l.lambda, l.lambda_init});
  }
  const std::string title = (t.config.name.empty() ? std::string("DIFF") : t.config.name) +
                            ":  \xce\xbb per layer" + lambda_set_note(t);
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
  dl->AddLine(ImVec2(key.x, key.y + th / 2), ImVec2(key.x + th * 1.5f, key.y + th / 2), model_ink(slot),
              2.5f * k);
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
                ImVec2(x_of(i + 1), a.y(t.layers[static_cast<size_t>(i + 1)].lambda)), model_ink(slot),
                2.5f * k);
  }
  for (int i = 0; i < L; ++i) {
    dl->AddCircleFilled(ImVec2(x_of(i), a.y(t.layers[static_cast<size_t>(i)].lambda)),
                        i == sel ? 6.0f * k : 4.0f * k,
                        i == sel ? IM_COL32(30, 30, 30, 255) : model_ink(slot));
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

ImU32 colour_of(double lambda) {
  const viz::Rgb8 c = viz::sequential_colormap().at(lambda);  // λ in (0, 1): the colormap's whole span
  return IM_COL32(c.r, c.g, c.b, 255);
}

// Quantiles of every layer's λ(token, head): min, 10%, median, 90%, max. Made once per result and slot
// (a long prompt has millions of values), not every frame.
using Quantiles = std::array<float, 5>;
const std::vector<Quantiles>& layer_quantiles(const RunResult& r, int slot) {
  static std::map<std::pair<uint64_t, int>, std::vector<Quantiles>> cache;
  const auto key = std::make_pair(r.request, slot);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() > 8) cache.clear();  // results come and go; keep only a few
  std::vector<Quantiles> q;
  for (const LayerTrace& l : r.traces[static_cast<size_t>(slot)]->layers) {
    std::vector<float> v(l.lambda_rows.data.begin(), l.lambda_rows.data.end());
    Quantiles x{};
    if (!v.empty()) {
      const double at[5] = {0.0, 0.1, 0.5, 0.9, 1.0};
      for (int k = 0; k < 5; ++k) {
        const size_t i = static_cast<size_t>(at[k] * static_cast<double>(v.size() - 1));
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
        x[static_cast<size_t>(k)] = v[i];
      }
    }
    q.push_back(x);
  }
  return cache.emplace(key, std::move(q)).first->second;
}

// The selected layer's λ(token, head) of a DIFF V2 trace in [min, max]: heads as rows, tokens as columns
// (pooled to the pixels when there are more tokens than pixels), a colour bar for 0..1 under it.
void draw_lambda_heatmap(GuiState& state, const RunResult& r, int slot, ImVec2 min, ImVec2 max) {
  const Trace& t = *r.traces[static_cast<size_t>(slot)];
  const std::vector<std::string>& labels = r.labels[static_cast<size_t>(slot)];
  const int layer = std::clamp(state.view.layer, 0, static_cast<int>(t.layers.size()) - 1);
  const LayerTrace& l = t.layers[static_cast<size_t>(layer)];
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  const float th = ImGui::GetTextLineHeight(), fs = ImGui::GetFontSize();
  const std::string title = (t.config.name.empty() ? std::string("DIFF V2") : t.config.name) +
                            ":  \xce\xbb(token, head) = \xcf\x83(x_t \xc2\xb7 w_\xce\xbb,h), layer " +
                            std::to_string(l.index);
  dl->AddText(min, text, title.c_str());
  if (l.lambda_rows.empty()) return;
  const int64_t H = l.lambda_rows.shape[0], T = l.lambda_rows.shape[1];
  const float head_w = ImGui::CalcTextSize("h00 ").x;
  // Data area: below the title, left of nothing, above the token labels and the colour bar.
  const ImVec2 a0(min.x + head_w, min.y + th * 1.4f), a1(max.x, max.y - th * 3.6f);
  if (a1.x - a0.x < 20 || a1.y - a0.y < 10) return;
  state.drawn.note("lambda.heat." + std::to_string(slot), a0.x, a0.y, a1.x, a1.y);
  const int64_t cols = std::min<int64_t>(T, std::max<int64_t>(1, static_cast<int64_t>(a1.x - a0.x)));
  const float cw = (a1.x - a0.x) / static_cast<float>(cols), rh = (a1.y - a0.y) / static_cast<float>(H);
  auto tokens_of = [&](int64_t c) {
    return std::make_pair(c * T / cols, std::max(c * T / cols + 1, (c + 1) * T / cols));
  };
  for (int64_t h = 0; h < H; ++h)
    for (int64_t c = 0; c < cols; ++c) {
      const auto [t0, t1] = tokens_of(c);
      double sum = 0;
      for (int64_t i = t0; i < t1; ++i) sum += l.lambda_rows.data[static_cast<size_t>(h * T + i)];
      dl->AddRectFilled(ImVec2(a0.x + cw * static_cast<float>(c), a0.y + rh * static_cast<float>(h)),
                        ImVec2(a0.x + cw * static_cast<float>(c + 1), a0.y + rh * static_cast<float>(h + 1)),
                        colour_of(sum / static_cast<double>(t1 - t0)));
    }
  // Head labels (every head while they fit), token labels under the columns (as many as fit).
  const int every_head = std::max(1, static_cast<int>(std::ceil(th / rh)));
  for (int64_t h = 0; h < H; h += every_head) {
    const std::string s = "h" + std::to_string(h);
    dl->AddText(ImVec2(min.x, a0.y + rh * (static_cast<float>(h) + 0.5f) - th / 2), text, s.c_str());
  }
  float next_free = a0.x;
  for (int64_t c = 0; c < cols; ++c) {
    const int64_t tok = tokens_of(c).first;
    const float x = a0.x + cw * (static_cast<float>(c) + 0.5f);
    const std::string s =
        static_cast<size_t>(tok) < labels.size() ? labels[static_cast<size_t>(tok)] : std::to_string(tok);
    const float w = ImGui::CalcTextSize(s.c_str()).x;
    if (x - w / 2 < next_free || x + w / 2 > a1.x + fs) continue;
    dl->AddText(ImVec2(x - w / 2, a1.y + 2), text, s.c_str());
    next_free = x + w / 2 + fs * 0.4f;
  }
  // The selected query token and head: outlines.
  const int q = state.selection.query < 0 ? static_cast<int>(T) - 1
                                          : std::min(state.selection.query, static_cast<int>(T) - 1);
  const int64_t qc = static_cast<int64_t>(q) * cols / T;
  const int head = std::clamp(state.view.head[slot], 0, static_cast<int>(H) - 1);
  dl->AddRect(ImVec2(a0.x + cw * static_cast<float>(qc), a0.y),
              ImVec2(a0.x + cw * static_cast<float>(qc + 1), a1.y), IM_COL32(240, 130, 0, 255), 0, 0, 2.0f);
  dl->AddRect(ImVec2(a0.x, a0.y + rh * static_cast<float>(head)),
              ImVec2(a1.x, a0.y + rh * static_cast<float>(head + 1)), IM_COL32(240, 130, 0, 255), 0, 0, 1.5f);
  // The colour bar: 0 .. 1.
  const float by = a1.y + th * 1.5f, bw = std::min(a1.x - a0.x, fs * 16);
  for (int k = 0; k < 64; ++k)
    dl->AddRectFilled(ImVec2(a0.x + bw * k / 64, by), ImVec2(a0.x + bw * (k + 1) / 64, by + th * 0.8f),
                      colour_of((k + 0.5) / 64));
  dl->AddText(ImVec2(a0.x, by + th * 0.9f), text, "0");
  dl->AddText(ImVec2(a0.x + bw - ImGui::CalcTextSize("1").x, by + th * 0.9f), text, "1");
  dl->AddText(ImVec2(a0.x + bw + fs * 0.6f, by), text,
              cols < T ? "\xce\xbb (each column the mean over its tokens)" : "\xce\xbb");
  ImGui::SetCursorScreenPos(a0);
  ImGui::InvisibleButton(("##lambda-heat" + std::to_string(slot)).c_str(), ImVec2(a1.x - a0.x, a1.y - a0.y));
  if (ImGui::IsItemHovered()) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    const int64_t c = std::clamp<int64_t>(static_cast<int64_t>((m.x - a0.x) / cw), 0, cols - 1);
    const int64_t h = std::clamp<int64_t>(static_cast<int64_t>((m.y - a0.y) / rh), 0, H - 1);
    const int64_t tok = tokens_of(c).first;
    const size_t at = static_cast<size_t>(h * T + tok);
    const std::string s = static_cast<size_t>(tok) < labels.size() ? labels[static_cast<size_t>(tok)] : "";
    ImGui::SetTooltip(
        "layer %d, head %lld, token %lld '%s'\n\xce\xbb = \xcf\x83(%.4f) = %.4f\n(click: select the head and the query token)",
        l.index, static_cast<long long>(h), static_cast<long long>(tok), s.c_str(), l.lambda_logits.data[at],
        l.lambda_rows.data[at]);
    if (ImGui::IsItemClicked()) {
      state.view.head[slot] = static_cast<int>(h);
      state.selection.query = static_cast<int>(tok);
    }
  }
}

// Every layer's λ distribution in [min, max]: a row per layer over λ in [0, 1], the whole range as a thin
// line, 10-90% as a box, the median as a tick; the selected layer highlighted, a click selects a layer.
void draw_lambda_distribution(GuiState& state, const RunResult& r, int slot, ImVec2 min, ImVec2 max) {
  const Trace& t = *r.traces[static_cast<size_t>(slot)];
  const std::vector<Quantiles>& q = layer_quantiles(r, slot);
  const int L = static_cast<int>(q.size());
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  const float th = ImGui::GetTextLineHeight(), k = ImGui::GetFontSize() / 16.0f;
  dl->AddText(min, text, "\xce\xbb per layer (range, 10-90%, median)");
  struct {
    ImVec2 min, max;
  } a{ImVec2(min.x, min.y + th * 1.4f), max};  // λ runs along x here: a plain white chart, no value axis
  dl->AddRectFilled(a.min, a.max, IM_COL32(255, 255, 255, 255));
  dl->AddRect(a.min, a.max, IM_COL32(170, 170, 170, 255));
  const float lab_w = ImGui::CalcTextSize("L00 ").x;
  const float x0 = a.min.x + lab_w, x1 = a.max.x - ImGui::GetFontSize() * 0.5f;
  auto x_of = [&](double v) { return x0 + static_cast<float>(v) * (x1 - x0); };
  const float rh = (a.max.y - a.min.y - th) / static_cast<float>(std::max(1, L));
  for (int i = 0; i <= 4; ++i) {  // the λ axis along the bottom
    char s[16];
    std::snprintf(s, sizeof s, "%.2g", i / 4.0);
    dl->AddLine(ImVec2(x_of(i / 4.0), a.min.y), ImVec2(x_of(i / 4.0), a.max.y - th),
                IM_COL32(225, 225, 225, 255));
    dl->AddText(ImVec2(x_of(i / 4.0) - ImGui::CalcTextSize(s).x / 2, a.max.y - th), text, s);
  }
  for (int i = 0; i < L; ++i) {
    const float y = a.min.y + rh * (static_cast<float>(i) + 0.5f);
    const Quantiles& v = q[static_cast<size_t>(i)];
    const bool sel = t.layers[static_cast<size_t>(i)].index == state.view.layer;
    if (sel)
      dl->AddRectFilled(ImVec2(a.min.x, y - rh / 2), ImVec2(a.max.x, y + rh / 2),
                        IM_COL32(255, 200, 120, 110));
    const std::string s = "L" + std::to_string(t.layers[static_cast<size_t>(i)].index);
    dl->AddText(ImVec2(a.min.x + 2, y - th / 2), text, s.c_str());
    const ImU32 ink = model_ink(slot);
    const float bh = std::min(rh * 0.6f, th);
    dl->AddLine(ImVec2(x_of(v[0]), y), ImVec2(x_of(v[4]), y), ink, 1.5f * k);
    dl->AddRectFilled(ImVec2(x_of(v[1]), y - bh / 2),
                      ImVec2(std::max(x_of(v[3]), x_of(v[1]) + 1), y + bh / 2), model_ink(slot, false, 120));
    dl->AddLine(ImVec2(x_of(v[2]), y - bh / 2), ImVec2(x_of(v[2]), y + bh / 2), IM_COL32(30, 30, 30, 255),
                3.0f * k);
  }
  ImGui::SetCursorScreenPos(a.min);
  ImGui::InvisibleButton(("##lambda-dist" + std::to_string(slot)).c_str(),
                         ImVec2(std::max(1.0f, a.max.x - a.min.x), std::max(1.0f, a.max.y - a.min.y - th)));
  if (ImGui::IsItemHovered() && L > 0) {
    const int i = std::clamp(static_cast<int>((ImGui::GetIO().MousePos.y - a.min.y) / rh), 0, L - 1);
    const Quantiles& v = q[static_cast<size_t>(i)];
    ImGui::SetTooltip(
        "layer %d: \xce\xbb over every token and head\nmin %.4f, 10%% %.4f, median %.4f, 90%% %.4f, max %.4f\nmean %.4f (click: select the layer)",
        t.layers[static_cast<size_t>(i)].index, v[0], v[1], v[2], v[3], v[4],
        t.layers[static_cast<size_t>(i)].lambda);
    if (ImGui::IsItemClicked()) state.view.layer = t.layers[static_cast<size_t>(i)].index;
  }
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
    if (t.config.is_diff_v2()) {  // the heatmap, and the distributions beside it (under it when narrow)
      const float dist_w = std::min(room.x * 0.34f, ImGui::GetFontSize() * 22);
      const bool stack = room.x < ImGui::GetFontSize() * 40;
      const ImVec2 max(origin.x + room.x, min.y + h);
      if (stack) {
        const float split = min.y + h * 0.62f;
        draw_lambda_heatmap(state, r, slots[k], min, ImVec2(max.x, split));
        draw_lambda_distribution(state, r, slots[k], ImVec2(min.x, split + gap), max);
      } else {
        draw_lambda_heatmap(state, r, slots[k], min, ImVec2(max.x - dist_w - gap, max.y));
        draw_lambda_distribution(state, r, slots[k], ImVec2(max.x - dist_w, min.y), max);
      }
      continue;
    }
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

viz::ChartFigure lambda_chart(GuiState& state, int width, int height, float font_px) {
  if (!state.shown) throw Error("no run on screen yet");
  viz::ChartFigure f = chart_frame(width, height, font_px, "\xce\xbb per layer", "\xce\xbb", "layer");
  viz::ChartPanel p;
  size_t layers = 0;
  for (int s = 0; s < kSlots; ++s)
    if (const auto& t = state.shown->traces[s]; t && t->config.is_diff())
      layers = std::max(layers, t->layers.size());
  if (layers == 0) throw Error("no DIFF model on screen: lambda belongs to DIFF attention");
  for (size_t i = 0; i < layers; ++i) p.groups.push_back(std::to_string(i));
  std::string notes;
  for (int s = 0; s < kSlots; ++s) {
    const auto& t = state.shown->traces[s];
    if (!t || !t->config.is_diff()) continue;
    const std::string name = t->config.name.empty() ? to_string(t->config.attention) : t->config.name;
    viz::ChartSeries lam, init;
    lam.name = name + (t->config.is_diff_v2() ? ": mean \xce\xbb over tokens and heads" : ": \xce\xbb");
    lam.color = viz::model_colour(static_cast<size_t>(s));
    init.name = name + ": \xce\xbb_init";
    init.color = viz::model_colour(static_cast<size_t>(s), true);
    for (size_t i = 0; i < layers; ++i) {
      const bool has = i < t->layers.size();
      lam.values.push_back(has ? t->layers[i].lambda : std::nan(""));
      init.values.push_back(has && !t->config.is_diff_v2() ? t->layers[i].lambda_init : std::nan(""));
    }
    p.series.push_back(lam);
    if (!t->config.is_diff_v2()) p.series.push_back(init);
  }
  p.value_labels = true;
  if (state.view.layer >= 0 && state.view.layer < static_cast<int>(layers)) p.mark = state.view.layer;
  f.panels.push_back(std::move(p));
  for (int s = 0; s < kSlots; ++s)
    if (const auto& t = state.shown->traces[s]; t && t->config.is_diff() && !lambda_set_note(*t).empty())
      notes += (t->config.name.empty() ? to_string(t->config.attention) : t->config.name) +
               lambda_set_note(*t) + " ";
  f.footnote =
      notes +
      "DIFF: \xce\xbb = exp(\xce\xbbq1\xc2\xb7\xce\xbbk1) \xe2\x88\x92 exp(\xce\xbbq2\xc2\xb7\xce\xbbk2) + \xce\xbb_init per layer; DIFF V2: \xce\xbb per token and head, its mean here. Orange under the axis: the selected layer.";
  return f;
}

}  // namespace difflens::app
