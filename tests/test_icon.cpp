// The icon (viz/icon): its maps are real attention maps (rows sum to 1, A1 − λA2 rows to 1 − λ, causal),
// and the drawing shows them where the layout puts them, in the app's colour maps, on a rounded square.
#include <array>
#include <catch2/catch.hpp>
#include <cmath>

#include "viz/colormap.h"
#include "viz/icon.h"

using namespace difflens::viz;

TEST_CASE(
    "icon: its maps are causal attention, rows of A1 and A2 sum to 1, rows of A1 - lambda A2 to 1 - lambda",
    "[viz][icon]") {
  const IconMaps m = icon_maps();
  REQUIRE(m.n == 6);
  for (int i = 0; i < m.n; ++i) {
    double s1 = 0, s2 = 0, s = 0;
    for (int j = 0; j < m.n; ++j) {
      const size_t at = static_cast<size_t>(i * m.n + j);
      if (j > i) {
        CHECK(m.a1[at] == 0);
        CHECK(m.a2[at] == 0);
        CHECK(m.a[at] == 0);
      }
      CHECK(m.a[at] == Approx(m.a1[at] - m.lambda * m.a2[at]));
      s1 += m.a1[at];
      s2 += m.a2[at];
      s += m.a[at];
    }
    CHECK(s1 == Approx(1));
    CHECK(s2 == Approx(1));
    CHECK(s == Approx(1 - m.lambda));
  }
  // Last row, by hand: A1 = 0.7 on the needle + 0.3 / 6 everywhere, A2 = 1 / 6, λ = 0.8.
  const size_t last = static_cast<size_t>(5 * m.n);
  CHECK(m.a[last + 1] == Approx(0.7 + 0.05 - 0.8 / 6));
  CHECK(m.a[last + 3] == Approx(0.05 - 0.8 / 6));
}

TEST_CASE("icon: the drawing has transparent corners, the needle blue in A1 - lambda A2, the noise red",
          "[viz][icon]") {
  for (const int size : {48, 256}) {
    INFO(size);
    const std::vector<uint8_t> px = render_icon(size);
    REQUIRE(px.size() == static_cast<size_t>(size * size * 4));
    auto at = [&](double u, double v) {
      const size_t i =
          (static_cast<size_t>(v * size) * static_cast<size_t>(size) + static_cast<size_t>(u * size)) * 4;
      return std::array<int, 4>{px[i], px[i + 1], px[i + 2], px[i + 3]};
    };
    CHECK(at(0.0, 0.0)[3] == 0);  // outside the rounded corner
    CHECK(at(0.99, 0.99)[3] == 0);
    CHECK(at(0.5, 0.03)[3] == 255);  // the background inside
    // The bottom map's last row (left 0.30, top 0.52, side 0.40, 6 cells): the needle (column 1) is the
    // diverging map's top end, a noise cell (column 3) below zero: red over blue.
    const double cell = 0.40 / 6, row = 0.52 + 5.5 * cell;
    const auto needle = at(0.30 + 1.5 * cell, row), noise = at(0.30 + 3.5 * cell, row);
    const Rgb8 top = diverging_colormap().at(1.0);
    CHECK(std::abs(needle[0] - top.r) <= 2);
    CHECK(std::abs(needle[1] - top.g) <= 2);
    CHECK(std::abs(needle[2] - top.b) <= 2);
    CHECK(noise[0] > noise[2]);
    // The same cell in A1 (top left) and A2 (top right), on the app's probability scale (0 to 1):
    // A1 0.7 + 0.3 / 6 = 0.75 on the needle, A2 1 / 6.
    const Rgb8 c1 = sequential_colormap().at(0.75), c2 = sequential_colormap().at(1.0 / 6);
    const auto a1 = at(0.08 + 1.5 * cell, 0.08 + 5.5 * cell), a2 = at(0.52 + 1.5 * cell, 0.08 + 5.5 * cell);
    CHECK(std::abs(a1[0] - c1.r) + std::abs(a1[1] - c1.g) + std::abs(a1[2] - c1.b) <= 6);
    CHECK(std::abs(a2[0] - c2.r) + std::abs(a2[1] - c2.g) + std::abs(a2[2] - c2.b) <= 6);
  }
  const std::string svg = icon_svg();
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(svg.find("<title>DiffLens</title>") != std::string::npos);
  size_t rects = 0;
  for (size_t p = svg.find("<rect"); p != std::string::npos; p = svg.find("<rect", p + 1)) ++rects;
  CHECK(rects == 1 + 3 * 36);  // the background and three maps of 6 x 6 cells (15 of each masked)
}
