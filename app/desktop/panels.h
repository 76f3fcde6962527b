// (library difflens_desktop) The app's panels: each draws from, and writes to, the plain state of
// app/desktop/gui_state.h; the shell (app/desktop/gui.cpp) calls them once per frame on the UI thread. The
// map panels (head view, model view) are declared in app/desktop/panel_maps.h.
#pragma once

#include <imgui.h>

#include <string>
#include <utility>
#include <vector>

#include "app/desktop/gui_state.h"
#include "viz/chart.h"
#include "viz/figure.h"

namespace difflens::app {

// panel_prompt.cpp: the model slots (side panel), the device choice (Run menu), the prompt editor.
void draw_model_slots(GuiState& state, InferenceWorker& worker);
// Loads a training run's kept step into each slot whose run kept it (the nearest before it; -1: the run's
// own weights): the side panel's step slider, and `checkpoint` in --play scripts.
void load_training_step(GuiState& state, InferenceWorker& worker, int64_t step);
void draw_device_menu(GuiState& state, InferenceWorker& worker);
void draw_prompt_editor(GuiState& state);
// The underline of the tokens Continue wrote: the writing model's identity colour (never a sign colour).
ImU32 written_ink(const GuiState& state);
// What an edit of the prompt does (the editor, --play's typing): the prompt runs after the debounce.
void prompt_edited(GuiState& state);
// The Run menu's pick of a device: accepted or refused with a message; loaded models go there again.
void pick_device(GuiState& state, InferenceWorker& worker, DeviceChoice to);
// The model card of the model loaded in `slot` (its folder's card.json), or nullptr: none there.
const ModelCard* slot_card(GuiState& state, int slot);
// Help > About the models: each slot's card line and its full model card, in a window.
void draw_about_models(GuiState& state);

// panel_tokens.cpp
// `pieces` are a trace's tokens, `labels` the same as RunResult::labels shows them.
void draw_token_strip(GuiState& state, const std::vector<std::string>& pieces,
                      const std::vector<std::string>& labels);

// panel_query_row.cpp: the "Figure 1" view: each model's attention of the selected query over all keys,
// the answer span marked, its share and the noise written on the chart, and the next-token top 5.
void draw_query_row_view(GuiState& state);

// panel_text.cpp: the Text view: the prompt as running text, each token's background the selected query's
// attention to it (or its attention to the query's token), both models side by side or stacked.
void draw_text_view(GuiState& state);
// File > Export page: the Text view's page of the result on screen (its layer, heads, query, answer,
// direction and mean) into state.export_page_path or a new file in the export folder; the status line says
// where or why not.
void export_text_page(GuiState& state);

// panel_model_view.cpp: puts `length` random tokens twice (state.repeated) into the prompt, drawn with the
// tokenizer of the model in `model_dir`; says in state.repeated.built what it made or why it could not.
void build_repeated_prompt(GuiState& state, const std::string& model_dir);

// panel_prompt.cpp: Continue. Its controls sit beside the prompt editor; the shell's per-frame step sends the
// request and takes the result (the text joins the prompt a token at a time, both models running again); the
// tokens the model wrote in the shown result (indices, ascending; empty when none or the prompt was edited);
// Back/Forward (-1/+1) through them.
void poll_continue(GuiState& state, InferenceWorker& worker);
// Ends a continuation in progress (saying `why` when one was) and forgets what was written: the prompt was
// edited (prompt_edited calls it) or replaced (the needle builder, Repeat them, a trace bundle).
void reset_continue(GuiState& state, const std::string& why);
std::vector<int> written_tokens(const GuiState& state);
void step_written(GuiState& state, int direction);

// panel_lambda.cpp: λ per layer of each DIFF model as a plot (λ and λ_init(l)) beside its table.
void draw_lambda_view(GuiState& state);

// panel_noise.cpp: the Attention noise tab and its needle builder.
void build_needle_prompt(GuiState& state, const std::string& model_dir);
void draw_needle_builder(GuiState& state);
const GuiState::NoiseCache& refresh_noise_cache(GuiState& state, const RunResult& r);
void focus_answer_head(GuiState& state, const RunResult& r);
// The status line's words for the heads on screen (the layer and heads focus_answer_head chose, or picked
// since): their answer mass in run `r`, which may be a later run of the same prompt (an intervention).
void describe_focused_heads(GuiState& state, const RunResult& r);
// The rows the answer readouts average, named with their numbers: "rows 246-250 (the query to the end)".
std::string answer_rows_phrase(int64_t query, int64_t length);
void draw_noise_panel(GuiState& state, const RunResult& r, InferenceWorker& worker);
// Bars against the training step: per slot at each step, answer_mass solid and noise_mass light (the lab puts
// its accuracy in answer_mass), on a 0-1 axis titled `title`; `id` names its region for the layout check.
void draw_steps_chart(GuiState& state, const std::array<std::vector<StepPoint>, kSlots>& points, float height,
                      const char* title, const char* id);
// Each slot's training run (read again when the slot's model changes); the steps any of them kept.
std::vector<int64_t> timeline_steps(GuiState& state);
// The Noise view's "Measure every kept step": the shown prompt, answer and query over the slots' kept steps.
void start_step_measure(GuiState& state, const RunResult& r, InferenceWorker& worker);

// panel_lab.cpp: the Needle lab tab.
void start_lab_sweep(GuiState& state, InferenceWorker& worker);
// "Sweep every kept step": the lab's sweep on each step the slots' runs kept, in turn (the lab view, drawn,
// starts each next step's sweep when the last one ends).
void start_steps_sweep(GuiState& state, InferenceWorker& worker);
void poll_lab(GuiState& state, const InferenceWorker& worker);
// "Sweep every kept step": after a step's sweep ends, its points, then the next step's sweep (every frame).
void poll_steps_sweep(GuiState& state, InferenceWorker& worker);
void export_lab(GuiState& state);
void draw_lab_panel(GuiState& state, InferenceWorker& worker);

// panel_outliers.cpp: the Outliers tab.
void draw_outlier_panel(GuiState& state);
// The Outliers view's statistics of one trace: at `layer`, or pooled over layers (layer < 0); false when the
// trace has no such layer.
bool outlier_stats(const Trace& t, int layer, ValueStats& logits, ValueStats& hidden);
// This prompt's largest |attention logit| and |hidden state| of each model in the run on screen, at the
// Outliers view's layer (or pooled), compared in words, and where the left model's is the larger, a note that
// the card's figure (over the whole haystack) can differ from one prompt: "" without two models.
std::string outlier_prompt_line(const GuiState& state);
// The Why view (panel_why.cpp): the logit lens at the query, each head's direct share of the answer's logit,
// and the interventions both models run under, before and after.
void draw_why_view(GuiState& state);
// A model card's line for a view (model_card.h, "views"), wrapped, in the caveat's orange: where the
// bundled model differs from the paper's, said beside the view that shows it. Nothing when no loaded
// model's card has one.
void draw_card_view_lines(GuiState& state, const std::string& view);

// The views as figures (app/desktop/figure_export.cpp writes them): Figure 1 (panel_query_row.cpp), λ per
// layer (panel_lambda.cpp) and the Noise chart (panel_noise.cpp) at width x height pixels, text at font_px
// (0: from the height). Throw Error when there is nothing to draw (no run, no DIFF model, no answer marked).
viz::ChartFigure figure1_chart(GuiState& state, int width, int height, float font_px);
// The loaded models' brief card lines, one a line ("diff-small: single needles ..."): a figure's footnote.
std::string card_footnote(GuiState& state);
// The cards' lines for `view` ("name: line" per model, one a line), as draw_card_view_lines shows them.
std::string card_view_text(GuiState& state, const std::string& view);
// A chart figure's frame: its size, text size, title and axis titles (the panels come from the view).
inline viz::ChartFigure chart_frame(int width, int height, float font_px, std::string title,
                                    std::string y_title, std::string x_title) {
  viz::ChartFigure f;
  f.width = width;
  f.height = height;
  f.font_px = font_px;
  f.title = std::move(title);
  f.y_title = std::move(y_title);
  f.x_title = std::move(x_title);
  return f;
}
viz::ChartFigure lambda_chart(GuiState& state, int width, int height, float font_px);
viz::ChartFigure noise_chart(GuiState& state, int width, int height, float font_px);
// A trace's model as figures name it: its config's name, else its kind ("diff").
std::string model_name(const Trace& trace);
// The Why view's export: the logit lens at the query (P(answer) after each layer, each model; under
// interventions also as trained, lighter) and, per model, the direct shares of the answer's logit by layer
// and head (and MLP), signed colours. Throw Error when the run has no explanation yet.
viz::ChartFigure why_lens_chart(GuiState& state, int width, int height, float font_px);
std::vector<viz::GridFigure> why_share_grids(GuiState& state, float font_px);

}  // namespace difflens::app
