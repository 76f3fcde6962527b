// Plays a --play script (app/desktop/play_script.h) in the window, one action a frame, through the same
// functions the app's controls call (prompt_edited, open_into_slot, pick_device, set_logit_width,
// start_lab_sweep...), so a played session is a session a person could have had. `wait` waits for the models,
// `screenshot` writes the window two frames after its action (the layout settled). Each action is logged on
// stdout
// ("play: LINE: ACTION"); the end prints the run's figures, resident memory included (the soak reads them).
// UI thread only.
#pragma once

#include <imgui.h>

#include <string>

#include "app/desktop/gui_state.h"
#include "app/desktop/play_script.h"

namespace difflens::app {

// What the shell does for an action (the window's size, a screenshot after rendering, closing).
struct PlayRequests {
  int width = 0, height = 0;  // resize the window to this (0: no change)
  std::string screenshot;     // write the window to this PNG after this frame is rendered
  bool quit = false;
};

class ScriptPlayer {
 public:
  // `delay_ms`: the pause before each action (a lecture's pace; 0: as soon as the app can); typing then
  // goes a character every 60 ms. `seconds` > 0: stop playing after that long, wait for the results and
  // quit (the soak's time limit).
  // `exit`: quit when the script ends (else the window stays, for the lecture's questions).
  ScriptPlayer(PlayScript script, double delay_ms, double seconds, bool exit);
  bool active() const { return started_ && !done_; }
  bool playing() const { return !script_.actions.empty() && !done_; }
  // Before the frame's widgets: plays the next action when its time has come (after the previous one's
  // wait), filling `out` with what the shell must do.
  void step(GuiState& state, InferenceWorker& worker, PlayRequests& out);
  // Before ImGui::NewFrame, with the pointer's place on the screen: while a script plays and the pointer
  // has not moved since it began, no pointer (no hover, no presenting dot in its screenshots); a person who
  // moves the mouse gets it back for the rest of the run.
  void park_mouse(ImGuiIO& io, double cursor_x, double cursor_y);
  // After a requested screenshot: whether it was written.
  void screenshot_written(const std::string& path, bool ok);
  // The layout check of a screenshot's frame: the summary counts the screenshots that were not clean.
  void layout_checked(bool clean) { faulty_shots_ += clean ? 0 : 1; }

 private:
  void play(const PlayAction& a, GuiState& state, InferenceWorker& worker, PlayRequests& out);
  bool results_in(const GuiState& state, const InferenceWorker& worker) const;
  void finish(const char* how);
  void note_memory();

  PlayScript script_;
  double delay_ms_ = 0, seconds_ = 0;
  size_t next_ = 0;
  bool exit_ = false;
  bool started_ = false, done_ = false, ending_ = false;
  double start_ = 0, last_action_ = 0;
  // The action in progress: waiting for the results (since), for a time, typing, or a screenshot's frames.
  double wait_until_ = 0, waiting_since_ = 0;
  bool wait_results_ = false;
  std::string typing_;
  int shot_frames_ = -1;
  double shot_since_ = 0;  // when the screenshot was asked for (it waits for a run on its way)
  std::string shot_path_;
  size_t played_ = 0;
  std::string message_;       // the status line's message last logged
  std::string cont_message_;  // Continue's last message, as printed
  bool cursor_seen_ = false, cursor_moved_ = false;
  double cursor_x_ = 0, cursor_y_ = 0;
  int failed_shots_ = 0, stuck_waits_ = 0, faulty_shots_ = 0;
  // Resident memory (MB): after the mark (the first thousand actions, or a quarter of a shorter script)
  // and the peak so far.
  size_t mark_ = 0;
  double rss_at_mark_ = -1, rss_peak_ = 0;
};

// This process's resident memory now and its peak (MB, from /proc/self/status).
double resident_mb();
double peak_resident_mb();

}  // namespace difflens::app
