// viz logic without GL: colormaps are perceptually ordered, pooling is exact, scales map values right.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "viz/colormap.h"
#include "viz/map_view.h"
#include "viz/text_shade.h"

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

TEST_CASE("diverging colormap: near-white at zero, symmetric lightness, red below and blue above",
          "[viz][colormap]") {
  const Colormap& c = diverging_colormap();
  CHECK(oklab_lightness(c.at(0.5)) > 0.93);
  for (int i = 0; i < 128; ++i)
    CHECK(oklab_lightness(c.rgb[static_cast<size_t>(i)]) ==
          Approx(oklab_lightness(c.rgb[static_cast<size_t>(255 - i)])).margin(0.02));
  CHECK(c.rgb.front().r > c.rgb.front().b + 60);
  CHECK(c.rgb.back().b > c.rgb.back().r + 60);
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
  // A missing folder is made (as every output folder is); a file where the folder should be cannot be.
  CHECK_NOTHROW(write_npy(dir / "no/such/dir/x.npy", m.data(), 2, 3));
  CHECK(std::filesystem::exists(dir / "no/such/dir/x.npy"));
  difflens::test::write_all(dir / "afile", "x");
  CHECK_THROWS_WITH(write_npy(dir / "afile/x.npy", m.data(), 2, 3), Catch::Contains("cannot write"));
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

// Token labels: hand-written pieces for every rule of viz/token_text.h, compared as exact strings.
#include <algorithm>

#include "viz/figure.h"
#include "viz/scene.h"
#include "viz/token_text.h"

namespace {
using Labels = std::vector<std::string>;
const std::string kMarker = "\xe2\x96\x81";      // ▁ U+2581
const std::string kShownSpace = "\xe2\x90\xa3";  // ␣ U+2423
const std::string kContinues = "\xc2\xb7";       // · U+00B7
const std::string kEmDash = "\xe2\x80\x94";      // — U+2014
}  // namespace

TEST_CASE("token labels: the word marker is a space, or a visible mark when the label is only spaces",
          "[viz][tokens]") {
  CHECK(display_token(kMarker + "The") == " The");
  CHECK(display_token(kMarker + kMarker + "x") == "  x");  // one space per marker
  CHECK(display_token("a" + kMarker + "b" + kMarker) == "a b ");
  CHECK(display_token("co") == "co");
  CHECK(display_token(kMarker) == " ");
  CHECK(display_token(kMarker, Spaces::Visible) == kShownSpace);
  CHECK(display_token(kMarker + kMarker, Spaces::Visible) == kShownSpace + kShownSpace);
  CHECK(display_token(" ", Spaces::Visible) == kShownSpace);         // a space piece (bytes tokenizer)
  CHECK(display_token(kMarker + "The", Spaces::Visible) == " The");  // other text: plain spaces
  CHECK(display_token("", Spaces::Visible).empty());
  CHECK(display_tokens({kMarker + "The", kMarker + "secret", "co", "de"}) ==
        Labels{" The", " secret", "co", "de"});
}

TEST_CASE("token labels: a byte-fallback run is decoded character by character", "[viz][tokens]") {
  // The em dash E2 80 94 over three pieces: the character on the first, continuation marks after it.
  CHECK(display_tokens({kMarker + "a", "<0xE2>", "<0x80>", "<0x94>", kMarker + "b"}) ==
        Labels{" a", kEmDash, kContinues, kContinues, " b"});
  // Two characters in one run (é è), and a 4-byte one (U+1F600) on lower-case hex digits.
  CHECK(display_tokens({"<0xC3>", "<0xA9>", "<0xC3>", "<0xA8>"}) ==
        Labels{"\xc3\xa9", kContinues, "\xc3\xa8", kContinues});
  CHECK(display_tokens({"<0xf0>", "<0x9f>", "<0x98>", "<0x80>"}) ==
        Labels{"\xf0\x9f\x98\x80", kContinues, kContinues, kContinues});
  // ASCII bytes: printable as themselves, a space like the word marker, controls by name.
  CHECK(display_tokens({"<0x41>", "<0x20>", "<0x0A>", "<0x09>", "<0x0D>", "<0x1B>", "<0x00>", "<0x7F>"}) ==
        Labels{"A", " ", "\xe2\x86\xb5", "\xe2\x87\xa5", "\\r", "\\x1B", "\\x00", "\\x7F"});
  CHECK(display_token("<0x0A>") == "\xe2\x86\xb5");  // ↵
  CHECK(display_token("<0x20>", Spaces::Visible) == kShownSpace);
  // Control characters spelled inside a piece get the same names.
  CHECK(display_token("a\nz\t") == "a\xe2\x86\xb5z\xe2\x87\xa5");
}

TEST_CASE("token labels: bytes that are not valid UTF-8 stay <0xNN>", "[viz][tokens]") {
  CHECK(display_token("<0xE2>") == "<0xE2>");  // a lone lead byte
  CHECK(display_tokens({"<0xE2>", "<0x80>", "<0x41>"}) == Labels{"<0xE2>", "<0x80>", "A"});  // cut short
  CHECK(display_tokens({"<0xE2>", "x", "<0x80>", "<0x94>"}) ==
        Labels{"<0xE2>", "x", "<0x80>", "<0x94>"});  // a piece between the bytes ends the run
  CHECK(display_tokens({"<0xC0>", "<0xAF>"}) == Labels{"<0xC0>", "<0xAF>"});  // overlong '/'
  CHECK(display_tokens({"<0xED>", "<0xA0>", "<0x80>"}) == Labels{"<0xED>", "<0xA0>", "<0x80>"});  // surrogate
  CHECK(display_tokens({"<0xF4>", "<0x90>", "<0x80>", "<0x80>"}) ==
        Labels{"<0xF4>", "<0x90>", "<0x80>", "<0x80>"});  // above U+10FFFF
  CHECK(display_token("<0xFF>") == "<0xFF>");
  // A stray continuation byte before a good character: only the stray byte stays raw.
  CHECK(display_tokens({"<0x80>", "<0xC3>", "<0xA9>"}) == Labels{"<0x80>", "\xc3\xa9", kContinues});
}

TEST_CASE("token labels: specials, look-alikes and broken UTF-8 pass through unchanged", "[viz][tokens]") {
  for (const std::string p : {"<s>", "</s>", "<unk>", "<|begin_of_text|>", "<|eot_id|>", "<0x4>", "<0xZZ>",
                              "<0x41", "0x41>", "<0X41>", "<0x411>", "\xc3", "\xffxyz"})
    CHECK(display_token(p) == p);
  CHECK(display_token("\xff" + kMarker) == "\xff ");                   // the marker still becomes a space
  CHECK(display_token(kMarker.substr(0, 2)) == kMarker.substr(0, 2));  // half a marker is not one
}

TEST_CASE("token labels: one label per piece, index for index", "[viz][tokens]") {
  CHECK(display_tokens({}).empty());
  const Labels pieces = {"<s>",    kMarker + "The", kMarker + "secret", "co",     "de",     kMarker, "<0xE2>",
                         "<0x80>", "<0x94>",        "<0x0A>",           "<0xC3>", "<0xFF>", "\xff",  "</s>"};
  const Labels labels = display_tokens(pieces);
  REQUIRE(labels.size() == pieces.size());
  CHECK(labels == Labels{"<s>", " The", " secret", "co", "de", " ", kEmDash, kContinues, kContinues,
                         "\xe2\x86\xb5", "<0xC3>", "<0xFF>", "\xff", "</s>"});
  CHECK(display_tokens(pieces, Spaces::Visible)[5] == kShownSpace);
  // A piece outside a byte run is labelled as it would be alone.
  for (size_t i : {0, 1, 2, 3, 4, 5, 12, 13}) CHECK(labels[i] == display_token(pieces[i]));
}

TEST_CASE("a head figure labels its axes with display labels and keeps the raw pieces",
          "[viz][tokens][figure]") {
  INFO("DejaVuSans.ttf not found: install fonts-dejavu-core");
  REQUIRE_FALSE(find_system_font().empty());
  const FigureFont& font = FigureFont::standard();
  HeadFigure fig;
  fig.tokens = {"<s>", kMarker + "The", kMarker, "<0xE2>", "<0x80>", "<0x94>", "<0x0A>"};
  const Labels raw = fig.tokens;
  const int64_t T = static_cast<int64_t>(fig.tokens.size());
  std::vector<float> a(static_cast<size_t>(T * T), 0.5f);
  fig.panels = {{"A", a.data(), {}}};
  fig.panel_size = 256;
  const FigureScene sc = layout_head_figure(fig, font);
  CHECK(fig.tokens == raw);
  // Each label once down the left (horizontal) and once under the map (vertical).
  for (const std::string& label : {std::string("<s>"), std::string(" The"), kShownSpace, kEmDash, kContinues,
                                   std::string("\xe2\x86\xb5")}) {
    INFO(label);
    const auto n = std::count_if(sc.texts.begin(), sc.texts.end(),
                                 [&](const FigureScene::Text& t) { return t.text == label; });
    CHECK(n == (label == kContinues ? 4 : 2));
  }
  for (const auto& t : sc.texts) {
    CHECK(t.text.find(kMarker) == std::string::npos);
    CHECK(t.text.find("<0x") == std::string::npos);
  }
  const std::string svg = head_figure_svg(fig, font);
  CHECK(svg.find("&lt;s&gt;</text>") != std::string::npos);  // still escaped for XML
  CHECK(svg.find("> The</text>") != std::string::npos);
  CHECK(svg.find(">" + kEmDash + "</text>") != std::string::npos);
  CHECK(svg.find(kMarker) == std::string::npos);
}

TEST_CASE("text shading: white at 0, blue for positive weights, red for negative ones, readable ink",
          "[viz][text]") {
  using namespace difflens::viz;
  ValueRange diverging{0.5, true}, sequential{0.5, false};
  const TextShade zero = text_shade(0.0, diverging, ValueScale::Linear);
  CHECK((zero.background.r == 255 && zero.background.g == 255 && zero.background.b == 255));
  CHECK(zero.ink.r == 20);  // dark text on white
  const TextShade top = text_shade(0.5, diverging, ValueScale::Linear);
  CHECK((top.background.r == kTextPositive.r && top.background.g == kTextPositive.g &&
         top.background.b == kTextPositive.b));
  CHECK(top.ink.r == 255);  // white text on the full blue
  const TextShade neg = text_shade(-0.5, diverging, ValueScale::Linear);
  CHECK((neg.background.r == kTextNegative.r && neg.background.b == kTextNegative.b));
  // Half the range, linear: step round(0.5 * 255) = 128, halfway from white to the colour.
  CHECK(text_shade_index(0.25, diverging, ValueScale::Linear) == 128);
  CHECK(text_shade(0.25, diverging, ValueScale::Linear).background.r == 152);  // 255 + (50 - 255) * 128/255
  // sqrt: a quarter of the range is halfway.
  CHECK(text_shade_index(0.125, diverging, ValueScale::Sqrt) == 128);
  // Beyond the range: the full colour; a sequential range shows negative weights as nothing; NaN: white.
  CHECK(text_shade_index(7.0, diverging, ValueScale::Linear) == kTextShadeSteps - 1);
  CHECK(text_shade_index(-0.5, sequential, ValueScale::Linear) == 0);
  CHECK(text_shade_index(std::nan(""), diverging, ValueScale::Linear) == 0);
  // Lightness falls monotonically with the step on both sides (darker = more weight).
  for (bool negative : {false, true})
    for (int k = 1; k < kTextShadeSteps; ++k)
      CHECK(oklab_lightness(text_shade_step(k, negative).background) <
            oklab_lightness(text_shade_step(k - 1, negative).background) + 1e-9);
}

TEST_CASE("one sign convention: the maps' colormap, the Text view's shades and Figure 1's bars agree",
          "[viz][colormap]") {
  // Blue above zero, red below (core/FORMATS.md, "Colours"): the colormap's ends, the text shades at full
  // weight and the two constants Figure 1's bars are drawn with.
  const auto blue = [](Rgb8 c) { return c.b > c.r + 60; };
  const auto red = [](Rgb8 c) { return c.r > c.b + 60; };
  const Colormap& map = diverging_colormap();
  CHECK(blue(map.at(1.0)));
  CHECK(blue(map.at(0.8)));
  CHECK(red(map.at(0.0)));
  CHECK(red(map.at(0.2)));
  CHECK(blue(text_shade_step(kTextShadeSteps - 1, false).background));
  CHECK(red(text_shade_step(kTextShadeSteps - 1, true).background));
  CHECK(blue(kTextPositive));
  CHECK(red(kTextNegative));
  // Zero is white in both.
  const Rgb8 zero = map.at(0.5), blank = text_shade_step(0, false).background;
  CHECK(std::min({zero.r, zero.g, zero.b}) > 230);
  CHECK(std::min({blank.r, blank.g, blank.b}) > 230);
}

TEST_CASE("model identity colours are never the sign scale's blue or red, nor the answer's or the query's",
          "[viz][colormap]") {
  const auto distance = [](double a, double b) {
    const double d = std::fabs(a - b);
    return std::min(d, 360 - d);
  };
  const double sign_plus = oklab_hue_degrees(diverging_colormap().at(1.0)),
               sign_minus = oklab_hue_degrees(diverging_colormap().at(0.0)),
               answer = oklab_hue_degrees(Rgb8{20, 160, 60}), query = oklab_hue_degrees(Rgb8{240, 130, 0});
  for (size_t i = 0; i < 4; ++i)
    for (bool light : {false, true}) {
      const Rgb8 c = model_colour(i, light);
      INFO("model colour " << i << (light ? " (light)" : "") << ": hue " << oklab_hue_degrees(c)
                           << ", chroma " << oklab_chroma(c));
      if (oklab_chroma(c) < 0.03) continue;  // a grey has no hue to confuse
      for (double h : {sign_plus, sign_minus, answer, query}) CHECK(distance(oklab_hue_degrees(c), h) >= 35);
    }
  // Four different colours, each side of the light switch (a sanitizer build once returned the first for
  // all).
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = 0; j < i; ++j) {
      CHECK(oklab_lightness(model_colour(i)) != oklab_lightness(model_colour(j)));
      CHECK(oklab_lightness(model_colour(i, true)) != oklab_lightness(model_colour(j, true)));
    }
}

TEST_CASE("scene text faults: texts over each other and past the edge are counted, neighbours are not",
          "[viz][layout]") {
  const FigureFont& font = FigureFont::standard();
  FigureScene s;
  s.width = 400;
  s.height = 200;
  auto text = [&](int x, int y, const std::string& t) {
    FigureScene::Text tx;
    tx.x = x;
    tx.y = y;
    tx.text = t;
    tx.px = 20;
    s.texts.push_back(tx);
  };
  text(10, 10, "0.104");
  text(10 + font.text_width("0.104", 20), 10, "next");  // touching on the right: apart
  text(10, 30, "below");                                // the next line down: apart
  CHECK(scene_text_faults(s, font).clean());
  text(14, 14, "-0.104");  // over "0.104" (and "next"'s start)
  SceneTextFaults f = scene_text_faults(s, font);
  CHECK(f.overlaps >= 1);
  CHECK(f.outside == 0);
  REQUIRE(!f.examples.empty());
  CHECK_THAT(f.examples[0], Catch::Contains("-0.104"));
  s.texts.pop_back();
  text(390, 100, "cut at the right edge");
  f = scene_text_faults(s, font);
  CHECK(f.overlaps == 0);
  CHECK(f.outside == 1);
  CHECK_THAT(f.examples[0], Catch::Contains("past the edge"));
}
