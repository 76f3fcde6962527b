// Round axis ticks (ticks.h).
#include "viz/ticks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace difflens::viz {

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {std::isfinite(lo) ? lo : 0.0};
  max_ticks = std::max(2, max_ticks);
  const double raw = (hi - lo) / (max_ticks - 1);
  // The smallest round step (1, 2 or 5 times a power of ten) whose ticks inside [lo, hi] are at most
  // max_ticks: ticks need not reach the ends, so steps below `raw` are tried too (two ticks over
  // [-0.12, 0.98] are 0 and 0.5, not 0 alone at a step of 1).
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  double step = decade, m = 1, p = decade;
  bool found = false;
  for (double u : {decade / 10, decade, decade * 10}) {
    for (double mm : {1.0, 2.0, 5.0}) {
      m = mm;
      p = u;
      step = m * p;
      if (std::floor(hi / step) - std::ceil(lo / step) + 1 <= max_ticks) {
        found = true;
        break;
      }
    }
    if (found) break;
  }
  // A single tick where two were asked for (0 alone on a short chart over [-0.40, 0.31]: Figure 1 of a DIFF
  // V2 row in lecture mode): the smallest step of 1, 2, 2.5, 4 or 5 times a power of ten that gives two or
  // more.
  if (std::floor(hi / step) - std::ceil(lo / step) + 1 < 2) {
    bool two = false;
    for (double u : {decade / 10, decade, decade * 10}) {
      for (double mm : {1.0, 2.0, 2.5, 4.0, 5.0}) {
        const double n = std::floor(hi / (mm * u)) - std::ceil(lo / (mm * u)) + 1;
        if (n >= 2 && n <= max_ticks) {
          m = mm, p = u, step = mm * u, two = true;
          break;
        }
      }
      if (two) break;
    }
  }
  // k·m·p computed as (k·m) / (1/p) below 1, so 0.6 is the double nearest 0.6, not 3 × 0.2.
  const double inv = p < 1 ? std::round(1 / p) : 0;
  std::vector<double> out;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k += 1)
    out.push_back(k == 0 ? 0.0 : inv > 0 ? k * m / inv : k * m * p);
  return out;
}

std::string tick_label_format(const std::vector<double>& ticks, const char* fmt) {
  if (ticks.size() < 2) return fmt;
  const double step = ticks[1] - ticks[0];
  char buf[64];
  for (double t : ticks) {
    std::snprintf(buf, sizeof buf, fmt, t);
    if (std::fabs(std::strtod(buf, nullptr) - t) >= 0.25 * step) {
      std::snprintf(buf, sizeof buf, "%%.%df",
                    std::clamp(static_cast<int>(std::ceil(-std::log10(step) - 1e-9)), 0, 9));
      return buf;
    }
  }
  return fmt;
}

}  // namespace difflens::viz
