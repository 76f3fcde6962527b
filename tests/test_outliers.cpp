// Outliers over a text: windows cover the text exactly, pooled statistics equal those of the captures
// they pool, the report writes the paper's Table 5 layout, and bad input is refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "app/reports/outlier_report.h"
#include "core/formats/error.h"
#include "core/model/model.h"
#include "core/model/outliers.h"
#include "helpers.h"
#include "viz/figure.h"

using namespace difflens;

TEST_CASE("outliers: windows cover the text and pooled stats equal the captures'", "[outliers][lab]") {
  const Model m = Model::random(test::tiny_config(AttentionKind::Diff), 3);
  const std::string text(250, 'x');  // bytes tokenizer: 250 tokens
  int64_t calls = 0;
  const OutlierStats s = measure_outliers(m, text, 100, 0, [&](int64_t done, int64_t total) {
    ++calls;
    CHECK(total == 3);  // 99 text tokens per window (BOS first): 99 + 99 + 52
    CHECK(done == calls);
  });
  CHECK(s.windows == 3);
  CHECK(s.tokens == 250 + 3);
  REQUIRE(s.logits_per_layer.size() == 2);
  // One window only: identical to a capture of BOS + the text.
  const std::string shorter(60, 'y');
  const OutlierStats one = measure_outliers(m, shorter, 100, 0);
  std::vector<int64_t> ids = m.tokenizer().encode(shorter, true).ids;
  const Trace t = m.capture(ids, CaptureOptions{false});
  for (size_t l = 0; l < 2; ++l) {
    CHECK(one.logits_per_layer[l].top == t.layers[l].logit_stats.top);
    CHECK(one.hidden_per_layer[l].median == t.layers[l].hidden_stats.median);
  }
  // Pooled over layers: exact top-k of the union.
  std::vector<float> all = t.layers[0].logit_stats.top;
  all.insert(all.end(), t.layers[1].logit_stats.top.begin(), t.layers[1].logit_stats.top.end());
  std::sort(all.begin(), all.end(), std::greater<float>());
  CHECK(one.logits.top_k(1) == all[0]);
  CHECK(one.logits.top_k(10) == all[9]);
  CHECK(one.logits.count == t.layers[0].logit_stats.count + t.layers[1].logit_stats.count);
  // BOS starts every window with the same state: only the first window counts it. Three windows of 100
  // (BOS + 99) count 253 - 2 hidden positions per layer; logits lose BOS's one causal entry per head and
  // component in windows 2 and 3.
  const int64_t E = m.config().hidden_size, H = m.config().map_heads();
  CHECK(s.hidden_per_layer[0].count == (253 - 2) * E);
  int64_t causal = 0;
  for (int64_t T : {100, 100, 53}) causal += T * (T + 1) / 2;
  CHECK(s.logits_per_layer[0].count == (causal - 2) * H * 2);  // DIFF: two components
  // --max-windows stops early.
  CHECK(measure_outliers(m, text, 100, 2).windows == 2);
  CHECK_THROWS_WITH(measure_outliers(m, "", 100, 0), Catch::Contains("the text is empty"));
  CHECK_THROWS_WITH(measure_outliers(m, text, 1, 0), Catch::Contains("at least 2 tokens"));
}

TEST_CASE("outliers: the report writes Table 5, CSV, JSON and histograms", "[outliers][lab][export]") {
  test::ScratchDir dir("outlierreport");
  const Model m = Model::random(test::tiny_config(AttentionKind::Baseline), 4);
  const OutlierStats s = measure_outliers(m, std::string(120, 'z'), 64, 0);
  const std::string md = app::write_outlier_report(dir / "o", {"base"}, {s});
  char want[64];
  std::snprintf(want, sizeof want, "| attention logits | base | %.2f |", s.logits.top_k(1));
  CHECK(md.find(want) != std::string::npos);
  CHECK(md.find("| hidden states | base |") != std::string::npos);
  const std::string csv = test::read_all(dir / "o/outliers.csv");
  CHECK(csv.find("\"base\",attention_logits,all,") != std::string::npos);
  CHECK(csv.find("\"base\",hidden_states,1,") != std::string::npos);
  for (const char* f : {"tables.md", "outliers.json", "logits.png", "hidden.png", "logits.svg", "hidden.svg"})
    CHECK(std::filesystem::file_size(dir / "o" / f) > 100);
  // The figures carry their readout: each model's top-k and median as tables.md has them, and the paper's.
  char top[64];
  std::snprintf(top, sizeof top, "base: top-1 %.3g, top-2", s.logits.top_k(1));
  CHECK_THAT(test::read_all(dir / "o/logits.svg"),
             Catch::Contains(top) && Catch::Contains("Table 5, 3B models"));
  std::snprintf(top, sizeof top, "base: top-1 %.3g, top-2", s.hidden.top_k(1));
  CHECK_THAT(test::read_all(dir / "o/hidden.svg"), Catch::Contains(top));
}

TEST_CASE("histogram figure: series drawn in their colours, empty input refused", "[viz][figure]") {
  viz::HistogramFigure h;
  h.x0 = -2;
  h.bin_width = 0.5;
  h.series = {{"a", {200, 0, 0}, {0, 5, 50, 500, 0, 0, 0, 0}}, {"b", {0, 0, 200}, {0, 0, 0, 0, 7, 70, 0, 0}}};
  h.width = 600;
  h.height = 300;
  const viz::Image img = viz::render_histogram_figure(h);
  CHECK(img.width == 600);
  CHECK(img.height == 300);
  int red = 0, blue = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      const viz::Rgb8 c = img.at(x, y);
      red += c.r == 200 && c.g == 0 && c.b == 0;
      blue += c.r == 0 && c.g == 0 && c.b == 200;
    }
  CHECK(red > 100);
  CHECK(blue > 100);
  // The SVG is the same scene: a rectangle for each of the scene's (grid, axes, steps, swatches) in its
  // colour, each label as text.
  const viz::FigureScene sc = viz::layout_histogram_figure(h, viz::FigureFont::standard());
  const std::string svg = viz::histogram_figure_svg(h);
  size_t rects = 0, reds = 0, texts = 0;
  for (size_t at = 0; (at = svg.find("<rect x=", at)) != std::string::npos; ++at) ++rects;
  for (size_t at = 0; (at = svg.find("fill=\"#c80000\"", at)) != std::string::npos; ++at) ++reds;
  for (size_t at = 0; (at = svg.find("<text ", at)) != std::string::npos; ++at) ++texts;
  CHECK(rects == sc.rects.size());
  CHECK(texts == sc.texts.size());
  CHECK(reds == static_cast<size_t>(
                    std::count_if(sc.rects.begin(), sc.rects.end(), [](const viz::FigureScene::Rect& r) {
                      return r.color.r == 200 && r.color.g == 0 && r.color.b == 0;
                    })));
  CHECK(reds > 4);
  CHECK(svg.find(">a</text>") != std::string::npos);
  CHECK(svg.find(">1e+0</text>") != std::string::npos);
  // The count axis: 1, 10, 100 (log scale, said so); no "0" under the 1.
  for (const char* label : {">1</text>", ">10</text>", ">100</text>", ">count (log scale)</text>"})
    CHECK(svg.find(label) != std::string::npos);
  CHECK(svg.find(">0</text>") == std::string::npos);
  h.series[0].counts.assign(8, 0);
  h.series[1].counts.assign(8, 0);
  CHECK_THROWS_WITH(viz::render_histogram_figure(h), Catch::Contains("every series is empty"));
  h.series[1].counts.resize(3);
  CHECK_THROWS_WITH(viz::render_histogram_figure(h), Catch::Contains("different bin counts"));
}

TEST_CASE("capture: statistics can start after the first positions, maps stay whole", "[outliers][capture]") {
  const Model m = Model::random(test::tiny_config(AttentionKind::Baseline), 4);
  const std::vector<int64_t> ids = test::random_ids(12, 259, 2);
  CaptureOptions all, later;
  all.keep_hidden = true;
  all.keep_logits = true;
  later.stats_from = 3;
  later.keep_hidden = true;
  const Trace a = m.capture(ids, all), b = m.capture(ids, later);
  const int64_t T = 12, E = m.config().hidden_size, H = m.config().map_heads();
  for (size_t l = 0; l < a.layers.size(); ++l) {
    CHECK(a.layers[l].hidden_stats.count == T * E);
    CHECK(b.layers[l].hidden_stats.count == (T - 3) * E);
    CHECK(b.layers[l].logit_stats.count == (T * (T + 1) / 2 - 6) * H);  // rows 0..2 hold 1 + 2 + 3 entries
    CHECK(b.layers[l].a.data == a.layers[l].a.data);
    // The largest |hidden| from position 3 on, by hand.
    float top = 0, top_all = 0;
    for (int64_t i = 0; i < T * E; ++i) {
      top_all = std::max(top_all, std::fabs(a.layers[l].hidden.data[static_cast<size_t>(i)]));
      if (i >= 3 * E) top = std::max(top, std::fabs(a.layers[l].hidden.data[static_cast<size_t>(i)]));
    }
    CHECK(b.layers[l].hidden_stats.top[0] == top);
    CHECK(a.layers[l].hidden_stats.top[0] == top_all);
    // ... and of |logits| over causal entries of rows >= 3.
    float ltop = 0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t q = 3; q < T; ++q)
        for (int64_t k = 0; k <= q; ++k)
          ltop =
              std::max(ltop, std::fabs(a.layers[l].logits1.data[static_cast<size_t>((h * T + q) * T + k)]));
    CHECK(b.layers[l].logit_stats.top[0] == ltop);
  }
  later.stats_from = 12;
  CHECK_THROWS_WITH(m.capture(ids, later),
                    Catch::Contains("statistics from position 12 of a 12-token prompt"));
}
