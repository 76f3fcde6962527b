// The GUI shell: window, fonts and the frame loop that lays out the panels (app/desktop/panel_*.cpp) over the
// plain state of app/desktop/gui_state.h. Results come from the InferenceWorker at one point per frame; GL
// uploads happen only here, on the UI thread.
#include "app/desktop/gui.h"

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <imgui_freetype.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#include "app/desktop/figure_export.h"
#include "app/desktop/glyphs.h"
#include "app/desktop/headless_run.h"
#include "app/desktop/panel_explain.h"
#include "app/desktop/panel_maps.h"
#include "app/desktop/panels.h"
#include "app/desktop/plot.h"
#include "app/desktop/script_player.h"
#include "app/desktop/shell.h"
#include "app/desktop/typing.h"
#include "app/desktop/ui_fonts.h"
#include "app/remote/client.h"
#include "app/reports/head_figures.h"
#include "app/reports/needle_report.h"
#include "app/worker/inference_worker.h"
#include "core/formats/atomic_file.h"
#include "core/formats/data.h"
#include "core/formats/error.h"
#include "core/formats/metrics.h"
#include "core/formats/tiles.h"
#include "core/model/needle.h"
#include "viz/export.h"
#include "viz/figure.h"
#include "viz/heatmap_view.h"
#include "viz/icon.h"
#include "viz/token_text.h"

namespace difflens::app {
namespace {

// How long a passing status message stays (the heads' shares excepted).
constexpr double kMessageSeconds = 8.0;

// The layout settings file (layout.h's key=value lines); missing or unreadable: the defaults.
LayoutState read_layout_settings(const std::string& path) {
  LayoutState layout;
  if (path.empty()) return layout;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) (void)read_layout_setting(layout, line);
  return layout;
}

void write_layout_settings(const std::string& path, const LayoutState& layout) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  try {  // whole or not at all: a full disk keeps the last good settings
    write_file_atomically(path, layout_settings_text(layout));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "difflens: the layout was not saved: %s\n", e.what());
  }
}

// The window's size and place when none is asked for: the remembered size, or 90 % of the primary monitor's
// work area, never larger than that area, centred in it.
void fit_to_monitor(const LayoutState& layout, int& width, int& height, int& x, int& y) {
  int ax = 0, ay = 0, aw = 0, ah = 0;
  if (GLFWmonitor* monitor = glfwGetPrimaryMonitor()) glfwGetMonitorWorkarea(monitor, &ax, &ay, &aw, &ah);
  if (aw <= 0 || ah <= 0) return;  // unknown: keep the default size
  width = layout.window_w > 0 ? std::min(layout.window_w, aw) : static_cast<int>(aw * 0.9);
  height = layout.window_h > 0 ? std::min(layout.window_h, ah) : static_cast<int>(ah * 0.9);
  width = std::max(width, 320);
  height = std::max(height, 240);
  x = ax + (aw - width) / 2;
  y = ay + (ah - height) / 2;
}

}  // namespace

namespace {

// What the command line asks for at start (models, prompt or bundle, selection, views, lab, needle or
// repeated-token prompt), into the state and the worker.
void apply_start_options(GuiState& state, InferenceWorker& worker, const GuiOptions& opt,
                         const LayoutState& layout) {
  state.device = parse_device(opt.device);
  state.cuda = cuda_available();
  worker.set_device(state.device);
  for (int s = 0; s < kSlots; ++s) {
    state.slots[s].path_field = without_token(opt.models[s]);  // shown on screen
    if (!opt.models[s].empty()) worker.load(s, opt.models[s]);
  }
  state.prompt.text = opt.prompt;
  state.prompt.pending = opt.bundle.empty();  // a bundle at start is shown instead of a run of the prompt
  if (!opt.bundle.empty()) {
    state.slots[0].bundle_field = opt.bundle;
    worker.open_bundle(0, opt.bundle);
  }
  state.view.layer = opt.layer;
  state.selection.query = opt.query;
  state.lecture = opt.lecture;
  state.prompt.specials_as_text = opt.specials_as_text;
  state.view.zoom_row0 = opt.zoom[0];
  state.view.zoom_col0 = opt.zoom[1];
  state.view.zoom_span = opt.zoom[2];
  if (!opt.export_dir.empty()) state.view.export_dir = opt.export_dir;
  state.layout = layout;
  if (opt.one_y_scale >= 0) {
    state.layout.shared_rows_scale = opt.one_y_scale == 1;
    state.layout.rows_scale_chosen = true;
  }
  state.view.head_metric = opt.head_metric;
  state.view.metric_rows = opt.metric_rows;
  state.font_scale = opt.font_scale;
  state.needle.haystack_path = opt.haystack;
  state.bundled_models = opt.bundled_models;
  state.pooled_budget =
      opt.pooled_budget_mb > 0 ? static_cast<size_t>(opt.pooled_budget_mb * 1024 * 1024) : 0;
  state.lab.lengths = opt.lab_lengths;
  state.lab.depths = opt.lab_depths;
  state.lab.needles = opt.lab_needles;
  state.lab.queried = opt.lab_queried;
  state.lab.seeds = opt.lab_seeds;
  state.why.extra = opt.interventions;
  state.selection.answer_begin = opt.answer_begin;
  state.selection.answer_end = opt.answer_end;
  if (opt.needle.size() >= 5) {  // a needle prompt at start (validated by the CLI)
    state.needle.length = opt.needle[0];
    state.needle.depth_pct = opt.needle[1];
    state.needle.needles = opt.needle[2];
    state.needle.asked = opt.needle[3];
    state.needle.seed = opt.needle[4];
    if (opt.needle.size() == 6) state.needle.with_answer = opt.needle[5] != 0;
    if (is_remote(opt.models[0])) {  // its tokenizer comes from the server once the slot connects
      state.needle.build_on_load = true;
      state.needle.select_layer = opt.layer;
      state.needle.select_head = opt.head;
      state.needle.select_query = opt.query;
      state.prompt.pending = false;
    } else {
      build_needle_prompt(state, opt.models[0]);
      if (opt.layer >= 0 || opt.head >= 0) state.needle.focus_pending = false;  // --select wins
      if (opt.query >= 0) state.selection.query = opt.query;                    // and --query
      if (state.needle.built.rfind("could not", 0) == 0)
        std::fprintf(stderr, "difflens: %s\n", state.needle.built.c_str());
    }
  }
  if (opt.repeated.size() == 2) {  // repeated random tokens at start (validated by the CLI)
    state.repeated.length = opt.repeated[0];
    state.repeated.seed = opt.repeated[1];
    if (is_remote(opt.models[0])) {
      state.repeated.build_on_load = true;
      state.prompt.pending = false;
    } else {
      build_repeated_prompt(state, opt.models[0]);
      if (state.repeated.built.rfind("could not", 0) == 0)
        std::fprintf(stderr, "difflens: %s\n", state.repeated.built.c_str());
    }
    if (opt.query >= 0) state.selection.query = opt.query;
  }
  for (int k = 0; k < 4; ++k)
    if (kQuantizationBits[k] == opt.logit_bits) state.view.quantization = k;
  if (opt.head >= 0) state.view.head[0] = state.view.head[1] = opt.head;
  if (opt.lab_run) start_lab_sweep(state, worker);  // after the logits setting it uses
}

// The worker's newest result, if any, onto the screen: the prompt box for a bundle, Continue's query, the
// needle's heads, the keystroke's latency. False when the headless run takes it as its simulated keystroke
// (the frame is skipped).
bool receive_result(GuiState& state, InferenceWorker& worker, HeadlessRun& headless) {
  if (auto r = worker.take_result()) {
    state.shown = std::move(r);
    // A run whose numbers overflowed says so (no view shows NaN or inf silently).
    // (Found on the worker's thread: RunResult::nonfinite.)
    for (int s = 0; s < kSlots; ++s)
      if (const std::string& bad = state.shown->nonfinite[static_cast<size_t>(s)]; !bad.empty())
        state.message = std::string(s == 0 ? "left" : "right") + " model: values that are not finite (" +
                        bad + "): the views leave them out";
    if (state.shown->prompt.rfind("(trace bundle ", 0) == 0) {  // the prompt box shows the bundle's text
      reset_continue(state, "stopped: a trace bundle was opened");
      for (const auto& t : state.shown->traces)
        if (t) {
          const bool bos = !t->token_ids.empty() && t->token_ids[0] == t->config.bos_token_id;
          state.prompt.text = viz::text_of_pieces(t->tokens, bos);
          state.prompt.pending = false;
        }
    }
    if (state.cont.follow && state.shown->prompt == state.prompt.text) {  // a written token arrived
      state.cont.follow = false;
      const std::vector<int> w = written_tokens(state);
      if (!w.empty()) state.selection.query = w.back();
    }
    if (state.needle.focus_pending && state.shown->prompt == state.prompt.text) {
      state.needle.focus_pending = false;
      focus_answer_head(state, *state.shown);
    } else if (!state.focus_message.empty() && state.message == state.focus_message &&
               state.shown->request != state.focus_request && state.shown->prompt == state.focus_prompt) {
      describe_focused_heads(state,
                             *state.shown);  // the same prompt run again (an intervention): its numbers
    }
    if (!headless.take_result(state)) return false;  // headless: the first result becomes a keystroke
    // A run a keystroke started (not a scripted prompt, a needle, Continue's tokens): its latency.
    state.edit_to_screen_ms = state.edited_at > 0 && state.shown->request == state.edited_request
                                  ? 1000.0 * (now_seconds() - state.edited_at)
                                  : -1;
  }
  return true;
}

// A needle or repeated-token prompt waiting for a remote slot's tokenizer: built once the slot has loaded
// (or the plain prompt runs instead when it cannot be).
void build_prompts_on_load(GuiState& state) {
  if (state.needle.build_on_load && (state.status.slots[0].loaded || !state.status.slots[0].error.empty())) {
    state.needle.build_on_load = false;
    const std::string& dir = state.status.slots[0].tokenizer_dir;
    if (!dir.empty() && state.status.slots[0].error.empty()) {
      build_needle_prompt(state, dir);
      if (state.needle.select_layer >= 0 || state.needle.select_head >= 0) state.needle.focus_pending = false;
      if (state.needle.select_query >= 0) state.selection.query = state.needle.select_query;
    }
    if (dir.empty() || state.needle.built.rfind("could not", 0) == 0) {
      if (!state.needle.built.empty()) std::fprintf(stderr, "difflens: %s\n", state.needle.built.c_str());
      state.prompt.pending = true;  // the plain prompt instead
      state.prompt.last_edit = 0;
    }
  }
  if (state.repeated.build_on_load &&
      (state.status.slots[0].loaded || !state.status.slots[0].error.empty())) {
    state.repeated.build_on_load = false;
    build_repeated_prompt(
        state, state.status.slots[0].error.empty() ? state.status.slots[0].tokenizer_dir : std::string());
    if (state.repeated.built.rfind("could not", 0) == 0) {
      std::fprintf(stderr, "difflens: %s\n", state.repeated.built.c_str());
      state.prompt.rerun();  // the plain prompt instead
    }
  }
}

// GLFW up and the window open with an OpenGL 3.3 core context: at the size asked for, else the last run's
// fitted to the monitor, with the icon. `layout` (as last left) takes the command line's view and split.
// Null after saying why on stderr.
GLFWwindow* open_window(const GuiOptions& opt, LayoutState& layout) {
  // GLFW's own reason for a failure (a display refused, no OpenGL 3.3 context) reaches the terminal.
  glfwSetErrorCallback([](int code, const char* description) {
    std::fprintf(stderr, "difflens: GLFW error 0x%x: %s\n", code, description ? description : "");
  });
  if (!glfwInit()) {
    std::fprintf(stderr,
                 "difflens: cannot open a window (no display?). Headless commands: difflens --help\n");
    return nullptr;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  // The layout as last left (view, split, side panel, window size), then what the command line asks.
  if (opt.view) layout.view = *opt.view;
  if (opt.split >= 0) {
    layout.view_split() = opt.split > 0;
    layout.side_by_side = opt.split == 2;
  }
  if (opt.split_fraction) layout.split_fraction = *opt.split_fraction;
  int width = opt.width, height = opt.height, x = -1, y = -1;
  if (!opt.size_given) fit_to_monitor(layout, width, height, x, y);
  // The window's class matches the desktop entry's StartupWMClass, so a desktop groups it under the icon.
  glfwWindowHintString(GLFW_X11_CLASS_NAME, "difflens");
  glfwWindowHintString(GLFW_X11_INSTANCE_NAME, "difflens");
  GLFWwindow* window = glfwCreateWindow(width, height, "DiffLens", nullptr, nullptr);
  if (!window) {
    std::fprintf(stderr, "difflens: cannot create an OpenGL 3.3 core window\n");
    glfwTerminate();
    return nullptr;
  }
  if (x >= 0 && y >= 0) glfwSetWindowPos(window, x, y);
  {  // the icon the build installs, drawn here at the sizes window managers ask for
    std::vector<uint8_t> small = viz::render_icon(48), large = viz::render_icon(256);
    GLFWimage icons[2] = {{48, 48, small.data()}, {256, 256, large.data()}};
    glfwSetWindowIcon(window, 2, icons);
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(1);

  return window;
}

// The File menu's (or a script's) "save this run" and "export this view as a figure", before the panels draw
// (the Maps view's head views export as they draw this frame); the status line says what was written.
void run_export_requests(GuiState& state) {
  if (state.save_bundles) {
    state.save_bundles = false;
    try {
      const std::vector<std::string> saved = save_run_bundles(state);
      std::string list;
      for (const std::string& b : saved) list += (list.empty() ? "" : " and ") + b;
      state.message = "saved " + list + " (File > Open trace bundle reads them)";
    } catch (const std::exception& e) {
      state.message = std::string("saving the run failed: ") + e.what();
    }
  }
  if (state.export_figure) {
    state.export_figure = false;
    try {
      const std::vector<std::string> files = export_view_figure(state);
      if (!files.empty())
        state.message = "exported " + files.front() +
                        (files.size() > 2 ? " and " + std::to_string(files.size() / 2 - 1) + " more" : "") +
                        " (PNG + SVG, " + std::to_string(state.view.figure_width) + "x" +
                        std::to_string(state.view.figure_height) + ")";
    } catch (const std::exception& e) {
      state.message = std::string("figure export failed: ") + e.what();
    }
  }
}

// An edited prompt whose pause is over (typing/debounce rules: desktop/typing.h) runs both models.
void start_edited_run(GuiState& state, InferenceWorker& worker) {
  if (!state.prompt.pending ||
      now_seconds() - state.prompt.last_edit < debounce_seconds(state.status.last_run_ms, state.status.busy))
    return;
  CaptureOptions capture;
  capture.logit_bits = kQuantizationBits[std::clamp(state.view.quantization, 0, 3)];
  // Long prompts switch to pooled maps (quantization needs whole maps: off above the budget).
  capture.pooled_budget_bytes = capture.logit_bits > 0 ? 0 : state.pooled_budget;
  capture.keep_qkv = true;     // the Explain tab recomputes a head from them (small beside the maps)
  capture.position_top_k = 5;  // what each token's model expected there (hover) and after the query
  RunEdits edits;
  edits.interventions = state.why.specs();
  edits.answer = {state.selection.answer_begin, state.selection.answer_end};
  edits.query = state.selection.query;
  edits.explain = state.layout.view == View::Why;
  if (edits.explain) edits.corrupt = state.why.corrupt;
  edits.specials = state.prompt.specials_as_text ? Specials::text : Specials::match;
  state.edited_request = worker.run(state.prompt.text, capture, edits);
  state.prompt.pending = false;
  state.edited_at = state.prompt.last_edit;
}

// Characters the atlas lacks (new prompt text, a new trace's tokens) or a new text size (the View menu): the
// atlas is rebuilt before this frame. And the font of the frame: the lecture size when lecturing or
// presenting.
void update_fonts(UiFonts& fonts, const GuiState& state, const ImGuiStyle& base_style) {
  ImGuiIO& io = ImGui::GetIO();
  const bool new_result = state.shown && state.shown->request != fonts.seen_request;
  const bool rescale = state.font_scale != fonts.scale;  // the View menu's text size
  if (rescale) {
    fonts.scale = state.font_scale;
    ImGui::GetStyle() = base_style;
    ImGui::GetStyle().ScaleAllSizes(fonts.scale);
  }
  if (fonts.needs.add(state.prompt.text) | (new_result && need_trace_glyphs(fonts, *state.shown)) | rescale) {
    build_fonts(fonts);
    ImGui_ImplOpenGL3_DestroyFontsTexture();
    ImGui_ImplOpenGL3_CreateFontsTexture();
  }
  if (new_result) fonts.seen_request = state.shown->request;
  if (fonts.normal && fonts.lecture)
    io.FontDefault = state.lecture || state.explain.present ? fonts.lecture : fonts.normal;
}

// Lecture mode as the last frame had it, and whether lecture mode ticked "one y scale".
struct LectureScale {
  bool lecture_before = false;
  bool from_lecture = false;  // unticked again when lecture mode ends
};

// Lecture mode turning on (L, the View menu, --lecture, a script) puts Figure 1's bars on one y scale, so
// that a projected chart does not make 0.05 look as tall as 1, unless this session chose the box's state
// (the box, --one-y-scale, a script's one-y-scale): a choice is never overridden.
void follow_lecture_scale(GuiState& state, LectureScale& seen) {
  if (state.lecture && !seen.lecture_before && !state.layout.rows_scale_chosen &&
      !state.layout.shared_rows_scale) {
    state.layout.shared_rows_scale = true;
    seen.from_lecture = true;
  }
  if (!state.lecture && seen.lecture_before && seen.from_lecture && !state.layout.rows_scale_chosen)
    state.layout.shared_rows_scale = false;  // lecture mode left: the box as it was
  if (!state.lecture || state.layout.rows_scale_chosen) seen.from_lecture = false;
  seen.lecture_before = state.lecture;
}

// A selection beyond the models (--select 9,9, a smaller model loaded) becomes their last layer or head,
// and the status line says so; kept as asked until there is a model to check it against.
void keep_selection_in_models(GuiState& state, const ModelShape& shape) {
  if (shape.layers <= 0) return;
  std::string moved;
  if (state.view.layer < 0 || state.view.layer >= shape.layers) {
    if (state.view.layer >= shape.layers)
      moved = "layer " + std::to_string(state.view.layer) + " is beyond the model's " +
              std::to_string(shape.layers) + " layers: showing layer " + std::to_string(shape.layers - 1);
    state.view.layer = shape.layers - 1;
  }
  for (int s = 0; s < kSlots; ++s) {
    const int last = std::max(0, shape.heads[s] - 1);
    if (shape.heads[s] > 0 && state.view.head[s] > last)
      moved += (moved.empty() ? "" : "; ") + std::string("head ") + std::to_string(state.view.head[s]) +
               " is beyond the " + (s == 0 ? "left" : "right") + " model's " +
               std::to_string(shape.heads[s]) + " heads: showing head " + std::to_string(last);
    state.view.head[s] = std::clamp(state.view.head[s], 0, last);
  }
  if (!moved.empty()) state.message = moved;
}

// The status line: running or idle, both models' time, the keystroke's latency, each remote slot's round
// trip (the server's own capture time in brackets) or why its last failed, and the message.
std::string status_line(const GuiState& state) {
  std::string remote, trips;
  if (state.shown)
    for (int s = 0; s < kSlots; ++s) {
      const size_t i = static_cast<size_t>(s);
      char part[512] = "";
      if (!state.shown->notes[i].empty()) {
        std::snprintf(part, sizeof part, " | %s: %s", s == 0 ? "left" : "right",
                      state.shown->notes[i].c_str());
        remote += part;
      } else if (state.shown->round_trip_ms[i] > 0) {
        std::snprintf(part, sizeof part, "%s%s %.0f ms (%.0f)", trips.empty() ? "" : ", ",
                      s == 0 ? "left" : "right", state.shown->round_trip_ms[i], state.shown->server_ms[i]);
        trips += part;
      }
    }
  if (!trips.empty()) remote = " | remote round trip " + trips + remote;
  char typed[64] = "";
  if (state.edit_to_screen_ms >= 0)
    std::snprintf(typed, sizeof typed, ", keystroke to screen %.0f ms", state.edit_to_screen_ms);
  // A run under interventions says so first (every view shows that run).
  std::string edited;
  if (state.shown)
    for (int s = 0; s < kSlots; ++s) {
      const auto& t = state.shown->traces[static_cast<size_t>(s)];
      if (!t || t->interventions.empty()) continue;
      edited += std::string(edited.empty() ? " | INTERVENED " : "; ") + (s == 0 ? "left: " : "right: ") +
                t->written_interventions();
    }
  // The shown run read its special tokens as text (the Run menu): said, since the tokens then differ.
  if (state.shown && state.shown->edits.specials == Specials::text)
    edited += " | special tokens read as text";
  char line[2048];
  std::snprintf(line, sizeof line, "%s%s | both models %.0f ms%s%s%s%s",
                state.status.busy ? "running..." : "idle", edited.c_str(), state.status.last_run_ms, typed,
                remote.c_str(), state.message.empty() ? "" : " | ", state.message.c_str());
  return line;
}

// The window before it went full screen.
struct Fullscreen {
  bool on = false;
  int x = 0, y = 0, w = 0, h = 0;
};

// Presenting takes the whole monitor (the window's place and size come back after Esc); headless screenshots
// keep the window at the size asked for (`present` is false for them).
void follow_presenting(GLFWwindow* window, bool present, Fullscreen& fullscreen) {
  if (present == fullscreen.on) return;
  fullscreen.on = present;
  if (fullscreen.on) {
    glfwGetWindowPos(window, &fullscreen.x, &fullscreen.y);
    glfwGetWindowSize(window, &fullscreen.w, &fullscreen.h);
    if (GLFWmonitor* monitor = glfwGetPrimaryMonitor())
      if (const GLFWvidmode* mode = glfwGetVideoMode(monitor))
        glfwSetWindowMonitor(window, monitor, 0, 0, mode->width, mode->height, mode->refreshRate);
  } else {
    glfwSetWindowMonitor(window, nullptr, fullscreen.x, fullscreen.y, fullscreen.w, fullscreen.h, 0);
  }
}

// The side panel at its width, or its ">>" button: folded in a window under 56 font heights wide (lecture
// mode: its own limit) unless unfolded by hand.
void draw_side_panel_or_fold(GuiState& state, InferenceWorker& worker, const ModelShape& shape) {
  const ImGuiIO& io = ImGui::GetIO();
  const float em = ImGui::GetFontSize();
  state.side_folded = state.layout.side_panel && !state.side_unfolded &&
                      io.DisplaySize.x < (state.lecture ? kLectureNarrowEm : kNarrowEm) * em;
  if (state.side_folded)
    state.drawn.note(state.lecture ? "lecture.side-folded" : "narrow.side-folded", 0, 0, 0, 0);
  if (state.layout.side_panel && !state.side_folded) {
    const float side_w = std::min(state.layout.side_width_em * em, ImGui::GetContentRegionAvail().x * 0.2f);
    ImGui::BeginChild("side", ImVec2(side_w, 0), true);
    if (ImGui::SmallButton("<< hide")) toggle_side_panel(state);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("Hide the side panel (Tab; View menu)");
    draw_side_panel(state, worker, shape);
    ImGui::EndChild();
    state.drawn.note("side", ImGui::GetItemRectMin().x, ImGui::GetItemRectMin().y, ImGui::GetItemRectMax().x,
                     ImGui::GetItemRectMax().y);
    ImGui::SameLine();
  } else {
    if (ImGui::Button(">>", ImVec2(0, ImGui::GetContentRegionAvail().y))) toggle_side_panel(state);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("Show the side panel: models, layer and heads (Tab)");
    ImGui::SameLine();
  }
}

// The token strip of the shown run, with the query kept inside the prompt and an answer span it no longer
// reaches cleared.
void draw_shown_tokens(GuiState& state) {
  const int s = state.shown ? first_trace_slot(*state.shown) : -1;
  if (s < 0) return;
  const Trace& t = *state.shown->traces[static_cast<size_t>(s)];
  const int T = static_cast<int>(t.length());
  if (state.selection.query < 0 || state.selection.query >= T) state.selection.query = T - 1;
  // An answer span the prompt on screen does not reach (the prompt was shortened) is dropped, as a
  // query beyond it becomes the last token, so every view and export agrees; not while a newer prompt
  // (a needle just built, with its span) is on its way.
  const bool current = !state.prompt.pending && (state.shown->prompt == state.prompt.text ||
                                                 state.shown->prompt.rfind("(trace bundle ", 0) == 0);
  if (current && state.selection.answer_end > T) {
    state.message = "the answer " +
                    viz::token_range(state.selection.answer_begin, state.selection.answer_end) +
                    " lies beyond the " + std::to_string(T) + "-token prompt: cleared";
    state.selection.answer_begin = state.selection.answer_end = -1;
  }
  draw_token_strip(state, t.tokens, state.shown->labels[static_cast<size_t>(s)]);
  state.drawn.note("tokens", ImGui::GetItemRectMin().x, ImGui::GetItemRectMin().y, ImGui::GetItemRectMax().x,
                   ImGui::GetItemRectMax().y);
}

// The window when not presenting: keys, menus and dialogs, the side panel, the prompt, the token strip, the
// view bar and the central area, and the status line (at most two lines; longer text ends in "..." with the
// whole of it on hover, so nothing is cut at the window's edge).
void draw_window_body(GuiState& state, InferenceWorker& worker, ViewObjects& views,
                      const viz::HeatmapRenderer& renderer, const ModelShape& shape) {
  handle_keys(state, shape);
  draw_menu_bar(state, worker);
  draw_open_dialog(state, worker);
  draw_prompt_set_window(state, worker);
  draw_about_models(state);
  state.selection.hovered_key = state.selection.hovered_next;
  state.selection.hovered_next = -1;
  const std::string status = status_line(state);
  const float status_w = ImGui::GetContentRegionAvail().x;
  const std::string status_text = wrap_at_spaces(status, status_w, 2);
  const float status_h = ImGui::CalcTextSize(status_text.c_str()).y + ImGui::GetStyle().ItemSpacing.y * 2 + 1;
  ImGui::BeginChild("body", ImVec2(0, -status_h), false, ImGuiWindowFlags_NoScrollbar);
  draw_side_panel_or_fold(state, worker, shape);
  ImGui::BeginChild("main", ImVec2(0, 0), false, ImGuiWindowFlags_NoScrollbar);
  draw_prompt_editor(state);
  draw_shown_tokens(state);
  draw_view_bar(state);
  draw_central_area(state, worker, views, renderer);
  ImGui::EndChild();
  ImGui::EndChild();
  ImGui::Separator();
  ImGui::TextUnformatted(status_text.c_str());
  if (ImGui::IsItemHovered() && status_text.find("...") != std::string::npos)
    ImGui::SetTooltip("%s", status.c_str());
}

}  // namespace

int run_gui(const GuiOptions& opt) {
  LayoutState layout = read_layout_settings(opt.settings_path);
  GLFWwindow* window = open_window(opt, layout);
  if (!window) return 1;

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // the layout is ours (LayoutState, kept by write_layout_settings), not ImGui's
  io.Fonts->FontBuilderIO = ImGuiFreeType::GetBuilderForFreeType();
  // Two sizes baked (crisp text in both): the normal one and the lecture one; characters beyond the base
  // ranges are added as prompts and tokens bring them (the atlas is rebuilt between frames).
  UiFonts fonts;
  fonts.main = viz::find_system_font().string();
  fonts.fallback = viz::find_fallback_font().string();
  fonts.scale = opt.font_scale;
  fonts.needs.add(opt.prompt);
  build_fonts(fonts);
  ImGui::StyleColorsLight();
  // Muted text (notes, axis ticks, a scale's name) is read from the back of a room too: a grey with 5.0:1
  // contrast on the window's grey (ImGui's light theme: 0.60, 2.5:1).
  ImGui::GetStyle().Colors[ImGuiCol_TextDisabled] = ImVec4(0.40f, 0.40f, 0.40f, 1.0f);
  const ImGuiStyle base_style = ImGui::GetStyle();
  ImGui::GetStyle().ScaleAllSizes(opt.font_scale);  // padding, spacing, grab sizes follow the font (HiDPI)
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");

  int exit_status = 0;
  {
    const viz::HeatmapRenderer renderer;
    InferenceWorker worker([] { glfwPostEmptyEvent(); }, opt.threads);
    GuiState state;
    apply_start_options(state, worker, opt, layout);
    ViewObjects views;
    Fullscreen fullscreen;
    bool script_sized = false;  // a play script's `size` set the window (presenting then keeps it)
    state.explain.step = std::clamp(opt.explain_step, 1, kExplainSteps);
    state.explain.present = opt.present;
    state.text.direction = opt.text_direction;
    state.text.probe = opt.hover_token;
    state.text.heads = opt.text_heads;
    HeadlessRun headless(opt);
    ScriptPlayer player(opt.play, opt.play_delay_ms, opt.play_seconds, opt.play_exit);
    bool was_presenting = opt.present;
    int rescroll_frames = 0;
    LectureScale lecture_scale;
    float strip_width_seen = 0;  // the window's width the strip was last scrolled for
    float strip_font_seen = 0;   // and the font's size

    while (!glfwWindowShouldClose(window)) {
      // Sleep until input or a worker result (the worker posts an event when a job ends); wake up for the
      // debounce deadline. While the models run, redraw only a few times a second for the status line:
      // every frame costs CPU the inference could use (software GL especially).
      if (player.playing())  // a script plays: its next action comes without an event to wake for
        glfwWaitEventsTimeout(0.005);
      else if (state.prompt.pending || headless.counting())
        glfwWaitEventsTimeout(0.03);
      else if (state.status.busy)
        glfwWaitEventsTimeout(0.25);
      else
        glfwWaitEventsTimeout(0.5);
      const double frame_start = now_seconds();  // the frame's own work, not the wait for events

      // The one point per frame where results reach the UI.
      if (!receive_result(state, worker, headless)) continue;  // headless: the first result is a keystroke
      state.status = worker.status();
      build_prompts_on_load(state);
      poll_lab(state, worker);
      poll_steps_sweep(state, worker);  // the lab's sweep over kept steps goes on whatever view is shown
      poll_continue(state, worker);
      headless.after_poll(state);
      PlayRequests played;
      player.step(state, worker, played);
      // The view as a figure (File menu last frame, or the action just played), before the panels draw: the
      // Maps view's head views export as they draw this frame.
      run_export_requests(state);
      if (played.width > 0 && !fullscreen.on) glfwSetWindowSize(window, played.width, played.height);
      if (played.width > 0) script_sized = true;
      start_edited_run(state, worker);

      update_fonts(fonts, state, base_style);
      follow_lecture_scale(state, lecture_scale);
      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      headless.place_mouse(state, io);
      {
        double cx = 0, cy = 0;  // on the screen: the window moves when presenting goes full screen
        int wx = 0, wy = 0;
        glfwGetCursorPos(window, &cx, &cy);
        glfwGetWindowPos(window, &wx, &wy);
        player.park_mouse(io, cx + wx, cy + wy);
      }
      ImGui::NewFrame();
      state.drawn = LayoutRecord{};
      ImGui::SetNextWindowPos(ImVec2(0, 0));
      ImGui::SetNextWindowSize(io.DisplaySize);
      ImGui::Begin("DiffLens", nullptr,
                   ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                       ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_MenuBar);
      // A passing message (an export written or refused, a selection moved) goes after a while; the heads'
      // shares stay while their prompt and run are on screen.
      if (state.message != state.message_seen) {
        state.message_seen = state.message;
        state.message_since = now_seconds();
      } else if (!state.message.empty() && state.message != state.focus_message &&
                 now_seconds() - state.message_since > kMessageSeconds) {
        state.message.clear();
        state.message_seen.clear();
      }
      if (!state.focus_message.empty() && state.prompt.text != state.focus_prompt) {
        if (state.message == state.focus_message) state.message.clear();  // another prompt: stale shares
        state.focus_message.clear();
      }
      const ModelShape shape = shape_of(state);
      keep_selection_in_models(state, shape);
      // Presenting began or ended, or the window was resized: the token strip is laid out anew (another font,
      // another width), so it is scrolled to the query again over the next frames, once its new size is
      // known.
      // Lecture mode (L) and the text size change the font: the same.
      const float font_now = ImGui::GetFontSize();
      if (state.explain.present != was_presenting || io.DisplaySize.x != strip_width_seen ||
          font_now != strip_font_seen) {
        was_presenting = state.explain.present;
        strip_width_seen = io.DisplaySize.x;
        strip_font_seen = font_now;
        rescroll_frames = 3;
      }
      if (rescroll_frames > 0) {
        --rescroll_frames;
        state.strip_scrolled_to = -1;
      }
      if (state.explain.present) {  // presentation: the token strip and the Explain slide fill the window
        views.explain.draw_presentation(state);
      } else {
        draw_window_body(state, worker, views, renderer, shape);
      }
      ImGui::End();
      if (!state.drawn.find("text.0") && !state.drawn.find("text.1"))
        state.text.hover = -1;  // the Text view is not on screen: no token is under the pointer there
      // This frame's export request (Ctrl+E, File menu, --export-all) had no maps on screen to export.
      if (state.export_all && !state.drawn.find("map.0") && state.layout.view != View::Explain && state.shown)
        state.message = "nothing exported: the maps are not on screen (view 1, or \"with the maps\")";
      state.export_all = (io.KeyCtrl && ImGui::IsKeyPressed(GLFW_KEY_E, false) && !io.WantTextInput) ||
                         headless.export_now(state);
      state.export_head_views = false;
      if (headless.page_now(state)) {
        state.export_page = true;
        state.export_page_path = opt.export_page;
      }
      if (state.export_page) {
        export_text_page(state);
        state.export_page = false;
        state.export_page_path.clear();
      }
      const bool window_shot = state.window_shot;
      state.window_shot = false;
      if (state.quit || played.quit) glfwSetWindowShouldClose(window, 1);

      ImGui::Render();
      int w, h;
      glfwGetFramebufferSize(window, &w, &h);
      glViewport(0, 0, w, h);
      glClearColor(0.95f, 0.95f, 0.95f, 1);
      glClear(GL_COLOR_BUFFER_BIT);
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
      if (window_shot) {
        std::error_code ec;
        std::filesystem::create_directories(state.view.export_dir, ec);
        const std::string path = free_path(state.view.export_dir,
                                           "window-" + std::to_string(static_cast<long long>(now_seconds())) +
                                               (state.shown ? intervention_file_tag(*state.shown) : ""),
                                           {".png"})
                                     .string() +
                                 ".png";
        state.message = write_window_png(path, w, h) ? "wrote " + path : "could not write " + path;
      }
      if (!played.screenshot.empty()) {
        std::error_code ec;
        const std::filesystem::path parent = std::filesystem::path(played.screenshot).parent_path();
        if (!parent.empty()) std::filesystem::create_directories(parent, ec);
        player.screenshot_written(played.screenshot, write_window_png(played.screenshot, w, h));
        player.layout_checked(check_layout(state, w, h, false).clean());
      }
      if (headless.after_render(state, worker, w, h, frame_start)) {
        exit_status = headless.exit_status();
        glfwSetWindowShouldClose(window, 1);
      }
      glfwSwapBuffers(window);
      // Presenting fills the monitor, except where the window's size was given (a headless screenshot, a
      // script's `size`, as a rehearsed story sets the projector's): then it fills that window.
      follow_presenting(window, state.explain.present && opt.screenshot.empty() && !script_sized, fullscreen);
    }
    // Remembered for the next run: the layout and the window's size (before it went full screen).
    if (fullscreen.on) {
      state.layout.window_w = fullscreen.w;
      state.layout.window_h = fullscreen.h;
    } else {
      glfwGetWindowSize(window, &state.layout.window_w, &state.layout.window_h);
    }
    write_layout_settings(opt.settings_path, state.layout);
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
#ifdef __SANITIZE_ADDRESS__
  // The sanitizer build's leak check, now: everything of ours is gone, and the GL driver, still loaded, has
  // its allocations reachable and its frames named. At exit the driver has been unloaded, and what it keeps
  // would be reported from "<unknown module>" frames no suppression can name.
  __lsan_do_leak_check();
#endif
  glfwDestroyWindow(window);
  glfwTerminate();
  return exit_status;
}

}  // namespace difflens::app
