// Intervals and paired tests for what DiffLens reports over episodes or items (no LibTorch):
//   accuracy       Wilson score interval (95 %) of k successes in n;
//   a mean         percentile bootstrap interval over the values (resampled with replacement);
//   two models on the same episodes
//                  accuracy: McNemar's exact test on the discordant pairs (b: only A right, c: only B right),
//                            two-sided binomial p = min(1, 2 · P[X <= min(b, c)]), X ~ Binomial(b + c, 1/2);
//                  a mean:   paired bootstrap of the mean difference (the same resampled indices for both),
//                            its 95 % interval and a two-sided p (twice the smaller tail beyond 0).
// The bootstrap is seeded (the same numbers every run) with `resamples` draws.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace difflens {

struct Interval {
  double estimate = 0, low = 0, high = 0;
};

// n = 0: estimate 0 and the whole [0, 1].
Interval wilson_interval(int64_t successes, int64_t n, double z = 1.959963984540054);

// An empty list: all three NaN; one value: that value three times.
Interval bootstrap_mean(const std::vector<double>& values, int resamples = 2000, uint64_t seed = 1);

struct PairedTest {
  Interval difference;  // of A − B (accuracy: the difference of proportions, interval by bootstrap)
  double p = 1;         // two-sided
  int64_t only_a = 0, only_b = 0;  // McNemar's discordant pairs (accuracy only)
};

// `a_right`, `b_right`: per episode, whether each model answered (the same episodes, in the same order).
// Throws Error when the lists differ in length.
PairedTest mcnemar(const std::vector<bool>& a_right, const std::vector<bool>& b_right);

// Paired bootstrap of mean(a − b); throws Error when the lists differ in length.
PairedTest paired_bootstrap(const std::vector<double>& a, const std::vector<double>& b, int resamples = 2000,
                            uint64_t seed = 1);

// "0.98 [0.93, 0.99]" with `digits` decimals.
std::string format_interval(const Interval& i, int digits = 2);

}  // namespace difflens
