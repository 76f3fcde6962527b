// The Needle lab tab: a needle-in-a-haystack sweep run by the worker, its accuracy and attention heatmaps
// per model, the per-cell tables and the export of the same files as the needle command.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "app/desktop/figure_export.h"
#include "app/desktop/panels.h"
#include "app/desktop/plot.h"
#include "app/reports/needle_report.h"
#include "core/formats/error.h"
#include "core/model/needle.h"
#include "viz/colormap.h"
#include "viz/figure.h"

namespace difflens::app {
namespace {

ImU32 colormap_u32(viz::Rgb8 c) {
  return IM_COL32(c.r, c.g, c.b, 255);
}

std::string depth_label(double d) {
  char b[16];
  std::snprintf(b, sizeof b, "%.0f%%", d * 100);
  return b;
}

// What a lab heatmap shows of a cell: its accuracy, the attention to the answer while the question is read,
// or the strongest head's attention to the answer while the code is produced.
enum class LabValue { Accuracy, QuestionAttention, AnsweringHead };

double lab_value(const NeedleCellSummary& c, LabValue v) {
  return v == LabValue::Accuracy            ? c.accuracy
         : v == LabValue::QuestionAttention ? c.attention.answer_mass
                                            : c.answering_head;
}

// The intervened runs' mark, as the Why view's orange corner.
const ImVec4 kIntervenedColour(230 / 255.0f, 120 / 255.0f, 20 / 255.0f, 1);

// What the lab tables and draws: each slot's model as trained and, when the sweep ran it under
// interventions, again under them ("diff-small under lambda:0=0"), the intervened one right after it.
struct LabSeries {
  int slot = 0;
  bool edited = false;
  const std::string* name = nullptr;
  const std::vector<NeedleRun>* runs = nullptr;
  const std::vector<NeedleCellSummary>* cells = nullptr;
};

// Each head's noise mass in a cell's episodes (the question's rows), the mean over the episodes: the spread
// the cell's mean hides.
std::vector<double> head_noise_masses(const std::vector<NeedleRun>& runs, const NeedleCell& cell) {
  std::vector<double> sum;
  int n = 0;
  for (const NeedleRun& r : runs) {
    if (r.cell.length != cell.length || r.cell.depth != cell.depth || r.cell.needles != cell.needles ||
        r.cell.queried != cell.queried)
      continue;
    size_t k = 0;
    for (const auto& layer : r.attention.per_head)
      for (const AttentionShare& h : layer) {
        if (sum.size() <= k) sum.resize(k + 1, 0.0);
        sum[k++] += h.noise_mass;
      }
    ++n;
  }
  for (double& v : sum) v /= std::max(1, n);
  return sum;
}

// A strip 0..1 a few characters wide with a tick for each value.
void head_strip(const std::vector<double>& values) {
  const float w = ImGui::GetFontSize() * 4, h = ImGui::GetTextLineHeight();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddLine(ImVec2(p.x, p.y + h * 0.5f), ImVec2(p.x + w, p.y + h * 0.5f), IM_COL32(150, 150, 150, 255));
  for (double v : values) {
    const float x = p.x + static_cast<float>(std::clamp(v, 0.0, 1.0)) * w;
    dl->AddLine(ImVec2(x, p.y + h * 0.15f), ImVec2(x, p.y + h * 0.85f), IM_COL32(40, 40, 40, 255), 1.5f);
  }
  ImGui::Dummy(ImVec2(w, h));
}

std::vector<LabSeries> lab_series(const GuiState::Lab& lab, const SweepProgress& p) {
  std::vector<LabSeries> out;
  for (int s = 0; s < kSlots; ++s) {
    const size_t k = static_cast<size_t>(s);
    if (p.models[k].empty()) continue;
    out.push_back({s, false, &p.models[k], &p.runs[k], &lab.cells[s]});
    if (!p.edited_models[k].empty())
      out.push_back({s, true, &p.edited_models[k], &p.edited_runs[k], &lab.edited_cells[s]});
  }
  return out;
}

// A series' name in a table cell: the intervened in the intervention orange.
void series_name(const LabSeries& x) {
  if (x.edited)
    ImGui::TextColored(kIntervenedColour, "%s", x.name->c_str());
  else
    ImGui::TextUnformatted(x.name->c_str());
}

// A depth × length grid of one model's cells for one (N, R), coloured over [lo, hi], values printed when
// they fit; hovering a cell tells its numbers.
void draw_lab_grid(const char* title, const NeedleSweep& sweep, const std::vector<NeedleCellSummary>& cells,
                   std::pair<int, int> nr, LabValue value, double lo, double hi, float cell) {
  ImGui::BeginGroup();
  ImGui::TextUnformatted(title);
  const float label_w = ImGui::CalcTextSize("100%").x + ImGui::GetStyle().ItemSpacing.x;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImVec2 p = ImGui::GetCursorScreenPos();
  for (size_t c = 0; c < sweep.lengths.size(); ++c) {  // length labels above the columns
    const std::string l = std::to_string(sweep.lengths[c]);
    const float w = ImGui::CalcTextSize(l.c_str()).x;
    dl->AddText(ImVec2(p.x + label_w + cell * (static_cast<float>(c) + 0.5f) - w / 2, p.y),
                ImGui::GetColorU32(ImGuiCol_Text), l.c_str());
  }
  p.y += ImGui::GetTextLineHeightWithSpacing();
  for (size_t r = 0; r < sweep.depths.size(); ++r) {
    const float y = p.y + cell * static_cast<float>(r);
    const std::string dlabel = depth_label(sweep.depths[r]);
    dl->AddText(ImVec2(p.x, y + (cell - ImGui::GetTextLineHeight()) / 2), ImGui::GetColorU32(ImGuiCol_Text),
                dlabel.c_str());
    for (size_t c = 0; c < sweep.lengths.size(); ++c) {
      const ImVec2 a(p.x + label_w + cell * static_cast<float>(c), y), b(a.x + cell - 1, a.y + cell - 1);
      const NeedleCellSummary* found = nullptr;
      for (const auto& cs : cells)
        if (cs.cell.length == sweep.lengths[c] && cs.cell.depth == sweep.depths[r] &&
            cs.cell.needles == nr.first && cs.cell.queried == nr.second)
          found = &cs;
      if (!found) {
        dl->AddRectFilled(a, b, IM_COL32(236, 236, 236, 255));
        continue;
      }
      const double v = lab_value(*found, value);
      // Shares below 0 (DIFF can subtract): the sign scale around 0, as every view; else sequential.
      const viz::Rgb8 colour = viz::grid_cell_colour(v, lo, hi, lo < 0);
      dl->AddRectFilled(a, b, colormap_u32(colour));
      char txt[32];
      std::snprintf(txt, sizeof txt, value == LabValue::QuestionAttention ? "%.3f" : "%.2f", v);
      const ImVec2 ts = ImGui::CalcTextSize(txt);
      if (ts.x < cell - 2) {
        const bool dark = viz::oklab_lightness(colour) < 0.6;
        dl->AddText(ImVec2(a.x + (cell - ts.x) / 2, a.y + (cell - ts.y) / 2),
                    dark ? IM_COL32(255, 255, 255, 255) : IM_COL32(20, 20, 20, 255), txt);
      }
      if (ImGui::IsMouseHoveringRect(a, b))
        ImGui::SetTooltip(
            "%lld tokens, depth %s (placed at %.0f%%: the sentence boundary nearest it), N=%d R=%d\n"
            "%d episodes: accuracy %.2f\n"
            "reading the question: attention mass on the answer %.3f, on the noise %.3f (output share %.3f)\n"
            "while answering: mass on the answer %.3f, on the noise %.3f, strongest head %.2f",
            static_cast<long long>(found->cell.length), depth_label(found->cell.depth).c_str(),
            found->placed_depth * 100, nr.first, nr.second, found->runs, found->accuracy,
            found->attention.answer_mass, found->attention.noise_mass, found->attention.noise_output,
            found->answering.answer_mass, found->answering.noise_mass, found->answering_head);
    }
  }
  ImGui::Dummy(
      ImVec2(label_w + cell * static_cast<float>(sweep.lengths.size()),
             ImGui::GetTextLineHeightWithSpacing() + cell * static_cast<float>(sweep.depths.size())));
  ImGui::EndGroup();
}

}  // namespace

void start_lab_sweep(GuiState& state, InferenceWorker& worker) {
  GuiState::Lab& lab = state.lab;
  try {
    SweepRequest req;
    req.sweep = parse_needle_sweep(lab.lengths, lab.depths, lab.needles, lab.queried, lab.seeds);
    req.haystack_path = state.needle.haystack_path;
    req.names = lab.names == 0 ? NameSet::SingleToken : NameSet::Original;
    req.wording = state.needle.wording;
    req.wording.validate();
    req.logit_bits = kQuantizationBits[std::clamp(state.view.quantization, 0, 3)];
    if (lab.with_interventions) req.interventions = state.why.specs();
    worker.start_sweep(req);
    lab.form_error.clear();
    lab.message.clear();
  } catch (const std::exception& e) {
    lab.form_error = e.what();
  }
}

// "Sweep every kept step": loads the next kept step into both slots and starts the lab's sweep on it (the
// worker runs loads before a sweep begins, so the sweep sees the step).
void start_next_step_sweep(GuiState& state, InferenceWorker& worker) {
  GuiState::Lab::OverSteps& o = state.lab.over_steps;
  load_training_step(state, worker, o.plan[o.next]);
  start_lab_sweep(state, worker);
  const auto p = worker.sweep_progress();
  if (!state.lab.form_error.empty() || !p) {
    o.running = false;
    o.note = "stopped: " + state.lab.form_error;
    return;
  }
  o.sweep = p->id;
}

void start_steps_sweep(GuiState& state, InferenceWorker& worker) {
  GuiState::Lab::OverSteps& o = state.lab.over_steps;
  o = GuiState::Lab::OverSteps{};
  o.plan = timeline_steps(state);
  if (o.plan.empty()) {
    o.note = "neither slot holds a training run with kept steps (train --keep-every N)";
    return;
  }
  o.running = true;
  start_next_step_sweep(state, worker);
}

// After the sweep of a step ends: each slot's accuracy and noise there, then the next step's sweep.
void poll_steps_sweep(GuiState& state, InferenceWorker& worker) {
  GuiState::Lab& lab = state.lab;
  GuiState::Lab::OverSteps& o = lab.over_steps;
  if (!o.running || !lab.progress || lab.progress->id != o.sweep || lab.progress->running) return;
  const SweepProgress& p = *lab.progress;
  if (p.cancelled || !p.finished) {
    o.running = false;
    o.note = "stopped at step " + std::to_string(o.plan[o.next]) + (p.error.empty() ? "" : ": " + p.error);
    return;
  }
  for (size_t s = 0; s < kSlots; ++s) {
    if (p.runs[s].empty()) continue;
    int answered = 0, asked = 0;
    double noise = 0;
    for (const NeedleRun& r : p.runs[s]) {
      answered += r.answered;
      asked += r.asked;
      noise += r.attention.mean.noise_mass;
    }
    StepPoint q;
    q.step = o.plan[o.next];
    q.answer_mass = asked > 0 ? static_cast<double>(answered) / asked : 0;
    q.noise_mass = noise / static_cast<double>(p.runs[s].size());
    o.points[s].push_back(q);
  }
  if (++o.next < o.plan.size())
    start_next_step_sweep(state, worker);
  else
    o.running = false;
}

// Takes the worker's sweep progress when it changed (the lab's one point per frame).
void poll_lab(GuiState& state, const InferenceWorker& worker) {
  GuiState::Lab& lab = state.lab;
  auto p = worker.sweep_progress(lab.progress ? lab.progress->version : 0);
  if (!p || p->id == 0) return;
  for (int s = 0; s < kSlots; ++s) {
    lab.cells[s] = summarize(p->runs[static_cast<size_t>(s)]);
    lab.edited_cells[s] = summarize(p->edited_runs[static_cast<size_t>(s)]);
  }
  lab.progress = std::move(p);
}

void export_lab(GuiState& state) {
  GuiState::Lab& lab = state.lab;
  const SweepProgress& p = *lab.progress;
  try {
    std::vector<std::string> names;
    std::vector<std::vector<NeedleRun>> runs;
    const bool same = p.models[0] == p.models[1];  // e.g. one model in both slots: tell the files apart
    for (const LabSeries& x : lab_series(lab, p)) {
      std::string name = *x.name;
      if (same) {  // before " under ..." so the slot stays with the model's name
        const size_t under = x.edited ? name.find(" under ") : std::string::npos;
        name.insert(under == std::string::npos ? name.size() : under, x.slot == 0 ? "-left" : "-right");
      }
      names.push_back(name);
      runs.push_back(*x.runs);
    }
    const std::filesystem::path dir =
        free_path(state.view.export_dir, "needle-lab-" + std::to_string(p.id), {""});  // never an earlier one
    write_needle_report(dir, names, runs, std::clamp(lab.cell_px, 16, 512));
    lab.message = "exported " + dir.string() + " (needle.json, needle.csv, tables.md, PNG + SVG heatmaps)";
  } catch (const std::exception& e) {
    lab.message = std::string("export failed: ") + e.what();
  }
  state.message = lab.message;
}

namespace {

// The sweep's form: lengths, depths, (N, R), seeds, names, the haystack, the wording; Run, Cancel, Export.
void draw_lab_form(GuiState& state, InferenceWorker& worker) {
  GuiState::Lab& lab = state.lab;
  const float w = ImGui::GetFontSize() * 9;
  // The form's items continue the line while they fit the view, else wrap (flow_next).
  const float pad = 2 * ImGui::GetStyle().FramePadding.x;
  auto button_w = [&](const char* label) { return ImGui::CalcTextSize(label).x + pad; };
  const bool running = lab.progress && lab.progress->running;
  const bool have_runs = lab.progress && lab.progress->done > 0;
  auto run_cancel_export = [&] {
    flow_next(button_w("Restart sweep"));
    if (ImGui::Button(running ? "Restart sweep" : "Run sweep")) start_lab_sweep(state, worker);
    flow_next(button_w("Cancel"));
    if (!running) ImGui::BeginDisabled();
    if (ImGui::Button("Cancel")) worker.cancel_sweep();
    if (!running) ImGui::EndDisabled();
    flow_next(button_w("Export results"));
    if (!have_runs) ImGui::BeginDisabled();
    if (ImGui::Button("Export results")) export_lab(state);
    if (!have_runs) ImGui::EndDisabled();
    if (!state.timeline.runs[0].steps.empty() || !state.timeline.runs[1].steps.empty()) {
      flow_next(button_w("Sweep every kept step"));
      if (running) ImGui::BeginDisabled();
      if (ImGui::Button("Sweep every kept step")) start_steps_sweep(state, worker);
      if (running) ImGui::EndDisabled();
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip(
            "runs this sweep on every step the slots' training runs kept (train --keep-every), loading each "
            "into both slots in turn, and charts accuracy and attention noise against the step");
    }
  };
  // Lecture mode with results: the form folds to the line of what ran, so the heatmaps are the slide.
  if (state.lecture && have_runs && !lab.form_open) {
    const NeedleSweep& sw = lab.progress->request.sweep;
    std::string what = "Sweep:";
    for (size_t i = 0; i < sw.lengths.size(); ++i) what += (i ? ", " : " ") + std::to_string(sw.lengths[i]);
    what += " tokens; depths";
    for (size_t i = 0; i < sw.depths.size(); ++i) what += (i ? ", " : " ") + depth_label(sw.depths[i]);
    for (const auto& [n, r] : sw.needles_queried)
      what += "; N=" + std::to_string(n) + " R=" + std::to_string(r);
    what += "; " + std::to_string(sw.seeds) + (sw.seeds == 1 ? " seed" : " seeds");
    ImGui::TextUnformatted(what.c_str());
    flow_next(button_w("Edit sweep"));
    if (ImGui::Button("Edit sweep")) lab.form_open = true;
    run_cancel_export();
    if (!lab.form_error.empty())
      ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", lab.form_error.c_str());
    return;
  }
  ImGui::TextUnformatted("Sweep:");
  flow_next(w, "lengths (tokens)");
  ImGui::SetNextItemWidth(w);
  ImGui::InputText("lengths (tokens)", &lab.lengths);
  flow_next(w, "depths (%)");
  ImGui::SetNextItemWidth(w);
  ImGui::InputText("depths (%)", &lab.depths);
  flow_next(w * 0.5f, "needles N");
  ImGui::SetNextItemWidth(w * 0.5f);
  ImGui::InputText("needles N", &lab.needles);
  flow_next(w * 0.5f, "asked R");
  ImGui::SetNextItemWidth(w * 0.5f);
  ImGui::InputText("asked R", &lab.queried);
  flow_next(w * 0.6f, "seeds");
  ImGui::SetNextItemWidth(w * 0.6f);
  ImGui::InputInt("seeds", &lab.seeds);
  lab.seeds = std::clamp(lab.seeds, 1, 1000);
  flow_next(w * 1.4f, "names");
  ImGui::SetNextItemWidth(w * 1.4f);
  ImGui::Combo("names", &lab.names, "held-out single-token\0held-out original\0");
  const float path_w = std::min(w * 3, ImGui::GetContentRegionAvail().x * 0.6f);
  ImGui::SetNextItemWidth(path_w);
  ImGui::InputText("haystack text file", &state.needle.haystack_path);
  flow_next(button_w("Wording..."));
  if (ImGui::Button("Wording...")) ImGui::OpenPopup("wording");
  if (ImGui::BeginPopup("wording")) {
    NeedleTemplate& t = state.needle.wording;
    ImGui::TextUnformatted("{name} and {code} are filled in; the answer \" <code>.\" follows the question.");
    ImGui::SetNextItemWidth(w * 4);
    ImGui::InputText("needle", &t.needle);
    ImGui::InputTextMultiline("question", &t.question, ImVec2(w * 4, ImGui::GetTextLineHeight() * 3));
    if (ImGui::Button("Trained wording")) t = NeedleTemplate{};
    try {
      t.validate();
    } catch (const std::exception& e) {
      ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", e.what());
    }
    ImGui::TextDisabled("The bundled models were trained on the default wording only.");
    ImGui::EndPopup();
  }
  // The Why view's interventions (each slot's own): the sweep also runs each slot under its list.
  const auto specs = state.why.specs();
  std::string list;
  for (int s = 0; s < kSlots; ++s) {
    const auto& v = specs[static_cast<size_t>(s)];
    if (v.empty()) continue;
    list += std::string(list.empty() ? "" : "; ") + (s == 0 ? "left: " : "right: ");
    for (size_t i = 0; i < v.size(); ++i) list += (i ? ", " : "") + v[i];
  }
  ImGui::Checkbox("also under the interventions", &lab.with_interventions);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "%s", wrap_at_spaces(
                  "Each slot runs every episode as trained and again under the interventions set in the "
                  "Why view (key 0); both are tabled and exported. The asked needle's code is the answer, "
                  "the question's first token the query. A slot whose model cannot take one (a baseline "
                  "has no lambda) skips it and says so.",
                  ImGui::GetFontSize() * 30)
                  .c_str());
  ImGui::SameLine();
  if (list.empty())
    ImGui::TextDisabled("(none set: the Why view, key 0, sets them)");
  else if (!lab.with_interventions)
    ImGui::TextDisabled("(%s: not swept)", list.c_str());
  else
    ImGui::TextColored(kIntervenedColour, "%s", list.c_str());
  run_cancel_export();
  flow_next(w * 0.6f, "px per cell");
  if (!have_runs) ImGui::BeginDisabled();
  ImGui::SetNextItemWidth(w * 0.6f);
  ImGui::InputInt("px per cell", &lab.cell_px, 8, 32);
  lab.cell_px = std::clamp(lab.cell_px, 16, 512);
  if (!have_runs) ImGui::EndDisabled();
  if (state.lecture && have_runs) {
    flow_next(button_w("Fold the form"));
    if (ImGui::Button("Fold the form")) lab.form_open = false;
  }
  if (!lab.form_error.empty()) ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", lab.form_error.c_str());
}

// The sweep's progress bar and messages, or what a sweep does before the first; the progress when it has
// episodes to show, else nullptr.
const SweepProgress* draw_lab_progress(GuiState::Lab& lab) {
  if (!lab.progress) {
    ImGui::TextWrapped(
        "Runs every length x depth x (N, R) cell on both models with held-out names, codes and haystack "
        "text, and again under the interventions when the box above is ticked and the Why view has some; "
        "typing a prompt meanwhile pauses the sweep. Accuracy: the whole code produced greedily. The sweep "
        "uses the logits menu above: exact, or attention logits quantized to 8/6/4 bits.");
    return nullptr;
  }
  const SweepProgress& p = *lab.progress;
  char overlay[320];
  const double eta = p.done > 0 && p.running
                         ? p.seconds / static_cast<double>(p.done) * static_cast<double>(p.total - p.done)
                         : 0;
  std::snprintf(
      overlay, sizeof overlay, "%zu/%zu episodes%s%s%s", p.done, p.total,
      p.running     ? (" - " + p.current).c_str()
      : p.cancelled ? " - cancelled"
      : p.finished  ? " - done"
                    : "",
      p.running && p.done > 0 ? (" - ETA " + std::to_string(static_cast<int>(eta + 0.5)) + " s").c_str() : "",
      "");
  ImGui::ProgressBar(p.total ? static_cast<float>(p.done) / static_cast<float>(p.total) : 0.0f, ImVec2(-1, 0),
                     overlay);
  if (!p.error.empty()) ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", p.error.c_str());
  if (!lab.message.empty()) ImGui::TextDisabled("%s", lab.message.c_str());
  return p.done > 0 ? &p : nullptr;
}

// Accuracy and the chosen attention heatmap, depth x length, per model and (N, R), sized to the view.
void draw_lab_heatmaps(GuiState::Lab& lab, const SweepProgress& p, const std::vector<LabSeries>& series) {
  const NeedleSweep& sweep = p.request.sweep;
  const float avail = ImGui::GetContentRegionAvail().x;
  const float label_w = ImGui::CalcTextSize("100%").x + 2 * ImGui::GetStyle().ItemSpacing.x;
  const float grids = 2.0f * static_cast<float>(series.size());
  // Cells as large as the width allows, up to 6 em, and short enough that the tables below stay in view.
  const float by_width = (avail - grids * label_w - grids * ImGui::GetFontSize()) /
                         (grids * static_cast<float>(sweep.lengths.size()));
  const float by_height = 0.5f * ImGui::GetContentRegionAvail().y / static_cast<float>(sweep.depths.size());
  // ...but never narrower than a value or a length label (the tab scrolls instead).
  float min_cell = ImGui::CalcTextSize("-0.000").x;
  for (int64_t L : sweep.lengths)
    min_cell = std::max(min_cell, ImGui::CalcTextSize(std::to_string(L).c_str()).x);
  min_cell += ImGui::GetFontSize() * 0.5f;
  const float cell = std::max(min_cell, std::min({by_width, by_height, ImGui::GetFontSize() * 6.0f}));
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 22);
  ImGui::Combo("second heatmap", &lab.attention_view,
               "attention mass on the answer (reading the question)\0strongest head (answering)\0");
  const LabValue shown = lab.attention_view == 0 ? LabValue::QuestionAttention : LabValue::AnsweringHead;
  const char* shown_name =
      shown == LabValue::QuestionAttention ? "attention mass on the answer" : "strongest head answering";
  for (const auto& nr : sweep.needles_queried) {
    // One range for every model shown so their colours compare.
    double lo = 0, hi = 0;
    for (const LabSeries& x : series)
      for (const auto& c : *x.cells)
        if (c.cell.needles == nr.first && c.cell.queried == nr.second)
          lo = std::min(lo, lab_value(c, shown)), hi = std::max(hi, lab_value(c, shown));
    if (!(hi > lo)) hi = lo + 1;
    ImGui::Text("N=%d needles, R=%d asked: rows = depth of the asked needle, columns = context length",
                nr.first, nr.second);
    // One group per model (as trained, then under the interventions): its name once, its two grids
    // beside each other under short titles; a group goes beside the last where it fits, else on the next
    // line (four grids of 72-pixel cells do not fit a 1280-pixel lecture window side by side).
    const char* short_name = shown == LabValue::QuestionAttention ? "answer mass" : "strongest head";
    const float grid_w = label_w + cell * static_cast<float>(sweep.lengths.size());
    const float group_w = std::max(grid_w, ImGui::CalcTextSize("accuracy").x) + ImGui::GetFontSize() +
                          std::max(grid_w, ImGui::CalcTextSize(short_name).x);
    for (size_t k = 0; k < series.size(); ++k) {
      const LabSeries& x = series[k];
      const std::string name = wrap_at_spaces(*x.name, std::max(group_w, ImGui::GetFontSize() * 14));
      if (k > 0) {  // a wider gap between groups than inside one, so that their titles read apart
        const float gap = ImGui::GetFontSize() * 2;
        const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
        if (ImGui::GetItemRectMax().x + gap + std::max(group_w, ImGui::CalcTextSize(name.c_str()).x) <= right)
          ImGui::SameLine(0, gap);
      }
      ImGui::BeginGroup();
      if (x.edited)
        ImGui::TextColored(kIntervenedColour, "%s", name.c_str());
      else
        ImGui::TextUnformatted(name.c_str());
      for (const bool accuracy : {true, false}) {
        if (!accuracy) ImGui::SameLine(0, ImGui::GetFontSize());
        ImGui::PushID(static_cast<int>(k) * 2 + (accuracy ? 0 : 1) + 16 * nr.first + 256 * nr.second);
        draw_lab_grid(accuracy ? "accuracy" : short_name, sweep, *x.cells, nr,
                      accuracy ? LabValue::Accuracy : shown, accuracy ? 0.0 : lo, accuracy ? 1.0 : hi, cell);
        ImGui::PopID();
      }
      ImGui::EndGroup();
    }
    if (lo < 0)
      ImGui::TextDisabled(
          "accuracy colours span 0..1; %s: blue above 0, red below, to %.3f either way, every grid",
          shown_name, std::max(-lo, hi));
    else
      ImGui::TextDisabled("accuracy colours span 0..1; %s spans %.3f..%.3f in every grid", shown_name, lo,
                          hi);
  }
}

// The paper's Table 3 layout, the while-answering table and the multi-needle accuracies.
void draw_lab_tables(const SweepProgress& p, const std::vector<LabSeries>& series) {
  const NeedleSweep& sweep = p.request.sweep;
  // The paper's Table 3 layout: attention mass on the answer / on the noise by depth, per length and model.
  for (const auto& nr : sweep.needles_queried) {
    ImGui::Text("Attention mass on the answer / attention noise (mass) by depth (N=%d, R=%d)", nr.first,
                nr.second);
    const int cols = 2 + static_cast<int>(sweep.depths.size()) + 1;
    ImGui::PushID(nr.first * 64 + nr.second);
    if (ImGui::BeginTable("table3", cols, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
      ImGui::TableSetupColumn("model");
      ImGui::TableSetupColumn("tokens");
      for (double d : sweep.depths) ImGui::TableSetupColumn(depth_label(d).c_str());
      ImGui::TableSetupColumn("accuracy [95 %]");
      ImGui::TableHeadersRow();
      for (int64_t L : sweep.lengths)
        for (const LabSeries& x : series) {
          ImGui::TableNextRow();
          ImGui::TableNextColumn();
          series_name(x);
          ImGui::TableNextColumn();
          ImGui::Text("%lld", static_cast<long long>(L));
          int64_t right = 0, asked = 0;  // pooled over the depths: accuracy with its Wilson 95 % interval
          int n = 0;
          for (double d : sweep.depths) {
            ImGui::TableNextColumn();
            for (const auto& c : *x.cells)
              if (c.cell.length == L && c.cell.depth == d && c.cell.needles == nr.first &&
                  c.cell.queried == nr.second) {
                ImGui::Text("%.3f / %.3f", c.attention.answer_mass, c.attention.noise_mass);
                if (ImGui::IsItemHovered())
                  ImGui::SetTooltip(
                      "noise mass %s over %d episodes (bootstrap 95 %%); output share %s\n"
                      "strip: each head's noise mass (mean over the episodes), 0 to 1",
                      format_interval(c.noise_mass_ci, 3).c_str(), c.runs,
                      format_interval(c.noise_output_ci, 3).c_str());
                ImGui::SameLine();
                head_strip(head_noise_masses(*x.runs, c.cell));
                right += c.answered;
                asked += c.asked;
                ++n;
              }
          }
          ImGui::TableNextColumn();
          if (n) ImGui::TextUnformatted(format_interval(wilson_interval(right, asked)).c_str());
        }
      ImGui::EndTable();
    }
    ImGui::PopID();
  }
  // While answering (the rows that produce the code): mean over depths, per length, as `needle` tables it.
  ImGui::TextUnformatted(
      "While answering: mass on the answer / on the noise / strongest head (mean over depths and seeds)");
  ImGui::SameLine();
  ImGui::TextDisabled("(?)");
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Query rows: the tokens that produce the asked code, the true code given; the question and "
        "the answer so far are neither answer nor noise. Strongest head: the attention mass on the answer "
        "of the head that gives it the most, per episode.");
  if (ImGui::BeginTable("answering", 2 + static_cast<int>(sweep.lengths.size()),
                        ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupColumn("model");
    ImGui::TableSetupColumn("N, R");
    for (int64_t L : sweep.lengths) ImGui::TableSetupColumn((std::to_string(L) + " tokens").c_str());
    ImGui::TableHeadersRow();
    for (const LabSeries& x : series)
      for (const auto& nr : sweep.needles_queried) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        series_name(x);
        ImGui::TableNextColumn();
        ImGui::Text("%d, %d", nr.first, nr.second);
        for (int64_t L : sweep.lengths) {
          ImGui::TableNextColumn();
          const AnsweringMean a = answering_over_depths(*x.cells, L, nr.first, nr.second);
          if (a.cells)
            ImGui::Text("%.3f / %.3f / %.2f", a.share.answer_mass, a.share.noise_mass, a.strongest_head);
        }
      }
    ImGui::EndTable();
  }
  if (sweep.needles_queried.size() > 1 &&
      ImGui::BeginTable("multi", 1 + static_cast<int>(sweep.needles_queried.size()),
                        ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupColumn("accuracy (mean over lengths, depths, seeds)");
    std::vector<std::string> heads;
    for (const auto& nr : sweep.needles_queried)
      heads.push_back("N=" + std::to_string(nr.first) + " R=" + std::to_string(nr.second));
    for (const auto& h : heads) ImGui::TableSetupColumn(h.c_str());
    ImGui::TableHeadersRow();
    for (const LabSeries& x : series) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      series_name(x);
      for (const auto& nr : sweep.needles_queried) {
        ImGui::TableNextColumn();
        double acc = 0;
        int n = 0;
        for (const auto& c : *x.cells)
          if (c.cell.needles == nr.first && c.cell.queried == nr.second) acc += c.accuracy, ++n;
        if (n) ImGui::Text("%.2f", acc / n);
      }
    }
    ImGui::EndTable();
  }
}

// Every episode: what each model answered, right or not, and where it looked.
void draw_lab_episodes(const std::vector<LabSeries>& series) {
  size_t episodes = 0;
  for (const LabSeries& x : series) episodes += x.runs->size();
  if (ImGui::CollapsingHeader(("Episodes (" + std::to_string(episodes) + ")").c_str(),
                              ImGuiTreeNodeFlags_DefaultOpen) &&
      ImGui::BeginTable("episodes", 9,
                        ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollY |
                            ImGuiTableFlags_RowBg,
                        ImVec2(0, ImGui::GetTextLineHeightWithSpacing() * 12))) {
    ImGui::TableSetupScrollFreeze(0, 1);
    for (const char* h :
         {"model", "tokens", "depth", "N", "R", "seed", "asked -> answered", "answer mass", "noise mass"})
      ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    std::vector<std::pair<size_t, size_t>> rows;  // (series, episode)
    for (size_t x = 0; x < series.size(); ++x)
      for (size_t k = 0; k < series[x].runs->size(); ++k) rows.push_back({x, k});
    ImGuiListClipper clipper;
    clipper.Begin(static_cast<int>(rows.size()));
    while (clipper.Step())
      for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
        const auto [x, k] = rows[static_cast<size_t>(i)];
        const NeedleRun& run = (*series[x].runs)[k];
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        series_name(series[x]);
        ImGui::TableNextColumn();
        ImGui::Text("%lld", static_cast<long long>(run.tokens));
        ImGui::TableNextColumn();
        ImGui::Text("%s (placed %.0f%%)", depth_label(run.cell.depth).c_str(), run.placed_depth * 100);
        ImGui::TableNextColumn();
        ImGui::Text("%d", run.cell.needles);
        ImGui::TableNextColumn();
        ImGui::Text("%d", run.cell.queried);
        ImGui::TableNextColumn();
        ImGui::Text("%llu", static_cast<unsigned long long>(run.seed));
        ImGui::TableNextColumn();
        std::string qa;
        for (size_t q = 0; q < run.truths.size() && q < run.replies.size(); ++q)
          qa += (q ? "; " : "") + run.truths[q] + " -> " + run.replies[q] +
                (q < run.right.size() && run.right[q] ? " (right)" : " (wrong)");
        if (run.answered == run.asked)
          ImGui::TextColored(ImVec4(0.1f, 0.55f, 0.1f, 1), "%s", qa.c_str());
        else
          ImGui::TextUnformatted(qa.c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%.3f", run.attention.mean.answer_mass);
        ImGui::TableNextColumn();
        ImGui::Text("%.3f", run.attention.mean.noise_mass);
      }
    ImGui::EndTable();
  }
}

}  // namespace

void draw_lab_panel(GuiState& state, InferenceWorker& worker) {
  draw_lab_form(state, worker);
  {  // the sweep over the kept steps: where it is, and its chart once a step is done
    const GuiState::Lab::OverSteps& o = state.lab.over_steps;
    if (o.running)
      ImGui::TextDisabled("sweeping kept step %zu of %zu (step %lld); Cancel stops it", o.next + 1,
                          o.plan.size(), static_cast<long long>(o.plan[o.next]));
    if (!o.note.empty()) ImGui::TextColored(ImVec4(0.75f, 0.35f, 0.0f, 1), "%s", o.note.c_str());
    if (!o.points[0].empty() || !o.points[1].empty())
      draw_steps_chart(state, o.points, ImGui::GetTextLineHeight() * 14,
                       "the sweep against the training step: accuracy (solid), attention noise (light)",
                       "lab.steps-chart");
  }
  const SweepProgress* progress = draw_lab_progress(state.lab);
  if (!progress) return;
  const SweepProgress& p = *progress;
  // The definitions: a paragraph, or in lecture mode one line with the paragraph on hover (the heatmaps
  // are the slide).
  static const std::string kDefinitions =
      std::string(kAttentionShareDefinition) +
      ". Answer span: the code of the needle the last question asks about; "
      "query rows: that question's tokens.";
  if (state.lecture) {
    ImGui::TextDisabled(
        "attention mass on the answer and the noise, answer span, query rows: hover for the definitions");
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("%s", wrap_at_spaces(kDefinitions, ImGui::GetFontSize() * 40).c_str());
  } else {
    ImGui::TextWrapped("%s", kDefinitions.c_str());
  }
  const std::vector<LabSeries> series = lab_series(state.lab, p);
  draw_lab_heatmaps(state.lab, p, series);
  draw_lab_tables(p, series);
  draw_lab_episodes(series);
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped(
      "Paper (Ye et al., ICLR 2025, Table 3; 3B models, 4K context): attention to answer by depth "
      "0/25/50/75/100 %%: "
      "Transformer .03 .03 .03 .07 .09, DIFF .27 .30 .31 .32 .40; noise: Transformer .51 .54 .52 .49 .49, "
      "DIFF .01 "
      ".02 .02 .02 .01.");
  ImGui::PopStyleColor();
}

}  // namespace difflens::app
