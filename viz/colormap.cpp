// OKLab → sRGB conversion and the two generated colormaps.
#include "viz/colormap.h"

#include <algorithm>
#include <cmath>

namespace difflens::viz {
namespace {

struct Lab {
  double L, a, b;
};

double srgb_encode(double x) {
  return x <= 0.0031308 ? 12.92 * x : 1.055 * std::pow(x, 1 / 2.4) - 0.055;
}
double srgb_decode(double x) {
  return x <= 0.04045 ? x / 12.92 : std::pow((x + 0.055) / 1.055, 2.4);
}

// OKLab → linear sRGB (Ottosson's published transform).
std::array<double, 3> oklab_to_linear(const Lab& c) {
  const double l_ = c.L + 0.3963377774 * c.a + 0.2158037573 * c.b;
  const double m_ = c.L - 0.1055613458 * c.a - 0.0638541728 * c.b;
  const double s_ = c.L - 0.0894841775 * c.a - 1.2914855480 * c.b;
  const double l = l_ * l_ * l_, m = m_ * m_ * m_, s = s_ * s_ * s_;
  return {4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s,
          -1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s,
          -0.0041960863 * l - 0.7034186147 * m + 1.7076147010 * s};
}

bool in_gamut(const std::array<double, 3>& rgb) {
  return std::all_of(rgb.begin(), rgb.end(), [](double v) { return v >= -1e-6 && v <= 1 + 1e-6; });
}

// Colour at lightness L, hue h (radians) and the largest chroma ≤ c_max that stays inside sRGB, so the
// lightness ramp is exact and never broken by clipping.
Rgb8 lch_in_gamut(double L, double c_max, double h) {
  double lo = 0, hi = c_max;
  for (int i = 0; i < 30; ++i) {
    const double c = 0.5 * (lo + hi);
    (in_gamut(oklab_to_linear({L, c * std::cos(h), c * std::sin(h)})) ? lo : hi) = c;
  }
  const auto rgb = oklab_to_linear({L, lo * std::cos(h), lo * std::sin(h)});
  auto to8 = [](double v) {
    return static_cast<uint8_t>(std::lround(255 * srgb_encode(std::clamp(v, 0.0, 1.0))));
  };
  return {to8(rgb[0]), to8(rgb[1]), to8(rgb[2])};
}

constexpr double kDeg = M_PI / 180.0;

}  // namespace

Rgb8 Colormap::at(double t) const {
  const double x = std::clamp(std::isnan(t) ? 0.0 : t, 0.0, 1.0) * (kEntries - 1);
  return rgb[static_cast<size_t>(std::lround(x))];
}

const Colormap& sequential_colormap() {
  static const Colormap cmap = [] {
    Colormap c;
    c.kind = ColormapKind::Sequential;
    for (int i = 0; i < Colormap::kEntries; ++i) {
      const double t = static_cast<double>(i) / (Colormap::kEntries - 1);
      const double L = 0.20 + 0.75 * t;             // monotonic lightness
      const double h = (300.0 - 200.0 * t) * kDeg;  // violet → blue → teal → green → yellow
      const double chroma = 0.11 + 0.06 * std::sin(M_PI * t);  // most colourful in the middle
      c.rgb.push_back(lch_in_gamut(L, chroma, h));
    }
    return c;
  }();
  return cmap;
}

const Colormap& diverging_colormap() {
  static const Colormap cmap = [] {
    Colormap c;
    c.kind = ColormapKind::Diverging;
    for (int i = 0; i < Colormap::kEntries; ++i) {
      const double t = static_cast<double>(i) / (Colormap::kEntries - 1);
      const double u = std::fabs(2 * t - 1);  // distance from zero
      const double L = 0.97 - 0.52 * u;       // symmetric lightness, near-white at 0
      // The app's one sign convention (core/FORMATS.md, "Colours"): red below zero, blue above, as the Text
      // view, the page and Figure 1's bars have it.
      const double h = (t < 0.5 ? 30.0 : 255.0) * kDeg;
      c.rgb.push_back(lch_in_gamut(L, 0.20 * std::sqrt(u), h));
    }
    return c;
  }();
  return cmap;
}

namespace {
std::array<double, 3> oklab_of(Rgb8 c) {
  const double r = srgb_decode(c.r / 255.0), g = srgb_decode(c.g / 255.0), b = srgb_decode(c.b / 255.0);
  const double l = std::cbrt(0.4122214708 * r + 0.5363288310 * g + 0.0514459929 * b);
  const double m = std::cbrt(0.2119034982 * r + 0.6806995451 * g + 0.1073969566 * b);
  const double s = std::cbrt(0.0883024619 * r + 0.2817188376 * g + 0.6299787005 * b);
  return {0.2104542553 * l + 0.7936177850 * m - 0.0040720468 * s,
          1.9779984951 * l - 2.4285922050 * m + 0.4505937099 * s,
          0.0259040371 * l + 0.7827717662 * m - 0.8086757660 * s};
}
}  // namespace

double oklab_hue_degrees(Rgb8 c) {
  const auto lab = oklab_of(c);
  const double h = std::atan2(lab[2], lab[1]) / kDeg;
  return h < 0 ? h + 360 : h;
}

double oklab_chroma(Rgb8 c) {
  const auto lab = oklab_of(c);
  return std::hypot(lab[1], lab[2]);
}

double oklab_lightness(Rgb8 c) {
  return oklab_of(c)[0];
}

}  // namespace difflens::viz
