// Colormaps for attention maps, generated in the OKLab perceptual space (no tables copied from elsewhere):
// a sequential map for probabilities (lightness rises monotonically from dark violet through teal to pale
// yellow) and a diverging map for A1 − λA2 (red for negative, near-white at 0, blue for positive, with
// lightness symmetric about 0: the sign convention of every view, core/FORMATS.md "Colours"). Plain data: the
// GL code uploads `rgb` as a 1-D texture.
#pragma once

#include <array>
#include <cstddef>
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
// OKLab hue (degrees, 0 to 360) and chroma of an sRGB colour: which colours may stand for what.
double oklab_hue_degrees(Rgb8 c);
double oklab_chroma(Rgb8 c);

// Colours that name a model (its slot, or its place in a list of models): never near the hues of the sign
// scale (blue above zero, red below; core/FORMATS.md, "Colours"), nor the answer's green or the query's
// orange. Slot 0 (the left, usually DIFF) purple, slot 1 (the right, usually the baseline) teal; lists go on
// with olive and grey. Light variants for a second quantity of the same model (the Noise chart's noise).
constexpr Rgb8 kModelColours[4] = {{118, 42, 131}, {1, 102, 94}, {120, 120, 20}, {90, 90, 90}};
constexpr Rgb8 kModelColoursLight[4] = {{194, 165, 207}, {128, 205, 193}, {205, 205, 130}, {190, 190, 190}};
inline Rgb8 model_colour(size_t i, bool light = false) {
  // Indexed on each side: GCC 12 with -fsanitize=undefined returned element 0 for every i from
  // (light ? a : b)[i] (the sanitizer build's test caught it).
  const size_t k = i % 4;
  return light ? kModelColoursLight[k] : kModelColours[k];
}

}  // namespace difflens::viz
