// Colormaps for attention maps, generated in the OKLab perceptual space (no tables copied from elsewhere):
// a sequential map for probabilities (lightness rises monotonically from dark violet through teal to pale
// yellow) and a diverging map for A1 − λA2 (red for negative, near-white at 0, blue for positive, with
// lightness symmetric about 0: the sign convention of every view, core/FORMATS.md "Colours"). Plain data: the
// GL code uploads `rgb` as a 1-D texture.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace difflens::viz {

struct Rgb8 {
  uint8_t r = 0, g = 0, b = 0;
};

enum class ColormapKind { Sequential, Diverging };

struct Colormap {
  ColormapKind kind = ColormapKind::Sequential;
  std::vector<Rgb8> rgb;  // kEntries colours; entry 0 is the low end (Diverging: most negative)
  static constexpr int kEntries = 256;
  // t in [0, 1] (Diverging: 0.5 is zero); clamped.
  Rgb8 at(double t) const;
};

const Colormap& sequential_colormap();
const Colormap& diverging_colormap();

// OKLab lightness of an sRGB colour (0 black .. 1 white), for tests and legends.
double oklab_lightness(Rgb8 c);

}  // namespace difflens::viz
