// Invariants of full captures on seeded random models: row sums, causality, λ, parameter matching,
// capture options, cancellation and bad input.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/formats/error.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;

namespace {

double row_sum(const FloatArray& a, int64_t h, int64_t i) {
  const int64_t T = a.shape[1];
  double s = 0;
  for (int64_t j = 0; j < T; ++j) s += a.data[static_cast<size_t>((h * T + i) * T + j)];
  return s;
}

bool future_is_zero(const FloatArray& a) {
  const int64_t H = a.shape[0], T = a.shape[1];
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = i + 1; j < T; ++j)
        if (a.data[static_cast<size_t>((h * T + i) * T + j)] != 0.0f) return false;
  return true;
}

}  // namespace

TEST_CASE("DIFF rows of A1 and A2 sum to 1, rows of A to 1 - lambda, nothing on the future",
          "[model][diff][invariants]") {
  const int64_t kv = GENERATE(2, 1);
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 64, 3, 2, kv);
  const Model m = Model::random(c, 42);
  const auto ids = test::random_ids(23, c.vocab_size, 1);
  const Trace t = m.capture(ids);
  REQUIRE(t.layers.size() == 3);
  for (const auto& l : t.layers) {
    REQUIRE(l.a1.shape == std::vector<int64_t>{2, 23, 23});
    CHECK(l.lambda == Approx(l.lambda_exp1 - l.lambda_exp2 + l.lambda_init).margin(1e-9));
    CHECK(l.lambda_init == Approx(lambda_init(l.index)).margin(1e-12));
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 23; ++i) {
        REQUIRE(row_sum(l.a1, h, i) == Approx(1.0).margin(1e-5));
        REQUIRE(row_sum(l.a2, h, i) == Approx(1.0).margin(1e-5));
        REQUIRE(row_sum(l.a, h, i) == Approx(1.0 - l.lambda).margin(1e-5));
      }
    CHECK(future_is_zero(l.a1));
    CHECK(future_is_zero(l.a2));
    CHECK(future_is_zero(l.a));
  }
}

TEST_CASE("baseline rows sum to 1 and nothing lands on the future", "[model][baseline][invariants]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Baseline, 64, 2, 2, 1);  // 4 heads, 2 kv heads
  const Model m = Model::random(c, 43);
  const Trace t = m.capture(test::random_ids(19, c.vocab_size, 2));
  for (const auto& l : t.layers) {
    REQUIRE(l.a.shape == std::vector<int64_t>{4, 19, 19});
    CHECK(l.a1.empty());
    CHECK(l.lambda == 0.0);
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 19; ++i) REQUIRE(row_sum(l.a, h, i) == Approx(1.0).margin(1e-5));
    CHECK(future_is_zero(l.a));
  }
}

TEST_CASE("a prefix of the prompt gives the same maps (causality end to end)", "[model][invariants]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2);
  const Model m = Model::random(c, 44);
  auto ids = test::random_ids(12, c.vocab_size, 3);
  const Trace full = m.capture(ids);
  ids.resize(7);
  const Trace prefix = m.capture(ids);
  for (size_t l = 0; l < 2; ++l)
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t j = 0; j <= i; ++j)
        REQUIRE(full.layers[l].a.data[static_cast<size_t>(i * 12 + j)] ==
                Approx(prefix.layers[l].a.data[static_cast<size_t>(i * 7 + j)]).margin(1e-6));
  // The hidden-state maximum over the first 7 positions cannot exceed that of all 12.
  CHECK(prefix.layers[1].hidden_stats.top_k(1) <= full.layers[1].hidden_stats.top_k(1) + 1e-6f);
}

TEST_CASE("lambda_init for layers 0..9 matches 0.8 - 0.6 exp(-0.3 l)", "[model][lambda]") {
  const double expected[] = {0.200, 0.356, 0.471, 0.556, 0.619, 0.666, 0.701, 0.727, 0.746, 0.760};
  for (int l = 0; l < 10; ++l) CHECK(lambda_init(l) == Approx(expected[l]).margin(5e-4));
  CHECK(lambda_init(0) == Approx(0.2).margin(1e-15));
  CHECK(lambda_init(100) == Approx(0.8).margin(1e-12));
}

TEST_CASE("the matched pair differs only by the lambda and subln vectors", "[model][pair]") {
  PairSpec s;
  s.hidden_size = 128;
  s.num_layers = 4;
  s.diff_heads = 4;
  s.diff_kv_heads = 4;
  s.vocab_size = 4096;
  const auto [d, b] = make_matched_pair(s);
  CHECK(d.num_attention_heads == 8);
  CHECK(b.num_attention_heads == 8);
  CHECK(d.map_heads() == 4);
  CHECK(b.map_heads() == 8);
  CHECK(d.head_dim == 16);
  CHECK(d.intermediate_size == 344);  // 8/3 · 128 rounded to a multiple of 8
  const Model md = Model::random(d, 1), mb = Model::random(b, 1);
  CHECK(md.parameter_count() == parameter_count(d));
  CHECK(mb.parameter_count() == parameter_count(b));
  // Per layer: λq1, λk1, λq2, λk2 (4·d) and subln (2·d).
  CHECK(md.parameter_count() - mb.parameter_count() == 4 * (4 * 16 + 2 * 16));
  CHECK(static_cast<double>(md.parameter_count() - mb.parameter_count()) /
            static_cast<double>(mb.parameter_count()) <
        1e-3);
}

TEST_CASE("capture keeps only the requested layers and heads, with identical values", "[model][capture]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 64, 3, 4, 4);
  const Model m = Model::random(c, 45);
  const auto ids = test::random_ids(10, c.vocab_size, 4);
  const Trace all = m.capture(ids);
  CaptureOptions opt;
  opt.layers = {1};
  opt.heads = {0, 3};
  opt.keep_logits = true;
  opt.keep_hidden = true;
  const Trace some = m.capture(ids, opt);
  REQUIRE(some.layers.size() == 3);
  CHECK(some.layers[0].a.empty());
  CHECK(some.layers[2].a1.empty());
  const LayerTrace& l = some.layers[1];
  REQUIRE(l.heads == std::vector<int>{0, 3});
  REQUIRE(l.a2.shape == std::vector<int64_t>{2, 10, 10});
  for (int64_t i = 0; i < 100; ++i) {
    CHECK(l.a2.data[static_cast<size_t>(i)] == all.layers[1].a2.data[static_cast<size_t>(i)]);
    CHECK(l.a2.data[static_cast<size_t>(100 + i)] == all.layers[1].a2.data[static_cast<size_t>(300 + i)]);
  }
  // Statistics are kept for every layer regardless of which maps are kept.
  CHECK(some.layers[0].logit_stats.count == 2u * 4u * 55u);  // two components × 4 heads × T(T+1)/2
  CHECK(some.layers[2].hidden_stats.count == 10u * 64u);
  REQUIRE(l.logits1.shape == std::vector<int64_t>{4, 10, 10});
  REQUIRE(l.hidden.shape == std::vector<int64_t>{10, 64});
  CHECK(std::isinf(l.logits1.data[1]));  // query 0, key 1: masked
  // The logit statistics are those of the kept logits: the largest |logit| among causal entries.
  float mx = 0;
  for (const FloatArray* a : {&l.logits1, &l.logits2})
    for (float v : a->data)
      if (std::isfinite(v)) mx = std::max(mx, std::fabs(v));
  CHECK(l.logit_stats.top_k(1) == Approx(mx).epsilon(1e-6));
  float hmax = 0;
  for (float v : l.hidden.data) hmax = std::max(hmax, std::fabs(v));
  CHECK(l.hidden_stats.top_k(1) == Approx(hmax).epsilon(1e-6));

  CaptureOptions none;
  none.keep_maps = false;
  const Trace stats_only = m.capture(ids, none);
  CHECK(stats_only.layers[1].a.empty());
  CHECK(stats_only.byte_size() < all.byte_size());
  CHECK(stats_only.layers[1].logit_stats.top == all.layers[1].logit_stats.top);
}

TEST_CASE("next-token distribution is a sorted top-k of probabilities", "[model][capture]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Baseline);
  const Model m = Model::random(c, 46);
  CaptureOptions opt;
  opt.next_token_top_k = 259;
  const Trace t = m.capture(test::random_ids(5, c.vocab_size, 5), opt);
  REQUIRE(t.next_token.size() == 259);
  double total = 0;
  for (size_t i = 0; i < t.next_token.size(); ++i) {
    total += t.next_token[i].probability;
    if (i) CHECK(t.next_token[i].probability <= t.next_token[i - 1].probability);
  }
  CHECK(total == Approx(1.0).margin(1e-4));
  CHECK(t.next_token[0].text == m.tokenizer().piece(t.next_token[0].id));
}

TEST_CASE("byte size accounts for the kept maps", "[model][capture]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2);
  const Model m = Model::random(c, 47);
  const Trace t = m.capture(test::random_ids(16, c.vocab_size, 6));
  const size_t maps = 2 /*layers*/ * 3 /*A1,A2,A*/ * 2 /*heads*/ * 16 * 16 * sizeof(float);
  CHECK(t.byte_size() >= maps);
  CHECK(t.byte_size() < maps + 200 * 1024);  // plus statistics and strings
}

TEST_CASE("a cancelled capture throws Cancelled", "[model][capture]") {
  const Model m = Model::random(test::tiny_config(AttentionKind::Diff), 48);
  std::atomic<bool> cancel{true};
  CHECK_THROWS_AS(m.capture({1, 2, 3}, {}, &cancel), Cancelled);
  cancel = false;
  CHECK(m.capture({1, 2, 3}, {}, &cancel).layers.size() == 2);
}

TEST_CASE("bad capture input gives a clear error", "[model][errors]") {
  const Model m = Model::random(test::tiny_config(AttentionKind::Diff), 49);
  CHECK_THROWS_WITH(m.capture({}), Catch::Contains("empty"));
  CHECK_THROWS_WITH(m.capture({1, 2, 999}), Catch::Contains("outside the vocabulary"));
  CHECK_THROWS_WITH(m.capture(std::vector<int64_t>(513, 5)), Catch::Contains("at most 512"));
  CaptureOptions opt;
  opt.heads = {7};
  CHECK_THROWS_WITH(m.capture({1, 2}, opt), Catch::Contains("head 7 does not exist"));
  opt.heads = {};
  opt.layers = {-1};
  CHECK_THROWS_WITH(m.capture({1, 2}, opt), Catch::Contains("layer -1 does not exist"));
}

TEST_CASE("a model the machine cannot hold is refused before its weights are allocated",
          "[model][errors][limits]") {
  ModelConfig c = test::tiny_config(AttentionKind::Baseline);
  c.hidden_size = 1 << 16;  // 64 K wide, 4096 layers: about 2.8e14 parameters, 1126 TB as F32
  c.num_attention_heads = 512;
  c.num_key_value_heads = 512;
  c.head_dim = 128;
  c.intermediate_size = 1 << 18;
  c.num_hidden_layers = 4096;
  c.validate();  // within the config's bounds
  CHECK_THROWS_WITH(Model::random(c, 1),
                    Catch::Contains("a random model: the weights (") &&
                        Catch::Contains("parameters) need 1125.9 TB of memory as F32, only"));
  CHECK_THROWS_WITH(Model::from_tensors(c, {}), Catch::Contains("a model from tensors: the weights"));
}

TEST_CASE("random initialisation is reproducible from the seed", "[model]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff);
  const auto a = Model::random(c, 5).tensors(), b = Model::random(c, 5).tensors(),
             d = Model::random(c, 6).tensors();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].data == b[i].data);
  CHECK(a[0].data != d[0].data);
}

TEST_CASE("CUDA capture matches CPU", "[model][gpu]") {
  if (!cuda_available()) test::skip("no CUDA device (this LibTorch build or this machine has no GPU)");
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 64, 2, 4, 2);
  const Model cpu = Model::random(c, 50, DeviceChoice::Cpu);
  const Model gpu = Model::from_tensors(c, cpu.tensors(), DeviceChoice::Cuda);
  const auto ids = test::random_ids(33, c.vocab_size, 7);
  const Trace a = cpu.capture(ids), b = gpu.capture(ids);
  for (size_t l = 0; l < a.layers.size(); ++l)
    for (size_t i = 0; i < a.layers[l].a.data.size(); ++i)
      REQUIRE(a.layers[l].a.data[i] == Approx(b.layers[l].a.data[i]).margin(1e-5));
}

// Layers spread over GPUs (serve --device cuda:0,cuda:1; on a one-GPU machine cuda:0 twice): the same
// maps as one GPU, exact and pooled, and the layers where the plan put them.
TEST_CASE("CUDA layer split: a model spread over GPUs captures as on one", "[model][gpu][placement]") {
  if (!cuda_available()) test::skip("no CUDA device (this LibTorch build or this machine has no GPU)");
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 64, 4, 4, 2);
  const Model cpu = Model::random(c, 51, DeviceChoice::Cpu);
  const Model one = Model::from_tensors(c, cpu.tensors(), DeviceChoice::Cuda);
  Model spread = Model::from_tensors(c, cpu.tensors(), DeviceChoice::Cpu);
  const bool two = cuda_device_count() >= 2;
  const std::vector<int> plan = spread.place_layers({"cuda:0", two ? "cuda:1" : "cuda:0"});
  CHECK(plan == std::vector<int>{0, 0, 1, 1});
  CHECK(spread.layer_devices().back() == (two ? "cuda:1" : "cuda:0"));
  const auto ids = test::random_ids(300, c.vocab_size, 7);
  for (const size_t budget : {size_t{0}, size_t{20000}}) {
    CaptureOptions o;
    o.pooled_budget_bytes = budget;
    const Trace a = one.capture(ids, o), b = spread.capture(ids, o);
    for (size_t l = 0; l < a.layers.size(); ++l) {
      const FloatArray& x = budget ? a.layers[l].a_mean : a.layers[l].a;
      const FloatArray& y = budget ? b.layers[l].a_mean : b.layers[l].a;
      REQUIRE(x.data.size() == y.data.size());
      for (size_t i = 0; i < x.data.size(); ++i)
        if (!std::isnan(x.data[i])) REQUIRE(x.data[i] == Approx(y.data[i]).margin(1e-6));
    }
  }
}

// A long capture on the GPU pools there (PoolingPath::Auto): it must give the CPU host loops' cells,
// statistics and tile inputs, and the GPU's memory query must answer where CUDA runs.
TEST_CASE("CUDA long capture pools on the GPU and matches the CPU's pooling", "[model][gpu][long]") {
  if (!cuda_available()) test::skip("no CUDA device (this LibTorch build or this machine has no GPU)");
  uint64_t free_bytes = 0, total_bytes = 0;
  CHECK(cuda_memory(free_bytes, total_bytes));
  CHECK(total_bytes >= free_bytes);
  CHECK(total_bytes > (uint64_t{1} << 30));
  for (const AttentionKind kind : {AttentionKind::Diff, AttentionKind::Baseline}) {
    const ModelConfig c = test::tiny_config(kind, 64, 2, 4, 2);
    const Model cpu = Model::random(c, 51, DeviceChoice::Cpu);
    const Model gpu = Model::from_tensors(c, cpu.tensors(), DeviceChoice::Cuda);
    const auto ids = test::random_ids(300, c.vocab_size, 8);
    CaptureOptions o;
    o.pooled_budget_bytes = 200000;
    o.block_rows = 64;  // several blocks: the streamed statistics
    const Trace a = cpu.capture(ids, o), b = gpu.capture(ids, o);
    for (size_t l = 0; l < a.layers.size(); ++l) {
      const LayerTrace &x = a.layers[l], &y = b.layers[l];
      REQUIRE(y.pooled == x.pooled);
      REQUIRE(x.pooled > 0);
      for (const auto& [p, q] :
           std::vector<std::pair<const FloatArray*, const FloatArray*>>{{&x.a1_mean, &y.a1_mean},
                                                                        {&x.a1_max, &y.a1_max},
                                                                        {&x.a2_mean, &y.a2_mean},
                                                                        {&x.a2_max, &y.a2_max},
                                                                        {&x.a_mean, &y.a_mean},
                                                                        {&x.a_max, &y.a_max},
                                                                        {&x.lse1, &y.lse1}}) {
        REQUIRE(p->data.size() == q->data.size());
        for (size_t i = 0; i < p->data.size(); ++i)
          if (!std::isnan(p->data[i])) REQUIRE(p->data[i] == Approx(q->data[i]).margin(1e-5));
      }
      CHECK(y.logit_stats.count == x.logit_stats.count);
      CHECK(y.logit_stats.top_k(1) == Approx(x.logit_stats.top_k(1)).epsilon(1e-4));
      CHECK(y.logit_stats.mean == Approx(x.logit_stats.mean).epsilon(1e-4));
    }
  }
}
