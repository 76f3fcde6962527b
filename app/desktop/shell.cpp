// The frame around the views (see shell.h).
#include "app/desktop/shell.h"

#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "app/common/keys.h"
#include "app/common/version.h"
#include "app/desktop/panels.h"
#include "app/desktop/plot.h"
#include "app/remote/client.h"
#include "app/reports/head_figures.h"
#include "core/formats/model_dir.h"
#include "viz/token_text.h"

namespace difflens::app {
namespace {

const char* slot_name(int s) {
  return s == 0 ? "left" : "right";
}

// A draggable bar between two regions; returns the new fraction of `extent` before it.
float splitter(const char* id, bool vertical_bar, float thickness, float extent, float fraction) {
  const ImVec2 size = vertical_bar ? ImVec2(thickness, -1) : ImVec2(-1, thickness);
  ImGui::InvisibleButton(id, ImVec2(size.x < 0 ? ImGui::GetContentRegionAvail().x : size.x,
                                    size.y < 0 ? ImGui::GetContentRegionAvail().y : size.y));
  const bool hot = ImGui::IsItemHovered() || ImGui::IsItemActive();
  if (ImGui::IsItemActive() && extent > 0) {
    const float d = vertical_bar ? ImGui::GetIO().MouseDelta.x : ImGui::GetIO().MouseDelta.y;
    fraction = std::clamp(fraction + d / extent, kMinSplit, kMaxSplit);
  }
  if (hot) ImGui::SetMouseCursor(vertical_bar ? ImGuiMouseCursor_ResizeEW : ImGuiMouseCursor_ResizeNS);
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
  const ImU32 col = hot ? IM_COL32(60, 120, 220, 255) : IM_COL32(190, 190, 190, 255);
  if (vertical_bar)
    ImGui::GetWindowDrawList()->AddLine(ImVec2((a.x + b.x) / 2, a.y), ImVec2((a.x + b.x) / 2, b.y), col,
                                        hot ? 3.0f : 1.0f);
  else
    ImGui::GetWindowDrawList()->AddLine(ImVec2(a.x, (a.y + b.y) / 2), ImVec2(b.x, (a.y + b.y) / 2), col,
                                        hot ? 3.0f : 1.0f);
  return fraction;
}

// One view in the current child window, filling it.
void draw_view(View v, GuiState& state, InferenceWorker& worker, ViewObjects& views,
               const viz::HeatmapRenderer& renderer) {
  if (v == View::Lab) {  // the lab runs its own episodes: it needs no result on screen
    draw_lab_panel(state, worker);
    return;
  }
  if (!state.shown) {
    ImGui::TextDisabled("%s",
                        state.status.busy ? "running both models..." : "waiting for a model (side panel)");
    return;
  }
  switch (v) {
    case View::Maps:
      draw_head_views(state, views.head, renderer);
      break;
    case View::QueryRow:
      draw_query_row_view(state);
      break;
    case View::Models:
      draw_model_view_tab(state, views.model, renderer);
      break;
    case View::Lambda:
      draw_lambda_view(state);
      break;
    case View::Noise:
      draw_needle_builder(state);
      draw_noise_panel(state, *state.shown, worker);
      break;
    case View::Lab:
      break;
    case View::Outliers:
      draw_outlier_panel(state);
      break;
    case View::Explain:
      views.explain.draw_tab(state);
      break;
    case View::Text:
      draw_text_view(state);
      break;
    case View::Why:
      draw_why_view(state);
      break;
  }
}

// A view in a child window of `size` (0: the rest), noted as "view.NAME". Views with long content (tables,
// the lab's results) scroll down; the maps and charts fit what they get. None scrolls sideways: its rows
// wrap instead (a horizontal scrollbar would also let wrapped text keep the width of a wider frame).
void draw_view_window(const char* id, View v, ImVec2 size, GuiState& state, InferenceWorker& worker,
                      ViewObjects& views, const viz::HeatmapRenderer& renderer) {
  const bool fits = v == View::Maps || v == View::QueryRow || v == View::Explain || v == View::Text;
  ImGui::BeginChild(id, size, false,
                    fits ? ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse : 0);
  const ImVec2 p = ImGui::GetWindowPos(), s = ImGui::GetWindowSize();
  state.drawn.note(std::string("view.") + view_name(v), p.x, p.y, p.x + s.x, p.y + s.y);
  draw_view(v, state, worker, views, renderer);
  ImGui::EndChild();
}

}  // namespace

ModelShape shape_of(const GuiState& state) {
  ModelShape m;
  if (!state.shown) return m;
  for (int s = 0; s < kSlots; ++s)
    if (const auto& t = state.shown->traces[s]) {
      m.layers = std::max(m.layers, static_cast<int>(t->layers.size()));
      m.heads[s] = static_cast<int>(t->config.map_heads());
    }
  return m;
}

void draw_menu_bar(GuiState& state, InferenceWorker& worker) {
  if (!ImGui::BeginMenuBar()) return;
  ViewState& v = state.view;
  LayoutState& l = state.layout;
  const float field = ImGui::GetFontSize() * 12;
  if (ImGui::BeginMenu("File")) {
    for (int s = 0; s < kSlots; ++s) {
      const std::string label = std::string("Open model into the ") + slot_name(s) + " slot...";
      if (ImGui::MenuItem(label.c_str(), s == 0 ? "Ctrl+O" : nullptr))
        state.open_dialog = {true, s, false, state.slots[s].path_field, false, state.open_dialog.token};
    }
    for (int s = 0; s < kSlots; ++s) {
      const std::string menu = std::string("Bundled model into the ") + slot_name(s) + " slot";
      if (ImGui::BeginMenu(menu.c_str(), !state.bundled_models.empty())) {
        for (const auto& [label, folder] : state.bundled_models)
          if (ImGui::MenuItem(label.c_str(), nullptr, state.slots[s].path_field == folder))
            open_into_slot(state, worker, s, 0, folder, "");
        ImGui::EndMenu();
      }
    }
    for (int s = 0; s < kSlots; ++s) {
      const std::string label = std::string("Open trace bundle into the ") + slot_name(s) + " slot...";
      if (ImGui::MenuItem(label.c_str()))
        state.open_dialog = {true, s, true, state.slots[s].bundle_field, false, state.open_dialog.token};
    }
    if (ImGui::MenuItem("Run a prompt set...")) state.prompt_set.open = true;
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "A file of prompts and their answers (JSON lines, as difflens batch reads them) run on both models:\n"
          "per item and head, a summary with 95 %% intervals and paired tests, written to a folder.");
    ImGui::Separator();
    if (ImGui::MenuItem("Export the maps shown (PNG, NPY, CSV)", "Ctrl+E", false, state.shown.has_value()))
      state.export_all = true;
    if (ImGui::MenuItem("Export head views (labelled PNG + SVG)", nullptr, false, state.shown.has_value()))
      state.export_head_views = true;
    if (ImGui::MenuItem("Export this view as a figure (PNG + SVG)", nullptr, false, state.shown.has_value()))
      state.export_figure = true;
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "Figure 1, lambda per layer, the Noise chart, the outliers or the Model view's grid, drawn at the\n"
          "figure size below with axis titles and a legend; the Maps view: its labelled head views.");
    if (ImGui::MenuItem("Save this run as trace bundles", nullptr, false, state.shown.has_value()))
      state.save_bundles = true;
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "Both models' traces of the prompt on screen (maps, lambda, statistics, queries and keys), each a\n"
          "folder that File > Open trace bundle and `difflens render` read, in a new run folder.");
    if (ImGui::MenuItem("Export page (HTML: the Text view for a browser)", nullptr, false,
                        state.shown.has_value()))
      state.export_page = true;
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "One self-contained file (no network): the prompt shaded by both models' attention for the\n"
          "selected layer, hover-to-query and the switches working in any browser.");
    if (ImGui::MenuItem("Save the window as PNG", "F12")) state.window_shot = true;
    ImGui::SetNextItemWidth(field);
    ImGui::InputText("export folder", &v.export_dir);
    ImGui::SetNextItemWidth(field);
    ImGui::InputInt("PNG size (px)", &v.export_size, 256, 1024);
    v.export_size = std::clamp(v.export_size, 8, 16384);
    ImGui::SetNextItemWidth(field);
    int fig[2] = {v.figure_width, v.figure_height};
    if (ImGui::InputInt2("figure size (px)", fig)) {
      v.figure_width = std::clamp(fig[0], 200, 8192);
      v.figure_height = std::clamp(fig[1], 200, 8192);
    }
    ImGui::SetNextItemWidth(field);
    ImGui::SliderFloat("figure text (px, 0: auto)", &v.figure_text_px, 0.0f, 60.0f, "%.0f");
    if (v.figure_text_px > 0 && v.figure_text_px < 6) v.figure_text_px = 6;
    ImGui::Separator();
    if (ImGui::MenuItem("Quit")) state.quit = true;
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("View")) {
    for (int i = 0; i < kViews; ++i) {
      const char key[2] = {static_cast<char>(i < 9 ? '1' + i : '0'), 0};  // the tenth view: 0
      if (ImGui::MenuItem(view_title(static_cast<View>(i)), key, l.view == static_cast<View>(i)))
        l.view = static_cast<View>(i);
    }
    ImGui::Separator();
    ImGui::MenuItem("Show this view with the maps", "S", &l.view_split(), l.view != View::Maps);
    ImGui::MenuItem("Maps beside the view (not above it)", nullptr, &l.side_by_side);
    ImGui::MenuItem("Side panel", "Tab", &l.side_panel);
    ImGui::MenuItem("Square maps", nullptr, &l.square_maps);
    ImGui::Separator();
    ImGui::MenuItem("Lecture mode (large text)", "L", &state.lecture);
    ImGui::SetNextItemWidth(field);
    float scale = state.font_scale;
    if (ImGui::SliderFloat("text size", &scale, 0.75f, 3.0f, "%.2fx")) state.font_scale = scale;
    ImGui::Separator();
    ImGui::SetNextItemWidth(field);
    ImGui::Combo("colour scale", &v.scale, "linear\0sqrt\0log\0");
    ImGui::SetNextItemWidth(field);
    ImGui::Combo("pooling", &v.pooling, "max\0mean\0");
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("A map with more tokens than pixels shows each pixel's largest or mean entry.");
    ImGui::Checkbox("one colour range for A1, A2 (and A)", &v.shared_scale);
    ImGui::SetNextItemWidth(field);
    ImGui::SliderFloat("clamp percentile", &v.clamp_percentile, 90.0f, 100.0f, "%.1f");
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Run")) {
    draw_device_menu(state, worker);
    ImGui::Separator();
    ImGui::TextDisabled("attention logits");
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "Absmax-quantize every attention logit (per head, dynamic) before the softmax,\n"
          "as in the paper's quantization study; both models re-run.");
    static const char* kWidths[] = {"exact", "8-bit", "6-bit", "4-bit"};
    for (int k = 0; k < 4; ++k)
      if (ImGui::MenuItem(kWidths[k], nullptr, v.quantization == k)) set_logit_width(state, k);
    ImGui::Separator();
    if (ImGui::MenuItem("Special tokens as text", nullptr, state.prompt.specials_as_text)) {
      state.prompt.specials_as_text = !state.prompt.specials_as_text;
      state.prompt.rerun();
    }
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "Off: special tokens written in the prompt (<|endoftext|>, <|eot_id|>) become their ids.\n"
          "On: they are read as the text they are, like any other characters (a text about\n"
          "tokenizers; no forged document boundary). SentencePiece models always read \"<s>\" as text.");
    ImGui::Separator();
    ImGui::TextDisabled("Continue");
    ImGui::SetNextItemWidth(field);
    ImGui::SliderFloat("temperature", &state.cont.temperature, 0.0f, 2.0f, "%.2f");
    state.cont.temperature = std::clamp(state.cont.temperature, 0.0f, 100.0f);
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("0: greedy, the likeliest token each time; above: sampled from the 40 likeliest");
    ImGui::SetNextItemWidth(field);
    ImGui::InputInt("seed##continue", &state.cont.seed);
    state.cont.seed = std::max(0, state.cont.seed);
    ImGui::Separator();
    ImGui::SetNextItemWidth(field);
    int budget_mb = static_cast<int>(state.pooled_budget >> 20);
    if (ImGui::InputInt("long-prompt MB", &budget_mb, 64, 256, ImGuiInputTextFlags_EnterReturnsTrue))
      set_pooled_budget(state, budget_mb);
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "Prompts whose exact maps would need more than this per model are captured in blocks\n"
          "and kept as pooled maps of this size (0: always exact maps, memory grows with T^2).");
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Help")) {
    static const std::string version = version_line();  // as difflens --version prints it
    ImGui::TextUnformatted(version.c_str());
    ImGui::Separator();
    if (ImGui::MenuItem("About the models (their cards)")) state.about_models = true;
    ImGui::Separator();
    ImGui::TextUnformatted(kKeysText);  // the manual's KEYS section is the same text
    ImGui::EndMenu();
  }
  // The device and the run's state at the right end of the bar.
  const std::string right = std::string(state.status.busy ? "running... " : "") + "device: " +
                            (state.device == DeviceChoice::Cuda  ? "cuda"
                             : state.device == DeviceChoice::Cpu ? "cpu"
                                                                 : "auto");
  ImGui::SameLine(std::max(
      ImGui::GetCursorPosX(),
      ImGui::GetWindowWidth() - ImGui::CalcTextSize(right.c_str()).x - 2 * ImGui::GetStyle().ItemSpacing.x));
  ImGui::TextDisabled("%s", right.c_str());
  ImGui::EndMenuBar();
}

void open_into_slot(GuiState& state, InferenceWorker& worker, int slot, int kind, const std::string& path,
                    const std::string& token) {
  slot = std::clamp(slot, 0, kSlots - 1);
  if (kind == 2) {  // remote: the token joins the address unless it carries one
    std::string spec = path;
    if (!token.empty() && spec.find("token=") == std::string::npos)
      spec += (spec.find('?') == std::string::npos ? "?token=" : "&token=") + token;
    state.slots[slot].path_field = path;
    worker.load(slot, spec);
    state.prompt.rerun();
  } else if (kind == 1) {
    state.slots[slot].bundle_field = path;
    worker.open_bundle(slot, path);
  } else {
    // A folder holding two models (the diff-mlx pair's diff/ and vanilla/, or its hub cache folder) opens
    // as both slots, DIFF on the left; anything else goes to the slot asked for (a folder DiffLens cannot
    // read is reported there, with the layouts it reads).
    std::vector<std::filesystem::path> models;
    try {
      models = models_in(path);
    } catch (const std::exception&) {
      models.clear();
    }
    if (models.size() >= 2) {  // the first DIFF model left, the first that is not one right
      const auto [left, right] = pair_of(models);
      state.slots[0].path_field = left.string();
      state.slots[1].path_field = right.string();
      for (int s = 0; s < kSlots; ++s) worker.load(s, state.slots[s].path_field);
      state.message = "opened " + path + ": " + left.filename().string() + " on the left, " +
                      right.filename().string() + " on the right" +
                      (models.size() > 2 ? " (" + std::to_string(models.size() - 2) + " more left out)" : "");
    } else {
      state.slots[slot].path_field = models.size() == 1 ? models[0].string() : path;
      worker.load(slot, state.slots[slot].path_field);
    }
    state.prompt.rerun();  // run the prompt with the new model
  }
}

void set_logit_width(GuiState& state, int width) {
  width = std::clamp(width, 0, 3);
  if (state.view.quantization == width) return;
  state.view.quantization = width;  // both models run again with the new width
  state.prompt.rerun();
}

void set_pooled_budget(GuiState& state, int megabytes) {
  state.pooled_budget = static_cast<size_t>(std::clamp(megabytes, 0, 65536)) << 20;
  state.prompt.rerun();
}

void draw_open_dialog(GuiState& state, InferenceWorker& worker) {
  GuiState::OpenDialog& d = state.open_dialog;
  if (d.request) {
    ImGui::OpenPopup("Open");
    d.request = false;
  }
  ImGui::SetNextWindowSize(ImVec2(ImGui::GetFontSize() * 36, 0));
  if (!ImGui::BeginPopupModal("Open", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) return;
  ImGui::TextUnformatted("Into the slot:");
  ImGui::SameLine();
  ImGui::RadioButton("left", &d.slot, 0);
  ImGui::SameLine();
  ImGui::RadioButton("right", &d.slot, 1);
  ImGui::TextUnformatted("What:");
  ImGui::SameLine();
  int kind = d.remote ? 2 : d.bundle ? 1 : 0;
  ImGui::RadioButton("a model folder", &kind, 0);
  ImGui::SameLine();
  ImGui::RadioButton("a trace bundle (capture --out)", &kind, 1);
  ImGui::SameLine();
  ImGui::RadioButton("remote (difflens serve)", &kind, 2);
  if (kind == 2 && !is_remote(d.path)) d.path = "remote://127.0.0.1:8765/" + std::to_string(d.slot);
  d.bundle = kind == 1;
  d.remote = kind == 2;
  ImGui::TextDisabled(d.remote ? "remote://HOST:PORT/MODEL as `difflens serve` printed it (MODEL: 0, 1, ...)"
                      : d.bundle ? "a folder with trace.json and maps.safetensors"
                                 : "DiffLens, Hugging Face Llama/Mistral/DiffLlama, diff-mlx or a hub cache "
                                   "folder; a folder of two models fills both slots");
  if (ImGui::IsWindowAppearing()) ImGui::SetKeyboardFocusHere();
  ImGui::SetNextItemWidth(-1);
  bool enter = ImGui::InputText("##path", &d.path, ImGuiInputTextFlags_EnterReturnsTrue);
  if (d.remote) {
    ImGui::TextUnformatted("Token:");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(-1);
    enter |= ImGui::InputText("##token", &d.token,
                              ImGuiInputTextFlags_Password | ImGuiInputTextFlags_EnterReturnsTrue);
    ImGui::TextDisabled("the token serve printed; over SSH: ssh -N -L 8765:localhost:8765 gpu-box first");
  }
  if (ImGui::Button("Open") || enter) {
    open_into_slot(state, worker, d.slot, d.remote ? 2 : d.bundle ? 1 : 0, d.path, d.token);
    ImGui::CloseCurrentPopup();
  }
  ImGui::SameLine();
  if (ImGui::Button("Cancel") || ImGui::IsKeyPressed(GLFW_KEY_ESCAPE, false)) ImGui::CloseCurrentPopup();
  ImGui::EndPopup();
}

void start_prompt_set(GuiState& state, InferenceWorker& worker) {
  GuiState::PromptSet& p = state.prompt_set;
  if (p.items.empty()) {
    state.message = "prompt set: give the items file (JSON lines: prompt, answer, ...)";
    return;
  }
  if (p.out.empty()) {  // beside the items: NAME-results
    std::filesystem::path items(p.items);
    p.out = (items.parent_path() / (items.stem().string() + "-results")).string();
  }
  worker.start_prompt_set({p.items, p.out, p.resume});
  p.open = true;
}

void draw_prompt_set_window(GuiState& state, InferenceWorker& worker) {
  GuiState::PromptSet& p = state.prompt_set;
  if (auto q = worker.prompt_set_progress(p.progress ? p.progress->version : 0)) p.progress = std::move(*q);
  if (!p.open) return;
  const float em = ImGui::GetFontSize();
  ImGui::SetNextWindowSize(ImVec2(em * 56, em * 26), ImGuiCond_FirstUseEver);
  if (!ImGui::Begin("Prompt set", &p.open)) {
    ImGui::End();
    return;
  }
  const bool running = p.progress && p.progress->running;
  ImGui::TextWrapped(
      "A file of prompts and the answers that should follow them, one JSON object a line (\"prompt\", "
      "\"answer\", optional \"answer_span\", \"query\", \"corrupt\", tags), run on both models: what "
      "difflens batch writes (core/FORMATS.md, \"Prompt sets\").");
  ImGui::TextUnformatted("Items:");
  ImGui::SameLine(em * 7);
  ImGui::SetNextItemWidth(-1);
  ImGui::InputText("##set-items", &p.items);
  ImGui::TextUnformatted("Write to:");
  ImGui::SameLine(em * 7);
  ImGui::SetNextItemWidth(-1);
  ImGui::InputTextWithHint("##set-out", "(empty: beside the items, NAME-results)", &p.out);
  ImGui::Checkbox("Resume (go on from what the folder holds)", &p.resume);
  ImGui::BeginDisabled(running);
  if (ImGui::Button("Start")) start_prompt_set(state, worker);
  ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::BeginDisabled(!running);
  if (ImGui::Button("Cancel##prompt-set")) worker.cancel_prompt_set();
  ImGui::EndDisabled();
  if (p.progress && p.progress->id != 0) {
    const PromptSetProgress& g = *p.progress;
    const double rate = g.seconds > 0 ? static_cast<double>(g.done) / g.seconds : 0;
    const int eta = rate > 0 ? static_cast<int>(static_cast<double>(g.total - g.done) / rate) : 0;
    char label[160];
    std::snprintf(label, sizeof label, "%lld / %lld items, %.1f items/s, %d:%02d left%s",
                  static_cast<long long>(g.done), static_cast<long long>(g.total), rate, eta / 60, eta % 60,
                  g.failed ? (" (" + std::to_string(g.failed) + " failed: errors.csv)").c_str() : "");
    ImGui::ProgressBar(g.total > 0 ? static_cast<float>(g.done) / static_cast<float>(g.total) : 0.0f,
                       ImVec2(-1, 0), label);
    std::string models;
    for (const std::string& m : g.models)
      if (!m.empty()) models += (models.empty() ? "" : ", ") + m;
    if (!models.empty()) ImGui::TextDisabled("models: %s; folder: %s", models.c_str(), g.request.out.c_str());
    if (!g.error.empty()) ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", g.error.c_str());
    if (g.cancelled && g.error.empty())
      ImGui::TextDisabled("stopped after %lld items: Resume goes on from them",
                          static_cast<long long>(g.done));
    if (!g.summary.empty()) {
      ImGui::Separator();
      ImGui::BeginChild("##set-summary", ImVec2(0, 0), false, ImGuiWindowFlags_HorizontalScrollbar);
      ImGui::TextUnformatted(g.summary.c_str());
      ImGui::EndChild();
    }
  }
  ImGui::End();
}

void draw_side_panel(GuiState& state, InferenceWorker& worker, const ModelShape& shape) {
  draw_model_slots(state, worker);
  ImGui::Separator();
  ViewState& v = state.view;
  const float w = ImGui::GetContentRegionAvail().x;
  ImGui::TextUnformatted("Layer");
  ImGui::SetNextItemWidth(w);
  if (shape.layers > 0)
    ImGui::SliderInt("##layer", &v.layer, 0, shape.layers - 1, "%d");
  else
    ImGui::TextDisabled("(no model yet)");
  for (int s = 0; s < kSlots; ++s) {
    if (shape.heads[s] == 0) continue;
    const auto& t = state.shown->traces[s];
    ImGui::TextWrapped("Head of %s", t->config.name.empty() ? slot_name(s) : t->config.name.c_str());
    ImGui::SetNextItemWidth(w);
    ImGui::PushID(s);
    ImGui::SliderInt("##head", &v.head[s], 0, shape.heads[s] - 1);
    ImGui::PopID();
  }
  ImGui::Separator();
  const SelectionState& sel = state.selection;
  if (state.shown)
    for (const auto& t : state.shown->traces)
      if (t) {
        const int64_t T = t->length();
        ImGui::TextWrapped("Query: token %d of %lld", sel.query, static_cast<long long>(T));
        if (sel.answer_begin >= 0 && sel.answer_end > sel.answer_begin) {
          ImGui::TextWrapped("Answer: tokens %s", viz::token_range(sel.answer_begin, sel.answer_end).c_str());
          flow_next(ImGui::CalcTextSize("clear").x + 2 * ImGui::GetStyle().FramePadding.x);
          if (ImGui::SmallButton("clear")) state.selection.answer_begin = state.selection.answer_end = -1;
        } else {
          ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
          ImGui::TextWrapped("Answer: right-drag on the tokens");
          ImGui::PopStyleColor();
        }
        break;
      }
  ImGui::Separator();
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped("1-9, 0 views, Up/Down layer, Left/Right head (Shift: right model), Help menu: more");
  ImGui::PopStyleColor();
}

void draw_view_bar(GuiState& state) {
  LayoutState& l = state.layout;
  const float spacing = ImGui::GetFontSize() * 0.25f, pad = 2 * ImGui::GetStyle().FramePadding.x;
  auto label = [](int i, bool shorter) {
    const View v = static_cast<View>(i);
    return std::to_string((i + 1) % 10) + " " + (shorter ? view_short_title(v) : view_title(v));  // 10th: 0
  };
  // The full titles when the bar and its split options fit on one line, else the short ones.
  float full = ImGui::CalcTextSize("with the maps  beside").x + 3 * ImGui::GetFrameHeight();
  for (int i = 0; i < kViews; ++i) full += ImGui::CalcTextSize(label(i, false).c_str()).x + pad + spacing;
  const bool shorter = full > ImGui::GetContentRegionAvail().x;
  ImGui::PushStyleVar(ImGuiStyleVar_ItemSpacing, ImVec2(spacing, ImGui::GetStyle().ItemSpacing.y));
  for (int i = 0; i < kViews; ++i) {
    const View v = static_cast<View>(i);
    const bool on = l.view == v;
    const std::string text = label(i, shorter);
    if (i) flow_next(ImGui::CalcTextSize(text.c_str()).x + pad);
    ImGui::PushStyleColor(ImGuiCol_Button, on ? ImGui::GetStyleColorVec4(ImGuiCol_ButtonActive)
                                              : ImGui::GetStyleColorVec4(ImGuiCol_FrameBg));
    if (ImGui::Button(text.c_str())) l.view = v;
    if (shorter && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", view_title(v));
    ImGui::PopStyleColor();
  }
  ImGui::PopStyleVar();
  if (l.view != View::Maps) {
    flow_next(ImGui::GetFrameHeight(), "with the maps");
    ImGui::Checkbox("with the maps", &l.view_split());
    if (l.view_split()) {
      flow_next(ImGui::GetFrameHeight(), "beside");
      ImGui::Checkbox("beside", &l.side_by_side);
      // Ticked while the area gave the view alone (last frame): why the maps are not on screen.
      if (!state.maps_hidden_why.empty()) {
        const std::string why = "(" + state.maps_hidden_why + ")";
        flow_next(ImGui::CalcTextSize(why.c_str()).x);
        ImGui::AlignTextToFramePadding();
        ImGui::TextDisabled("%s", why.c_str());
      }
    }
  }
}

void toggle_side_panel(GuiState& state) {
  // On what is on screen: shown (by the setting, or brought back over a narrow window's folding) hides it;
  // hidden (by the setting, or folded in a narrow window) shows it, and keeps it shown there.
  const bool shown = state.layout.side_panel && !state.side_folded;
  state.layout.side_panel = state.side_unfolded = !shown;
}

void handle_keys(GuiState& state, const ModelShape& shape) {
  const ImGuiIO& io = ImGui::GetIO();
  if (io.WantTextInput) return;
  if (io.KeyCtrl) {
    if (ImGui::IsKeyPressed(GLFW_KEY_L, false)) state.prompt.editing = state.prompt.focus = true;
    if (ImGui::IsKeyPressed(GLFW_KEY_O, false))
      state.open_dialog = {true, 0, false, state.slots[0].path_field, false, state.open_dialog.token};
    return;
  }
  for (int i = 0; i < kViews; ++i) {
    const int key = i < 9 ? GLFW_KEY_1 + i : GLFW_KEY_0, pad = i < 9 ? GLFW_KEY_KP_1 + i : GLFW_KEY_KP_0;
    if (ImGui::IsKeyPressed(key, false) || ImGui::IsKeyPressed(pad, false))
      state.layout.view = static_cast<View>(i);
  }
  if (ImGui::IsKeyPressed(GLFW_KEY_S, false) && state.layout.view != View::Maps)
    state.layout.view_split() = !state.layout.view_split();
  if (ImGui::IsKeyPressed(GLFW_KEY_TAB, false)) toggle_side_panel(state);
  if (ImGui::IsKeyPressed(GLFW_KEY_L, false)) state.lecture = !state.lecture;
  if (ImGui::IsKeyPressed(GLFW_KEY_F12, false)) state.window_shot = true;
  if (ImGui::IsKeyPressed(GLFW_KEY_C, false) &&
      state.cont.request == 0) {  // Continue (Shift: the right model)
    state.cont.slot = io.KeyShift ? 1 : 0;
    state.cont.start = true;
  }
  if (ImGui::IsKeyPressed(GLFW_KEY_COMMA)) step_written(state, -1);
  if (ImGui::IsKeyPressed(GLFW_KEY_PERIOD)) step_written(state, +1);
  if (shape.layers > 0) {
    if (ImGui::IsKeyPressed(GLFW_KEY_UP)) state.view.layer = std::max(0, state.view.layer - 1);
    if (ImGui::IsKeyPressed(GLFW_KEY_DOWN))
      state.view.layer = std::min(shape.layers - 1, state.view.layer + 1);
  }
  if (state.layout.view == View::Explain) return;  // its own Left/Right step the slides
  const int s = io.KeyShift ? 1 : 0;
  if (shape.heads[s] > 0) {
    if (ImGui::IsKeyPressed(GLFW_KEY_LEFT)) state.view.head[s] = std::max(0, state.view.head[s] - 1);
    if (ImGui::IsKeyPressed(GLFW_KEY_RIGHT))
      state.view.head[s] = std::min(shape.heads[s] - 1, state.view.head[s] + 1);
  }
}

void draw_central_area(GuiState& state, InferenceWorker& worker, ViewObjects& views,
                       const viz::HeatmapRenderer& renderer) {
  LayoutState& l = state.layout;
  const ImVec2 room = ImGui::GetContentRegionAvail();
  {
    const ImVec2 p = ImGui::GetCursorScreenPos();
    state.drawn.note("central", p.x, p.y, p.x + room.x, p.y + room.y);
  }
  const float bar = std::max(6.0f, ImGui::GetFontSize() * 0.45f);
  const float extent = (l.side_by_side ? room.x : room.y) - bar;
  const float maps = std::max(32.0f, extent * l.split_fraction);
  // Lecture mode: Figure 1 takes the area alone unless the maps beside it would be at least 200 px each
  // (smaller ones cannot be read from the back of a room).
  bool alone = !l.split_shown();
  state.maps_hidden_why.clear();
  // Too little room for two panes: the view alone (the maps come back as the window grows).
  if (!alone) {
    const float em = ImGui::GetFontSize(), other = extent - maps;
    const float least =
        l.side_by_side ? kSplitMinEm * em : kSplitMinLines * ImGui::GetTextLineHeightWithSpacing();
    if (other < least || maps < least) {
      alone = true;
      state.maps_hidden_why = "no room for the maps at this window size";
      state.drawn.note("narrow.view-alone", 0, 0, 0, 0);
    }
  }
  if (!alone && state.lecture && l.view == View::QueryRow && state.shown) {
    int n = 0;
    int64_t tokens = 0;
    for (int s = 0; s < kSlots; ++s)
      if (const auto& t = state.shown->traces[s]) {
        n += static_cast<int>(head_maps(*t, state.view.layer, state.view.head[s]).size());
        tokens = std::max(tokens, t->length());
      }
    const MapGrid g = plan_head_views(n, tokens, l.side_by_side ? ImVec2(maps, room.y) : ImVec2(room.x, maps),
                                      l.square_maps);
    alone = std::min(g.map_w, g.map_h) < kLectureMinMap;
    if (alone) {
      state.maps_hidden_why = "lecture mode: the maps would be under 200 px";
      state.drawn.note("lecture.figure1-alone", 0, 0, 0, 0);
    }
  }
  if (alone) {
    draw_view_window("view", l.view, ImVec2(0, 0), state, worker, views, renderer);
    return;
  }
  draw_view_window("maps", View::Maps, l.side_by_side ? ImVec2(maps, room.y) : ImVec2(room.x, maps), state,
                   worker, views, renderer);
  if (l.side_by_side) ImGui::SameLine(0, 0);
  l.split_fraction = splitter("##split", l.side_by_side, bar, extent, l.split_fraction);
  if (l.side_by_side) ImGui::SameLine(0, 0);
  draw_view_window("view", l.view, ImVec2(0, 0), state, worker, views, renderer);
}

}  // namespace difflens::app
