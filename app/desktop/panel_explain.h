// The Explain tab: one head of each model for the selected layer and query, step by step (Back / Next or
// the arrow keys), as the slides of app/reports/explain_slides.h rendered at the size shown; "Present" fills
// the window with the slide (large, a highlighted pointer, Esc leaves) and "Export steps" writes all six
// slides as 1920 x 1080 PNG and SVG. UI thread only (it owns a GL texture).
#pragma once

#include <cstdint>
#include <string>

#include "viz/scene.h"

#include "app/desktop/gui_state.h"
#include "app/reports/explain_slides.h"

namespace difflens::app {

class ExplainView {
 public:
  ExplainView() = default;
  ~ExplainView();
  ExplainView(const ExplainView&) = delete;
  ExplainView& operator=(const ExplainView&) = delete;
  // The tab's contents (controls and the slide in the space left).
  void draw_tab(GuiState& state);
  // Presentation mode: the whole window (full screen, set by the shell) is the slide, its text at least the
  // UI's (lecture) text size, under one row of buttons; "Tokens" unfolds the token strip above it.
  void draw_presentation(GuiState& state);
  // Arrow keys step through the slides (when no text field has the keyboard).
  static void handle_keys(GuiState& state);

 private:
  ExplainInput input(const GuiState& state) const;
  void draw_slide(GuiState& state, float width, float height);
  void export_steps(GuiState& state);
  unsigned texture_ = 0;
  int tex_w_ = 0, tex_h_ = 0;
  std::string key_;              // what the texture shows
  viz::SceneTextFaults faults_;  // the shown slide's texts over each other or past its edges
};

}  // namespace difflens::app
