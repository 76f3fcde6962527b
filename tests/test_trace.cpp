// Trace statistics (log histogram, merging) and trace bundles (write → read round trip, bad bundles).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "core/formats/error.h"
#include "core/formats/safetensors.h"
#include "core/formats/trace_io.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;

TEST_CASE("log histogram bins, totals and quantiles", "[trace][stats]") {
  LogHistogram h;
  h.add(0.0f);   // below 1e-8
  h.add(-1.0f);  // |−1| = 1 → bin of log10 1 = 0 → index 8·64
  h.add(1e9f);   // above 1e8
  h.add(NAN);    // counted below, never crashes
  CHECK(h.below == 2);
  CHECK(h.above == 1);
  CHECK(h.counts[8 * 64] == 1);
  CHECK(h.total() == 4);
  CHECK(LogHistogram::bin_lower(8 * 64) == Approx(1.0));
  LogHistogram u;
  for (int i = 1; i <= 1000; ++i) u.add(static_cast<float>(i));
  CHECK(u.quantile(0.5) == Approx(500.0).epsilon(0.04));  // within one bin (3.7 %)
  CHECK(u.quantile(0.99) == Approx(990.0).epsilon(0.04));
  CHECK(LogHistogram().quantile(0.5) == 0.0);
}

TEST_CASE("merging value statistics keeps exact top-k and mean", "[trace][stats]") {
  ValueStats a, b;
  a.count = 3;
  a.top = {9, 5, 1};
  a.mean = 5;
  a.median = 5;
  b.count = 1;
  b.top = {7};
  b.mean = 7;
  b.median = 7;
  for (float v : {9.0f, 5.0f, 1.0f}) a.histogram.add(v);
  b.histogram.add(7.0f);
  ValueStats pooled;
  pooled.merge(a);
  CHECK(pooled.median == 5.0f);  // a single pool keeps its exact median
  pooled.merge(b);
  CHECK(pooled.count == 4);
  CHECK(pooled.top == std::vector<float>{9, 7, 5, 1});
  CHECK(pooled.mean == Approx(5.5));
  CHECK(pooled.top_k(2) == 7.0f);
  CHECK(pooled.top_k(100) == 0.0f);
  CHECK(pooled.median == Approx(5.0).epsilon(0.04));  // histogram estimate of the lower median
}

TEST_CASE("per-layer statistics are exact: top-k, median, mean against the kept values", "[trace][stats]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Baseline, 32, 1, 2, 2);
  const Model m = Model::random(c, 70);
  CaptureOptions opt;
  opt.keep_hidden = true;
  const Trace t = m.capture(test::random_ids(9, c.vocab_size, 11), opt);
  std::vector<float> v;
  for (float x : t.layers[0].hidden.data) v.push_back(std::fabs(x));
  std::sort(v.begin(), v.end(), std::greater<float>());
  const ValueStats& s = t.layers[0].hidden_stats;
  REQUIRE(s.count == v.size());
  CHECK(s.top_k(1) == v[0]);
  CHECK(s.top_k(3) == v[2]);
  CHECK(s.top_k(100) == v[99]);
  CHECK(s.median == v[v.size() - (v.size() + 1) / 2]);  // lower median of 288 values
  double mean = 0;
  for (float x : v) mean += x;
  CHECK(s.mean == Approx(mean / v.size()).epsilon(1e-5));
  CHECK(s.histogram.total() == s.count);
}

TEST_CASE("trace bundle round trip keeps tokens, maps, lambda and statistics", "[trace][bundle]") {
  test::ScratchDir dir("bundle");
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2);
  const Model m = Model::random(c, 71);
  CaptureOptions opt;
  opt.keep_logits = true;
  opt.keep_hidden = true;
  opt.layers = {1};
  const Trace t = m.capture(m.tokenizer().encode("abc \xff", true).ids, opt);
  write_trace_bundle(t, dir.path());
  const SafetensorsFile maps(dir / "maps.safetensors");
  CHECK(maps.at("layers.1.A1").shape == std::vector<int64_t>{2, 6, 6});
  CHECK(maps.find("layers.0.A") == nullptr);
  const Trace r = read_trace_bundle(dir.path());
  CHECK(r.token_ids == t.token_ids);
  CHECK(r.tokens == t.tokens);
  CHECK(r.tokens[5] == "<0xFF>");
  CHECK(r.config.attention == AttentionKind::Diff);
  REQUIRE(r.layers.size() == 2);
  CHECK(r.layers[0].a.empty());
  CHECK(r.layers[1].a.data == t.layers[1].a.data);
  CHECK(r.layers[1].a1.data == t.layers[1].a1.data);
  CHECK(r.layers[1].a2.data == t.layers[1].a2.data);
  CHECK(r.layers[1].logits2.data.size() == t.layers[1].logits2.data.size());
  CHECK(r.layers[0].hidden.data == t.layers[0].hidden.data);
  CHECK(r.layers[0].lambda == t.layers[0].lambda);
  CHECK(r.layers[1].lambda_exp2 == t.layers[1].lambda_exp2);
  CHECK(r.layers[1].logit_stats.top == t.layers[1].logit_stats.top);
  CHECK(r.layers[1].logit_stats.histogram.counts == t.layers[1].logit_stats.histogram.counts);
  CHECK(r.layers[0].hidden_stats.median == t.layers[0].hidden_stats.median);
  REQUIRE(r.next_token.size() == t.next_token.size());
  CHECK(r.next_token[0].id == t.next_token[0].id);
  CHECK(r.next_token[0].probability == t.next_token[0].probability);
}

TEST_CASE("broken trace bundles are rejected with a message", "[trace][bundle][errors]") {
  test::ScratchDir dir("badbundle");
  const Model m = Model::random(test::tiny_config(AttentionKind::Diff, 32, 1, 2, 2), 72);
  write_trace_bundle(m.capture({1, 5, 6}), dir.path());
  CHECK_THROWS_WITH(read_trace_bundle(dir / "nothing"), Catch::Contains("is this a trace bundle directory"));
  const std::string json = test::read_all(dir / "trace.json");
  SECTION("maps missing") {
    std::filesystem::remove(dir / "maps.safetensors");
    CHECK_THROWS_WITH(read_trace_bundle(dir.path()), Catch::Contains("maps.safetensors: cannot open"));
  }
  SECTION("maps of the wrong shape") {
    const std::vector<float> z(2 * 4 * 4, 0.0f);
    write_safetensors(dir / "maps.safetensors", {{"layers.0.A", {2, 4, 4}, z.data()}});
    CHECK_THROWS_WITH(read_trace_bundle(dir.path()),
                      Catch::Contains("'layers.0.A' is [2,4,4], trace.json implies [2,3,3]"));
  }
  SECTION("truncated trace.json") {
    test::write_all(dir / "trace.json", json.substr(0, json.size() / 2));
    CHECK_THROWS_WITH(read_trace_bundle(dir.path()), Catch::Contains("not valid JSON"));
  }
  SECTION("a field missing") {
    test::write_all(dir / "trace.json", R"({"format":"difflens-trace","version":1})");
    CHECK_THROWS_WITH(read_trace_bundle(dir.path()), Catch::Contains("missing or mistyped field"));
  }
  SECTION("maps larger than the memory available") {
    // A sparse maps.safetensors whose one tensor declares 2^38 floats (1 TB, valid offsets): refused from
    // its header, before any of it is copied.
    const uint64_t bytes = uint64_t{1} << 40;
    const std::string header = R"({"layers.0.A":{"dtype":"F32","shape":[262144,1048576],"data_offsets":[0,)" +
                               std::to_string(bytes) + "]}}";
    std::string head(8, '\0');
    for (int i = 0; i < 8; ++i)
      head[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    test::write_all(dir / "maps.safetensors", head + header);
    std::filesystem::resize_file(dir / "maps.safetensors", 8 + header.size() + bytes);
    CHECK_THROWS_WITH(read_trace_bundle(dir.path()),
                      Catch::Contains("the bundle's maps need 1.1 TB of memory as F32 and only") &&
                          Catch::Contains("is available"));
  }
}

TEST_CASE("a trace's byte counts include every buffer it keeps, the values and output-norm weights too",
          "[trace]") {
  Trace t;
  t.token_ids = {1, 2, 3};
  t.layers.resize(2);
  const size_t before = t.byte_size();
  // The Explain view's inputs (CaptureOptions::keep_qkv): values [kv heads, T, dv] and the norm's weight.
  t.layers[0].v.data.assign(2 * 3 * 8, 0.5f);
  t.layers[1].v.data.assign(2 * 3 * 8, 0.5f);
  t.layers[0].subln_weight.data.assign(8, 1.0f);
  const size_t added = (2 * 2 * 3 * 8 + 8) * sizeof(float);
  CHECK(t.byte_size() == before + added);
  CHECK(t.kept_bytes().values == added);
  // Every buffer a layer lists counts once: filling all of them adds exactly their bytes.
  const size_t with_values = t.byte_size();
  LayerTrace& l = t.layers[1];
  size_t extra = 0;
  for (const FloatArray* a : l.arrays())
    if (a->empty()) {
      const_cast<FloatArray*>(a)->data.assign(5, 0.0f);
      extra += 5 * sizeof(float);
    }
  CHECK(l.arrays().size() == 22);
  CHECK(t.byte_size() == with_values + extra);
  const Trace::KeptBytes k = t.kept_bytes();
  CHECK(k.pooled_maps == 6 * 5 * sizeof(float));
  CHECK(k.tile_inputs == 8 * 5 * sizeof(float));
}

TEST_CASE("a trace says where it holds values that are not finite", "[trace][hostile]") {
  const Model m = Model::random(test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2), 3);
  Trace t = m.capture(test::random_ids(12, 259, 2));
  CHECK(t.nonfinite_summary().empty());  // a model's own run: every value finite
  t.layers[1].a.data[5] = std::numeric_limits<float>::quiet_NaN();
  t.layers[1].a1.data[7] = std::numeric_limits<float>::infinity();
  t.next_token[0].probability = std::numeric_limits<float>::quiet_NaN();
  const std::string s = t.nonfinite_summary();
  CHECK_THAT(s, Catch::Contains("layer 1: 2 NaN or inf values") && Catch::Contains("the predictions: 1") &&
                    !Catch::Contains("layer 0"));
  // A pooled capture's grids hold NaN where a cell has no causal entry (the future): by design, not counted;
  // an infinity there is.
  CaptureOptions o;
  o.pooled_budget_bytes = 4096;  // 12 kept maps x mean and max: 9 x 9 cells of 60 tokens
  Trace p = m.capture(test::random_ids(60, 259, 3), o);
  REQUIRE(p.layers[0].pooled > 1);
  REQUIRE(p.layers[0].pooled < 60);
  size_t nan = 0;
  for (float v : p.layers[0].a_mean.data) nan += std::isnan(v);
  REQUIRE(nan > 0);
  CHECK(p.nonfinite_summary().empty());
  p.layers[0].a_max.data[0] = std::numeric_limits<float>::infinity();
  CHECK_THAT(p.nonfinite_summary(), Catch::Contains("layer 0: 1 NaN or inf values"));
  // Kept attention logits are -inf where the mask is (`capture --keep-logits` warned of 2,808 "NaN or inf"
  // values a layer on a 27-token prompt: the future): not counted; -inf on a causal entry is, as NaN
  // anywhere.
  CaptureOptions keep;
  keep.keep_logits = true;
  Trace g = m.capture(test::random_ids(12, 259, 4), keep);
  FloatArray& logits = g.layers[0].logits1;
  REQUIRE(logits.shape == std::vector<int64_t>{logits.shape[0], 12, 12});
  REQUIRE(std::isinf(logits.data[1]));  // row 0, key 1: the future
  CHECK(g.nonfinite_summary().empty());
  logits.data[12 + 1] = -std::numeric_limits<float>::infinity();  // row 1, key 1: causal
  logits.data[2] = std::numeric_limits<float>::quiet_NaN();       // row 0, key 2: masked, but NaN
  CHECK_THAT(g.nonfinite_summary(), Catch::Contains("layer 0: 2 NaN or inf values"));
}
