// viz logic without GL: colormaps are perceptually ordered, pooling is exact, scales map values right.
#include <catch2/catch.hpp>

#include <cmath>

#include "viz/colormap.h"
#include "viz/map_view.h"

using namespace difflens::viz;

TEST_CASE("sequential colormap: lightness rises monotonically from dark to light", "[viz][colormap]") {
  const Colormap& c = sequential_colormap();
  REQUIRE(c.rgb.size() == 256);
  double prev = -1;
  for (const Rgb8& rgb : c.rgb) {
    const double L = oklab_lightness(rgb);
    CHECK(L > prev - 0.004);  // 8-bit rounding only
    prev = L;
  }
  CHECK(oklab_lightness(c.rgb.front()) == Approx(0.20).margin(0.02));
  CHECK(oklab_lightness(c.rgb.back()) == Approx(0.95).margin(0.02));
  CHECK(c.at(-3).r == c.rgb.front().r);  // clamped
  CHECK(c.at(NAN).g == c.rgb.front().g);
}

TEST_CASE("diverging colormap: near-white at zero, symmetric lightness, blue below and red above",
          "[viz][colormap]") {
  const Colormap& c = diverging_colormap();
  CHECK(oklab_lightness(c.at(0.5)) > 0.93);
  for (int i = 0; i < 128; ++i)
    CHECK(oklab_lightness(c.rgb[static_cast<size_t>(i)]) ==
          Approx(oklab_lightness(c.rgb[static_cast<size_t>(255 - i)])).margin(0.02));
  CHECK(c.rgb.front().b > c.rgb.front().r + 60);
  CHECK(c.rgb.back().r > c.rgb.back().b + 60);
  CHECK(oklab_lightness(c.rgb.front()) < 0.5);
}

TEST_CASE("pooling copies a map that fits and partitions one that does not", "[viz][pooling]") {
  // 4×4 causal map: row i holds i+1 equal entries 1/(i+1).
  std::vector<float> m(16, 0.0f);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j) m[static_cast<size_t>(i * 4 + j)] = 1.0f / static_cast<float>(i + 1);
  const PooledMap same = pool_map(m.data(), 4, 4, 8, 8, Pooling::Mean, true);
  REQUIRE(same.rows == 4);
  CHECK(same.at(2, 1) == Approx(1.0 / 3));
  CHECK(std::isnan(same.at(0, 3)));  // the future is masked, not zero
  const PooledMap mx = pool_map(m.data(), 4, 4, 2, 2, Pooling::Max, true);
  REQUIRE(mx.rows == 2);
  CHECK(mx.at(0, 0) == 1.0f);             // rows 0-1, cols 0-1: max of 1, 1/2, 1/2
  CHECK(std::isnan(mx.at(0, 1)));         // rows 0-1, cols 2-3: all future
  CHECK(mx.at(1, 0) == Approx(1.0 / 3));  // rows 2-3, cols 0-1
  CHECK(mx.at(1, 1) == Approx(1.0 / 3));  // rows 2-3, cols 2-3 (causal: (2,2), (3,2), (3,3))
  const PooledMap mean = pool_map(m.data(), 4, 4, 2, 2, Pooling::Mean, true);
  CHECK(mean.at(0, 0) == Approx((1.0 + 0.5 + 0.5) / 3));  // (0,1) is future: not averaged in
  CHECK(mean.at(1, 1) == Approx((1.0 / 3 + 0.25 + 0.25) / 3));
}

TEST_CASE("max pooling keeps the sign of the largest magnitude", "[viz][pooling]") {
  const std::vector<float> m = {0.2f, -0.7f, 0.5f, 0.1f};
  const PooledMap p = pool_map(m.data(), 2, 2, 1, 1, Pooling::Max, false);
  CHECK(p.at(0, 0) == -0.7f);
  // Uneven partition: 5 rows into 2 cells covers rows {0,1} and {2,3,4}.
  std::vector<float> col = {1, 2, 3, 4, 5};
  const PooledMap q = pool_map(col.data(), 5, 1, 2, 1, Pooling::Mean, false);
  CHECK(q.at(0, 0) == 1.5f);
  CHECK(q.at(1, 0) == 4.0f);
}

TEST_CASE("value range from a percentile of causal magnitudes", "[viz][scale]") {
  std::vector<float> m(100);
  for (int i = 0; i < 100; ++i)
    m[static_cast<size_t>(i)] = static_cast<float>(i + 1) * (i % 2 ? -1.0f : 1.0f);
  CHECK(value_range({m.data()}, 10, 10, 100, true, false).hi == 100.0);
  CHECK(value_range({m.data()}, 10, 10, 90, true, false).hi == 90.0);
  m[1] = 1000.0f;  // row 0, key 1: in the future, so a causal range ignores it
  CHECK(value_range({m.data()}, 10, 10, 100, false, false).hi == 1000.0);
  CHECK(value_range({m.data()}, 10, 10, 100, false, true).hi == 100.0);
  const std::vector<float> zeros(4, 0.0f);
  CHECK(value_range({zeros.data()}, 2, 2, 99, false, false).hi == 1.0);
}

TEST_CASE("colormap coordinates for linear, sqrt, log and diverging scales", "[viz][scale]") {
  const ValueRange seq{0.5, false}, div{2.0, true};
  CHECK(colormap_coordinate(0.25, seq, ValueScale::Linear) == Approx(0.5));
  CHECK(colormap_coordinate(0.125, seq, ValueScale::Sqrt) == Approx(0.5));
  CHECK(colormap_coordinate(0.5e-2, seq, ValueScale::Log) == Approx(0.5));  // 2 of 4 decades below hi
  CHECK(colormap_coordinate(0.5e-6, seq, ValueScale::Log) == 0.0);
  CHECK(colormap_coordinate(9.0, seq, ValueScale::Linear) == 1.0);  // clamped
  CHECK(colormap_coordinate(0.0, div, ValueScale::Linear) == 0.5);
  CHECK(colormap_coordinate(-1.0, div, ValueScale::Linear) == Approx(0.25));
  CHECK(colormap_coordinate(2.0, div, ValueScale::Linear) == Approx(1.0));
  CHECK(std::isnan(colormap_coordinate(NAN, div, ValueScale::Linear)));
}

#include <fstream>

#include "helpers.h"
#include "viz/export.h"

TEST_CASE("NPY and CSV exports re-read to the same numbers", "[viz][export]") {
  difflens::test::ScratchDir dir("export");
  const std::vector<float> m = {0.125f, 0.0f, -0.333333343f, 1e-7f, 3.5f, 2.0f};
  write_npy(dir / "m.npy", m.data(), 2, 3);
  int64_t r = 0, c = 0;
  CHECK(read_npy(dir / "m.npy", &r, &c) == m);
  CHECK(r == 2);
  CHECK(c == 3);
  const std::string npy = difflens::test::read_all(dir / "m.npy");
  CHECK((npy.size() - m.size() * 4) % 64 == 0);  // data 64-byte aligned, as numpy writes it
  write_csv(dir / "m.csv", m.data(), 2, 3, {"<s>", "a,b"}, {"k0", "k\"1", "k2"});
  std::ifstream in(dir / "m.csv");
  std::string header, row0, row1;
  std::getline(in, header);
  std::getline(in, row0);
  std::getline(in, row1);
  CHECK(header == "query\\key,k0,\"k\"\"1\",k2");
  CHECK(row0 == "<s>,0.125,0,-0.333333343");
  CHECK(row1.rfind("\"a,b\",", 0) == 0);
  CHECK(std::stof(row1.substr(row1.find(',', 6) + 1)) == 3.5f);
  CHECK_THROWS_WITH(write_npy(dir / "no/such/dir/x.npy", m.data(), 2, 3), Catch::Contains("cannot write"));
  difflens::test::write_all(dir / "bad.npy", "not numpy");
  CHECK_THROWS_WITH(read_npy(dir / "bad.npy", &r, &c), Catch::Contains("not an NPY"));
}

TEST_CASE("pooling a zoomed region uses absolute indices for causality", "[viz][pooling]") {
  // 6×6 map with value 10·i + j in causal cells.
  std::vector<float> m(36, 0.0f);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j <= i; ++j) m[static_cast<size_t>(i * 6 + j)] = static_cast<float>(10 * i + j);
  // Rows 2..4, columns 1..3, shown exactly.
  const PooledMap p = pool_region(m.data(), 6, 6, {2, 1, 3, 3}, 100, 100, Pooling::Max, true);
  REQUIRE(p.rows == 3);
  REQUIRE(p.cols == 3);
  CHECK(p.at(0, 0) == 21.0f);     // (2, 1)
  CHECK(p.at(0, 1) == 22.0f);     // (2, 2): the diagonal
  CHECK(std::isnan(p.at(0, 2)));  // (2, 3): future
  CHECK(p.at(2, 2) == 43.0f);     // (4, 3)
  const PooledMap half = pool_region(m.data(), 6, 6, {2, 1, 3, 3}, 1, 1, Pooling::Mean, true);
  CHECK(half.at(0, 0) == Approx((21 + 22 + 31 + 32 + 33 + 41 + 42 + 43) / 8.0));
  CHECK(std::isnan(
      pool_region(m.data(), 6, 6, {5, 5, 3, 3}, 4, 4, Pooling::Max, true).at(0, 0)));  // outside: masked
}
