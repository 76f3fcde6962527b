// Wilson intervals, bootstrap intervals, McNemar's exact test and the paired bootstrap (see
// core/formats/stats.h).
#include "core/formats/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "core/formats/error.h"

namespace difflens {

Interval wilson_interval(int64_t k, int64_t n, double z) {
  if (n <= 0) return {0, 0, 1};
  if (k < 0 || k > n)
    throw Error("wilson interval: " + std::to_string(k) + " successes of " + std::to_string(n));
  const double nn = static_cast<double>(n), p = static_cast<double>(k) / nn, z2 = z * z;
  const double centre = (p + z2 / (2 * nn)) / (1 + z2 / nn);
  const double half = z / (1 + z2 / nn) * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn));
  return {p, std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

namespace {

// The 2.5 % and 97.5 % percentiles of sorted draws (linear interpolation between order statistics).
std::pair<double, double> percentiles(std::vector<double>& draws) {
  std::sort(draws.begin(), draws.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(draws.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, draws.size() - 1);
    return draws[lo] + (pos - static_cast<double>(lo)) * (draws[hi] - draws[lo]);
  };
  return {at(0.025), at(0.975)};
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? std::numeric_limits<double>::quiet_NaN() : s / static_cast<double>(v.size());
}

}  // namespace

Interval bootstrap_mean(const std::vector<double>& values, int resamples, uint64_t seed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (values.empty()) return {nan, nan, nan};
  const double m = mean_of(values);
  if (values.size() == 1) return {m, m, m};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
  std::vector<double> draws(static_cast<size_t>(std::max(resamples, 1)));
  for (double& d : draws) {
    double s = 0;
    for (size_t i = 0; i < values.size(); ++i) s += values[pick(rng)];
    d = s / static_cast<double>(values.size());
  }
  const auto [lo, hi] = percentiles(draws);
  return {m, lo, hi};
}

PairedTest paired_bootstrap(const std::vector<double>& a, const std::vector<double>& b, int resamples,
                            uint64_t seed) {
  if (a.size() != b.size())
    throw Error("paired test: " + std::to_string(a.size()) + " values against " + std::to_string(b.size()));
  std::vector<double> diff(a.size());
  for (size_t i = 0; i < a.size(); ++i) diff[i] = a[i] - b[i];
  PairedTest t;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (diff.empty()) {
    t.difference = {nan, nan, nan};
    return t;
  }
  const double m = mean_of(diff);
  if (diff.size() == 1) {
    t.difference = {m, m, m};
    return t;
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, diff.size() - 1);
  std::vector<double> draws(static_cast<size_t>(std::max(resamples, 1)));
  int64_t at_or_below = 0, at_or_above = 0;
  for (double& d : draws) {
    double s = 0;
    for (size_t i = 0; i < diff.size(); ++i) s += diff[pick(rng)];
    d = s / static_cast<double>(diff.size());
    at_or_below += d <= 0;
    at_or_above += d >= 0;
  }
  const auto [lo, hi] = percentiles(draws);
  t.difference = {m, lo, hi};
  const double n = static_cast<double>(draws.size());
  t.p = std::min(1.0, 2.0 * static_cast<double>(std::min(at_or_below, at_or_above)) / n);
  return t;
}

PairedTest mcnemar(const std::vector<bool>& a, const std::vector<bool>& b) {
  if (a.size() != b.size())
    throw Error("paired test: " + std::to_string(a.size()) + " episodes against " + std::to_string(b.size()));
  PairedTest t;
  std::vector<double> da, db;
  for (size_t i = 0; i < a.size(); ++i) {
    t.only_a += a[i] && !b[i];
    t.only_b += b[i] && !a[i];
    da.push_back(a[i] ? 1.0 : 0.0);
    db.push_back(b[i] ? 1.0 : 0.0);
  }
  t.difference = paired_bootstrap(da, db).difference;
  const int64_t n = t.only_a + t.only_b, k = std::min(t.only_a, t.only_b);
  if (n == 0) {
    t.p = 1;
    return t;
  }
  // P[X <= k] for X ~ Binomial(n, 1/2), summed in logs (n may be thousands).
  double tail = 0;
  for (int64_t i = 0; i <= k; ++i)
    tail += std::exp(std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(i) + 1) -
                     std::lgamma(static_cast<double>(n - i) + 1) - static_cast<double>(n) * std::log(2.0));
  t.p = std::min(1.0, 2 * tail);
  return t;
}

std::string format_interval(const Interval& i, int digits) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.*f [%.*f, %.*f]", digits, i.estimate, digits, i.low, digits, i.high);
  return buf;
}

}  // namespace difflens
