// A capture's layers in plain C++ (core/cpu/layer_cpu.h) against LibTorch's modules (core/model/nn.h), which
// training and GPUs run: the matrix kernel (and cblas_sgemm, which the layers call for large blocks on some
// CPUs) against a double-precision product on every instruction set, half-precision weights converted
// exactly, and whole captures of every architecture with both (the modules by DIFFLENS_PACKED_WEIGHTS_MB=0)
// holding the same hidden states, attention inputs, maps and next token.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "core/cpu/layer_cpu.h"
#include "core/model/model.h"
#include "helpers.h"
#include "isa.h"

using namespace difflens;

namespace {

// The capture of `ids` with every layer's plain-C++ pass (packed) or as LibTorch's modules.
Trace capture_with(const Model& m, const std::vector<int64_t>& ids, bool packed, CaptureOptions o) {
  if (packed)
    unsetenv("DIFFLENS_PACKED_WEIGHTS_MB");
  else
    setenv("DIFFLENS_PACKED_WEIGHTS_MB", "0", 1);
  Trace t = m.capture(ids, o);
  unsetenv("DIFFLENS_PACKED_WEIGHTS_MB");
  return t;
}

double worst(const FloatArray& a, const FloatArray& b) {
  REQUIRE(a.shape == b.shape);
  double w = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (std::isinf(a.data[i]) || std::isinf(b.data[i])) {
      CHECK(a.data[i] == b.data[i]);
      continue;
    }
    w = std::max(w, static_cast<double>(std::fabs(a.data[i] - b.data[i])));
  }
  return w;
}

// Runs `check` with the layers' products by the hand-written kernel, then by OpenBLAS's cblas_sgemm where the
// build has it (matrices packed after the code is set), then returns to the measured choice.
template <typename Check>
void on_every_matmul_code(Check&& check) {
  for (const MatmulCode code : {MatmulCode::Kernel, MatmulCode::Blas}) {
    if (!set_matmul_code(code)) {
      WARN("this build has no OpenBLAS: cblas_sgemm's route is not run here");
      continue;
    }
    INFO((code == MatmulCode::Blas ? "cblas_sgemm" : "hand-written kernel"));
    check();
  }
  set_matmul_code(MatmulCode::Auto);
}

double largest(const FloatArray& a) {
  double m = 0;
  for (float x : a.data) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

}  // namespace

TEST_CASE("layer_cpu: a hand-computed product, accumulated and not", "[layer_cpu]") {
  const std::vector<float> w = {1, 0, 0, 1, 1, 1};  // W [3, 2]
  const std::vector<float> x = {1, 2, 3, 4};        // [2, 2]
  on_every_matmul_code([&] {
    const PackedMatrix p = pack_matrix({{w.data(), WeightDtype::F32, 3}}, 2);
    CHECK(p.N == 3);
    CHECK(p.K == 2);
    test::on_every_isa([&] {
      std::vector<float> y(6, 100.0f);
      matmul_cpu(x.data(), 2, 2, p, y.data(), 3, false);
      CHECK(y == std::vector<float>{1, 2, 3, 3, 4, 7});
      matmul_cpu(x.data(), 2, 2, p, y.data(), 3, true);
      CHECK(y == std::vector<float>{2, 4, 6, 6, 8, 14});
    });
  });
}

TEST_CASE("layer_cpu: half-precision weights convert exactly", "[layer_cpu]") {
  // F16: 1, -2, the smallest subnormal 2^-24, 65504, +inf; BF16: 1, -0.5, 2^-133 (subnormal).
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00};
  const std::vector<uint16_t> bf16 = {0x3f80, 0xbf00, 0x0001};
  const PackedMatrix p =
      pack_matrix({{f16.data(), WeightDtype::F16, 5}, {bf16.data(), WeightDtype::BF16, 3}}, 1);
  REQUIRE(p.N == 8);
  const float one = 1;
  std::vector<float> y(8);
  matmul_cpu(&one, 1, 1, p, y.data(), 8, false);
  CHECK(y[0] == 1.0f);
  CHECK(y[1] == -2.0f);
  CHECK(y[2] == std::ldexp(1.0f, -24));
  CHECK(y[3] == 65504.0f);
  CHECK(std::isinf(y[4]));
  CHECK(y[5] == 1.0f);
  CHECK(y[6] == -0.5f);
  CHECK(y[7] == std::ldexp(1.0f, -133));
}

TEST_CASE("layer_cpu: products of every edge shape equal a double-precision product", "[layer_cpu]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  on_every_matmul_code([&] {
    test::on_every_isa([&] {
      for (const int64_t M : {1, 3, 4, 5, 13})
        for (const int64_t N : {1, 15, 16, 17, 64, 65, 130})
          for (const int64_t K : {1, 7, 128}) {
            // W stacked from two parts (as q, k and v are), x with a row stride wider than K.
            const int64_t n1 = N / 2, ldx = K + 3, ldy = N + 5;
            std::vector<float> w(static_cast<size_t>(N * K)), x(static_cast<size_t>(M * ldx));
            for (float& v : w) v = nd(rng);
            for (float& v : x) v = nd(rng);
            const PackedMatrix p = pack_matrix(
                {{w.data(), WeightDtype::F32, n1}, {w.data() + n1 * K, WeightDtype::F32, N - n1}}, K);
            std::vector<float> y(static_cast<size_t>(M * ldy), 0.5f);
            for (const bool acc : {false, true}) {
              const std::vector<float> before = y;
              matmul_cpu(x.data(), M, ldx, p, y.data(), ldy, acc);
              double bad = 0;
              for (int64_t i = 0; i < M; ++i) {
                for (int64_t j = 0; j < N; ++j) {
                  double ref = 0, size = 0;
                  for (int64_t k = 0; k < K; ++k) {
                    ref += static_cast<double>(x[i * ldx + k]) * w[j * K + k];
                    size += std::fabs(static_cast<double>(x[i * ldx + k]) * w[j * K + k]);
                  }
                  const double base = acc ? before[i * ldy + j] : 0.0;
                  bad = std::max(bad,
                                 std::fabs(y[i * ldy + j] - (base + ref)) / (size + std::fabs(base) + 1e-30));
                }
                for (int64_t j = N; j < ldy; ++j) CHECK(y[i * ldy + j] == before[i * ldy + j]);  // untouched
              }
              INFO("M " << M << " N " << N << " K " << K << (acc ? " accumulated" : ""));
              CHECK(bad < 1e-6);
            }
          }
    });
  });
}

TEST_CASE("layer_cpu: every architecture's capture equals LibTorch's modules", "[layer_cpu]") {
  struct Case {
    std::string name;
    ModelConfig c;
  };
  std::vector<Case> cases;
  cases.push_back({"baseline", test::tiny_config(AttentionKind::Baseline, 48, 2, 2, 2)});
  cases.push_back(
      {"baseline GQA, rotate-half RoPE", test::tiny_config(AttentionKind::Baseline, 48, 2, 2, 1)});
  cases.back().c.rope_style = RopeStyle::Half;
  cases.push_back({"baseline, sliding window 5", test::tiny_config(AttentionKind::Baseline, 48, 2, 2, 2)});
  cases.back().c.sliding_window = 5;
  cases.push_back({"DIFF, adjacent components", test::tiny_config(AttentionKind::Diff, 48, 3, 3, 3)});
  cases.push_back({"DIFF GQA, split components, no output-norm weight (DiffLlama)",
                   test::tiny_config(AttentionKind::Diff, 48, 2, 2, 1)});
  cases.back().c.diff_pairing = DiffPairing::Half;
  cases.back().c.subln_weight = false;
  cases.back().c.rope_style = RopeStyle::Half;
  {
    ModelConfig v2;
    v2.attention = AttentionKind::DiffV2;
    v2.hidden_size = 32;
    v2.num_hidden_layers = 2;
    v2.num_attention_heads = 8;
    v2.num_key_value_heads = 2;
    v2.head_dim = 8;
    v2.intermediate_size = 50;  // not a whole number of vectors: the MLP's tail columns
    v2.vocab_size = 259;
    v2.max_position_embeddings = 512;
    v2.subln_weight = false;
    v2.name = "v2";
    cases.push_back({"DIFF V2", v2});
  }
  for (const Case& k : cases) {
    SECTION(k.name) {
      const Model m = Model::random(k.c, 11, DeviceChoice::Cpu);
      CaptureOptions o;
      o.keep_hidden = o.keep_qkv = o.keep_logits = true;
      for (const size_t T : {size_t{1}, size_t{37}}) {
        const std::vector<int64_t> ids = test::random_ids(T, k.c.vocab_size, 3);
        const Trace modules = capture_with(m, ids, false, o);
        on_every_matmul_code([&] {
          test::on_every_isa([&] {
            INFO(k.name << ", T " << T);
            const Trace packed = capture_with(m, ids, true, o);
            REQUIRE(packed.layers.size() == modules.layers.size());
            for (size_t i = 0; i < packed.layers.size(); ++i) {
              const LayerTrace &a = packed.layers[i], &b = modules.layers[i];
              INFO("layer " << i);
              CHECK(worst(a.hidden, b.hidden) <= 1e-6 * std::max(1.0, largest(b.hidden)));
              CHECK(worst(a.q1, b.q1) < 1e-6);
              CHECK(worst(a.k1, b.k1) < 1e-6);
              CHECK(worst(a.v, b.v) < 1e-6);
              CHECK(worst(a.a, b.a) < 1e-6);
              CHECK(worst(a.logits1, b.logits1) < 1e-5);
              if (k.c.is_diff()) {
                CHECK(worst(a.q2, b.q2) < 1e-6);
                CHECK(worst(a.k2, b.k2) < 1e-6);
                CHECK(worst(a.a1, b.a1) < 1e-6);
                CHECK(worst(a.a2, b.a2) < 1e-6);
                CHECK(std::fabs(a.lambda - b.lambda) < 1e-6);
              }
              if (k.c.is_diff_v2()) {
                CHECK(worst(a.lambda_rows, b.lambda_rows) < 1e-6);
                CHECK(worst(a.lambda_logits, b.lambda_logits) < 1e-6);
              }
            }
            REQUIRE(packed.next_token.size() == modules.next_token.size());
            for (size_t j = 0; j < packed.next_token.size(); ++j)
              CHECK(std::fabs(packed.next_token[j].probability - modules.next_token[j].probability) < 1e-6);
          });
        });
      }
    }
  }
}

TEST_CASE("layer_cpu: a long prompt's pooled capture and generation use the same layers", "[layer_cpu]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 2);
  const Model m = Model::random(c, 5, DeviceChoice::Cpu);
  const std::vector<int64_t> ids = test::random_ids(300, c.vocab_size, 9);
  CaptureOptions o;
  o.keep_hidden = true;
  o.pooled_budget_bytes = 64 * 1024;  // pooled: the exact maps would take far more
  const Trace modules = capture_with(m, ids, false, o);
  const Trace packed = capture_with(m, ids, true, o);
  REQUIRE(packed.layers.size() == modules.layers.size());
  REQUIRE(packed.layers[0].pooled > 0);
  for (size_t i = 0; i < packed.layers.size(); ++i) {
    CHECK(worst(packed.layers[i].hidden, modules.layers[i].hidden) <=
          1e-6 * std::max(1.0, largest(modules.layers[i].hidden)));
    CHECK(worst(packed.layers[i].q1, modules.layers[i].q1) < 1e-6);
  }
  setenv("DIFFLENS_PACKED_WEIGHTS_MB", "0", 1);
  const std::vector<int64_t> by_modules = m.generate(test::random_ids(20, c.vocab_size, 2), 8);
  unsetenv("DIFFLENS_PACKED_WEIGHTS_MB");
  CHECK(m.generate(test::random_ids(20, c.vocab_size, 2), 8) == by_modules);
}
