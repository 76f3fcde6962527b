// (library difflens_desktop) The app's plain state, drawn from and written to by the panels
// (app/desktop/panel_*.cpp) and the shell (app/desktop/gui.cpp). Threads: all of it lives on the UI thread.
// The InferenceWorker never touches it: the shell copies a finished RunResult into `shown` at one point per
// frame, and panels send requests through the worker's thread-safe calls. Who writes what:
//   prompt      the prompt editor (panel_prompt) and the needle builder; the shell submits it after the
//               debounce and clears `pending`
//   view        the controls (panel_prompt), head and model views (zoom, selection by click), the lab
//   selection   the token strip (query, answer span), head views (hovered key), the needle builder
//   slots       the model slots (panel_prompt); `shown`, `status`: the shell only
//   message     any panel that exports or fails; shown in the status line
//   needle, lab, noise_cache   their tabs (panel_noise, panel_lab); the shell reads lab progress
//   explain     the Explain tab and its presentation mode (panel_explain)
#pragma once

#include <array>
#include <cctype>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "app/desktop/layout.h"
#include "app/reports/model_card.h"
#include "app/worker/inference_worker.h"
#include "core/formats/data.h"
#include "core/formats/metrics.h"
#include "core/formats/model_dir.h"
#include "core/formats/token_weights.h"
#include "core/formats/tokenizer.h"
#include "core/model/needle.h"

namespace difflens::app {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Rectangles of the frame's main regions, as drawn (window pixels): the headless run prints them so tests
// can hold the layout to numbers.
struct LayoutRecord {
  struct Rect {
    std::string name;
    float x0, y0, x1, y1;
  };
  std::vector<Rect> rects;
  // Faults inside figures drawn as images (an Explain slide's texts over each other), which the layout
  // check cannot see in ImGui's draw lists: "what: example".
  std::vector<std::string> figure_faults;
  void note(const std::string& name, float x0, float y0, float x1, float y1) {
    rects.push_back({name, x0, y0, x1, y1});
  }
  const Rect* find(const std::string& name) const {
    for (const Rect& r : rects)
      if (r.name == name) return &r;
    return nullptr;
  }
};

struct ViewState {
  int layer = -1;
  int head[kSlots] = {0, 0};
  int scale = 1;    // viz::ValueScale: 0 linear, 1 sqrt, 2 log
  int pooling = 0;  // viz::Pooling: 0 max, 1 mean
  bool shared_scale = true;
  float clamp_percentile = 99.5f;
  int outlier_layer = -1;  // -1: pooled over layers
  int export_size = 1024;  // PNG export resolution (pixels per side)
  // A view exported as a figure (File > Export this view as a figure): its size and text size (0: from
  // the height).
  int figure_width = 1600, figure_height = 900;
  float figure_text_px = 0;
  // Zoom of the head view, shared by its maps so they stay comparable: the visible square of
  // `span` tokens starting at (row0, col0). span 0 = the whole map.
  double zoom_row0 = 0, zoom_col0 = 0, zoom_span = 0;
  std::string export_dir = "difflens-exports";
  int quantization = 0;                   // attention logits: 0 exact, 1: 8 bits, 2: 6 bits, 3: 4 bits
  std::string layer_filter, head_filter;  // model view: "0-3,7"; empty = all
  int head_metric = 0;  // model view: 0 the maps; per-head summaries 1 answer, 2 noise, 3 entropy, 4 sink
  int metric_rows = 0;  // ...over 0 the selected query's row, 1 the question's rows (the query to the end)
};

constexpr int kQuantizationBits[] = {0, 8, 6, 4};

struct PromptState {
  std::string text;
  double last_edit = 0;
  bool pending = false;  // edited, not yet submitted (debounce)
  // Special tokens written in the prompt ("<|endoftext|>"): matched as their ids, or read as the text they
  // are (Run menu; --specials; `specials` in --play scripts). Both models re-run when it changes.
  bool specials_as_text = false;
  // The prompt box: wrapped text to read (ImGui's editor does not wrap lines), the editor once clicked (or
  // Ctrl+L), until it loses the keyboard. `focus`: give the editor the keyboard next frame.
  bool editing = false, focus = false;
  size_t shown_size = 0;  // the text's size when the wrapped view last scrolled to its end
  int scroll_frames = 0;  // frames the wrapped view still scrolls to its end
  // Both models run the prompt again at once (a new model, device, logit width or budget).
  void rerun() {
    pending = true;
    last_edit = 0;
  }
};

struct SlotState {
  std::string path_field;
  std::string bundle_field;
};

// Token selection, shared by every view of both models (linked highlight).
struct SelectionState {
  int query = -1;         // selected query token (-1: the last token)
  int hovered_key = -1;   // key under the mouse, as drawn this frame (collected last frame)
  int hovered_next = -1;  // key under the mouse, collected while drawing this frame
  int answer_begin = -1;  // answer span [begin, end) marked by right-dragging on the token strip
  int answer_end = -1;
  int answer_anchor = -1;                    // where the current right-drag started
  std::vector<std::pair<int, int>> needles;  // needle sentences [begin, end) placed by the needle builder
};

// The Why view's interventions: both models re-run under them and every view shows that run (marked in the
// status line); one click clears them.
struct WhyState {
  int knockout = 0;  // both models, every layer, the query to the end: 0 none, 1 not-answer, 2 only-answer,
                     // 3 not-noise
  std::array<std::set<int>, kSlots> lambda_zero;              // per slot: DIFF layers run with λ = 0
  std::array<std::set<std::pair<int, int>>, kSlots> ablated;  // per slot: (layer, head) ablated to zero
  std::array<std::set<std::pair<int, int>>, kSlots> head_lambda_zero;  // per DIFF slot: (layer, head), λ = 0
  std::vector<std::string> extra;  // --intervene SPEC and the play action `intervene SPEC`: both models
  bool form_open = false;          // lecture mode: the controls unfolded ("Change"), else one line
  // Activation patching: the corrupt prompt the runs patch into ("": none; kept by Clear, which clears the
  // interventions), the text being typed, and per slot the head picked in its patching grid ((-1, -1): none).
  std::string corrupt, corrupt_typed;
  std::array<std::pair<int, int>, kSlots> picked{{{-1, -1}, {-1, -1}}};
  bool patch_grid = true;  // with a corrupt prompt: the grids show patching (else the direct shares)
  // Each slot's specs as written (core/formats/intervention.h), in this order: extra, knockout, λ per layer,
  // λ per head, ablations.
  std::array<std::vector<std::string>, kSlots> specs() const {
    static const char* kPresets[] = {"", "not-answer", "only-answer", "not-noise"};
    std::array<std::vector<std::string>, kSlots> out;
    for (int s = 0; s < kSlots; ++s) {
      auto& v = out[static_cast<size_t>(s)];
      v = extra;
      if (knockout > 0 && knockout < 4) v.push_back(std::string("knockout=") + kPresets[knockout]);
      for (int l : lambda_zero[static_cast<size_t>(s)]) v.push_back("lambda:" + std::to_string(l) + "=0");
      for (const auto& [l, h] : head_lambda_zero[static_cast<size_t>(s)])
        v.push_back("lambda:" + std::to_string(l) + ":" + std::to_string(h) + "=0");
      for (const auto& [l, h] : ablated[static_cast<size_t>(s)])
        v.push_back("ablate:" + std::to_string(l) + ":" + std::to_string(h));
    }
    return out;
  }
  bool any() const {
    const auto s = specs();
    return !s[0].empty() || !s[1].empty();
  }
  void clear() {  // the interventions; the corrupt prompt stays (it is not one)
    const std::string c = corrupt, t = corrupt_typed;
    *this = WhyState();
    corrupt = c;
    corrupt_typed = t;
  }
};

// A training run's kept steps in the slots (a slot opened on a run's model folder, or on one of its kept
// steps): the side panel's step slider loads the chosen step into each slot whose run kept it.
struct TimelineState {
  std::array<std::string, kSlots> seen;  // the slot paths `runs` were read for
  std::array<KeptSteps, kSlots> runs;
  // The Noise view's measure against the step (InferenceWorker::start_steps): the job's last state, and
  // whether the chart shows it (else the per-layer chart).
  std::optional<StepsProgress> steps;
  bool chart_steps = false;
};

struct GuiState {
  PromptState prompt;
  ViewState view;
  LayoutState layout;
  LayoutRecord drawn;  // this frame's regions (cleared at the start of each frame)
  SelectionState selection;
  WhyState why;
  TimelineState timeline;
  SlotState slots[kSlots];
  std::optional<RunResult> shown;  // the result on screen
  WorkerStatus status;
  std::string message;  // last export result or error, shown in the status line
  // When `message` last changed (the shell's clock) and what it was then: a message other than the heads'
  // shares (focus_message) leaves the status line after kMessageSeconds.
  double message_since = 0;
  std::string message_seen;
  // The heads' shares the status line gives (focus_answer_head) are those of one prompt: the message and
  // that prompt, so that another prompt (an edit, Continue's tokens) clears it instead of keeping a stale
  // number on screen.
  std::string focus_message, focus_prompt;
  uint64_t focus_request = 0;  // the run focus_message describes: a later run of the prompt re-describes it
  bool lecture = false;        // large font for lecture halls
  // Why the view asked to show "with the maps" had the area alone last frame ("" : it did not, or was not
  // asked to): said beside the box, so that a ticked box never stands over no maps unexplained.
  std::string maps_hidden_why;
  bool side_folded = false;    // this frame: lecture mode folded the side panel away (the window is narrow)
  bool side_unfolded = false;  // Tab or ">>" brought it back while lecture mode folds it
  DeviceChoice device = DeviceChoice::Auto;  // the device menu: where loads put the models
  std::string device_message;                // what the last pick of that menu did, or why it was refused
  bool cuda = false;                         // LibTorch has a usable CUDA device (asked once at start)
  double edited_at = 0;                      // the last keystroke of the prompt now running
  uint64_t edited_request = 0;               // the run it started
  double edit_to_screen_ms = -1;   // that keystroke → both maps drawn (debounce + inference + upload); -1:
                                   // the run on screen was not typed (a script's prompt, a needle, Continue)
  bool export_all = false;         // Ctrl+E: export every map of the head view this frame
  bool export_head_views = false;  // File menu: export each model's labelled head view this frame
  bool export_figure = false;
  bool save_bundles = false;  // File menu, play: each slot's trace of the run on screen as a bundle  // File
                              // menu, play: the view on screen as a figure (PNG + SVG) after this frame
  bool window_shot = false;   // F12 / File menu: save the window as a PNG after this frame
  bool export_page = false;   // File menu: write the Text view as an HTML page after this frame
  std::string export_page_path;  // ...to this file ("" : a new file in the export folder)
  bool quit = false;             // File menu: close the window
  // Each slot's model card (card.json in its folder), read again when the slot's folder changes.
  struct Card {
    std::string dir;  // the folder it was read from
    std::optional<ModelCard> card;
  } cards[kSlots];
  bool about_models = false;  // Help > About the models: the cards' window is open
  std::vector<std::pair<std::string, std::string>> bundled_models;  // menu label, folder (GuiOptions')
  float font_scale = 1.0f;  // View menu: the UI's text size (the shell rebuilds the fonts when it moves)
  // File menu / side panel: the "Open" dialog (a model folder or a trace bundle into a slot).
  struct OpenDialog {
    bool request = false;  // open the popup this frame
    int slot = 0;
    bool bundle = false;
    std::string path;
    bool remote = false;  // a `difflens serve` address (path) and its token
    std::string token;
  } open_dialog;
  // File > Run a prompt set (InferenceWorker::start_prompt_set): its window, fields and the job's last state.
  struct PromptSet {
    bool open = false;
    std::string items, out;
    bool resume = false;
    std::optional<PromptSetProgress> progress;
  } prompt_set;
  // Needle builder (Attention noise tab): the episode it built last and the haystack it reads.
  struct Needle {
    int length = 256, depth_pct = 50, needles = 1, asked = 1, seed = 1;
    bool with_answer = true;     // the prompt goes on through the asked code (where retrieval shows)
    bool focus_pending = false;  // select the strongest answer head once the built prompt's result arrives
    // A remote left slot at start: build the episode once the worker has fetched its tokenizer.
    bool build_on_load = false;
    int select_layer = -1, select_head = -1, select_query = -1;  // --select / --query to apply after it
    std::string haystack_path;
    NeedleTemplate wording;      // needle and question sentences (builder and lab)
    std::string built;           // description of the last built episode, or why building failed
    std::string built_prompt;    // the prompt it built ("" after a failure): `built` describes that text only
    std::string tokenizer_path;  // the tokenizer the cached haystack was counted with
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<Haystack> haystack;
  } needle;
  // Continue: a model writes the prompt on, token by token (panel_prompt.cpp); what it wrote stays marked
  // in the token strip until the prompt is edited, and Back/Forward step the query through it.
  struct Continue {
    int slot = 0;           // the model that writes: 0 left, 1 right
    int tokens = 8;         // how many
    float temperature = 0;  // 0: greedy (the likeliest token each time)
    int seed = 1;           // the sampler's, with a temperature
    bool start = false;     // asked this frame (button, key, script): the shell sends it to the worker
    bool cancel = false;    // typing: the shell cancels the continuation in progress
    uint64_t request = 0;   // the continuation in flight (0: none)
    std::string message;    // what the last continuation wrote, or why it could not
    size_t written_begin = 0, written_end = 0;  // the prompt's bytes the model wrote (empty: none)
    int written_slot = -1;                      // which model wrote them
    bool follow = false;  // the query goes to the newest written token once its run arrives
    // The written text, a token at a time: steps[k] is what token k adds; `revealed` of them are in the
    // prompt. The next joins once the run of the text so far is on screen and `next_at` has come.
    std::vector<std::string> steps;
    size_t revealed = 0;
    double next_at = 0;
  } cont;
  // The Model view's "repeated random tokens" prompt: `length` random tokens, then the same again (the
  // induction score's prompt, core/formats/head_scores.h; `difflens heads --repeated` draws the same).
  struct Repeated {
    int length = 50, seed = 1;
    bool build_on_load = false;  // --repeated with a remote left slot: once its tokenizer is fetched
    std::string built;           // what the last build made, or why it could not
    std::string built_prompt;    // the prompt it made: `built` is shown while that prompt is on screen
  } repeated;
  // Text view: the prompt shaded by the query's attention (panel_text).
  struct TextView {
    int direction = 0;  // 0: from the query (its row), 1: to the query's token (its column)
    int heads = 0;      // 0: the selected head, 1: the mean over the layer's heads, 2: over all layers
    bool shared_scale = false;  // both models on one scale (else each its own)
    int hover = -1;             // the token under the pointer last frame: the query while it stays there
    int hover_next = -1;        // collected while drawing this frame
    int probe = -1;             // headless --hover-token: the token whose box the first panel notes
    int first_slot = 0;         // the slot of the first panel drawn
    int shown_query = -1;       // the query the panels showed this frame (hovered or kept)
    int scrolled_to[kSlots] = {-1, -1};      // the kept query each panel last scrolled to
    int scrolled_answer[kSlots] = {-1, -1};  // ... and the answer's first token then
    // Per slot, what the last frames computed: the weights (recomputed when the request, layer, head, mean,
    // direction or query changes) and the text's layout (when the request, the panel's size or the UI font
    // changes): a long prompt's frame then costs drawing only.
    struct Cache {
      std::array<int64_t, 6> key{-1, -1, -1, -1, -1, -1};
      TokenWeights weights;
      std::string error;
      double top = 0;  // the largest |weight| shown
      std::array<float, 4> layout_key{-1, -1, -1, -1};
      float font_size = 0;         // the font the text fits in
      std::vector<float> x, y, w;  // each token's box from the text's top left
      float pad = 1, line = 16, height = 0;
    } cache[kSlots];
  } text;
  // Explain tab: the step shown (1..6) and whether the slide fills the window (presentation mode).
  struct Explain {
    int step = 1;
    bool present = false;
    bool strip = false;  // presenting: the token strip shown above the slide (folded away at first)
  } explain;
  // Needle lab tab: the sweep grid as typed, the worker's last progress and its per-cell summaries.
  struct Lab {
    std::string lengths, depths, needles, queried;
    int seeds = 3;
    int names = 0;     // 0: single-token held-out names, 1: the original multi-piece ones
    int cell_px = 72;  // export resolution of the heatmaps (pixels per cell)
    int attention_view =
        1;  // second heatmap: 0 attention to answer reading the question, 1 strongest head answering
    std::string form_error, message;
    // Also sweep under the Why view's interventions (each slot's own; a slot without any runs as trained).
    bool with_interventions = true;
    bool form_open = false;  // lecture mode with results: the form shown whole (else one line of what ran)
    std::optional<SweepProgress> progress;
    std::vector<NeedleCellSummary> cells[kSlots];
    std::vector<NeedleCellSummary> edited_cells[kSlots];  // the slot's episodes under the interventions
    // "Sweep every kept step": the sweep run on each step the slots' training runs kept, in turn (each loaded
    // into both slots as the step slider does); per step and slot, the accuracy (in answer_mass) and the
    // attention noise of the episodes as trained.
    struct OverSteps {
      std::vector<int64_t> plan;
      size_t next = 0;
      bool running = false;
      uint64_t sweep = 0;  // the sweep of plan[next]
      std::array<std::vector<StepPoint>, kSlots> points;
      std::string note;  // why it stopped
    } over_steps;
  } lab;
  // Attention-noise readouts of the result on screen for the current selection.
  struct NoiseCache {
    std::array<int64_t, 4> key{-1, -1, -1, -1};  // request, query, answer begin, answer end
    std::optional<NoiseReadout> readouts[kSlots];
    std::string errors[kSlots];
  } noise_cache;
  size_t pooled_budget = size_t{256} << 20;  // long prompts: pooled maps within this many bytes per model
  bool exact_tile_shown[kSlots] = {false,
                                   false};  // last frame: a head view drew an exact tile (headless report)
  float strip_height = 0;      // the token chips' full height last frame (the strip scrolls beyond ~4 lines)
  int strip_scrolled_to = -1;  // the query the strip last scrolled to
};

inline std::string file_safe(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  return s;
}

}  // namespace difflens::app
