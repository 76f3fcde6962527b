// A view as a figure for slides and papers (File > Export this view as a figure; play's "export figure"):
// Figure 1, λ per layer, the Noise chart, the outliers' histograms and the Model view's grid, drawn on the
// CPU from the run on screen (viz/chart.h, viz/figure.h) at the size asked, as PNG and SVG from one layout;
// the Maps view exports its head views the same way. No GL.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "app/desktop/gui_state.h"

namespace difflens::app {

// Writes the figure(s) of the view on screen into the export folder, each as NAME.png and NAME.svg, never
// over an earlier file (NAME-2, NAME-3, ...); returns the files written. Throws Error when the view has no
// such figure (the Text view: its page; Explain and the Lab: their own exports) or nothing is on screen.
std::vector<std::string> export_view_figure(GuiState& state);

// The interventions of run `r` as the status line names them: "lambda=0", or each slot's when they differ
// ("left: lambda=0; right: ablate:1:3"); "" when every slot ran as trained.
std::string run_interventions(const RunResult& r);
// What an export of run `r` adds to its file names ("-under-lambda_0") and titles ("  (INTERVENED:
// lambda=0)"):
// "" for a run as trained.
std::string intervention_file_tag(const RunResult& r);
std::string intervention_title_tag(const RunResult& r);
// dir/stem, or dir/stem-2, dir/stem-3, ...: the first for which no stem + ext exists for any of `exts` (a
// folder: {""}), so that no export ever replaces an earlier one.
std::filesystem::path free_path(const std::filesystem::path& dir, const std::string& stem,
                                const std::vector<std::string>& exts);

// File > Save this run as trace bundles (play: "export bundle"): each slot's trace of the run on screen as
// a bundle (core/formats/trace_io.h) in a new folder of the export folder (run, run-2, ...), named by slot
// and model ("left-diff-small"), which File > Open trace bundle and `difflens render` read. Returns the
// bundles' folders; throws Error when no run is on screen.
std::vector<std::string> save_run_bundles(GuiState& state);

}  // namespace difflens::app
