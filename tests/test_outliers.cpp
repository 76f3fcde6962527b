// Outliers over a text: windows cover the text exactly, pooled statistics equal those of the captures
// they pool, the report writes the paper's Table 5 layout, and bad input is refused.
#include <catch2/catch.hpp>

#include "app/outlier_report.h"
#include "core/error.h"
#include "core/model.h"
#include "core/outliers.h"
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
  for (const char* f : {"tables.md", "outliers.json", "logits.png", "hidden.png"})
    CHECK(std::filesystem::file_size(dir / "o" / f) > 100);
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
  h.series[0].counts.assign(8, 0);
  h.series[1].counts.assign(8, 0);
  CHECK_THROWS_WITH(viz::render_histogram_figure(h), Catch::Contains("every series is empty"));
  h.series[1].counts.resize(3);
  CHECK_THROWS_WITH(viz::render_histogram_figure(h), Catch::Contains("different bin counts"));
}
