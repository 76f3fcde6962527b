// The Why view: why each model answers at the query, and whether what it attends to matters. Interventions on
// top (keys knocked out of the query's rows, λ = 0 per DIFF layer, heads ablated by a click in the grid),
// both models re-run under them (every view then shows that run, marked in the status line); per model the
// answer's probability before → after, the top 5 before and after, the logit lens at the query (the answer's
// probability after each layer) and each head's direct share of the answer's logit (signed colours: blue
// raises it, red lowers it; hover for the value and DIFF's A1 and −λA2 parts).
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "app/desktop/panels.h"
#include "app/desktop/plot.h"
#include "core/error.h"
#include "core/intervention.h"
#include "viz/figure.h"
#include "viz/token_text.h"

namespace difflens::app {
namespace {

std::string piece(const std::string& p) {
  return viz::display_token(p, viz::Spaces::Visible);
}

std::string top_line(const LensLayer& layer, size_t q) {
  std::string out;
  char buf[96];
  for (const TokenProbability& c : layer.top[q]) {
    std::snprintf(buf, sizeof buf, "%s'%s' %.3f", out.empty() ? "" : ", ", piece(c.text).c_str(),
                  c.probability);
    out += buf;
  }
  return out;
}

// The intervention controls, for both models.
void draw_controls(GuiState& state) {
  WhyState& w = state.why;
  bool changed = false;
  const bool full = !state.lecture;  // lecture mode: what runs, not how to change it (the slide's room)
  if (full)
    ImGui::TextUnformatted("Interventions: both models run again under them, and every view shows that run.");
  if (full) {
    static const char* kKnockouts[] = {"none", "the answer's keys (not-answer)",
                                       "all but the answer (only-answer)", "the noise (not-noise)"};
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 18);
    if (ImGui::Combo("keys removed from the query's rows (every layer)", &w.knockout, kKnockouts, 4))
      changed = true;
    if (w.knockout > 0 && state.selection.answer_begin < 0) {
      ImGui::SameLine();
      ImGui::TextColored(ImVec4(0.75f, 0.25f, 0.05f, 1), "(mark the answer: right-drag on the tokens)");
    }
    for (int s = 0; s < kSlots; ++s) {
      const auto& t = state.shown ? state.shown->traces[static_cast<size_t>(s)] : nullptr;
      if (!t || !t->config.is_diff()) continue;
      ImGui::Text("%s: λ = 0 in layer", t->config.name.c_str());
      for (int l = 0; l < t->config.num_hidden_layers; ++l) {
        ImGui::SameLine();
        bool on = w.lambda_zero[static_cast<size_t>(s)].count(l) > 0;
        const std::string id = std::to_string(l) + "##lz" + std::to_string(s);
        if (ImGui::Checkbox(id.c_str(), &on)) {
          if (on)
            w.lambda_zero[static_cast<size_t>(s)].insert(l);
          else
            w.lambda_zero[static_cast<size_t>(s)].erase(l);
          changed = true;
        }
      }
    }
  }
  const auto specs = w.specs();
  for (int s = 0; s < kSlots; ++s) {
    std::string list;
    for (const std::string& x : specs[static_cast<size_t>(s)]) list += (list.empty() ? "" : ", ") + x;
    // Lecture mode: the skipped specs named on the same line (their reasons on hover).
    std::string skipped;
    if (state.shown && !full)
      for (const std::string& why : state.shown->skipped[static_cast<size_t>(s)]) {
        const size_t a = why.find('\''), b = a == std::string::npos ? a : why.find('\'', a + 1);
        skipped += (skipped.empty() ? " (skipped: " : ", ") +
                   (b == std::string::npos ? why : why.substr(a + 1, b - a - 1));
      }
    if (!skipped.empty()) skipped += ")";
    ImGui::Text("%s: %s%s", s == 0 ? "left" : "right", list.empty() ? "as trained" : list.c_str(),
                skipped.c_str());
    if (!skipped.empty() && ImGui::IsItemHovered()) {
      std::string all;
      for (const std::string& why : state.shown->skipped[static_cast<size_t>(s)]) all += why + "\n";
      ImGui::SetTooltip("%s", all.c_str());
    }
    if (state.shown && full)
      for (const std::string& why : state.shown->skipped[static_cast<size_t>(s)]) {
        ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(0.75f, 0.25f, 0.05f, 1));
        ImGui::TextUnformatted(wrap_at_spaces("  skipped: " + why, ImGui::GetContentRegionAvail().x).c_str());
        ImGui::PopStyleColor();
      }
  }
  if (!full) {
    if (changed) state.prompt.rerun();
    return;
  }
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextUnformatted(
      wrap_at_spaces(
          "Click a head in a grid below to ablate it (its output zero before o_proj), right-click a DIFF "
          "head for its lambda = 0; again to restore.",
          ImGui::GetContentRegionAvail().x)
          .c_str());
  ImGui::PopStyleColor();
  if (w.any()) {
    if (ImGui::Button("Clear: the models as trained")) {
      w.clear();
      changed = true;
    }
  }
  if (changed) state.prompt.rerun();
}

// One model's column.
void draw_model(GuiState& state, int s, float width) {
  const RunResult& r = *state.shown;
  const auto& t = r.traces[static_cast<size_t>(s)];
  if (!t) return;
  ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + width);
  const auto& why = r.why[static_cast<size_t>(s)];
  if (!r.why_error[static_cast<size_t>(s)].empty()) {
    ImGui::TextWrapped("%s: %s", t->config.name.c_str(), r.why_error[static_cast<size_t>(s)].c_str());
    ImGui::PopTextWrapPos();
    return;
  }
  if (!why) {
    ImGui::TextDisabled("%s: explaining...", t->config.name.c_str());
    ImGui::PopTextWrapPos();
    return;
  }
  const LogitAttribution& a = why->attribution;
  const size_t q = static_cast<size_t>(a.query);
  // Heads the run ablated (by a click or a spec): "off" in the grid.
  std::set<std::pair<int, int>> off;
  for (const auto& iv : t->interventions) {
    try {
      const InterventionSpec spec = parse_intervention(iv.second);
      if (spec.kind == InterventionKind::Ablate)
        off.insert({static_cast<int>(spec.layer), static_cast<int>(spec.head)});
    } catch (const Error&) {
    }
  }
  ImGui::PushStyleColor(ImGuiCol_Text, model_ink(s));
  ImGui::TextWrapped("%s: after '%s' (query %lld) the answer '%s'", t->config.name.c_str(),
                     piece(t->tokens[q]).c_str(), static_cast<long long>(a.query),
                     piece(a.target_text).c_str());
  ImGui::PopStyleColor();
  const LensLayer& last = why->layers.back();
  const auto& before = r.why_before[static_cast<size_t>(s)];
  if (before) {
    const LensLayer& b = before->layers.back();
    char line[160];
    std::snprintf(line, sizeof line, "P(answer) %.3f (rank %lld) -> %.3f (rank %lld) under the interventions",
                  b.target_probability[q], static_cast<long long>(b.target_rank[q]),
                  last.target_probability[q], static_cast<long long>(last.target_rank[q]));
    ImGui::TextUnformatted(wrap_at_spaces(line, width).c_str());
    if (!state.lecture) {
      ImGui::TextUnformatted(wrap_at_spaces("top 5 before: " + top_line(b, q), width).c_str());
      ImGui::TextUnformatted(wrap_at_spaces("top 5 after:  " + top_line(last, q), width).c_str());
    }
  } else {
    ImGui::Text("P(answer) %.3f (rank %lld), as trained", last.target_probability[q],
                static_cast<long long>(last.target_rank[q]));
    if (!state.lecture) ImGui::TextUnformatted(wrap_at_spaces("top 5: " + top_line(last, q), width).c_str());
  }
  // The logit lens at the query: the answer's probability after each layer.
  ImGui::Spacing();
  if (state.lecture) {  // one line: the answer's probability after each layer
    std::string lens = "lens, P(answer) after";
    char part[48];
    for (size_t l = 0; l < why->layers.size(); ++l) {
      std::snprintf(part, sizeof part, "%s L%zu %.2f", l ? "," : "", l, why->layers[l].target_probability[q]);
      lens += part;
    }
    ImGui::TextUnformatted(wrap_at_spaces(lens, width).c_str());
  }
  if (!state.lecture) ImGui::TextUnformatted("Logit lens at the query: P(answer) after each layer");
  const float bar_w = std::max(ImGui::GetFontSize() * 6, width - ImGui::GetFontSize() * 9);
  for (size_t l = 0; l < why->layers.size() && !state.lecture; ++l) {
    char label[64];
    const float p = why->layers[l].target_probability[q];
    std::snprintf(label, sizeof label, "%.3f (rank %lld)", p,
                  static_cast<long long>(why->layers[l].target_rank[q]));
    ImGui::Text("L%zu", l);
    ImGui::SameLine(ImGui::GetFontSize() * 2.2f);
    ImGui::PushStyleColor(ImGuiCol_PlotHistogram, model_ink(s));
    ImGui::ProgressBar(std::isnan(p) ? 0.0f : p, ImVec2(bar_w, 0), label);
    ImGui::PopStyleColor();
    if (before && ImGui::IsItemHovered())
      ImGui::SetTooltip("as trained: %.3f (rank %lld)", before->layers[l].target_probability[q],
                        static_cast<long long>(before->layers[l].target_rank[q]));
  }
  // Direct attribution: layers x heads, then the MLPs.
  ImGui::Spacing();
  double parts = 0, mlps = 0;
  for (const auto& l : a.heads)
    for (double v : l) parts += v;
  for (double v : a.mlps) mlps += v;
  char sum_line[256];
  std::snprintf(sum_line, sizeof sum_line, "%s %.2f = heads %+.2f + MLPs %+.2f + embedding %+.2f%s",
                state.lecture ? "Logit" : "Direct shares of the answer's logit", a.logit, parts, mlps,
                a.embedding, state.lecture ? "" : " (final norm's scale frozen)");
  ImGui::TextUnformatted(wrap_at_spaces(sum_line, width).c_str());
  double m = 1e-9;
  for (const auto& l : a.heads)
    for (double v : l) m = std::max(m, std::fabs(v));
  const int H = a.heads.empty() ? 0 : static_cast<int>(a.heads[0].size());
  // Two decimals where the grid fits them in the column, else one.
  const float pad = ImGui::GetStyle().CellPadding.x * 2 + 4, label_w = ImGui::CalcTextSize("L00").x + pad;
  // The widest number of the grid in a format, and whether the grid fits the column with it.
  auto widest = [&](const char* f, bool mlps) {
    float w = ImGui::CalcTextSize("off").x;
    char buf[32];
    for (size_t l = 0; l < a.heads.size(); ++l) {
      for (double v : a.heads[l]) {
        std::snprintf(buf, sizeof buf, f, v);
        w = std::max(w, ImGui::CalcTextSize(buf).x);
      }
      std::snprintf(buf, sizeof buf, f, a.mlps[l]);
      if (mlps) w = std::max(w, ImGui::CalcTextSize(buf).x);
    }
    return w;
  };
  auto fits = [&](const char* f, int columns, bool mlps) {
    return label_w + static_cast<float>(columns) * (widest(f, mlps) + pad) <= width;
  };
  // Two decimals with the sign; else one; else one without the '+' (the colour still says it).
  const bool wide = fits("%+.2f", H + 1, true);
  const char* format = wide ? "%+.2f" : fits("%+.1f", H, false) ? "%+.1f" : "%.1f";
  // Too narrow for a column of MLPs too: they go on a line below the grid.
  const bool mlp_column = wide || fits(format, H + 1, true);
  const int cells = H + (mlp_column ? 1 : 0);
  const float cell_w = std::max(widest(format, mlp_column),
                                std::min(ImGui::GetFontSize() * 4, (width - label_w) / cells - pad - 2));
  const std::string table = "why-grid-" + std::to_string(s);
  ImGui::PopTextWrapPos();  // the cells are narrower than the column: numbers must not wrap there
  if (H > 0 &&
      ImGui::BeginTable(table.c_str(), cells + 1, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed, label_w - pad);
    for (int h = 0; h < H; ++h)
      ImGui::TableSetupColumn(("H" + std::to_string(h)).c_str(), ImGuiTableColumnFlags_WidthFixed, cell_w);
    if (mlp_column) ImGui::TableSetupColumn("MLP", ImGuiTableColumnFlags_WidthFixed, cell_w);
    ImGui::TableHeadersRow();
    for (size_t l = 0; l < a.heads.size(); ++l) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("L%zu", l);
      for (int h = 0; h < H; ++h) {
        ImGui::TableNextColumn();
        const double v = a.heads[l][static_cast<size_t>(h)];
        const bool clicked = state.why.ablated[static_cast<size_t>(s)].count({static_cast<int>(l), h}) > 0;
        const bool ablated = clicked || off.count({static_cast<int>(l), h}) > 0;
        const viz::Rgb8 c = viz::grid_cell_colour(v, -m, m, true);
        ImGui::TableSetBgColor(ImGuiTableBgTarget_CellBg, ink(c));
        char text[64];
        if (ablated)
          std::snprintf(text, sizeof text, "off##%zu-%d", l, h);
        else
          std::snprintf(text, sizeof text, (std::string(format) + "##%zu-%d").c_str(), v, l, h);
        if (ImGui::Selectable(text, ablated)) {
          auto& set = state.why.ablated[static_cast<size_t>(s)];
          const std::pair<int, int> key{static_cast<int>(l), h};
          if (clicked)
            set.erase(key);
          else if (!ablated)
            set.insert(key);
          state.prompt.rerun();
        }
        // DIFF: a right click sets this head's λ to 0 (A1 alone), again restores it.
        const bool diff = !a.heads_a1.empty();
        auto& zero = state.why.head_lambda_zero[static_cast<size_t>(s)];
        const std::pair<int, int> here{static_cast<int>(l), h};
        if (diff && ImGui::IsItemClicked(ImGuiMouseButton_Right)) {
          if (zero.count(here))
            zero.erase(here);
          else
            zero.insert(here);
          state.prompt.rerun();
        }
        if (diff && zero.count(here)) {  // marked: an orange corner
          const ImVec2 lo = ImGui::GetItemRectMin(), hi = ImGui::GetItemRectMax();
          const float k = ImGui::GetFontSize() * 0.45f;
          ImGui::GetWindowDrawList()->AddTriangleFilled(ImVec2(hi.x - k, lo.y), ImVec2(hi.x, lo.y),
                                                        ImVec2(hi.x, lo.y + k), IM_COL32(230, 120, 20, 255));
        }
        if (ImGui::IsItemHovered()) {
          std::string tip = "L" + std::to_string(l) + " H" + std::to_string(h) + ": " +
                            std::to_string(v).substr(0, 7) + " of the logit " +
                            std::to_string(a.logit).substr(0, 6);
          if (!a.heads_a1.empty() && !std::isnan(a.heads_a1[l][static_cast<size_t>(h)])) {
            char parts_text[96];
            std::snprintf(parts_text, sizeof parts_text, "\nA1 part %+.3f, -lambda A2 part %+.3f",
                          a.heads_a1[l][static_cast<size_t>(h)], a.heads_a2[l][static_cast<size_t>(h)]);
            tip += parts_text;
          }
          tip += ablated ? "\nablated: click to restore" : "\nclick to ablate it (both models re-run)";
          if (diff)
            tip += zero.count(here) ? "\nlambda = 0 here (orange corner): right-click to restore"
                                    : "\nright-click: lambda = 0 for this head (A1 alone)";
          ImGui::SetTooltip("%s", tip.c_str());
        }
      }
      if (!mlp_column) continue;
      ImGui::TableNextColumn();
      ImGui::Text(format, a.mlps[l]);
    }
    ImGui::EndTable();
  }
  if (!mlp_column) {
    std::string line = "MLPs:";
    char part[48];
    for (size_t l = 0; l < a.mlps.size(); ++l) {
      std::snprintf(part, sizeof part, "%s L%zu %+.1f", l ? "," : "", l, a.mlps[l]);
      line += part;
    }
    ImGui::TextUnformatted(wrap_at_spaces(line, width).c_str());
  }
}

}  // namespace

void draw_why_view(GuiState& state) {
  if (!state.shown) return;
  const RunResult& r = *state.shown;
  // The explanation follows the query: a result made for another (or none) runs both models again.
  const int s0 = first_trace_slot(r);
  if (s0 < 0) return;
  const int64_t T = r.traces[static_cast<size_t>(s0)]->length();
  const int64_t want =
      state.selection.query < 0 || state.selection.query >= T ? T - 1 : state.selection.query;
  bool stale = !r.edits.explain;
  for (int s = 0; s < kSlots; ++s)
    if (r.why[static_cast<size_t>(s)] && r.why[static_cast<size_t>(s)]->attribution.query != want)
      stale = true;
  if (stale && !state.prompt.pending && !state.status.busy) state.prompt.rerun();

  draw_controls(state);
  ImGui::Separator();
  if (ImGui::BeginTable("why-models", kSlots, ImGuiTableFlags_SizingStretchSame)) {
    for (int s = 0; s < kSlots; ++s) {
      ImGui::TableNextColumn();
      const ImVec2 p = ImGui::GetCursorScreenPos();
      const float column = ImGui::GetContentRegionAvail().x;
      draw_model(state, s, column - ImGui::GetFontSize() * 0.5f);
      state.drawn.note("why." + std::to_string(s), p.x, p.y, p.x + column, ImGui::GetCursorScreenPos().y);
    }
    ImGui::EndTable();
  }
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextUnformatted(
      wrap_at_spaces(state.lecture
                         ? "Direct shares, final norm's scale frozen; 1.8 M-parameter toy models."
                         : "Direct shares only: what a head adds to the residual stream read straight "
                           "through the final norm, not what later layers make of it. The bundled "
                           "models are 1.8 M-parameter toys trained here.",
                     ImGui::GetContentRegionAvail().x)
          .c_str());
  ImGui::PopStyleColor();
}

}  // namespace difflens::app
