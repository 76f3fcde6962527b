// The inference worker: loads on its own thread, runs both slots, latest request wins, stale runs are
// cancelled, broken models and prompts report errors while the worker keeps going.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "app/worker/inference_worker.h"
#include "core/formats/metrics.h"
#include "core/formats/trace_io.h"
#include "core/model/batch.h"
#include "helpers.h"

using namespace difflens;
using namespace difflens::app;

namespace {

// A seeded pair saved to disk (byte tokenizer) so the worker loads real checkpoint directories.
struct PairOnDisk {
  test::ScratchDir dir{"worker"};
  PairOnDisk() {
    Model::random(test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2), 1).save(dir / "diff");
    Model::random(test::tiny_config(AttentionKind::Baseline, 32, 2, 2, 2), 1).save(dir / "baseline");
  }
};

}  // namespace

TEST_CASE("worker loads both slots and runs a prompt through both", "[worker]") {
  PairOnDisk pair;
  std::atomic<int> wakes{0};
  InferenceWorker w([&] { ++wakes; }, 1);
  w.load(0, (pair.dir / "diff").string());
  w.load(1, (pair.dir / "baseline").string());
  const uint64_t id = w.run("Hello, lens!");
  w.wait_idle();
  const auto r = w.take_result();
  REQUIRE(r);
  CHECK(r->request == id);
  REQUIRE(r->traces[0]);
  REQUIRE(r->traces[1]);
  CHECK(r->traces[0]->config.attention == AttentionKind::Diff);
  CHECK(r->traces[1]->config.attention == AttentionKind::Baseline);
  CHECK(r->traces[0]->length() == 13);  // BOS + 12 bytes
  CHECK(r->offsets[0][1] == std::pair<size_t, size_t>{0, 1});
  CHECK(r->traces[0]->tokens[1] == "H");
  CHECK(r->errors[0].empty());
  // One wake per finished job (2 loads, 1 run); the callback runs just after the job is published.
  for (int i = 0; i < 200 && wakes < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(wakes == 3);
  CHECK_FALSE(w.take_result());  // taken once
  const WorkerStatus s = w.status();
  CHECK(s.slots[0].loaded);
  CHECK(s.slots[0].description.find("diff, 2 layers x 2 heads") == 0);
  CHECK(s.last_run_ms > 0);
}

TEST_CASE("worker: the latest request wins and stale results are dropped", "[worker]") {
  PairOnDisk pair;
  InferenceWorker w({}, 1);
  w.load(0, (pair.dir / "diff").string());
  w.load(1, (pair.dir / "baseline").string());
  uint64_t last = 0;
  for (int i = 0; i < 20; ++i) last = w.run(std::string(static_cast<size_t>(50 + i), 'a'));
  w.wait_idle();
  const auto r = w.take_result();
  REQUIRE(r);
  CHECK(r->request == last);
  CHECK(r->prompt.size() == 69);
  CHECK(r->traces[0]->length() == 70);
}

TEST_CASE("worker: a broken model or prompt reports an error and the worker keeps running",
          "[worker][errors]") {
  PairOnDisk pair;
  InferenceWorker w({}, 1);
  w.load(0, (pair.dir / "nonexistent").string());
  w.load(1, (pair.dir / "baseline").string());
  w.run("ok");
  w.wait_idle();
  auto r = w.take_result();
  REQUIRE(r);
  CHECK(r->errors[0] == "no model loaded");
  CHECK(r->traces[1]);
  CHECK(w.status().slots[0].error.find("not a model directory") != std::string::npos);
  CHECK_FALSE(w.status().slots[0].loaded);

  w.load(0, (pair.dir / "diff").string());  // recovers
  w.run("");                                // BOS only: still a valid one-token prompt
  w.wait_idle();
  r = w.take_result();
  REQUIRE(r);
  CHECK(r->traces[0]->length() == 1);
  w.run(std::string(600, 'x'));  // longer than these models' 512 positions
  w.wait_idle();
  r = w.take_result();
  REQUIRE(r);
  CHECK(r->errors[0].find("at most 512") != std::string::npos);
  CHECK(r->errors[1].find("at most 512") != std::string::npos);
  CHECK_THROWS(w.load(5, "x"));
}

TEST_CASE("device menu: which picks reload the models, which are refused", "[worker][device]") {
  using D = DeviceChoice;
  // Without CUDA: auto and cpu are the same device; cuda is refused and nothing changes.
  DeviceSwitch p = plan_device_switch(D::Auto, D::Cpu, false);
  CHECK(p.accepted);
  CHECK_FALSE(p.reload);
  p = plan_device_switch(D::Cpu, D::Auto, false);
  CHECK(p.accepted);
  CHECK_FALSE(p.reload);
  CHECK(p.message == "auto: the CPU (no CUDA here)");
  p = plan_device_switch(D::Auto, D::Cuda, false);
  CHECK_FALSE(p.accepted);
  CHECK_FALSE(p.reload);
  CHECK(p.message.find("CUDA is not available") == 0);
  // Started with --device cuda on a CPU-only build (every load failed): cpu loads them on the CPU.
  p = plan_device_switch(D::Cuda, D::Cpu, false);
  CHECK(p.accepted);
  CHECK(p.reload);
  CHECK(p.message == "loading the models again on the CPU");
  // With CUDA: auto is the GPU, so auto <-> cuda keeps the models and auto/cuda <-> cpu moves them.
  CHECK_FALSE(plan_device_switch(D::Auto, D::Cuda, true).reload);
  CHECK_FALSE(plan_device_switch(D::Cuda, D::Auto, true).reload);
  p = plan_device_switch(D::Auto, D::Cpu, true);
  CHECK(p.reload);
  CHECK(p.message == "loading the models again on the CPU");
  p = plan_device_switch(D::Cpu, D::Cuda, true);
  CHECK(p.accepted);
  CHECK(p.reload);
  CHECK(p.message == "loading the models again on the GPU");
  CHECK_FALSE(plan_device_switch(D::Cpu, D::Cpu, true).reload);
}

TEST_CASE("worker: loads go where set_device says, a CUDA request without CUDA fails in the slot",
          "[worker][device]") {
  PairOnDisk pair;
  InferenceWorker w({}, 1);
  const std::string dir = (pair.dir / "diff").string();
  w.set_device(DeviceChoice::Cuda);
  w.load(0, dir);
  w.wait_idle();
  if (cuda_available()) {
    REQUIRE(w.status().slots[0].loaded);
    CHECK(w.status().slots[0].description.find("cuda") != std::string::npos);
  } else {
    CHECK_FALSE(w.status().slots[0].loaded);
    CHECK(w.status().slots[0].error ==
          "CUDA was requested but this LibTorch build has no usable CUDA device");
  }
  w.set_device(DeviceChoice::Cpu);  // what the menu does: set the device, load the folder again
  w.load(0, dir);
  w.wait_idle();
  REQUIRE(w.status().slots[0].loaded);
  CHECK(w.status().slots[0].error.empty());
  CHECK(w.status().slots[0].description.find(", cpu") != std::string::npos);
  w.run("on the CPU");
  w.wait_idle();
  const auto r = w.take_result();
  REQUIRE(r);
  CHECK(r->traces[0]);
}

TEST_CASE("worker opens trace bundles into a slot and reports broken ones", "[worker][bundle]") {
  PairOnDisk pair;
  const Model m = Model::load(pair.dir / "diff");
  write_trace_bundle(m.capture({1, 40, 41, 42}), pair.dir / "bundle");
  InferenceWorker w({}, 1);
  w.open_bundle(1, (pair.dir / "bundle").string());
  w.wait_idle();
  auto r = w.take_result();
  REQUIRE(r);
  REQUIRE(r->traces[1]);
  CHECK(r->traces[1]->length() == 4);
  CHECK(r->traces[1]->config.attention == AttentionKind::Diff);
  CHECK_FALSE(r->traces[0]);
  w.open_bundle(0, (pair.dir / "missing").string());
  w.wait_idle();
  r = w.take_result();
  REQUIRE(r);
  CHECK(r->errors[0].find("is this a trace bundle directory") != std::string::npos);
}

namespace {

const std::string kHaystack = DIFFLENS_SOURCE_DIR "/assets/haystack.txt";

SweepRequest small_sweep(std::vector<int64_t> lengths, int seeds) {
  SweepRequest req;
  req.sweep.lengths = std::move(lengths);
  req.sweep.depths = {0.0, 1.0};
  req.sweep.needles_queried = {{1, 1}};
  req.sweep.seeds = seeds;
  req.haystack_path = kHaystack;
  return req;
}

// Polls until `done` holds (the sweep runs on the worker; wait_idle would wait for all of it).
template <class F>
bool eventually(F done, int seconds = 60) {
  for (int i = 0; i < seconds * 100; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

TEST_CASE("worker: a needle sweep runs both slots, episode for episode like a direct run",
          "[worker][needle][lab]") {
  PairOnDisk pair;
  InferenceWorker w({}, 1);
  w.load(0, (pair.dir / "diff").string());
  w.load(1, (pair.dir / "baseline").string());
  const uint64_t id = w.start_sweep(small_sweep({160, 200}, 2));
  w.wait_idle();
  const auto p = w.sweep_progress();
  REQUIRE(p);
  CHECK(p->id == id);
  INFO(p->error);
  CHECK(p->finished);
  CHECK_FALSE(p->running);
  CHECK_FALSE(p->cancelled);
  CHECK(p->error.empty());
  CHECK(p->total == 16);  // 2 lengths × 2 depths × 2 seeds, both slots
  CHECK(p->done == 16);
  CHECK(p->models[0] == "diff");
  CHECK(p->models[1] == "baseline");
  CHECK_FALSE(w.sweep_progress(p->version));  // nothing new since
  // The same episodes in the same order (lengths, then depths, then seeds) as the CLI's expansion, with
  // the same answers and attention readouts as running them directly.
  const std::string text = test::read_all(kHaystack);
  const std::vector<NeedleJob> jobs = expand(small_sweep({160, 200}, 2).sweep);
  for (size_t s = 0; s < 2; ++s) {
    const Model m = Model::load(pair.dir / (s == 0 ? "diff" : "baseline"));
    const Haystack hay(text, m.tokenizer());
    const EpisodeBuilder builder(hay, m.tokenizer(), NeedleSplit::Eval);
    REQUIRE(p->runs[s].size() == jobs.size());
    for (size_t j = 0; j < jobs.size(); ++j) {
      const NeedleRun direct = run_needle(m, builder, jobs[j].cell, jobs[j].seed);
      const NeedleRun& got = p->runs[s][j];
      CHECK(got.cell.length == jobs[j].cell.length);
      CHECK(got.cell.depth == jobs[j].cell.depth);
      CHECK(got.seed == jobs[j].seed);
      CHECK(got.tokens == direct.tokens);
      CHECK(got.truths == direct.truths);
      CHECK(got.replies == direct.replies);
      CHECK(got.attention.mean.answer == Approx(direct.attention.mean.answer).margin(1e-6));
      CHECK(got.attention.mean.noise == Approx(direct.attention.mean.noise).margin(1e-6));
    }
  }
}

TEST_CASE("worker: a sweep under interventions runs each slot as trained and under its own, like run_needle",
          "[worker][needle][lab][intervene]") {
  PairOnDisk pair;
  InferenceWorker w({}, 1);
  w.load(0, (pair.dir / "diff").string());
  w.load(1, (pair.dir / "baseline").string());
  SweepRequest req = small_sweep({160}, 2);
  // The Why view's lists: the baseline cannot take λ (skipped, said), it keeps its ablation.
  req.interventions = {std::vector<std::string>{"lambda=0"},
                       std::vector<std::string>{"lambda:1=0", "ablate:0:1"}};
  w.start_sweep(req);
  w.wait_idle();
  const auto p = w.sweep_progress();
  REQUIRE(p);
  INFO(p->error);
  CHECK(p->finished);
  CHECK(p->total == 16);  // 2 depths × 2 seeds × (diff, diff under, baseline, baseline under)
  CHECK(p->done == 16);
  CHECK(p->error ==
        "right slot: skipped --intervene 'lambda:1=0': layer 1 of this baseline model has no λ (only DIFF "
        "layers do)");
  CHECK(p->edited_models[0] == "diff under lambda=0");
  CHECK(p->edited_models[1] == "baseline under ablate:0:1");
  CHECK(p->applied[1] == std::vector<std::string>{"ablate:0:1"});
  const std::string text = test::read_all(kHaystack);
  const std::vector<NeedleJob> jobs = expand(req.sweep);
  for (size_t s = 0; s < 2; ++s) {
    const Model m = Model::load(pair.dir / (s == 0 ? "diff" : "baseline"));
    const Haystack hay(text, m.tokenizer());
    const EpisodeBuilder builder(hay, m.tokenizer(), NeedleSplit::Eval);
    REQUIRE(p->runs[s].size() == jobs.size());
    REQUIRE(p->edited_runs[s].size() == jobs.size());
    // The intervened lane really ran edited: a random model's attention is near uniform, so the shares move
    // little (DIFF: 1e-4 over these episodes, the baseline 1e-5), but they move.
    double moved = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const NeedleRun direct = run_needle(m, builder, jobs[j].cell, jobs[j].seed, nullptr, p->applied[s]);
      const NeedleRun& got = p->edited_runs[s][j];
      CHECK(got.seed == jobs[j].seed);
      CHECK(got.replies == direct.replies);
      CHECK(got.attention.mean.answer == Approx(direct.attention.mean.answer).margin(1e-6));
      CHECK(got.attention.mean.noise == Approx(direct.attention.mean.noise).margin(1e-6));
      moved += std::abs(got.attention.mean.noise - p->runs[s][j].attention.mean.noise);
    }
    CHECK(moved > 1e-6);
  }
  // A list no slot's model can take: the sweep runs as trained only and says why.
  req.interventions = {std::vector<std::string>{"ablate:5:0"}, std::vector<std::string>{"lambda=0"}};
  w.start_sweep(req);
  w.wait_idle();
  const auto q = w.sweep_progress();
  INFO(q->error);
  CHECK(q->finished);
  CHECK(q->total == 8);
  CHECK(q->edited_models[0].empty());
  CHECK(q->edited_runs[0].empty());
  CHECK(q->error.find("left slot: skipped --intervene 'ablate:5:0': layer 5 is out of range") !=
        std::string::npos);
  CHECK(q->error.find("right slot: skipped --intervene 'lambda=0'") != std::string::npos);
}

TEST_CASE("worker: prompts run during a sweep, cancel stops it, finished episodes stay",
          "[worker][needle][lab]") {
  PairOnDisk pair;
  InferenceWorker w({}, 1);
  w.load(0, (pair.dir / "diff").string());
  w.load(1, (pair.dir / "baseline").string());
  w.wait_idle();
  w.start_sweep(small_sweep({384, 448, 512}, 20));  // 240 episodes: minutes of work
  REQUIRE(eventually([&] { return w.sweep_progress()->done >= 1; }));
  // A prompt typed meanwhile comes back long before the sweep ends.
  const uint64_t id = w.run("typed during a sweep");
  std::optional<RunResult> r;
  REQUIRE(eventually([&] { return (r = w.take_result()).has_value(); }));
  CHECK(r->request == id);
  CHECK(r->traces[0]);
  CHECK(r->traces[1]);
  auto p = w.sweep_progress();
  CHECK(p->running);
  CHECK(p->done < p->total);
  w.cancel_sweep();
  REQUIRE(eventually([&] { return !w.sweep_progress()->running; }));
  p = w.sweep_progress();
  CHECK(p->cancelled);
  CHECK_FALSE(p->finished);
  CHECK(p->done < 240);
  CHECK(p->runs[0].size() + p->runs[1].size() == p->done);
  CHECK(p->runs[0].size() >= p->runs[1].size());  // the slots take turns, left first
  CHECK(p->runs[0].size() - p->runs[1].size() <= 1);
  w.wait_idle();  // returns: nothing left to do
  // A new sweep replaces a running one; a model change stops a sweep.
  w.start_sweep(small_sweep({512}, 20));
  REQUIRE(eventually([&] { return w.sweep_progress()->done >= 1; }));
  const uint64_t second = w.start_sweep(small_sweep({160}, 1));
  w.wait_idle();
  p = w.sweep_progress();
  CHECK(p->id == second);
  CHECK(p->finished);
  CHECK(p->done == 4);
  w.start_sweep(small_sweep({512}, 20));
  REQUIRE(eventually([&] { return w.sweep_progress()->done >= 1; }));
  w.load(1, (pair.dir / "diff").string());
  w.wait_idle();
  p = w.sweep_progress();
  CHECK(p->cancelled);
  CHECK(p->error.find("model in the right slot changed") != std::string::npos);
}

TEST_CASE("worker: sweeps that cannot run say why", "[worker][needle][lab]") {
  PairOnDisk pair;
  InferenceWorker w({}, 1);
  SweepRequest req = small_sweep({160}, 1);
  w.start_sweep(req);  // no models yet
  w.wait_idle();
  auto p = w.sweep_progress();
  CHECK_FALSE(p->finished);
  CHECK(p->error.find("left slot: no model loaded") != std::string::npos);
  CHECK(p->error.find("no slot can run the sweep") != std::string::npos);
  w.load(0, (pair.dir / "diff").string());
  w.load(1, (pair.dir / "baseline").string());
  req.haystack_path = (pair.dir / "missing.txt").string();
  w.start_sweep(req);
  w.wait_idle();
  CHECK(w.sweep_progress()->error.find("cannot open the haystack") != std::string::npos);
  req = small_sweep({1024}, 1);  // longer than the models' 512 positions
  w.start_sweep(req);
  w.wait_idle();
  p = w.sweep_progress();
  CHECK(p->error.find("exceeds the model's 512 positions") != std::string::npos);
  CHECK(p->done == 0);
  req = small_sweep({160}, 0);
  w.start_sweep(req);
  w.wait_idle();
  CHECK(w.sweep_progress()->error.find("seeds must be at least 1") != std::string::npos);
  req = small_sweep({80}, 1);  // too short for a needle and its question in bytes
  w.start_sweep(req);
  w.wait_idle();
  CHECK(w.sweep_progress()->error.find("cannot hold 1 needles") != std::string::npos);
  w.cancel_sweep();  // nothing running: harmless
  w.run("still fine");
  w.wait_idle();
  CHECK(w.take_result());
}

TEST_CASE("worker: a sweep with quantized logits matches direct quantized runs and leaves prompts exact",
          "[worker][needle][lab][quantize]") {
  PairOnDisk pair;
  InferenceWorker w({}, 1);
  w.load(0, (pair.dir / "diff").string());
  SweepRequest req = small_sweep({160}, 2);
  req.logit_bits = 4;
  w.start_sweep(req);
  w.wait_idle();
  const auto p = w.sweep_progress();
  INFO(p->error);
  REQUIRE(p->finished);
  CHECK(p->models[0] == "diff (logits 4-bit)");
  CHECK(p->runs[1].empty());  // no right model: the left one runs alone
  Model m = Model::load(pair.dir / "diff");
  const Haystack hay(test::read_all(kHaystack), m.tokenizer());
  const EpisodeBuilder builder(hay, m.tokenizer(), NeedleSplit::Eval);
  const std::vector<NeedleJob> jobs = expand(req.sweep);
  REQUIRE(p->runs[0].size() == jobs.size());
  bool differs_from_exact = false;
  for (size_t j = 0; j < jobs.size(); ++j) {
    m.set_logit_bits(4);
    const NeedleRun quantized = run_needle(m, builder, jobs[j].cell, jobs[j].seed);
    m.set_logit_bits(0);
    const NeedleRun exact = run_needle(m, builder, jobs[j].cell, jobs[j].seed);
    CHECK(p->runs[0][j].replies == quantized.replies);
    CHECK(p->runs[0][j].attention.mean.noise == Approx(quantized.attention.mean.noise).margin(1e-6));
    differs_from_exact |= std::fabs(exact.attention.mean.noise - quantized.attention.mean.noise) > 1e-6;
  }
  CHECK(differs_from_exact);
  // A prompt run after the sweep uses exact logits again.
  w.run("after the sweep");
  w.wait_idle();
  const auto r = w.take_result();
  REQUIRE(r);
  REQUIRE(r->traces[0]);
  CHECK(r->traces[0]->logit_bits == 0);
  req.logit_bits = 1;
  w.start_sweep(req);
  w.wait_idle();
  CHECK(w.sweep_progress()->error.find("2 to 32 bits") != std::string::npos);
}

TEST_CASE("worker: a model without a text tokenizer reads typed token ids", "[worker][errors][tokenizer]") {
  ModelConfig c = test::tiny_config(AttentionKind::Diff);
  c.tokenizer = TokenizerKind::SentencePiece;  // built in memory: no tokenizer.model, so ids only
  const Model m = Model::random(c, 3);
  REQUIRE_FALSE(m.tokenizer().can_encode());
  const Encoding e = encode_prompt(m, app::typed_prompt(" 1, 40 41,42 "), app::kTypeIds);
  CHECK(e.ids == std::vector<int64_t>{1, 40, 41, 42});  // as typed: no BOS added
  CHECK(e.pieces.size() == 4);
  CHECK(e.offsets.size() == 4);
  CHECK_THROWS_WITH(encode_prompt(m, app::typed_prompt("hello"), app::kTypeIds),
                    Catch::Contains("this model has no text tokenizer") &&
                        Catch::Contains("type token ids separated by commas or spaces, e.g. 1, 450, 3") &&
                        Catch::Contains("expected comma-separated non-negative integers near 'hello'"));
  CHECK_THROWS_WITH(encode_prompt(m, app::typed_prompt(""), app::kTypeIds),
                    Catch::Contains("type token ids"));
  CHECK_THROWS_WITH(encode_prompt(m, app::typed_prompt("1, 100000"), app::kTypeIds),
                    Catch::Contains("id 100000 is outside the vocabulary"));
  // A model with a tokenizer reads text, with BOS.
  const Model b = Model::random(test::tiny_config(AttentionKind::Baseline), 3);
  CHECK(encode_prompt(b, app::typed_prompt("1, 2"), app::kTypeIds).ids.size() ==
        5);  // BOS + the 4 bytes of "1, 2"
}

TEST_CASE("worker: Continue writes generate's tokens as text that continues the prompt, and typing stops it",
          "[worker][generate]") {
  InferenceWorker w({}, 1);
  const std::string models = DIFFLENS_SOURCE_DIR "/assets/models/";
  w.load(0, models + "diff-small");
  w.load(1, models + "baseline-small");
  w.wait_idle();
  const std::string prompt =
      "The secret code of Rachel is 4823. The river was high that spring. Q: What is the secret code of "
      "Rachel?\nA: The secret code of Rachel is";
  GenerateOptions o;
  o.max_new = 6;
  for (int slot = 0; slot < 2; ++slot) {
    INFO("slot " << slot);
    const uint64_t id = w.continue_prompt(slot, prompt, o);
    w.wait_idle();
    const auto c = w.take_continuation();
    REQUIRE(c);
    CHECK(c->request == id);
    CHECK(c->slot == slot);
    CHECK(c->error.empty());
    CHECK(c->prompt == prompt);
    // The same tokens as Model::generate (and `difflens generate`), and the text decoding adds after the
    // prompt.
    const Model m = Model::load(models + (slot == 0 ? "diff-small" : "baseline-small"));
    const std::vector<int64_t> ids = m.tokenizer().encode(prompt, true).ids;
    const std::vector<int64_t> expect = m.generate(ids, 6);
    CHECK(c->ids == expect);
    std::vector<int64_t> all = ids;
    all.insert(all.end(), expect.begin(), expect.end());
    CHECK(prompt + c->text == prompt + m.tokenizer().decode(all).substr(m.tokenizer().decode(ids).size()));
    CHECK(m.tokenizer().encode(prompt + c->text, true).ids.size() >= ids.size() + 1);
    if (slot == 0) CHECK(c->text.rfind(" 4823", 0) == 0);  // DIFF retrieves the code (held in its card: 1.00)
    CHECK_FALSE(c->first_wrote_back_space);                // the prompt ends in a word
    CHECK_FALSE(w.take_continuation());                    // taken once
  }
  {  // A prompt ending in a space (the needle builder's, before the code): the space is not written twice,
     // and the whole text reads back as the prompt's tokens and the written ones.
    const std::string spaced = prompt + " ";
    w.continue_prompt(0, spaced, o);
    w.wait_idle();
    const auto c = w.take_continuation();
    REQUIRE(c);
    const Model m = Model::load(models + "diff-small");
    const std::vector<int64_t> ids = m.tokenizer().encode(spaced, true).ids;
    std::vector<int64_t> all = ids;
    for (const int64_t id : m.generate(ids, 6)) all.push_back(id);
    CHECK(c->text.rfind("4823", 0) == 0);
    CHECK(m.tokenizer().encode(spaced + c->text, true).ids == all);
    // Its first token wrote the space back (a step that adds nothing), and the continuation says so.
    REQUIRE_FALSE(c->steps.empty());
    CHECK(c->steps.front().empty());
    CHECK(c->first_wrote_back_space);
  }
  // Typing cancels: whatever was queued or running is never delivered, and the worker goes on.
  o.max_new = 200;
  w.continue_prompt(0, prompt, o);
  w.cancel_continuation();
  w.wait_idle();
  CHECK_FALSE(w.take_continuation());
  // A run queued after a continuation waits for it (Continue's text then runs as the newest prompt).
  o.max_new = 3;
  const uint64_t first = w.continue_prompt(0, prompt, o);
  const uint64_t run = w.run(prompt);
  w.wait_idle();
  const auto r = w.take_result();
  REQUIRE(r);
  CHECK(r->request == run);
  const auto delivered = w.take_continuation();
  REQUIRE(delivered);
  CHECK(delivered->request == first);
  CHECK(delivered->ids.size() == 3);
  // A run queued while a continuation writes does not stop it (the edit that stops it is
  // cancel_continuation).
  o.max_new = 120;
  const uint64_t writing = w.continue_prompt(0, prompt, o);
  for (int i = 0; i < 200 && w.status().activity.rfind("writing", 0) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  w.run(prompt);
  w.wait_idle();
  const auto kept = w.take_continuation();
  REQUIRE(kept);
  CHECK(kept->request == writing);
  CHECK(kept->error.empty());
  CHECK(w.take_result());
  // Refusals come back as the continuation's error.
  o.max_new = 4;
  w.continue_prompt(0, "", o);
  w.wait_idle();
  auto c = w.take_continuation();
  REQUIRE(c);
  CHECK(c->error.find("the prompt is empty") != std::string::npos);
  InferenceWorker empty({}, 1);
  empty.continue_prompt(1, prompt, o);
  empty.wait_idle();
  c = empty.take_continuation();
  REQUIRE(c);
  CHECK(c->error == "the right slot has no model to continue the prompt with");
}

TEST_CASE("worker: the Why view's explanation as trained is made once per prompt and query", "[worker]") {
  PairOnDisk pair;
  InferenceWorker w({}, 1);
  w.load(0, (pair.dir / "diff").string());
  w.load(1, (pair.dir / "baseline").string());
  RunEdits edits;
  edits.explain = true;
  auto run = [&](const std::string& prompt, const RunEdits& e) {
    w.run(prompt, {}, e);
    w.wait_idle();
    auto r = w.take_result();
    REQUIRE(r);
    return *r;
  };
  const RunResult plain = run("The code is 4821.", edits);
  REQUIRE(plain.why[0]);
  CHECK_FALSE(plain.why_before[0]);
  edits.interventions[0] = edits.interventions[1] = {"lambda=0"};
  const RunResult zero = run("The code is 4821.", edits);
  REQUIRE(zero.why_before[0]);
  CHECK(zero.why_before[0] == plain.why[0]);  // reused, not made again
  CHECK(zero.why[0] != plain.why[0]);
  CHECK(zero.why[0]->interventions.size() == 1);
  edits.interventions[0] = edits.interventions[1] = {"ablate:0:0"};
  const RunResult ablated = run("The code is 4821.", edits);
  CHECK(ablated.why_before[0] == plain.why[0]);
  // Another query or prompt: made anew, and equal to an explanation made from scratch.
  edits.query = 5;
  const RunResult other = run("The code is 4821.", edits);
  REQUIRE(other.why_before[0]);
  CHECK(other.why_before[0] != plain.why[0]);
  CHECK(other.why_before[0]->attribution.query == 5);
  const Model m = Model::load(pair.dir / "diff", DeviceChoice::Cpu);
  LensOptions lo;
  lo.query = 5;
  const AnswerExplanation fresh = m.explain_answer(other.traces[0]->token_ids, lo);
  CHECK(other.why_before[0]->attribution.logit == Approx(fresh.attribution.logit).margin(1e-6));
}

TEST_CASE("worker: the Why view's patching equals the core's, and says why it cannot run",
          "[worker][patch]") {
  PairOnDisk pair;
  InferenceWorker w({}, 1);
  w.load(0, (pair.dir / "diff").string());
  w.load(1, (pair.dir / "baseline").string());
  RunEdits edits;
  edits.explain = true;
  edits.corrupt = "The code is 9056.";
  w.run("The code is 4821.", {}, edits);
  w.wait_idle();
  auto r = w.take_result();
  REQUIRE(r);
  const Model m = Model::load(pair.dir / "diff", DeviceChoice::Cpu);
  const std::vector<int64_t> clean = m.tokenizer().encode("The code is 4821.", true).ids,
                             corrupt = m.tokenizer().encode("The code is 9056.", true).ids;
  REQUIRE(r->patch[0]);  // this pair's DIFF model parts the two prompts (the baseline may not)
  for (size_t s = 0; s < 2; ++s) {
    INFO("slot " << s);
    if (!r->patch[s]) {
      // Untrained models may give both prompts the same next tokens: then the reason is on screen instead.
      CHECK(r->patch_error[s].find("are both") != std::string::npos);
      continue;
    }
    const PatchReport& p = *r->patch[s];
    const ModelConfig& c = r->traces[s]->config;
    REQUIRE(p.results.size() == static_cast<size_t>(c.num_hidden_layers * c.map_heads()));
    if (s != 0) continue;
    PatchOptions o;
    o.extend_shared = 8;
    const PatchReport core = m.patch(clean, corrupt, {{{PatchComponent::Head, 1, 1, {}}}}, o);
    CHECK(p.target == core.target);
    CHECK(p.alternative == core.alternative);
    CHECK(p.shared == core.shared);
    CHECK(p.results[static_cast<size_t>(c.map_heads() + 1)].normalized ==
          Approx(core.results[0].normalized).margin(1e-9));
  }
  // A corrupt prompt of another length: said per slot, the explanation still there.
  edits.corrupt = "The code of the other is 9056 and 1.";
  w.run("The code is 4821.", {}, edits);
  w.wait_idle();
  r = w.take_result();
  REQUIRE(r);
  CHECK(r->why[0]);
  CHECK_FALSE(r->patch[0]);
  CHECK(r->patch_error[0].find("patching copies position by position") != std::string::npos);
}

TEST_CASE("worker: the Noise view's measure over kept steps equals each step's own readout, and can stop",
          "[worker][timeline]") {
  test::ScratchDir dir("workersteps");
  // Two "kept steps" of a run: two different random models; the slot-1 run has one step that is broken.
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2);
  Model::random(c, 3).save(dir / "s10");
  Model::random(c, 4).save(dir / "s20");
  std::filesystem::create_directories(dir / "broken");
  test::write_all(dir / "broken" / "config.json", "{ not json");
  InferenceWorker w({}, 1);
  StepsRequest q;
  q.prompt = "The code of Anna is 4821. Q: Anna? A: 4821";
  q.answer = {21, 25};
  q.query = 34;
  q.steps[0] = {{10, (dir / "s10").string()}, {20, (dir / "s20").string()}};
  q.steps[1] = {{10, (dir / "broken").string()}};
  const uint64_t id = w.start_steps(q);
  w.wait_idle();
  const auto p = w.steps_progress();
  REQUIRE(p);
  CHECK(p->id == id);
  CHECK(p->finished);
  CHECK_FALSE(p->running);
  CHECK(p->done == 3);
  REQUIRE(p->points[0].size() == 2);
  for (size_t k = 0; k < 2; ++k) {
    const Model m = Model::load(dir / (k == 0 ? "s10" : "s20"));
    const Trace t = m.capture(encode_prompt(m, app::typed_prompt(q.prompt), app::kTypeIds).ids);
    const NoiseReadout want = attention_noise(t, {21, 25}, {34, t.length()});
    CHECK(p->points[0][k].step == (k == 0 ? 10 : 20));
    CHECK(p->points[0][k].error.empty());
    CHECK(p->points[0][k].noise_mass == Approx(want.mean.noise_mass).margin(1e-9));
    CHECK(p->points[0][k].answer_mass == Approx(want.mean.answer_mass).margin(1e-9));
  }
  CHECK(p->points[0][0].noise_mass != p->points[0][1].noise_mass);  // two different models
  REQUIRE(p->points[1].size() == 1);
  CHECK_THAT(p->points[1][0].error, Catch::Contains("config.json"));
  // Cancelled at once (usually before it starts, the worker busy loading first; but a loaded machine may let
  // it measure a step or a few first - the sanitizer CI run saw one): it stops, says so, keeps only what it
  // measured, each point a step of the plan; the version moves so the view sees it. 400 steps, so that it
  // cannot finish first.
  StepsRequest many = q;
  many.steps[0].clear();
  for (int k = 1; k <= 400; ++k) many.steps[0].push_back({k, (dir / "s10").string()});
  many.steps[1].clear();
  w.load(0, (dir / "s10").string());  // keeps the worker busy first
  w.start_steps(many);
  w.cancel_steps();
  w.wait_idle();
  const auto c2 = w.steps_progress();
  REQUIRE(c2);
  CHECK(c2->cancelled);
  CHECK_FALSE(c2->finished);
  CHECK(c2->done < 400);
  CHECK(c2->points[0].size() == c2->done);
  for (size_t k = 0; k < c2->points[0].size(); ++k)
    CHECK(c2->points[0][k].step == static_cast<int64_t>(k) + 1);
  CHECK(c2->points[1].empty());
  CHECK_FALSE(w.steps_progress(c2->version));  // unchanged since
}

TEST_CASE("worker: a prompt set runs both slots into a folder as difflens batch writes it, and stops",
          "[worker][batch]") {
  PairOnDisk pair;
  test::ScratchDir dir("workerset");
  std::string items;
  for (int i = 0; i < 4; ++i)
    items += "{\"id\": \"n" + std::to_string(i) + "\", \"prompt\": \"The code of Anna is 48" +
             std::to_string(i) + "1. Anna?\", \"answer\": \" 48" + std::to_string(i) + "1\"}\n";
  items += "{\"prompt\": 3}\n";  // a bad item: errors.csv, the set goes on
  test::write_all(dir / "items.jsonl", items);
  InferenceWorker w({}, 1);
  w.load(0, (pair.dir / "diff").string());
  w.load(1, (pair.dir / "baseline").string());
  const uint64_t id = w.start_prompt_set({(dir / "items.jsonl").string(), (dir / "out").string(), false});
  w.wait_idle();
  auto p = w.prompt_set_progress();
  REQUIRE(p);
  CHECK(p->id == id);
  CHECK(p->finished);
  CHECK(p->error.empty());
  CHECK(p->done == 5);
  CHECK(p->total == 5);
  CHECK(p->failed == 2);  // the bad item on each model
  CHECK_THAT(p->summary, Catch::Contains("| accuracy (greedy) |"));
  // What each model wrote: as core/model/batch's run_batch_entry gives it, item by item.
  const std::string csv = test::read_all(dir / "out/items.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 4 * 2);
  CHECK(test::read_all(dir / "out/errors.csv").find("5,5,") != std::string::npos);
  const Model m = Model::load(pair.dir / "diff");
  const BatchItem item = parse_batch_item(
      "{\"id\": \"n2\", \"prompt\": \"The code of Anna is 4821. Anna?\", \"answer\": \" 4821\"}", 3);
  std::vector<std::string> refused;
  const BatchOutcome o = run_batch_entry(m, item, {}, refused);
  const std::string name = m.config().name.empty() ? (pair.dir / "diff").string() : m.config().name;
  CHECK(test::read_all(dir / "out/items.jsonl").find(batch_record_json(item, o, name)) != std::string::npos);
  // Again into the same folder: refused, saying how to go on; with Resume nothing runs twice.
  w.start_prompt_set({(dir / "items.jsonl").string(), (dir / "out").string(), false});
  w.wait_idle();
  p = w.prompt_set_progress();
  CHECK_THAT(p->error, Catch::Contains("items.jsonl is there already; tick Resume"));
  w.start_prompt_set({(dir / "items.jsonl").string(), (dir / "out").string(), true});
  w.wait_idle();
  p = w.prompt_set_progress();
  CHECK(p->finished);
  CHECK(p->skipped == 8);
  const std::string again = test::read_all(dir / "out/items.csv");
  CHECK(again == csv);
  // Cancelled before it starts: nothing written; a missing file: said.
  w.load(0, (pair.dir / "diff").string());
  w.start_prompt_set({(dir / "items.jsonl").string(), (dir / "out2").string(), false});
  w.cancel_prompt_set();
  w.wait_idle();
  p = w.prompt_set_progress();
  CHECK(p->cancelled);
  CHECK(p->done == 0);
  CHECK_FALSE(std::filesystem::exists(dir / "out2" / "items.jsonl"));
  w.start_prompt_set({(dir / "missing.jsonl").string(), (dir / "out3").string(), false});
  w.wait_idle();
  CHECK_THAT(w.prompt_set_progress()->error, Catch::Contains("cannot be read"));
}

TEST_CASE("worker: a job replaced while it runs leaves nothing of itself in the new one's progress",
          "[worker][batch][timeline]") {
  PairOnDisk pair;
  test::ScratchDir dir("workerreplace");
  std::string items;
  for (int i = 0; i < 30; ++i)
    items += "{\"prompt\": \"The code of Anna is 48" + std::to_string(i % 10) +
             "1. Anna?\", \"answer\": \" 4801\"}\n";
  test::write_all(dir / "items.jsonl", items);
  InferenceWorker w({}, 1);
  w.load(0, (pair.dir / "diff").string());
  w.load(1, (pair.dir / "baseline").string());
  w.wait_idle();
  // A set started, replaced at once by one into an existing folder (refused), then by a good one: no crash,
  // and the last one's counters are its own.
  w.start_prompt_set({(dir / "items.jsonl").string(), (dir / "a").string(), false});
  std::filesystem::create_directories(dir / "b");
  test::write_all(dir / "b" / "items.jsonl", "");
  w.start_prompt_set({(dir / "items.jsonl").string(), (dir / "b").string(), false});
  w.start_prompt_set({(dir / "items.jsonl").string(), (dir / "c").string(), false});
  w.wait_idle();
  const auto p = w.prompt_set_progress();
  REQUIRE(p);
  CHECK(p->request.out == (dir / "c").string());
  CHECK(p->finished);
  CHECK(p->done == 30);
  CHECK(p->skipped == 0);
  const std::string csv = test::read_all(dir / "c" / "items.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 30 * 2);
  // The same for the steps: the second job's points are its own steps only.
  Model::random(test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2), 9).save(dir / "s1");
  StepsRequest q;
  q.prompt = "The code of Anna is 4821. Anna? 4821";
  q.answer = {21, 25};
  q.query = 30;
  q.steps[0] = {{1, (dir / "s1").string()}, {2, (dir / "s1").string()}, {3, (dir / "s1").string()}};
  w.start_steps(q);
  q.steps[0] = {{7, (dir / "s1").string()}};
  w.start_steps(q);
  w.wait_idle();
  const auto s = w.steps_progress();
  REQUIRE(s);
  CHECK(s->finished);
  REQUIRE(s->points[0].size() == 1);
  CHECK(s->points[0][0].step == 7);
  CHECK(s->done == 1);
}
