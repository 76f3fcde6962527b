// The headless run of the window (--screenshot): it times one real edit, waits for the result (and
// --lab-run's sweep), keeps the mouse off the maps unless --hover asks, exports once with --export-all,
// then writes the window as a PNG with a report (timings, each slot's errors, long-prompt pooling, the
// layout: every region drawn and any window that clips) and ends the run. UI thread only (ImGui, GL).
#pragma once

#include <imgui.h>

#include <filesystem>
#include <string>
#include <vector>

#include "app/desktop/gui.h"
#include "app/desktop/gui_state.h"

namespace difflens::app {

// What the layout check found in the frame just rendered: windows outside the screen or clipping their
// contents, lines of text cut by a clip rectangle, lines half shown at the edge of a scrolled box, and
// texts drawn over each other. Printed as one "layout check:" line with up to 8 examples of each; with
// `print_regions`, every region the panels recorded first.
// In lecture mode a slide is held to more: no line half shown at a scroll edge and no region the panels
// drew (a map, a chart, a model's grid) reaching past the window, where a lecturer would have to scroll.
struct LayoutCheck {
  int windows = 0, clipped = 0, cut = 0, cut_at_scroll_edge = 0, overlaps = 0, regions_beyond = 0;
  int stale = 0;  // texts on screen that describe an earlier run than the one shown (the status line's)
  bool lecture = false;
  bool clean() const {
    return clipped == 0 && cut == 0 && overlaps == 0 && stale == 0 &&
           (!lecture || (cut_at_scroll_edge == 0 && regions_beyond == 0));
  }
};
LayoutCheck check_layout(const GuiState& state, int width, int height, bool print_regions);

// The framebuffer as a PNG (rows flipped: GL's are bottom-up). False when it cannot be written.
bool write_window_png(const std::string& path, int width, int height);

class HeadlessRun {
 public:
  explicit HeadlessRun(const GuiOptions& options)
      : opt_(options),
        export_pending_(options.export_all),
        page_pending_(!options.export_page.empty()),
        started_(std::filesystem::file_time_type::clock::now()) {}
  bool active() const { return !opt_.screenshot.empty(); }
  // Frames are being counted towards the screenshot (the loop should not sleep long).
  bool counting() const { return frames_ >= 0; }
  // A result reached the UI. The first one (models just loaded) becomes a simulated keystroke, so the
  // screenshot times a real edit: false then, and the result is not the one to wait for.
  bool take_result(GuiState& state);
  // After the frame's polling: counting starts once the result, and --lab-run's sweep, are in.
  void after_poll(GuiState& state);
  // Before ImGui::NewFrame: no hover, or the mouse on the first pixel of --hover's cell of the first map.
  void place_mouse(const GuiState& state, ImGuiIO& io) const;
  // --export-all: true once, on the first frame with a result.
  bool export_now(const GuiState& state);
  // --export-page: true once, on the first frame with a result.
  bool page_now(const GuiState& state);
  // After the frame is rendered (its work began at frame_start): its time, and after --exit-after-frames
  // frames the PNG and the report. True when the run is over (exit_status() then says how it went).
  bool after_render(const GuiState& state, const InferenceWorker& worker, int width, int height,
                    double frame_start);
  int exit_status() const { return exit_status_; }

 private:
  void report(const GuiState& state, const InferenceWorker& worker, int width, int height) const;
  // What the run was asked and did not do, said on stderr (the status is 1 when --export-all wrote nothing).
  void check_asked(const GuiState& state);

  const GuiOptions& opt_;
  int frames_ = -1;  // frames drawn since the awaited result (-1: still waiting)
  bool export_pending_ = false;
  bool page_pending_ = false;
  bool simulated_edit_ = false;
  bool result_ready_ = false;
  std::vector<double> first_frame_ms_, steady_ms_;
  int exit_status_ = 0;
  std::filesystem::file_time_type started_;  // files in the export folder written since count as exported
};

}  // namespace difflens::app
