// Intervals and paired tests against textbook values.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/formats/error.h"
#include "core/formats/stats.h"

using namespace difflens;

TEST_CASE("Wilson intervals equal Newcombe's (1998) worked examples", "[stats]") {
  // Newcombe, Statistics in Medicine 17:857-872, Table I, method 3 (score, no continuity correction).
  const struct {
    int64_t k, n;
    double low, high;
  } cases[] = {
      {81, 263, 0.2553, 0.3662}, {15, 148, 0.0624, 0.1605}, {0, 20, 0.0, 0.1611}, {1, 29, 0.0061, 0.1718}};
  for (const auto& c : cases) {
    INFO(c.k << "/" << c.n);
    const Interval i = wilson_interval(c.k, c.n);
    CHECK(i.estimate == Approx(static_cast<double>(c.k) / static_cast<double>(c.n)));
    CHECK(i.low == Approx(c.low).margin(5e-5));
    CHECK(i.high == Approx(c.high).margin(5e-5));
  }
  CHECK(wilson_interval(100, 100).high == Approx(1.0));
  CHECK(wilson_interval(0, 0).high == 1.0);
  CHECK_THROWS_WITH(wilson_interval(5, 3), Catch::Contains("5 successes of 3"));
  CHECK(format_interval(wilson_interval(98, 100)) == "0.98 [0.93, 0.99]");
}

TEST_CASE("McNemar's exact test on discordant pairs", "[stats]") {
  // b = 5 (only A right), c = 1 (only B right): p = 2 * P[X <= 1], X ~ Bin(6, 1/2) = 2 * 7/64.
  std::vector<bool> a, b;
  for (int i = 0; i < 5; ++i) a.push_back(true), b.push_back(false);
  a.push_back(false), b.push_back(true);
  for (int i = 0; i < 10; ++i) a.push_back(true), b.push_back(true);
  const PairedTest t = mcnemar(a, b);
  CHECK(t.only_a == 5);
  CHECK(t.only_b == 1);
  CHECK(t.p == Approx(14.0 / 64.0));
  CHECK(t.difference.estimate == Approx(4.0 / 16.0));
  // No discordant pair: p = 1; 10 against 0: 2 / 1024.
  CHECK(mcnemar({true, false}, {true, false}).p == 1.0);
  CHECK(mcnemar(std::vector<bool>(10, true), std::vector<bool>(10, false)).p == Approx(2.0 / 1024.0));
  CHECK_THROWS_WITH(mcnemar({true}, {true, false}), Catch::Contains("1 episodes against 2"));
}

TEST_CASE("bootstrap intervals: seeded, around the mean, and paired differences", "[stats]") {
  std::vector<double> v;
  for (int i = 0; i < 200; ++i) v.push_back(std::sin(i * 0.7) * 0.5 + 0.3);
  const Interval i = bootstrap_mean(v);
  CHECK(i.low < i.estimate);
  CHECK(i.estimate < i.high);
  // The normal approximation's half-width 1.96 * sd / sqrt(n) within 15 %.
  double m = 0, ss = 0;
  for (double x : v) m += x;
  m /= 200;
  for (double x : v) ss += (x - m) * (x - m);
  const double half = 1.959964 * std::sqrt(ss / 199) / std::sqrt(200.0);
  CHECK((i.high - i.low) / 2 == Approx(half).epsilon(0.15));
  CHECK(bootstrap_mean(v).low == i.low);  // seeded: the same interval every run
  CHECK(std::isnan(bootstrap_mean({}).estimate));
  CHECK(bootstrap_mean({0.4}).high == 0.4);
  // A paired shift of exactly 0.1: the interval is [0.1, 0.1] and p = 0.
  std::vector<double> w = v;
  for (double& x : w) x -= 0.1;
  const PairedTest t = paired_bootstrap(v, w);
  CHECK(t.difference.estimate == Approx(0.1));
  CHECK(t.difference.low == Approx(0.1));
  CHECK(t.p == 0.0);
  // Unrelated noise around the same mean: no significant difference.
  std::vector<double> u;
  for (int k = 0; k < 200; ++k) u.push_back(std::cos(k * 1.3) * 0.5 + m);
  CHECK(paired_bootstrap(v, u).p > 0.05);
}
