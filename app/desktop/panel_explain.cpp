// The Explain tab and its presentation mode (app/desktop/panel_explain.h).
#include "app/desktop/panel_explain.h"

#include "app/desktop/figure_export.h"

#include <GLFW/glfw3.h>
#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "app/desktop/panels.h"
#include "app/desktop/plot.h"
#include "viz/gl.h"

namespace difflens::app {

ExplainView::~ExplainView() {
  if (texture_) glDeleteTextures(1, &texture_);
}

void ExplainView::handle_keys(GuiState& state) {
  if (ImGui::GetIO().WantTextInput) return;
  if (ImGui::IsKeyPressed(GLFW_KEY_RIGHT, false) || ImGui::IsKeyPressed(GLFW_KEY_PAGE_DOWN, false))
    state.explain.step = std::min(kExplainSteps, state.explain.step + 1);
  if (ImGui::IsKeyPressed(GLFW_KEY_LEFT, false) || ImGui::IsKeyPressed(GLFW_KEY_PAGE_UP, false))
    state.explain.step = std::max(1, state.explain.step - 1);
  if (state.explain.present && ImGui::IsKeyPressed(GLFW_KEY_ESCAPE, false)) state.explain.present = false;
}

// Both slots at the selected layer: the left slot's head, the right slot's head, the selected query, and
// the marked answer and question spans.
ExplainInput ExplainView::input(const GuiState& state) const {
  ExplainInput in;
  if (!state.shown) return in;
  // The selection as the main view resolves it: no query yet means the last token, no layer the last one.
  int64_t T = 0;
  int layers = 0;
  for (const auto& t : state.shown->traces)
    if (t) {
      T = std::max(T, t->length());
      layers = std::max(layers, static_cast<int>(t->layers.size()));
    }
  const int64_t query =
      state.selection.query >= 0 && state.selection.query < T ? state.selection.query : T - 1;
  const int layer = state.view.layer >= 0 && state.view.layer < layers ? state.view.layer : layers - 1;
  for (int s = 0; s < kSlots; ++s) {
    const auto& t = state.shown->traces[s];
    const std::string name = t ? (t->config.name.empty() ? to_string(t->config.attention) : t->config.name)
                               : (s == 0 ? "left slot" : "right slot");
    ExplainSide side = explain_side(name, t.get(), layer, state.view.head[s], query);
    if (!t && !state.shown->errors[s].empty()) side.why = state.shown->errors[s];
    (s == 0 ? in.diff : in.base) = std::move(side);
  }
  if (state.selection.answer_begin >= 0 && state.selection.answer_end > state.selection.answer_begin) {
    in.answer = {state.selection.answer_begin, state.selection.answer_end};
    in.question = {query, query + 1};  // the query's own token is neither answer nor noise
  }
  return in;
}

// Renders the current step at exactly width x height pixels (16:9, fitted) when anything it shows changed,
// and draws it centred in the space given.
void ExplainView::draw_slide(GuiState& state, float width, float height) {
  // Rendered at the size shown (text stays crisp); below 480 x 270 it is rendered there and shown smaller.
  const float fit = std::max(1.0f, std::min(width, height * 16.0f / 9.0f));
  const float w = std::max(480.0f, fit);
  const int pw = static_cast<int>(w), ph = static_cast<int>(w * 9.0f / 16.0f);
  const uint64_t request = state.shown ? state.shown->request : 0;
  char key[256];
  // Readable however small the slide is shown: its smallest text (tick labels) at 0.62 of the UI's text size,
  // so its readouts and chart titles come out at about the UI's size (the lecture size while presenting).
  const float min_text = ImGui::GetFontSize() * 0.62f;
  std::snprintf(key, sizeof key, "%llu/%d/%d/%d/%d/%d/%d/%d/%dx%d/%.1f",
                static_cast<unsigned long long>(request), state.view.layer, state.view.head[0],
                state.view.head[1], state.selection.query, state.selection.answer_begin,
                state.selection.answer_end, state.explain.step, pw, ph, min_text);
  if (key_ != key) {
    key_ = key;
    try {
      // Laid out at the size shown when its texts fit there; else at the first larger size, up to the
      // Present layout's 1920 x 1080, where they do (charts and labels keep their room), shown scaled down.
      const ExplainInput in = input(state);
      viz::FigureScene scene = explain_slide(in, state.explain.step, pw, ph, min_text);
      faults_ = viz::scene_text_faults(scene);
      for (float grow = 1.25f; !faults_.clean() && pw * grow / 1.25f < 1920; grow *= 1.25f) {
        const int gw = std::min(1920, static_cast<int>(pw * grow)), gh = gw * 9 / 16;
        viz::FigureScene larger = explain_slide(in, state.explain.step, gw, gh, min_text);
        viz::SceneTextFaults f = viz::scene_text_faults(larger);
        if (f.overlaps + f.outside < faults_.overlaps + faults_.outside || f.clean()) {
          scene = std::move(larger);
          faults_ = std::move(f);
        }
      }
      const viz::Image img = viz::render_scene(scene);
      if (!texture_) glGenTextures(1, &texture_);
      glBindTexture(GL_TEXTURE_2D, texture_);
      glPixelStorei(GL_UNPACK_ALIGNMENT, 1);
      glTexImage2D(GL_TEXTURE_2D, 0, GL_RGB8, img.width, img.height, 0, GL_RGB, GL_UNSIGNED_BYTE,
                   img.rgb.data());
      glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_LINEAR);
      glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_LINEAR);
      tex_w_ = img.width;
      tex_h_ = img.height;
    } catch (const std::exception& e) {
      state.message = std::string("explain: ") + e.what();
      tex_w_ = tex_h_ = 0;
    }
  }
  if (!texture_ || tex_w_ == 0) return;
  const float shown_w = std::min(static_cast<float>(tex_w_), fit), shown_h = shown_w * 9.0f / 16.0f;
  ImGui::SetCursorPosX(ImGui::GetCursorPosX() + std::max(0.0f, (width - shown_w) / 2));
  ImGui::Image(reinterpret_cast<ImTextureID>(static_cast<intptr_t>(texture_)), ImVec2(shown_w, shown_h));
  for (const std::string& f : faults_.examples) state.drawn.figure_faults.push_back("Explain slide: " + f);
  state.drawn.note("slide", ImGui::GetItemRectMin().x, ImGui::GetItemRectMin().y, ImGui::GetItemRectMax().x,
                   ImGui::GetItemRectMax().y);
}

void ExplainView::export_steps(GuiState& state) {
  try {
    // A new folder each time (explain, explain-2, ...), named for the interventions in force.
    const std::string dir =
        free_path(state.view.export_dir, "explain" + (state.shown ? intervention_file_tag(*state.shown) : ""),
                  {""})
            .string();
    const std::vector<std::string> files = export_explain_slides(input(state), dir);
    state.message =
        "exported " + std::to_string(files.size() / 2) + " steps as 1920x1080 PNG + SVG to " + dir;
  } catch (const std::exception& e) {
    state.message = std::string("explain export failed: ") + e.what();
  }
}

void ExplainView::draw_tab(GuiState& state) {
  ExplainView::handle_keys(state);
  if (ImGui::Button("< Back")) state.explain.step = std::max(1, state.explain.step - 1);
  ImGui::SameLine();
  if (ImGui::Button("Next >")) state.explain.step = std::min(kExplainSteps, state.explain.step + 1);
  char title[160];
  std::snprintf(title, sizeof title, "step %d of %d: %s", state.explain.step, kExplainSteps,
                explain_step_title(state.explain.step));
  flow_next(ImGui::CalcTextSize(title).x);
  ImGui::TextUnformatted(title);
  const float pad = 2 * ImGui::GetStyle().FramePadding.x;
  flow_next(ImGui::CalcTextSize("Present").x + pad);
  if (ImGui::Button("Present")) state.explain.present = true;
  flow_next(ImGui::CalcTextSize("Export steps (PNG + SVG, 1920x1080)").x + pad);
  if (ImGui::Button("Export steps (PNG + SVG, 1920x1080)") || state.export_all) export_steps(state);
  flow_next(ImGui::CalcTextSize("(Left/Right step)").x);
  ImGui::TextDisabled("(Left/Right step)");
  const ImVec2 room = ImGui::GetContentRegionAvail();
  draw_slide(state, room.x, room.y);
}

void ExplainView::draw_presentation(GuiState& state) {
  ExplainView::handle_keys(state);
  if (state.explain.strip)
    if (const int s = state.shown ? first_trace_slot(*state.shown) : -1; s >= 0)
      draw_token_strip(state, state.shown->traces[static_cast<size_t>(s)]->tokens,
                       state.shown->labels[static_cast<size_t>(s)]);
  if (ImGui::Button("< Back")) state.explain.step = std::max(1, state.explain.step - 1);
  ImGui::SameLine();
  if (ImGui::Button("Next >")) state.explain.step = std::min(kExplainSteps, state.explain.step + 1);
  ImGui::SameLine();
  if (ImGui::Button(state.explain.strip ? "Hide tokens" : "Tokens"))
    state.explain.strip = !state.explain.strip;
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("The prompt's tokens above the slide: click one for the query");
  ImGui::SameLine();
  if (ImGui::Button("Leave (Esc)")) state.explain.present = false;
  const ImVec2 room = ImGui::GetContentRegionAvail();
  draw_slide(state, room.x, room.y);
  // The pointer as a laser dot, visible from the back of a lecture hall.
  if (ImGui::IsMousePosValid()) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    ImDrawList* fg = ImGui::GetForegroundDrawList();
    fg->AddCircleFilled(m, ImGui::GetFontSize() * 0.9f, IM_COL32(255, 30, 30, 70));
    fg->AddCircleFilled(m, ImGui::GetFontSize() * 0.35f, IM_COL32(255, 20, 20, 230));
  }
}

}  // namespace difflens::app
