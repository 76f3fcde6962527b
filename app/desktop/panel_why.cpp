// The Why view: why each model answers at the query, and whether what it attends to matters. Interventions on
// top (keys knocked out of the query's rows, λ = 0 per DIFF layer, heads ablated by a click in the grid),
// both models re-run under them (every view then shows that run, marked in the status line); per model the
// answer's probability before → after, the top 5 before and after, the logit lens at the query (the answer's
// probability after each layer) and each head's direct share of the answer's logit (signed colours: blue
// raises it, red lowers it; hover for the value and DIFF's A1 and −λA2 parts).
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "app/desktop/panels.h"
#include "app/desktop/plot.h"
#include "core/formats/error.h"
#include "core/formats/intervention.h"
#include "core/formats/patch_site.h"
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

// Specs given as text (--intervene, the play action `intervene`) that the boxes below stand for: λ = 0 in
// a layer (or every layer), a knockout preset of every layer from the query on.
bool extra_zeroes_layer(const WhyState& w, int layer) {
  for (const std::string& x : w.extra) try {
      const InterventionSpec s = parse_intervention(x);
      if (s.kind == InterventionKind::Lambda && s.head < 0 && !s.lambda_init && s.value == 0 &&
          (s.layer < 0 || s.layer == layer))
        return true;
    } catch (const Error&) {
    }
  return false;
}

int extra_knockout(const WhyState& w) {  // the preset's index in the combo (0: none)
  for (const std::string& x : w.extra) try {
      const InterventionSpec s = parse_intervention(x);
      if (s.kind != InterventionKind::Knockout || s.layer >= 0 || s.head >= 0 || !s.rows_from_query) continue;
      if (s.keys == KnockoutKeys::NotAnswer) return 1;
      if (s.keys == KnockoutKeys::OnlyAnswer) return 2;
      if (s.keys == KnockoutKeys::NotNoise) return 3;
    } catch (const Error&) {
    }
  return 0;
}

// Before a box changes what such a spec set: the spec leaves `extra` and the boxes hold what it did (λ = 0
// per layer of each DIFF model; the knockout's preset), so that the box changes that alone.
void absorb_extra(GuiState& state) {
  WhyState& w = state.why;
  std::vector<std::string> kept;
  for (const std::string& x : w.extra) {
    bool absorbed = false;
    try {
      const InterventionSpec s = parse_intervention(x);
      if (s.kind == InterventionKind::Lambda && s.head < 0 && !s.lambda_init && s.value == 0) {
        for (int slot = 0; slot < kSlots; ++slot) {
          const auto& t = state.shown ? state.shown->traces[static_cast<size_t>(slot)] : nullptr;
          if (!t || !t->config.is_diff()) continue;
          for (int l = 0; l < t->config.num_hidden_layers; ++l)
            if (s.layer < 0 || s.layer == l) w.lambda_zero[static_cast<size_t>(slot)].insert(l);
        }
        absorbed = true;
      } else if (s.kind == InterventionKind::Knockout && s.layer < 0 && s.head < 0 && s.rows_from_query &&
                 (s.keys == KnockoutKeys::NotAnswer || s.keys == KnockoutKeys::OnlyAnswer ||
                  s.keys == KnockoutKeys::NotNoise)) {
        w.knockout = s.keys == KnockoutKeys::NotAnswer ? 1 : s.keys == KnockoutKeys::OnlyAnswer ? 2 : 3;
        absorbed = true;
      }
    } catch (const Error&) {
    }
    if (!absorbed) kept.push_back(x);
  }
  w.extra = kept;
}

// "tokens 0-134 ('The', ' river' ... ' spring') and 139-245": the key ranges a resolved knockout removes.
std::string knocked_keys(const InterventionSpec& s, const Trace& t) {
  const int64_t T = t.length();
  std::string out;
  for (const TokenRange& r : s.key_ranges) {
    const int64_t b = std::clamp<int64_t>(r.first, 0, T), e = std::clamp<int64_t>(r.second, 0, T);
    if (b >= e) continue;
    std::string part = e - b == 1 ? "token " + std::to_string(b)
                                  : "tokens " + std::to_string(b) + "-" + std::to_string(e - 1);
    part += " ('" + piece(t.tokens[static_cast<size_t>(b)]) + "'";
    if (e - b > 1) part += (e - b > 2 ? " ... '" : ", '") + piece(t.tokens[static_cast<size_t>(e - 1)]) + "'";
    out += (out.empty() ? "" : " and ") + part + ")";
  }
  return out.empty() ? "no key" : out;
}

// Each knockout in force, as the run resolved it: which keys leave which rows, so that a class sees what
// "the noise" was (not-noise removes the question's own tokens before the query too).
void draw_knockouts(GuiState& state, int s, float width) {
  const auto& t = state.shown ? state.shown->traces[static_cast<size_t>(s)] : nullptr;
  if (!t) return;
  for (const auto& [written, resolved] : t->interventions) {
    InterventionSpec spec;
    try {
      spec = parse_intervention(resolved);
    } catch (const Error&) {
      continue;
    }
    if (spec.kind != InterventionKind::Knockout) continue;
    const bool drop = spec.keys == KnockoutKeys::Drop;
    const std::string rows =
        spec.rows_from_query ? "the query's rows"
        : spec.rows.second >= t->length() || spec.rows.second == kToEnd
            ? "rows " + std::to_string(spec.rows.first) + "-"
            : "rows " + std::to_string(spec.rows.first) + "-" + std::to_string(spec.rows.second - 1);
    std::string line = written + ": " + rows + (drop ? " lose " : " keep only ") + knocked_keys(spec, *t);
    if (written.find("not-noise") != std::string::npos)
      line += "; the question's words before the query count as noise too";
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextUnformatted(wrap_at_spaces(line, width).c_str());
    ImGui::PopStyleColor();
    state.drawn.note("why.knockout-keys." + std::to_string(s), 0, 0, 0, 0);
  }
}

// What the corrupt prompt changes, in words: "'7182' -> '4821'" (the differing stretch of each, widened to
// whole words); the corrupt stretch alone when either is long.
std::string corrupt_change(const std::string& prompt, const std::string& corrupt) {
  size_t a = 0;
  while (a < prompt.size() && a < corrupt.size() && prompt[a] == corrupt[a]) ++a;
  size_t b = 0;
  while (b < prompt.size() - a && b < corrupt.size() - a &&
         prompt[prompt.size() - 1 - b] == corrupt[corrupt.size() - 1 - b])
    ++b;
  auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t'; };
  while (a > 0 && !space(prompt[a - 1])) --a;
  while (b > 0 && !space(prompt[prompt.size() - b])) --b;
  const std::string from = prompt.substr(a, prompt.size() - a - b),
                    to = corrupt.substr(a, corrupt.size() - a - b);
  if (from.size() > 40 || to.size() > 40) {
    size_t cut = std::min<size_t>(37, to.size());
    while (cut > 0 && cut < to.size() && (static_cast<unsigned char>(to[cut]) & 0xC0) == 0x80)
      --cut;  // UTF-8
    return "'" + (to.size() > 40 ? to.substr(0, cut) + "..." : to) + "'";
  }
  return "'" + from + "' -> '" + to + "'";
}

// Activation patching's corrupt prompt: typed, then "Patch" (or Enter) runs it; "Copy the prompt" starts from
// the prompt's text (change a code or a name, keep the token count); "Stop" ends patching.
void draw_corrupt(GuiState& state, float avail) {
  WhyState& w = state.why;
  ImGui::TextUnformatted(
      wrap_at_spaces(
          "Activation patching: a corrupt prompt of as many tokens (another code, another name); each "
          "head's output is copied from the prompt's run into the corrupt one's.",
          avail)
          .c_str());
  const float buttons = ImGui::CalcTextSize("Copy the prompt").x + ImGui::CalcTextSize("Patch").x +
                        ImGui::CalcTextSize("Stop").x + ImGui::GetStyle().FramePadding.x * 6 +
                        ImGui::GetStyle().ItemSpacing.x * 4;
  ImGui::SetNextItemWidth(std::max(ImGui::GetFontSize() * 8, avail - buttons));
  bool go = ImGui::InputTextWithHint("##corrupt", "the prompt with one code or name changed",
                                     &w.corrupt_typed, ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SameLine();
  if (ImGui::Button("Copy the prompt")) w.corrupt_typed = state.prompt.text;
  ImGui::SameLine();
  go = ImGui::Button("Patch") || go;
  ImGui::SameLine();
  const bool stop = ImGui::Button("Stop");
  if (go && w.corrupt_typed != w.corrupt) {
    w.corrupt = w.corrupt_typed;
    w.picked = {{{-1, -1}, {-1, -1}}};
    state.prompt.rerun();
  }
  if (stop && !w.corrupt.empty()) {
    w.corrupt.clear();
    w.picked = {{{-1, -1}, {-1, -1}}};
    state.prompt.rerun();
  }
}

// The intervention controls, for both models. Lecture mode folds them to one line (what runs, "Change",
// "Clear") until "Change" opens them, as the Lab folds its form.
void draw_controls(GuiState& state) {
  WhyState& w = state.why;
  bool changed = false;
  const bool open = !state.lecture || w.form_open;
  const float avail = ImGui::GetContentRegionAvail().x;
  if (!state.lecture)
    ImGui::TextUnformatted("Interventions: both models run again under them, and every view shows that run.");
  if (open) {
    static const char* kKnockouts[] = {"none", "the answer's keys (not-answer)",
                                       "all but the answer (only-answer)", "the noise (not-noise)"};
    int shown_knockout = w.knockout > 0 ? w.knockout : extra_knockout(w);
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 18);
    if (ImGui::Combo("keys removed from the query's rows (every layer)", &shown_knockout, kKnockouts, 4)) {
      absorb_extra(state);
      w.knockout = shown_knockout;
      changed = true;
    }
    if (shown_knockout > 0 && state.selection.answer_begin < 0) {
      ImGui::SameLine();
      ImGui::TextColored(ImVec4(0.75f, 0.25f, 0.05f, 1), "(mark the answer: right-drag on the tokens)");
    }
    for (int s = 0; s < kSlots; ++s) {
      const auto& t = state.shown ? state.shown->traces[static_cast<size_t>(s)] : nullptr;
      if (!t || !t->config.is_diff()) continue;
      ImGui::Text("%s: λ = 0 in layer", t->config.name.c_str());
      for (int l = 0; l < t->config.num_hidden_layers; ++l) {
        ImGui::SameLine();
        // Ticked for every source of λ = 0 in the layer: this box, or a spec given as text.
        bool on = w.lambda_zero[static_cast<size_t>(s)].count(l) > 0 || extra_zeroes_layer(w, l);
        const std::string id = std::to_string(l) + "##lz" + std::to_string(s);
        if (ImGui::Checkbox(id.c_str(), &on)) {
          absorb_extra(state);
          if (on)
            w.lambda_zero[static_cast<size_t>(s)].insert(l);
          else
            w.lambda_zero[static_cast<size_t>(s)].erase(l);
          changed = true;
        }
      }
    }
    draw_corrupt(state, avail);
  }
  const auto specs = w.specs();
  std::string both;  // lecture mode: both slots on one line
  for (int s = 0; s < kSlots; ++s) {
    std::string list;
    for (const std::string& x : specs[static_cast<size_t>(s)]) list += (list.empty() ? "" : ", ") + x;
    // Lecture mode: the skipped specs named on the same line (their reasons on hover).
    std::string skipped;
    if (state.shown && state.lecture)
      for (const std::string& why : state.shown->skipped[static_cast<size_t>(s)]) {
        const size_t a = why.find('\''), b = a == std::string::npos ? a : why.find('\'', a + 1);
        skipped += (skipped.empty() ? " (skipped: " : ", ") +
                   (b == std::string::npos ? why : why.substr(a + 1, b - a - 1));
      }
    if (!skipped.empty()) skipped += ")";
    if (state.lecture) {
      both += std::string(s == 0 ? "left: " : "; right: ") + (list.empty() ? "as trained" : list) + skipped;
      if (s + 1 < kSlots) continue;
      ImGui::TextUnformatted(wrap_at_spaces(both, avail).c_str());
      if (ImGui::IsItemHovered() && state.shown) {
        std::string all;
        for (const auto& slot : state.shown->skipped)
          for (const std::string& why : slot) all += why + "\n";
        if (!all.empty()) ImGui::SetTooltip("%s", all.c_str());
      }
      draw_knockouts(state, 0, avail);
      if (specs[1] != specs[0]) draw_knockouts(state, 1, avail);
      continue;
    }
    ImGui::Text("%s: %s%s", s == 0 ? "left" : "right", list.empty() ? "as trained" : list.c_str(),
                skipped.c_str());
    if (!skipped.empty() && ImGui::IsItemHovered()) {
      std::string all;
      for (const std::string& why : state.shown->skipped[static_cast<size_t>(s)]) all += why + "\n";
      ImGui::SetTooltip("%s", all.c_str());
    }
    if (state.shown && !state.lecture)
      for (const std::string& why : state.shown->skipped[static_cast<size_t>(s)]) {
        ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(0.75f, 0.25f, 0.05f, 1));
        ImGui::TextUnformatted(wrap_at_spaces("  skipped: " + why, ImGui::GetContentRegionAvail().x).c_str());
        ImGui::PopStyleColor();
      }
    if (s == 0 || specs[1] != specs[0]) draw_knockouts(state, s, avail);
  }
  // The buttons on one line: Change / Fold (lecture mode), Clear, and while the models run, "working...".
  if (state.lecture) {
    const char* label = w.form_open ? "Fold" : "Change";
    if (ImGui::Button(label)) w.form_open = !w.form_open;
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(w.form_open ? "Fold the controls to one line" : "λ = 0 per layer, keys removed");
    ImGui::SameLine();
  } else {
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextUnformatted(
        wrap_at_spaces("Click a head in a grid below to ablate it (its output zero before "
                       "o_proj), right-click a DIFF head for its lambda = 0; again to restore.",
                       avail)
            .c_str());
    ImGui::PopStyleColor();
  }
  const bool none = !w.any();
  if (none) ImGui::BeginDisabled();
  if (ImGui::Button("Clear: the models as trained")) {
    const bool form_open = w.form_open;
    w.clear();
    w.form_open = form_open;
    changed = true;
  }
  if (none) ImGui::EndDisabled();
  if (changed) state.prompt.rerun();
  // A change runs both models again with the lens and attribution: marked until its result is on screen.
  if (state.status.busy || state.prompt.pending) {
    ImGui::SameLine();
    ImGui::TextColored(ImVec4(0.75f, 0.45f, 0.05f, 1), "working...");
    state.drawn.note("why.working", 0, 0, 0, 0);
  }
}

// The grids' number formats, finest first: two decimals with the sign, one, one without the '+' (the colour
// still says it).
constexpr const char* kGridFormats[] = {"%+.2f", "%+.1f", "%.1f"};

// A grid number: a value that rounds to zero is "0.00" (never "-0.0" or "+0.00").
std::string grid_number(const char* format, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  std::string out = buf;
  if (out.find_first_not_of("+-0.") == std::string::npos) out.erase(0, out.find_first_not_of("+-"));
  return out;
}

// The widest number of an attribution's grid in a format ("off" at least), with its MLPs or not.
float grid_widest(const LogitAttribution& a, const char* f, bool with_mlps) {
  float w = ImGui::CalcTextSize("off").x;
  for (size_t l = 0; l < a.heads.size(); ++l) {
    for (double v : a.heads[l]) w = std::max(w, ImGui::CalcTextSize(grid_number(f, v).c_str()).x);
    if (with_mlps) w = std::max(w, ImGui::CalcTextSize(grid_number(f, a.mlps[l]).c_str()).x);
  }
  return w;
}

// The finest format (kGridFormats' index) whose grid fits `width`: two decimals with the MLP column, else
// one with the sign, else one without.
int grid_detail(const LogitAttribution& a, float width) {
  const int H = a.heads.empty() ? 0 : static_cast<int>(a.heads[0].size());
  const float pad = ImGui::GetStyle().CellPadding.x * 2 + 4, label_w = ImGui::CalcTextSize("L00").x + pad;
  auto fits = [&](const char* f, int columns, bool with_mlps) {
    return label_w + static_cast<float>(columns) * (grid_widest(a, f, with_mlps) + pad) <= width;
  };
  if (fits(kGridFormats[0], H + 1, true)) return 0;
  return fits(kGridFormats[1], H, false) ? 1 : 2;
}

void draw_patch(GuiState& state, int s, float width, const char* format);  // below

// One model's column.
void draw_model(GuiState& state, int s, float width, int detail) {
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
    std::snprintf(line, sizeof line,
                  state.lecture ? "P(answer) %.3f (rank %lld) -> %.3f (rank %lld)"
                                : "P(answer) %.3f (rank %lld) -> %.3f (rank %lld) under the interventions",
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
    std::string lens = "lens: P(answer) after L0-L" + std::to_string(why->layers.size() - 1) + ":";
    char part[48];
    for (size_t l = 0; l < why->layers.size(); ++l) {
      std::snprintf(part, sizeof part, "%s %.2f", l ? "," : "", why->layers[l].target_probability[q]);
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
  // With a corrupt prompt the grid shows patching (the toggle above the models), else the direct shares.
  if (!r.edits.corrupt.empty() && state.why.patch_grid) {
    ImGui::PopTextWrapPos();
    draw_patch(state, s, width, kGridFormats[std::clamp(detail, 0, 2)]);
    return;
  }
  // Direct attribution: layers x heads, then the MLPs.
  ImGui::Spacing();
  double parts = 0, mlps = 0;
  for (const auto& l : a.heads)
    for (double v : l) parts += v;
  for (double v : a.mlps) mlps += v;
  char sum_line[256];
  std::snprintf(sum_line, sizeof sum_line,
                state.lecture ? "%s %.2f = heads %+.2f, MLPs %+.2f, emb. %+.2f%s"
                              : "%s %.2f = heads %+.2f + MLPs %+.2f + embedding %+.2f%s",
                state.lecture ? "Logit" : "Direct shares of the answer's logit", a.logit, parts, mlps,
                a.embedding, state.lecture ? "" : " (final norm's scale frozen)");
  ImGui::TextUnformatted(wrap_at_spaces(sum_line, width).c_str());
  double m = 1e-9;
  for (const auto& l : a.heads)
    for (double v : l) m = std::max(m, std::fabs(v));
  const int H = a.heads.empty() ? 0 : static_cast<int>(a.heads[0].size());
  const float pad = ImGui::GetStyle().CellPadding.x * 2 + 4, label_w = ImGui::CalcTextSize("L00").x + pad;
  // The format both models' grids share (detail: the coarser of the two columns' fits).
  const char* format = kGridFormats[std::clamp(detail, 0, 2)];
  const bool wide = detail == 0;
  auto widest = [&](const char* f, bool with_mlps) { return grid_widest(a, f, with_mlps); };
  auto fits = [&](const char* f, int columns, bool with_mlps) {
    return label_w + static_cast<float>(columns) * (widest(f, with_mlps) + pad) <= width;
  };
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
          std::snprintf(text, sizeof text, "%s##%zu-%d", grid_number(format, v).c_str(), l, h);
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
      ImGui::TextUnformatted(grid_number(format, a.mlps[l]).c_str());
    }
    ImGui::EndTable();
  }
  if (!mlp_column) {
    std::string line = "MLPs:";
    char part[48];
    for (size_t l = 0; l < a.mlps.size(); ++l) {
      std::snprintf(part, sizeof part, "%s L%zu %s", l ? "," : "", l, grid_number(format, a.mlps[l]).c_str());
      line += part;
    }
    ImGui::TextUnformatted(wrap_at_spaces(line, width).c_str());
  }
}

// One model's activation patching: a layers x heads grid of the normalised logit difference when the head's
// output comes from the prompt's run into the corrupt prompt's (0: the corrupt run, 1: the prompt's; blue
// restores the answer, red pushes it further away); a click picks a head and says what its patch does.
void draw_patch(GuiState& state, int s, float width, const char* format) {
  const RunResult& r = *state.shown;
  const size_t si = static_cast<size_t>(s);
  if (r.edits.corrupt.empty()) return;
  ImGui::Spacing();
  if (!r.patch_error[si].empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(0.75f, 0.25f, 0.05f, 1));
    ImGui::TextUnformatted(wrap_at_spaces("Patching: " + r.patch_error[si], width).c_str());
    ImGui::PopStyleColor();
    return;
  }
  const auto& p = r.patch[si];
  if (!p) {
    ImGui::TextDisabled("patching...");
    return;
  }
  char head[320];
  const std::string after = p->shared.empty() ? "" : " after '" + piece(p->shared_text) + "'";
  std::snprintf(head, sizeof head,
                state.lecture
                    ? "Patched into the corrupt prompt%s: '%s' vs '%s', %.2f vs %.2f"
                    : "Patching, each head's output into the corrupt prompt%s: logit '%s' - '%s' %.2f "
                      "(this prompt), %.2f (corrupt); cells: share of the gap restored",
                after.c_str(), piece(p->target_text).c_str(), piece(p->alternative_text).c_str(),
                p->clean_diff, p->corrupt_diff);
  ImGui::TextUnformatted(wrap_at_spaces(head, width).c_str());
  const auto& t = r.traces[si];
  const int L = t ? static_cast<int>(t->config.num_hidden_layers) : 0;
  const int H = t ? static_cast<int>(t->config.map_heads()) : 0;
  if (L * H != static_cast<int>(p->results.size()) || H == 0) return;
  const float pad = ImGui::GetStyle().CellPadding.x * 2 + 4, label_w = ImGui::CalcTextSize("L00").x + pad;
  float widest = ImGui::CalcTextSize("0.00").x;
  for (const PatchResult& pr : p->results)
    widest = std::max(widest, ImGui::CalcTextSize(grid_number(format, pr.normalized).c_str()).x);
  const float cell_w = std::max(
      widest, std::min(ImGui::GetFontSize() * 4, (width - label_w) / static_cast<float>(H) - pad - 2));
  const ImVec2 top = ImGui::GetCursorScreenPos();
  const std::string table = "why-patch-" + std::to_string(s);
  auto& picked = state.why.picked[si];
  if (ImGui::BeginTable(table.c_str(), H + 1, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed, label_w - pad);
    for (int h = 0; h < H; ++h)
      ImGui::TableSetupColumn(("H" + std::to_string(h)).c_str(), ImGuiTableColumnFlags_WidthFixed, cell_w);
    ImGui::TableHeadersRow();
    for (int l = 0; l < L; ++l) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("L%d", l);
      for (int h = 0; h < H; ++h) {
        ImGui::TableNextColumn();
        const PatchResult& pr = p->results[static_cast<size_t>(l * H + h)];
        const double v = pr.normalized;
        ImGui::TableSetBgColor(ImGuiTableBgTarget_CellBg,
                               ink(viz::grid_cell_colour(std::isnan(v) ? 0 : v, -1, 1, true)));
        char text[64];
        std::snprintf(text, sizeof text, "%s##p%d-%d", std::isnan(v) ? "-" : grid_number(format, v).c_str(),
                      l, h);
        const bool on = picked == std::pair<int, int>{l, h};
        if (ImGui::Selectable(text, on))
          picked = on ? std::pair<int, int>{-1, -1} : std::pair<int, int>{l, h};
        if (ImGui::IsItemHovered()) {
          char tip[192];
          std::snprintf(
              tip, sizeof tip,
              "L%d H%d's output from this prompt's run in the corrupt run:\nlogit difference %.3f -> "
              "%.3f (%.3f of the way to this prompt's %.3f)\nclick to pick it",
              l, h, p->corrupt_diff, pr.logit_diff, v, p->clean_diff);
          ImGui::SetTooltip("%s", tip);
        }
      }
    }
    ImGui::EndTable();
  }
  state.drawn.note("why.patch." + std::to_string(s), top.x, top.y, top.x + width,
                   ImGui::GetCursorScreenPos().y);
  if (picked.first >= 0 && picked.first < L && picked.second >= 0 && picked.second < H) {
    const PatchResult& pr = p->results[static_cast<size_t>(picked.first * H + picked.second)];
    char line[192];
    std::snprintf(line, sizeof line,
                  "L%d H%d patched: the corrupt run's logit difference %.2f -> %.2f (%.2f)", picked.first,
                  picked.second, p->corrupt_diff, pr.logit_diff, pr.normalized);
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
  // One number format for both grids, the coarser one's, so that the two models' numbers read alike.
  int detail = 0;
  const float column_w = ImGui::GetContentRegionAvail().x / kSlots - ImGui::GetFontSize() * 0.5f -
                         ImGui::GetStyle().CellPadding.x * 2;
  for (int s = 0; s < kSlots; ++s)
    if (r.why[static_cast<size_t>(s)] && r.why_error[static_cast<size_t>(s)].empty())
      detail = std::max(detail, grid_detail(r.why[static_cast<size_t>(s)]->attribution, column_w));
  if (!r.edits.corrupt.empty()) {
    ImGui::TextUnformatted("Grids:");
    ImGui::SameLine();
    if (ImGui::RadioButton("direct shares", !state.why.patch_grid)) state.why.patch_grid = false;
    ImGui::SameLine();
    if (ImGui::RadioButton("patching", state.why.patch_grid)) state.why.patch_grid = true;
    ImGui::SameLine();
    ImGui::TextDisabled("%s", corrupt_change(r.prompt, r.edits.corrupt).c_str());
  }
  if (ImGui::BeginTable("why-models", kSlots, ImGuiTableFlags_SizingStretchSame)) {
    for (int s = 0; s < kSlots; ++s) {
      ImGui::TableNextColumn();
      const ImVec2 p = ImGui::GetCursorScreenPos();
      const float column = ImGui::GetContentRegionAvail().x;
      draw_model(state, s, column - ImGui::GetFontSize() * 0.5f, detail);
      state.drawn.note("why." + std::to_string(s), p.x, p.y, p.x + column, ImGui::GetCursorScreenPos().y);
    }
    ImGui::EndTable();
  }
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextUnformatted(
      wrap_at_spaces(
          !r.edits.corrupt.empty() && state.why.patch_grid
              ? (state.lecture ? "Patching: a head's output at every position from this prompt's run into "
                                 "the corrupt one's; 0: as corrupt, 1: as this prompt."
                               : "Patching: each cell is the corrupt run with that head's output (every "
                                 "position, as o_proj reads it) from this prompt's run: the share of the "
                                 "logit difference's gap it restores, 0 the corrupt run, 1 this prompt's "
                                 "(blue restores, red pushes further). The bundled models are 1.8 "
                                 "M-parameter toys trained here.")
          : state.lecture ? "Direct shares, final norm's scale frozen; 1.8 M-parameter toy models."
                          : "Direct shares only: what a head adds to the residual stream read straight "
                            "through the final norm, not what later layers make of it. The bundled "
                            "models are 1.8 M-parameter toys trained here.",
          ImGui::GetContentRegionAvail().x)
          .c_str());
  ImGui::PopStyleColor();
}

viz::ChartFigure why_lens_chart(GuiState& state, int width, int height, float font_px) {
  if (!state.shown) throw Error("no run on screen yet");
  const RunResult& r = *state.shown;
  viz::ChartFigure f =
      chart_frame(width, height, font_px, "Logit lens at the query: P(answer) after each layer", "P(answer)",
                  "the residual stream after the layer, read through the final "
                  "norm and the unembedding");
  f.lo = 0;
  f.hi = 1;
  viz::ChartPanel p;
  std::string answers;
  size_t layers = 0;
  for (int s = 0; s < kSlots; ++s)
    if (r.why[static_cast<size_t>(s)])
      layers = std::max(layers, r.why[static_cast<size_t>(s)]->layers.size());
  if (layers == 0) {
    for (int s = 0; s < kSlots; ++s)
      if (!r.why_error[static_cast<size_t>(s)].empty()) throw Error(r.why_error[static_cast<size_t>(s)]);
    throw Error("the Why view has no explanation yet (it is still running, or no model is loaded)");
  }
  for (size_t l = 0; l < layers; ++l) p.groups.push_back("layer " + std::to_string(l));
  for (int s = 0; s < kSlots; ++s) {
    const auto& why = r.why[static_cast<size_t>(s)];
    const auto& t = r.traces[static_cast<size_t>(s)];
    if (!why || !t) continue;
    const size_t q = static_cast<size_t>(why->attribution.query);
    auto series = [&](const AnswerExplanation& e, const std::string& name, bool light) {
      viz::ChartSeries c;
      c.name = name;
      c.color = viz::model_colour(static_cast<size_t>(s), light);
      for (size_t l = 0; l < layers; ++l)
        c.values.push_back(l < e.layers.size() ? e.layers[l].target_probability[q] : std::nan(""));
      p.series.push_back(c);
    };
    const auto& before = r.why_before[static_cast<size_t>(s)];
    if (before) series(*before, model_name(*t) + " as trained", true);
    series(*why, model_name(*t) + (before ? " under the interventions" : ""), false);
    answers += (answers.empty() ? "" : "; ") + model_name(*t) + ": after '" + piece(t->tokens[q]) +
               "' (query " + std::to_string(q) + ") the answer '" + piece(why->attribution.target_text) + "'";
  }
  p.value_labels = true;
  f.panels.push_back(p);
  f.footnote = answers;
  return f;
}

std::vector<viz::GridFigure> why_share_grids(GuiState& state, float font_px) {
  if (!state.shown) throw Error("no run on screen yet");
  const RunResult& r = *state.shown;
  std::vector<viz::GridFigure> out;
  for (int s = 0; s < kSlots; ++s) {
    const auto& why = r.why[static_cast<size_t>(s)];
    const auto& t = r.traces[static_cast<size_t>(s)];
    if (!why || !t) continue;
    const LogitAttribution& a = why->attribution;
    viz::GridFigure g;
    char logit[32];
    std::snprintf(logit, sizeof logit, "%.2f", a.logit);
    g.title = model_name(*t) + ": direct shares of the logit of '" + piece(a.target_text) + "' at query " +
              std::to_string(a.query) + " (" + logit + ")";
    g.row_title = "layer";
    g.col_title = "head";
    size_t heads = 0;
    for (const auto& l : a.heads) heads = std::max(heads, l.size());
    for (size_t l = 0; l < a.heads.size(); ++l) g.row_labels.push_back("L" + std::to_string(l));
    for (size_t h = 0; h < heads; ++h) g.col_labels.push_back("H" + std::to_string(h));
    g.col_labels.push_back("MLP");
    double m = 0;
    for (size_t l = 0; l < a.heads.size(); ++l) {
      for (size_t h = 0; h < heads; ++h) {
        const double v = h < a.heads[l].size() ? a.heads[l][h] : std::nan("");
        g.values.push_back(v);
        if (std::isfinite(v)) m = std::max(m, std::fabs(v));
      }
      g.values.push_back(a.mlps[l]);
      if (std::isfinite(a.mlps[l])) m = std::max(m, std::fabs(a.mlps[l]));
    }
    if (!(m > 0)) m = 1;  // every share 0 (or none finite): a scale still
    g.lo = -m;
    g.hi = m;
    g.diverging = true;
    g.format = "%+.2f";
    if (font_px > 0) g.cell = std::clamp(static_cast<int>(font_px * 4.5f), 16, 512);
    out.push_back(std::move(g));
  }
  if (out.empty())
    throw Error("the Why view has no explanation yet (it is still running, or no model is loaded)");
  return out;
}

}  // namespace difflens::app
