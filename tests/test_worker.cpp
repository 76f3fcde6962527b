// The inference worker: loads on its own thread, runs both slots, latest request wins, stale runs are
// cancelled, broken models and prompts report errors while the worker keeps going.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "app/inference_worker.h"
#include "core/trace_io.h"
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
