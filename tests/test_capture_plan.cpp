// Capture planning alone: what a capture keeps, whether its maps are exact or pooled, its blocks, the
// memory it needs (hand-computed), and what it refuses, on any machine (the machine is a parameter).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "core/formats/error.h"
#include "core/formats/trace.h"
#include "core/model/capture_plan.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;

namespace {

// DIFF, 2 layers, 2 heads (d = 8), positions up to 4096.
ModelConfig diff_config() {
  ModelConfig c = test::tiny_config(AttentionKind::Diff);
  c.max_position_embeddings = 4096;
  return c;
}

std::vector<int64_t> ids(int64_t n) {
  return std::vector<int64_t>(static_cast<size_t>(n), 5);
}

}  // namespace

TEST_CASE("capture plan: an exact capture's kept maps and memory, by hand", "[capture][plan]") {
  const ModelConfig c = diff_config();
  REQUIRE(c.map_heads() == 2);
  const CapturePlan p = plan_capture(c, ids(10), {}, 0, {});
  CHECK(p.tokens == 10);
  CHECK(p.pooled == 0);
  CHECK(p.heads == std::vector<int64_t>{0, 1});
  CHECK(p.all_heads);
  CHECK(p.kept_layers == 2);
  CHECK(p.exact_map_bytes == 2 * 2 * 3 * 100 * 4);  // layers x heads x (A1, A2, A) x T² x 4
  CHECK(p.layer_bytes == 2 * 100 * 4 * 5);          // heads x T² x 4 x (2 logits + 3 maps)
  // One layer's activations: 10 rows of the hidden state and its norm (4 E), q | k | v and their rotated
  // copies (2 x (Hq + 2 Hkv) d), the heads' outputs (Hq d) and the SwiGLU's three (3 I), 4 bytes each.
  REQUIRE(c.hidden_size == 32);
  REQUIRE(c.num_attention_heads == 4);
  REQUIRE(c.num_key_value_heads == 4);
  REQUIRE(c.head_dim == 8);
  const double act =
      10 * 4.0 * (4 * 32 + 2 * (4 + 8) * 8 + 4 * 8 + 3.0 * static_cast<double>(c.intermediate_size));
  CHECK(p.activation_bytes == act);
  CHECK(p.host_bytes == 4800 + act);  // the CPU's fused pass: each kept map once, beside the activations
  CHECK(p.device_bytes == 4000 + 2 * 100 + act);  // a GPU: one layer computed whole, two T x T masks
  CaptureMachine on_gpu;
  on_gpu.cuda = true;
  CHECK(plan_capture(c, ids(10), {}, 0, on_gpu).host_bytes ==
        4800 + 2400);  // and one layer's maps in transit

  CaptureOptions some;
  some.layers = {1};
  some.heads = {1};
  some.keep_logits = true;
  const CapturePlan q = plan_capture(c, ids(10), some, 0, {});
  CHECK(q.layers == std::vector<bool>{false, true});
  CHECK(q.heads == std::vector<int64_t>{1});
  CHECK_FALSE(q.all_heads);
  CHECK(q.exact_map_bytes == 1 * 1 * 3 * 100 * 4);
  CHECK(q.logits_bytes == 1 * 2 * 100 * 4 * 2);  // the selected layer's every head, both logits

  // The baseline: one map and one logit per head.
  const ModelConfig b = test::tiny_config(AttentionKind::Baseline);
  const CapturePlan r = plan_capture(b, ids(10), {}, 0, {});
  CHECK(r.exact_map_bytes == 2 * 4 * 1 * 100 * 4);
  CHECK(r.layer_bytes == 4 * 100 * 4 * 2);

  // Heads asked in another order are kept in that order, not as "all heads".
  CaptureOptions swapped;
  swapped.heads = {1, 0};
  CHECK_FALSE(plan_capture(c, ids(10), swapped, 0, {}).all_heads);
  CaptureOptions no_maps;
  no_maps.keep_maps = false;
  const CapturePlan n = plan_capture(c, ids(10), no_maps, 0, {});
  CHECK(n.kept_layers == 0);
  CHECK(n.exact_map_bytes == 0);
}

TEST_CASE("capture plan: long prompts pool their maps within the budget, in blocks of rows",
          "[capture][plan]") {
  const ModelConfig c = diff_config();
  CaptureOptions o;
  o.pooled_budget_bytes = 1 << 20;
  // 2 layers x 2 heads x 3 maps x 1000² x 4 = 48 MB > 1 MB: pooled. 12 maps, each a mean and a max grid:
  // floor(sqrt(1048576 / (24 x 4))) = 104 cells per side.
  const CapturePlan p = plan_capture(c, ids(1000), o, 0, {});
  CHECK(p.pooled == 104);
  // CPU: a block's logits and maps within 24 MB: 25165824 / (2 heads x 1000 x 4 x 5) = 629 rows.
  CHECK(p.block_rows == 629);
  // On the host: 12 maps' mean and max grids, the activations, and 4 blocks' logits and maps.
  CHECK(p.host_bytes == 12 * 2 * 104 * 104 * 4 + p.activation_bytes + 4.0 * 629 * (2 * 1000 * 4 * 5));
  CHECK_FALSE(p.pool_by_kernels);
  // An 80 GB GPU whose build has no kernels: a 32nd of it, at most 2 GB, is more than the whole prompt: one
  // block, pooled on the host.
  CaptureMachine gpu;
  gpu.cuda = true;
  gpu.device_total = uint64_t{80} << 30;
  const CapturePlan g = plan_capture(c, ids(1000), o, 0, gpu);
  CHECK(g.block_rows == 1000);
  CHECK_FALSE(g.pool_by_kernels);  // this machine says the kernels cannot run the model
  // A build with the kernels: auto pools by them; host still chooses the host.
  CaptureMachine kernels = gpu;
  kernels.no_kernels = "";
  CHECK(plan_capture(c, ids(1000), o, 0, kernels).pool_by_kernels);
  o.pooling = PoolingPath::Host;
  CHECK_FALSE(plan_capture(c, ids(1000), o, 0, kernels).pool_by_kernels);
  // Asked for where they cannot run: refused with the reason and the other way.
  o.pooling = PoolingPath::Kernel;
  CHECK(plan_capture(c, ids(1000), o, 0, kernels).pool_by_kernels);
  CHECK_THROWS_WITH(plan_capture(c, ids(1000), o, 0, gpu),
                    "--pooling kernel: the model is not on a CUDA GPU (--pooling host pools on the host)");
  o.pooling = PoolingPath::Host;
  o.block_rows = 100;
  CHECK(plan_capture(c, ids(1000), o, 0, gpu).block_rows == 100);

  // One layer computed whole would exceed the budget though the kept map fits: blocks, and with room for
  // every entry the map stays exact. Kept: 1 map triple of 100² (120 KB); one layer: 2 x 100² x 20 = 400 KB.
  CaptureOptions one;
  one.layers = {0};
  one.heads = {0};
  one.pooled_budget_bytes = 300000;
  CHECK(plan_capture(c, ids(100), one, 0, {}).pooled == 0);
  // No maps kept: blocks with nothing pooled.
  CaptureOptions none;
  none.keep_maps = false;
  none.pooled_budget_bytes = 1000;
  CHECK(plan_capture(c, ids(100), none, 0, {}).pooled == 1);
  // Under the budget: exact.
  o = {};
  o.pooled_budget_bytes = 1 << 20;
  CHECK(plan_capture(c, ids(50), o, 0, {}).pooled == 0);  // 120 KB of maps, 100 KB for one layer
}

TEST_CASE("capture plan: refusals name the numbers and what to do", "[capture][plan][errors]") {
  const ModelConfig c = diff_config();
  auto refusal = [&](int64_t n, const CaptureOptions& o, int bits, const CaptureMachine& m) -> std::string {
    try {
      plan_capture(c, ids(n), o, bits, m);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(refusal(0, {}, 0, {}) == "the prompt is empty: nothing to run");
  CHECK(refusal(4097, {}, 0, {}) == "the prompt has 4097 tokens; this model supports at most 4096");
  CHECK_THROWS_WITH(plan_capture(c, {1, 259}, {}, 0, {}),
                    "token id 259 is outside the vocabulary (size 259)");
  CHECK_THAT(refusal(10, {}, 1, {}), Catch::Contains("bits must be between 2 and 32"));
  CaptureOptions bad_head;
  bad_head.heads = {2};
  CHECK(refusal(10, bad_head, 0, {}) == "head 2 does not exist (model has 2)");
  CaptureOptions bad_layer;
  bad_layer.layers = {2};
  CHECK(refusal(10, bad_layer, 0, {}) == "layer 2 does not exist (model has 2)");
  CaptureOptions late;
  late.stats_from = 10;
  CHECK(refusal(10, late, 0, {}) == "capture: statistics from position 10 of a 10-token prompt");

  // The host: 4096 tokens keep 2 x 2 x 3 x 4096² x 4 = 805 MB of maps, written once by the CPU's pass: with
  // 1 GB available that runs, with 512 MB it is refused; from a GPU, one layer's maps (403 MB) pass through
  // the host as well: refused with 1 GB.
  CaptureMachine small;
  small.host_available = uint64_t{1} << 30;
  CHECK(refusal(4096, {}, 0, small).empty());
  small.host_available = uint64_t{512} << 20;
  CHECK_THAT(refusal(4096, {}, 0, small),
             Catch::StartsWith("an exact capture of 4096 tokens would need about 815 MB of memory (the kept "
                               "maps, 805 MB), and 537 MB is available: give a pooled budget"));
  CaptureMachine gpu_host;
  gpu_host.cuda = true;
  gpu_host.host_available = uint64_t{1} << 30;
  CHECK_THAT(
      refusal(4096, {}, 0, gpu_host),
      Catch::StartsWith("an exact capture of 4096 tokens would need about 1.2 GB of memory (the kept maps, "
                        "805 MB, and one layer's more while it comes from the GPU), and 1.1 GB is "
                        "available"));
  small.host_available = uint64_t{1} << 30;
  CaptureOptions pooled;
  pooled.pooled_budget_bytes = 16 << 20;
  CHECK(refusal(4096, pooled, 0, small).empty());  // a pooled capture fits
  // A GPU of 1 GB holds the weights but not one layer of 4096 tokens computed whole (671 MB + masks).
  CaptureMachine gpu;
  gpu.cuda = true;
  gpu.device_total = uint64_t{700} << 20;
  gpu.weight_bytes = 40e6;
  CHECK_THAT(
      refusal(4096, {}, 0, gpu),
      Catch::Contains("of GPU memory for one layer's attention beside the weights (40 MB), and the GPU "
                      "has 734 MB: give a pooled budget"));
  // What a pooled capture cannot do.
  CHECK(refusal(4096, pooled, 4, {}) == "long-prompt capture does not combine with logit quantization");
  pooled.keep_logits = true;
  CHECK(refusal(4096, pooled, 0, {}) == "full logits (--keep-logits) do not fit a long-prompt capture");
}

TEST_CASE("capture: heads asked in another order keep their own maps, exact and pooled", "[capture][plan]") {
  // Every head named, in another order: each kept map must be the map of the head it is labelled with (all
  // heads once counted as "every head in order" and kept head 0's map under head 1's label).
  const Model m = Model::random(diff_config(), 7);
  const std::vector<int64_t> prompt = test::random_ids(40, 259, 3);
  const Trace all = m.capture(prompt);
  CaptureOptions swapped;
  swapped.heads = {1, 0};
  const Trace t = m.capture(prompt, swapped);
  REQUIRE(t.layers[0].heads == std::vector<int>{1, 0});
  const size_t n = 40 * 40;
  for (int layer = 0; layer < 2; ++layer)
    for (size_t k = 0; k < 2; ++k) {
      const size_t head = static_cast<size_t>(t.layers[layer].heads[k]);
      for (const auto& [got, want] : {std::pair{&t.layers[layer].a, &all.layers[layer].a},
                                      std::pair{&t.layers[layer].a1, &all.layers[layer].a1}})
        CHECK(std::equal(got->data.begin() + k * n, got->data.begin() + (k + 1) * n,
                         want->data.begin() + head * n));
    }
  // Pooled: the same order through the fused pass's pooling (the kernels' order is checked on a GPU, in
  // "CUDA long prompts: ...", with a head kept alone).
  swapped.pooled_budget_bytes = 20000;
  swapped.pooling = PoolingPath::Host;
  CaptureOptions pooled_all = swapped;
  pooled_all.heads = {};
  const Trace p = m.capture(prompt, swapped), q = m.capture(prompt, pooled_all);
  REQUIRE(p.layers[0].pooled > 0);
  REQUIRE(q.layers[0].pooled == p.layers[0].pooled);
  const size_t cells = static_cast<size_t>(p.layers[0].pooled * p.layers[0].pooled);
  for (size_t k = 0; k < 2; ++k) {
    const size_t head = static_cast<size_t>(p.layers[1].heads[k]);
    for (const auto& [got, want] : {std::pair{&p.layers[1].a_mean, &q.layers[1].a_mean},
                                    std::pair{&p.layers[1].a1_max, &q.layers[1].a1_max}}) {
      REQUIRE(got->data.size() == 2 * cells);
      // NaN cells (no causal entry) compare by position: both NaN.
      for (size_t i = 0; i < cells; ++i) {
        const float x = got->data[k * cells + i], y = want->data[head * cells + i];
        CHECK(((std::isnan(x) && std::isnan(y)) || x == y));
      }
    }
  }
}

TEST_CASE(
    "layer split: consecutive layers on consecutive devices in proportion to their room, refusals with numbers",
    "[capture][plan][placement]") {
  const std::vector<std::string> two{"cuda:0", "cuda:1"};
  CHECK(plan_layer_split({1, 1, 1, 1}, 0, 0, {10, 10}, two) == std::vector<int>{0, 0, 1, 1});
  CHECK(plan_layer_split({1, 1, 1, 1}, 0, 0, {30, 10}, two) == std::vector<int>{0, 0, 0, 1});
  CHECK(plan_layer_split({1, 1, 1, 1}, 0, 0, {10}, {"cuda:0"}) == std::vector<int>{0, 0, 0, 0});
  // The embedding counts on the first device, the output on the last: 2 + 4 + 2 = 8 split 4 / 4.
  CHECK(plan_layer_split({1, 1, 1, 1}, 2, 2, {10, 10}, two) == std::vector<int>{0, 0, 1, 1});
  // 2 + 1 | 1 + 1 + 1: balanced; the first layer always stays with the embedding.
  CHECK(plan_layer_split({1, 1, 1, 1}, 2, 0, {10, 10}, two) == std::vector<int>{0, 1, 1, 1});
  CHECK(plan_layer_split({1, 1, 1, 1}, 3, 0, {10, 10}, two) == std::vector<int>{0, 1, 1, 1});
  // A device too small for one layer is passed over.
  CHECK(plan_layer_split({4, 4}, 0, 0, {3, 10, 10}, {"a", "b", "c"}) == std::vector<int>{1, 2});
  // Three devices, six layers: two each.
  CHECK(plan_layer_split({1, 1, 1, 1, 1, 1}, 0, 0, {5, 5, 5}, {"a", "b", "c"}) ==
        std::vector<int>{0, 0, 1, 1, 2, 2});
  CHECK_THROWS_WITH(
      plan_layer_split({4e9, 4e9, 4e9}, 1e9, 1e9, {6e9, 6e9}, two),
      Catch::Contains("the weights need 14.00 GB and the devices can hold 12.00 GB (cuda:0 6.00 GB, "
                      "cuda:1 6.00 GB)"));
  // Enough room in all, but no way to place a 7 GB layer on 6 GB devices.
  CHECK_THROWS_WITH(plan_layer_split({7e9}, 0, 0, {6e9, 6e9}, two),
                    Catch::Contains("layer 0 (7.00 GB) does not fit on cuda:1"));
}

TEST_CASE("layer split on the CPU: a model spread over cpu,cpu captures and generates as one on one device",
          "[capture][placement]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 4);
  const Model one = Model::random(c, 7);
  Model spread = Model::random(c, 7);
  CHECK(spread.place_layers({"cpu", "cpu"}) == std::vector<int>{0, 0, 1, 1});
  CHECK(spread.layer_devices() == std::vector<std::string>{"cpu", "cpu", "cpu", "cpu"});
  CHECK(spread.device_name() == "cpu");
  const std::vector<int64_t> ids = test::random_ids(70, 259, 3);
  for (const size_t budget : {size_t{0}, size_t{4000}}) {
    CaptureOptions o;
    o.pooled_budget_bytes = budget;
    o.keep_qkv = true;
    const Trace a = one.capture(ids, o), b = spread.capture(ids, o);
    INFO("pooled budget " << budget);
    REQUIRE(a.layers.size() == b.layers.size());
    CHECK(a.layers[0].pooled == (budget > 0 ? b.layers[0].pooled : 0));
    for (size_t l = 0; l < a.layers.size(); ++l) {
      const auto xs = a.layers[l].arrays(), ys = b.layers[l].arrays();
      for (size_t k = 0; k < xs.size(); ++k) {
        CHECK(test::same_bits(*xs[k], *ys[k]));
      }
    }
    CHECK(a.next_token[0].probability == b.next_token[0].probability);
  }
  CHECK(one.generate(ids, 5) == spread.generate(ids, 5));
  CHECK_THROWS_WITH(spread.place_layers({"gpu0"}), Catch::Contains("'gpu0' is not a device"));
  CHECK_THROWS_WITH(spread.place_layers({}), Catch::Contains("no devices"));
  if (!cuda_available())
    CHECK_THROWS_WITH(spread.place_layers({"cuda:0", "cuda:1"}), Catch::Contains("no usable CUDA device"));
}

TEST_CASE("capture plan: an exact capture's estimate holds to the measured peak memory",
          "[capture][plan][memory]") {
#ifdef __SANITIZE_ADDRESS__
  // AddressSanitizer's shadow memory and its quarantine of freed blocks (the warm-up run's trace) add to the
  // resident memory what no build for users has; the uninstrumented builds measure it.
  test::skip("built with AddressSanitizer: its shadow memory and quarantine change resident memory");
#endif
  // `bench` in a process of its own (the bundled pair, 2K tokens, exact maps): what was resident before, the
  // high-water mark after DIFF's captures (its trace of 768 MB freed between runs) and the plan's estimate.
  test::ScratchDir dir("planmem");
  const std::string log = (dir / "bench.txt").string();
  const std::string cmd = std::string(DIFFLENS_EXE) +
                          " bench --models " DIFFLENS_SOURCE_DIR
                          "/assets/models/diff-small," DIFFLENS_SOURCE_DIR
                          "/assets/models/baseline-small --lengths 2048 --repeats 1 --threads 2 > '" +
                          log + "' 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string out = test::read_all(log);
  INFO(out);
  auto number_after = [&](const std::string& text, const std::string& key) {
    const size_t at = text.find(key);
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(at + key.size()));
  };
  const double before = number_after(out, "resident before the captures (process, libraries, weights): ");
  const size_t row = out.find("\ndiff ");
  REQUIRE(row != std::string::npos);
  std::istringstream fields(out.substr(row + 1, out.find('\n', row + 1) - row - 1));
  std::string model, T, median, min, trace, trace_unit, pooled, peak, peak_unit, plan;
  fields >> model >> T >> median >> min >> trace >> trace_unit >> pooled >> peak >> peak_unit >> plan;
  CHECK(T == "2048");
  CHECK(pooled == "exact");
  const double grew = std::stod(peak) - before, expected = std::stod(plan.substr(1));
  // The plan is DiffLens's own arithmetic: within 10 % of what the capture added, plus 64 MB for what it does
  // not model (the allocator's slack, the packed weights made on the first capture, thread stacks).
  CHECK(expected > 768);
  CHECK(grew >= 0.9 * expected);
  CHECK(grew <= 1.1 * expected + 64);
}
