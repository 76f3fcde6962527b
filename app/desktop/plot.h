// Chart frames drawn with ImGui's draw list: a y axis with round ticks, labels and grid lines, and the
// mapping from values to pixels. UI thread only.
#pragma once

#include <imgui.h>

#include <string>

#include "viz/colormap.h"

namespace difflens::app {

// A viz colour for ImGui's draw list.
inline ImU32 ink(viz::Rgb8 c, int alpha = 255) {
  return IM_COL32(c.r, c.g, c.b, alpha);
}
// A model's identity colour by its slot (viz::model_colour: never a sign colour).
inline ImU32 model_ink(int slot, bool light = false, int alpha = 255) {
  return ink(viz::model_colour(static_cast<size_t>(slot < 0 ? 0 : slot), light), alpha);
}

struct PlotArea {
  ImVec2 min, max;  // the data area, inside the axes
  double lo = 0, hi = 1;
  float y(double v) const { return max.y - static_cast<float>((v - lo) / (hi - lo)) * (max.y - min.y); }
};

// A white chart in [min, max] with its y axis on the left (ticks from nice_ticks, labels in `fmt`, grid
// lines), `y_title` as a line (or, with "\n", lines) above the axis, and room for one line of x labels below
// when x_labels. Returns the data area.
PlotArea draw_plot_frame(ImVec2 min, ImVec2 max, double lo, double hi, const char* fmt, bool x_labels,
                         const std::string& y_title = "");

// `text` wrapped at its spaces (ImGui's own wrapping also breaks after '.', splitting "1.00") into lines of
// at most `width` pixels in the current font, joined by "\n": at most `lines` of them (0: no limit), the last
// ending in "..." when the text goes on; a word wider than a line is broken between characters.
std::string wrap_at_spaces(const std::string& text, float width, int lines = 0);

// Continues the current line when the next item (a widget `width` wide with `label` after it) fits in the
// window's width, else starts a new line: rows of controls that wrap instead of running off the view.
void flow_next(float width, const char* label = "");

}  // namespace difflens::app
