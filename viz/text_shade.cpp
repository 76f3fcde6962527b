// Text shading (see text_shade.h).
#include "viz/text_shade.h"

#include <algorithm>
#include <cmath>

namespace difflens::viz {

TextShade text_shade_step(int step, bool negative) {
  const Rgb8 full = negative ? kTextNegative : kTextPositive;
  const double f = std::clamp(step, 0, kTextShadeSteps - 1) / static_cast<double>(kTextShadeSteps - 1);
  auto mix = [&](uint8_t c) { return static_cast<uint8_t>(std::lround(255.0 + (c - 255.0) * f)); };
  TextShade s;
  s.background = {mix(full.r), mix(full.g), mix(full.b)};
  s.ink = oklab_lightness(s.background) < 0.62 ? Rgb8{255, 255, 255} : Rgb8{20, 20, 20};
  return s;
}

int text_shade_index(double w, const ValueRange& range, ValueScale scale) {
  if (std::isnan(w)) return 0;
  ValueRange sequential = range;
  sequential.diverging = false;
  const double f = colormap_coordinate(std::fabs(w), sequential, scale);
  if (!range.diverging && w < 0) return 0;
  return static_cast<int>(std::lround(f * (kTextShadeSteps - 1)));
}

TextShade text_shade(double w, const ValueRange& range, ValueScale scale) {
  return text_shade_step(text_shade_index(w, range, scale), w < 0);
}

}  // namespace difflens::viz
