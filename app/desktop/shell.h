// The window's frame around the views: the menu bar, the collapsible side panel (model slots, layer and
// head pickers), the view bar, the keyboard, and the central area that shows the selected view (alone or
// split with the maps). UI thread only; everything reads and writes the plain state of
// app/desktop/gui_state.h.
#pragma once

#include "app/desktop/gui_state.h"
#include "app/desktop/panel_explain.h"
#include "app/desktop/panel_maps.h"

namespace difflens::app {

// The views that own GL textures or caches, kept from frame to frame.
struct ViewObjects {
  HeadView head[kSlots];
  ModelView model[kSlots];
  ExplainView explain;
};

// Layers of the deepest model on screen and each slot's head count (0 where a slot shows nothing).
struct ModelShape {
  int layers = 0;
  int heads[kSlots] = {0, 0};
};
ModelShape shape_of(const GuiState& state);

void draw_menu_bar(GuiState& state, InferenceWorker& worker);
void draw_open_dialog(GuiState& state, InferenceWorker& worker);
// File > Run a prompt set: the items file, the output folder, Start / Cancel, the progress and the summary.
void draw_prompt_set_window(GuiState& state, InferenceWorker& worker);
// Starts the prompt set of state.prompt_set's fields (the window's Start; `prompt-set` in --play).
void start_prompt_set(GuiState& state, InferenceWorker& worker);
// What the "Open" dialog does: `kind` 0 a model folder, 1 a trace bundle, 2 a remote model (`token` joins
// its address); a model load re-runs the prompt.
void open_into_slot(GuiState& state, InferenceWorker& worker, int slot, int kind, const std::string& path,
                    const std::string& token);
// The Run menu: the attention logits' width (0 exact, 1 8-bit, 2 6-bit, 3 4-bit) and the long-prompt
// budget in MB; both re-run the prompt.
void set_logit_width(GuiState& state, int width);
void set_pooled_budget(GuiState& state, int megabytes);
void draw_side_panel(GuiState& state, InferenceWorker& worker, const ModelShape& shape);
// The row of view buttons (1-9) and the split toggle, above the central area.
void draw_view_bar(GuiState& state);
// 1-9 pick a view, Up/Down the layer, Left/Right the left model's head (Shift: the right model's; in the
// Explain view Left/Right step its slides), Ctrl+O opens a model, F12 saves the window.
void handle_keys(GuiState& state, const ModelShape& shape);
// Tab, "<< hide", ">>": hides the side panel when it is on screen, shows it when it is not.
void toggle_side_panel(GuiState& state);
// Lecture mode: the smallest map (px) Figure 1 keeps beside it; below that Figure 1 takes the area alone.
constexpr float kLectureMinMap = 200;
// The window narrower than this many font heights folds the side panel away in lecture mode (Tab: back).
constexpr float kLectureNarrowEm = 80;
// Outside lecture mode the side panel folds below this many (its fifth of the window would clip its
// buttons), and a view shares the area with the maps only when each keeps this many font heights across
// (beside) or kSplitMinLines text lines (below); else the view takes the area alone.
constexpr float kNarrowEm = 56;
constexpr float kSplitMinEm = 22;
constexpr float kSplitMinLines = 6;

// The selected view in all the space left (split with the maps when asked).
void draw_central_area(GuiState& state, InferenceWorker& worker, ViewObjects& views,
                       const viz::HeatmapRenderer& renderer);

}  // namespace difflens::app
