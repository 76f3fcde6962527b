// DiffLens's icon, drawn from its own colour maps: three causal attention maps of one small synthetic head
// (the masked cells above the diagonal grey), A1 and A2 side by side above and their difference A1 − λA2
// below, on a dark rounded square. A1 attends
// to one key (the "needle") with some noise, A2 spreads its attention evenly (the noise alone), so
// A1 − λA2 keeps the needle blue (positive) and cancels the noise to near white and red (negative): the app's
// story in 48 pixels.
// Plain data and CPU drawing: the PNGs and SVG the build installs and the window's icon (GLFW) come from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace difflens::viz {

// The icon's maps, n x n row-major, causal (zero above the diagonal): rows of a1 and a2 sum to 1, and
// a = a1 − lambda · a2 (rows sum to 1 − lambda).
struct IconMaps {
  int n = 0;
  double lambda = 0;
  int needle = 0;  // the key A1 attends to
  std::vector<double> a1, a2, a;
};
IconMaps icon_maps();

// The icon at size x size pixels, RGBA (straight alpha), rows top first; corners outside the rounded
// square transparent, edges antialiased (4 x 4 samples per pixel).
std::vector<uint8_t> render_icon(int size);
// The same drawing as SVG (scalable; 256 user units).
std::string icon_svg();

}  // namespace difflens::viz
