// How long an edit of the prompt waits before both models run again (no ImGui, no LibTorch).
#pragma once

namespace difflens::app {

// An edit runs the models after kDebounceSeconds (typing on coalesces the edits), unless the last run of
// both models took under kFastRunMs and none is in progress: then at once, so that a keystroke reaches the
// screen in about the models' own time (a newer run still cancels an older one: latest wins).
inline constexpr double kDebounceSeconds = 0.15;
inline constexpr double kFastRunMs = 100;

// The pause after an edit, given the last run's time in ms (0 or less: no run yet) and whether a run is in
// progress (a pasted long text: its run's time is not known yet, so typing on waits as after a slow run).
inline double debounce_seconds(double last_run_ms, bool running = false) {
  return !running && last_run_ms > 0 && last_run_ms < kFastRunMs ? 0.0 : kDebounceSeconds;
}

}  // namespace difflens::app
