// Generation (core/model/generate.cpp): with the key/value cache a written token costs its own row; the
// tokens and each written token's attention rows must equal those of re-running the whole sequence, on every
// architecture (DIFF, DIFF V2, baseline, GQA, sliding windows) and every path (the CPU's packed layers and
// fused pass, its modules and fused pass, the tensor operations a GPU runs).
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdlib>

#include "core/formats/error.h"
#include "core/formats/trace_io.h"
#include "core/model/model.h"
#include "helpers.h"
#include "isa.h"

using namespace difflens;

namespace {

struct Case {
  std::string name;
  ModelConfig c;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back({"DIFF", test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2)});
  v.push_back({"DIFF GQA", test::tiny_config(AttentionKind::Diff, 32, 2, 4, 2)});
  v.push_back({"baseline", test::tiny_config(AttentionKind::Baseline, 32, 2, 2, 2)});
  v.push_back({"baseline window 6", test::tiny_config(AttentionKind::Baseline, 32, 2, 2, 1)});
  v.back().c.sliding_window = 6;
  v.push_back({"DIFF window 5, half rotary", test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2)});
  v.back().c.sliding_window = 5;
  v.back().c.rope_style = RopeStyle::Half;
  PairSpec s;
  s.hidden_size = 32;
  s.num_layers = 2;
  s.diff_heads = 2;
  s.diff_kv_heads = 1;
  s.vocab_size = 259;
  s.max_position_embeddings = 512;
  v.push_back({"DIFF V2 GQA", make_matched_diff_v2(s)});
  return v;
}

// The largest |x − y| over two arrays of one shape.
double worst(const FloatArray& a, const FloatArray& b) {
  REQUIRE(a.shape == b.shape);
  double w = 0;
  for (size_t i = 0; i < a.data.size(); ++i)
    w = std::max(w, static_cast<double>(std::fabs(a.data[i] - b.data[i])));
  return w;
}

// Row p of a whole map [H, T, T] as [H, p + 1].
FloatArray row_of(const FloatArray& m, int64_t p) {
  const int64_t H = m.shape[0], T = m.shape[1];
  FloatArray r;
  r.shape = {H, p + 1};
  for (int64_t h = 0; h < H; ++h)
    r.data.insert(r.data.end(), m.data.begin() + (h * T + p) * T, m.data.begin() + (h * T + p) * T + p + 1);
  return r;
}

// Each written token's rows equal its row in a capture of the whole text.
void check_rows(const Model& m, const std::vector<int64_t>& prompt, const Generation& g) {
  std::vector<int64_t> all = prompt;
  all.insert(all.end(), g.ids.begin(), g.ids.end());
  const Trace t = m.capture(all);
  REQUIRE(g.rows.size() == g.ids.size());
  for (size_t k = 0; k < g.rows.size(); ++k) {
    const int64_t p = static_cast<int64_t>(prompt.size() + k);
    const GeneratedRows& r = g.rows[k];
    REQUIRE(r.a.size() == t.layers.size());
    for (size_t l = 0; l < t.layers.size(); ++l) {
      INFO("token " << k << " (position " << p << "), layer " << l);
      CHECK(worst(r.a[l], row_of(t.layers[l].a, p)) < 1e-5);
      REQUIRE(r.a1.size() == (t.layers[l].a1.empty() ? 0 : t.layers.size()));
      if (!r.a1.empty()) {
        CHECK(worst(r.a1[l], row_of(t.layers[l].a1, p)) < 1e-5);
        CHECK(worst(r.a2[l], row_of(t.layers[l].a2, p)) < 1e-5);
      }
    }
  }
}

}  // namespace

TEST_CASE("generate: the key/value cache writes the same tokens and rows as re-running the sequence",
          "[generate][cache]") {
  // On every instruction set the fused pass is compiled for: a written token's queries start at row q_row0.
  test::on_every_isa([] {
    for (const Case& k : cases()) {
      const Model m = Model::random(k.c, 17, DeviceChoice::Cpu);
      const std::vector<int64_t> prompt = test::random_ids(23, k.c.vocab_size, 4);
      GenerateOptions o;
      o.max_new = 10;
      o.cache = false;
      const Generation full = m.generate(prompt, o);
      REQUIRE(full.ids.size() == 10);
      CHECK_FALSE(full.cached);
      // The CPU's packed layers and fused pass; its modules with the fused pass; the tensor operations.
      for (int path = 0; path < 3; ++path) {
        INFO(k.name << ", path " << path);
        struct Unpacked {  // unset even when a REQUIRE throws: later tests must run with packed weights
          ~Unpacked() { unsetenv("DIFFLENS_PACKED_WEIGHTS_MB"); }
        } unpacked;
        if (path == 1) setenv("DIFFLENS_PACKED_WEIGHTS_MB", "0", 1);
        o.cache = true;
        o.keep_rows = true;
        o.tensor_ops = path == 2;
        const Generation cached = m.generate(prompt, o);
        unsetenv("DIFFLENS_PACKED_WEIGHTS_MB");
        CHECK(cached.cached);
        CHECK(cached.ids == full.ids);
        check_rows(m, prompt, cached);
        o.keep_rows = false;
        o.tensor_ops = false;
      }
      // Rows without the cache come from one capture of the whole text: the same.
      o.cache = false;
      o.keep_rows = true;
      check_rows(m, prompt, m.generate(prompt, o));
    }
  });
}

TEST_CASE("generate: the bundled pair's cached tokens and rows equal re-running, on every instruction set",
          "[generate][cache][bundled]") {
  // The app's Continue runs these shapes (head size 16, 8 heads, prompts not a multiple of any vector width).
  const std::filesystem::path models = DIFFLENS_SOURCE_DIR "/assets/models";
  for (const char* name : {"diff-small", "baseline-small"}) {
    const Model m = Model::load(models / name, DeviceChoice::Cpu);
    const std::vector<int64_t> prompt = test::random_ids(37, m.config().vocab_size, 9);
    GenerateOptions o;
    o.max_new = 5;
    o.cache = false;
    const Generation full = m.generate(prompt, o);
    test::on_every_isa([&] {
      INFO(name);
      o.cache = true;
      o.keep_rows = true;
      const Generation cached = m.generate(prompt, o);
      CHECK(cached.ids == full.ids);
      check_rows(m, prompt, cached);
    });
  }
}

TEST_CASE("generate: sampling, EOS, the context's end, quantized logits, tokens as they come and cancel",
          "[generate][cache]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2);
  Model m = Model::random(c, 5, DeviceChoice::Cpu);
  const std::vector<int64_t> prompt = test::random_ids(12, c.vocab_size, 8);
  GenerateOptions o;
  o.max_new = 12;
  o.temperature = 1.0;
  o.top_k = 50;
  o.seed = 3;
  std::vector<int64_t> seen;
  o.on_token = [&](int64_t id) { seen.push_back(id); };
  const Generation sampled = m.generate(prompt, o);
  CHECK(seen == sampled.ids);
  o.cache = false;
  CHECK(m.generate(prompt, o).ids == sampled.ids);  // the same draws from the same logits
  o.cache = true;
  o.seed = 4;
  CHECK(m.generate(prompt, o).ids != sampled.ids);
  // The old signature: greedy, cached.
  o.on_token = nullptr;
  o.temperature = 0;
  o.max_new = 6;
  const Generation greedy = m.generate(prompt, o);
  CHECK(m.generate(prompt, 6) == greedy.ids);
  // The context's end: a prompt two short of it gets two tokens.
  const std::vector<int64_t> long_prompt = test::random_ids(510, c.vocab_size, 2);
  o.keep_rows = true;
  const Generation end = m.generate(long_prompt, o);
  CHECK(end.ids.size() == 2);
  CHECK(end.rows.size() == 2);
  CHECK(end.rows.back().a[0].shape == std::vector<int64_t>{c.map_heads(), 512});
  o.keep_rows = false;
  // Quantized logits: every token re-runs the sequence (the step spans the whole map), the same tokens.
  m.set_logit_bits(6);
  const Generation q = m.generate(prompt, o);
  CHECK_FALSE(q.cached);
  o.cache = false;
  CHECK(m.generate(prompt, o).ids == q.ids);
  m.set_logit_bits(0);
  // Cancel: polled before each token; the tokens so far were reported.
  std::atomic<bool> stop{false};
  int calls = 0;
  o.cache = true;
  o.max_new = 10;
  o.on_token = [&](int64_t) {
    if (++calls == 3) stop = true;
  };
  CHECK_THROWS_AS(m.generate(prompt, o, &stop), Cancelled);
  CHECK(calls == 3);
  // Bad input.
  CHECK_THROWS_WITH(m.generate({}, o), Catch::Contains("the prompt is empty"));
  CHECK_THROWS_WITH(m.generate(test::random_ids(513, c.vocab_size, 1), o),
                    Catch::Contains("513 tokens; this model reads at most 512"));
}

TEST_CASE(
    "difflens generate --trace writes the bundle of the prompt and what the model wrote, and --bench compares",
    "[generate][cli]") {
  test::ScratchDir dir("generate-cli");
  const std::string models = (dir / "m").string(), trace = (dir / "t").string(), log = (dir / "log").string();
  auto run = [&](const std::string& args) {
    const int raw = std::system((std::string(DIFFLENS_EXE) + " " + args + " > '" + log + "' 2>&1").c_str());
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  };
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 2 --heads 2 --vocab 300 --seed 2") == 0);
  const std::string model = " --model " + models + "/diff";
  REQUIRE(run("generate" + model + " --prompt 'The code is' --tokens 6 --temperature 0 --trace " + trace) ==
          0);
  INFO(test::read_all(log));
  const Model m = Model::load(models + "/diff");
  const std::vector<int64_t> prompt = m.tokenizer().encode("The code is", true).ids;
  const std::vector<int64_t> written = m.generate(prompt, 6);
  const Trace t = read_trace_bundle(trace);
  std::vector<int64_t> all = prompt;
  all.insert(all.end(), written.begin(), written.end());
  CHECK(t.token_ids == all);
  CHECK(t.layers.size() == 2);
  CHECK(test::read_all(log).find("(" + std::to_string(all.size()) + " tokens: the prompt's " +
                                 std::to_string(prompt.size()) + " and 6 written)") != std::string::npos);
  // The printed text is the prompt and the same continuation, with the cache or without.
  REQUIRE(run("generate" + model + " --prompt 'The code is' --tokens 6 --temperature 0") == 0);
  const std::string cached = test::read_all(log);
  REQUIRE(run("generate" + model + " --prompt 'The code is' --tokens 6 --temperature 0 --no-cache") == 0);
  CHECK(test::read_all(log) == cached);
  CHECK(cached == m.tokenizer().decode(all) + "\n");
  REQUIRE(run("generate" + model + " --prompt 'The code is' --tokens 8 --bench") == 0);
  const std::string bench = test::read_all(log);
  CHECK(bench.find("8 tokens after a " + std::to_string(prompt.size()) + "-token prompt") !=
        std::string::npos);
  CHECK(bench.find("every token re-runs the sequence") != std::string::npos);
  CHECK(bench.find("key/value cache") != std::string::npos);
  CHECK(bench.find("the same tokens: yes") != std::string::npos);
  // Refused: two prompts, none, a file where the bundle's folder goes.
  test::write_all(dir / "file", "x");
  CHECK(run("generate" + model + " --prompt a --prompt-file x") == 1);
  CHECK(test::read_all(log).find("give exactly one of --prompt, --prompt-file") != std::string::npos);
  CHECK(run("generate" + model) == 1);
  CHECK(run("generate" + model + " --prompt a --trace " + (dir / "file").string()) == 1);
  CHECK(test::read_all(log).find("is a file; give a folder") != std::string::npos);
}

TEST_CASE("generate on CUDA: the key/value cache writes the CPU's tokens and rows", "[generate][gpu]") {
  if (!cuda_available()) test::skip("no CUDA device (this LibTorch build or this machine has no GPU)");
  for (const Case& k : cases()) {
    INFO(k.name);
    const Model cpu = Model::random(k.c, 17, DeviceChoice::Cpu);
    const Model gpu = Model::from_tensors(k.c, cpu.tensors(), DeviceChoice::Cuda);
    const std::vector<int64_t> prompt = test::random_ids(23, k.c.vocab_size, 4);
    GenerateOptions o;
    o.max_new = 10;
    o.keep_rows = true;
    const Generation a = cpu.generate(prompt, o), b = gpu.generate(prompt, o);
    CHECK(b.cached);
    CHECK(b.ids == a.ids);
    check_rows(cpu, prompt, b);
  }
}
