// Colours of running text shaded by attention (the app's Text view and the exported page): a token's
// background is white at weight 0, so the text stays readable, and deepens towards blue for positive weights
// and towards red for negative ones (DIFF's A1 − λA2 pushes some keys away), as Figure 1 colours its bars.
// The ink turns white where the background gets dark. Plain data: the page embeds the same table.
#pragma once

#include <vector>

#include "viz/colormap.h"
#include "viz/map_view.h"

namespace difflens::viz {

struct TextShade {
  Rgb8 background, ink;
};

constexpr int kTextShadeSteps = 256;
constexpr Rgb8 kTextPositive{50, 110, 180}, kTextNegative{200, 60, 60};

// The shade of step k in [0, kTextShadeSteps) of a sign: step 0 is white, the last the full colour.
TextShade text_shade_step(int step, bool negative);

// The shade of weight `w` on `range` (its magnitude through `scale`, as the maps' colour coordinate; a
// sequential range shows negative weights as 0). NaN: white.
TextShade text_shade(double w, const ValueRange& range, ValueScale scale);

// The step text_shade picks for w (what the page computes in the browser): 0 .. kTextShadeSteps - 1.
int text_shade_index(double w, const ValueRange& range, ValueScale scale);

}  // namespace difflens::viz
