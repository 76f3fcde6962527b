// A view as a figure for slides and papers (File > Export this view as a figure; play's "export figure"):
// Figure 1, λ per layer, the Noise chart, the outliers' histograms and the Model view's grid, drawn on the
// CPU from the run on screen (viz/chart.h, viz/figure.h) at the size asked, as PNG and SVG from one layout;
// the Maps view exports its head views the same way. No GL.
#pragma once

#include <string>
#include <vector>

#include "app/desktop/gui_state.h"

namespace difflens::app {

// Writes the figure(s) of the view on screen into the export folder, each as NAME.png and NAME.svg, never
// over an earlier file (NAME-2, NAME-3, ...); returns the files written. Throws Error when the view has no
// such figure (the Text view: its page; Explain and the Lab: their own exports) or nothing is on screen.
std::vector<std::string> export_view_figure(GuiState& state);

// File > Save this run as trace bundles (play: "export bundle"): each slot's trace of the run on screen as
// a bundle (core/trace_io.h) in a new folder of the export folder (run, run-2, ...), named by slot and
// model ("left-diff-small"), which File > Open trace bundle and `difflens render` read. Returns the
// bundles' folders; throws Error when no run is on screen.
std::vector<std::string> save_run_bundles(GuiState& state);

}  // namespace difflens::app
