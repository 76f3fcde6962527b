// DiffLens's icon (see icon.h).
#include "viz/icon.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "viz/colormap.h"

namespace difflens::viz {
namespace {

constexpr double kCorner = 0.18;  // the rounded square's corner radius, as a share of the side
constexpr Rgb8 kBackground{30, 34, 48};
constexpr Rgb8 kMasked{62, 68,
                       86};  // the causal mask's cells (above the diagonal): each map reads as a square
// Each map's square: left, top, side (a share of the icon's side): A1, A2 above, A1 − λA2 below.
constexpr double kMaps[3][3] = {{0.08, 0.08, 0.40}, {0.52, 0.08, 0.40}, {0.30, 0.52, 0.40}};

bool inside_rounded_square(double u, double v) {
  const double cu = std::clamp(u, kCorner, 1 - kCorner), cv = std::clamp(v, kCorner, 1 - kCorner);
  return u >= 0 && u <= 1 && v >= 0 && v <= 1 &&
         (u - cu) * (u - cu) + (v - cv) * (v - cv) <= kCorner * kCorner;
}

// Every cell's colour, map by map (A1, A2, A1 − λA2; n x n row-major), the mask's grey above the diagonal:
// A1 and A2 on one probability scale (their largest value), A1 − λA2 diverging around 0 (its largest
// |value|).
std::array<std::vector<Rgb8>, 3> cell_colours(const IconMaps& m) {
  double top = 0, top_abs = 0;
  for (size_t x = 0; x < m.a.size(); ++x) {
    top = std::max({top, m.a1[x], m.a2[x]});
    top_abs = std::max(top_abs, std::fabs(m.a[x]));
  }
  std::array<std::vector<Rgb8>, 3> c;
  for (auto& map : c) map.assign(m.a.size(), kMasked);
  for (int i = 0; i < m.n; ++i)
    for (int j = 0; j <= i; ++j) {
      const size_t at = static_cast<size_t>(i * m.n + j);
      c[0][at] = sequential_colormap().at(m.a1[at] / top);
      c[1][at] = sequential_colormap().at(m.a2[at] / top);
      c[2][at] = diverging_colormap().at(0.5 + 0.5 * m.a[at] / top_abs);
    }
  return c;
}

// The colour at (u, v) in [0, 1]², and whether it is inside the icon.
bool colour_at(const std::array<std::vector<Rgb8>, 3>& cells, int n, double u, double v, Rgb8& c) {
  if (!inside_rounded_square(u, v)) return false;
  c = kBackground;
  for (int k = 0; k < 3; ++k) {
    const double x = (u - kMaps[k][0]) / kMaps[k][2], y = (v - kMaps[k][1]) / kMaps[k][2];
    if (x < 0 || x >= 1 || y < 0 || y >= 1) continue;
    c = cells[k][static_cast<size_t>(static_cast<int>(y * n) * n + static_cast<int>(x * n))];
  }
  return true;
}

}  // namespace

IconMaps icon_maps() {
  IconMaps m;
  m.n = 6;
  m.lambda = 0.8;
  m.needle = 1;
  const size_t cells = static_cast<size_t>(m.n * m.n);
  m.a1.assign(cells, 0);
  m.a2.assign(cells, 0);
  m.a.assign(cells, 0);
  for (int i = 0; i < m.n; ++i)
    for (int j = 0; j <= i; ++j) {
      const size_t at = static_cast<size_t>(i * m.n + j);
      const double even = 1.0 / (i + 1);
      // A1: 0.7 on the needle (once it is in view), the rest spread evenly; A2: spread evenly.
      m.a1[at] = i >= m.needle ? 0.3 * even + (j == m.needle ? 0.7 : 0.0) : even;
      m.a2[at] = even;
      m.a[at] = m.a1[at] - m.lambda * m.a2[at];
    }
  return m;
}

std::vector<uint8_t> render_icon(int size) {
  const IconMaps m = icon_maps();
  const auto cells = cell_colours(m);
  std::vector<uint8_t> out(static_cast<size_t>(size) * static_cast<size_t>(size) * 4, 0);
  constexpr int kSamples = 4;
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x) {
      double r = 0, g = 0, b = 0;
      int hits = 0;
      for (int sy = 0; sy < kSamples; ++sy)
        for (int sx = 0; sx < kSamples; ++sx) {
          Rgb8 c;
          if (!colour_at(cells, m.n, (x + (sx + 0.5) / kSamples) / size, (y + (sy + 0.5) / kSamples) / size,
                         c))
            continue;
          r += c.r;
          g += c.g;
          b += c.b;
          ++hits;
        }
      uint8_t* p = &out[(static_cast<size_t>(y) * static_cast<size_t>(size) + static_cast<size_t>(x)) * 4];
      if (hits == 0) continue;
      p[0] = static_cast<uint8_t>(std::lround(r / hits));
      p[1] = static_cast<uint8_t>(std::lround(g / hits));
      p[2] = static_cast<uint8_t>(std::lround(b / hits));
      p[3] = static_cast<uint8_t>(std::lround(255.0 * hits / (kSamples * kSamples)));
    }
  return out;
}

std::string icon_svg() {
  const IconMaps m = icon_maps();
  const auto cells = cell_colours(m);
  constexpr double kSide = 256;
  char buf[256];
  std::string svg =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"256\" height=\"256\" viewBox=\"0 0 256 256\">\n"
      "<title>DiffLens</title>\n";
  std::snprintf(buf, sizeof buf, "<rect width=\"256\" height=\"256\" rx=\"%.2f\" fill=\"#%02x%02x%02x\"/>\n",
                kCorner * kSide, kBackground.r, kBackground.g, kBackground.b);
  svg += buf;
  for (int k = 0; k < 3; ++k) {
    const double cell = kMaps[k][2] * kSide / m.n;
    for (int i = 0; i < m.n; ++i)
      for (int j = 0; j < m.n; ++j) {
        const Rgb8 c = cells[k][static_cast<size_t>(i * m.n + j)];
        std::snprintf(buf, sizeof buf,
                      "<rect x=\"%.3f\" y=\"%.3f\" width=\"%.3f\" height=\"%.3f\" fill=\"#%02x%02x%02x\"/>\n",
                      kMaps[k][0] * kSide + j * cell, kMaps[k][1] * kSide + i * cell, cell, cell, c.r, c.g,
                      c.b);
        svg += buf;
      }
  }
  return svg + "</svg>\n";
}

}  // namespace difflens::viz
