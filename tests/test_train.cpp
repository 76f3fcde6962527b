// `train` on a tiny pair: the loss goes down for both models, logs are written, a stopped run resumes
// to exactly the weights of an uninterrupted one, and the saved checkpoint reloads to identical logits.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <tuple>

#include <sys/resource.h>

#include <atomic>
#include <csignal>

#include <cmath>
#include <fstream>

#include "core/formats/error.h"
#include "core/formats/model_dir.h"
#include "core/model/model.h"
#include "core/model/train.h"
#include "helpers.h"

#include <nlohmann/json.hpp>

using namespace difflens;

namespace {

const std::filesystem::path kAssets = DIFFLENS_SOURCE_DIR "/assets";

// A corpus directory made from the shipped haystack text and the bundled tokenizer.
void make_corpus(const std::filesystem::path& dir) {
  const std::string text = test::read_all(kAssets / "haystack.txt");
  REQUIRE(text.size() > 100000);
  test::write_all(dir / "train.txt", text.substr(0, 200000));
  test::write_all(dir / "val.txt", text.substr(200000));
  std::filesystem::copy_file(kAssets / "models/diff-small/tokenizer.model", dir / "tokenizer.model");
}

TrainOptions tiny(const std::filesystem::path& corpus, const std::filesystem::path& out, int64_t steps) {
  TrainOptions o;
  o.corpus_dir = corpus;
  o.out_dir = out;
  o.model.hidden_size = 32;
  o.model.num_layers = 1;
  o.model.diff_heads = 2;
  o.model.diff_kv_heads = 2;
  o.steps = steps;
  o.seq_len = 64;
  o.batch = 4;
  o.lr = 3e-3;
  o.warmup = 5;
  o.eval_every = 20;
  o.save_every = 1000;
  o.eval_episodes = 2;
  o.eval_lengths = {96};
  o.threads = 1;
  o.device = "cpu";
  return o;
}

std::vector<double> column(const std::filesystem::path& csv, int col) {
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);  // header
  std::vector<double> v;
  while (std::getline(in, line)) {
    size_t pos = 0;
    for (int c = 0; c < col; ++c) pos = line.find(',', pos) + 1;
    v.push_back(std::stod(line.substr(pos)));
  }
  return v;
}

double max_weight_difference(const std::filesystem::path& a_dir, const std::filesystem::path& b_dir) {
  const auto a = Model::load(a_dir).tensors(), b = Model::load(b_dir).tensors();
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].data.size(); ++j)
      d = std::max<double>(d, std::fabs(a[i].data[j] - b[i].data[j]));
  return d;
}

}  // namespace

TEST_CASE("train: both models' loss goes down and the logs are written", "[train]") {
  test::ScratchDir dir("train");
  make_corpus(dir.path());
  const TrainOptions o = tiny(dir.path(), dir / "out", 60);
  CHECK(train_pair(o, nullptr, nullptr) == 60);
  for (const char* name : {"diff-small", "baseline-small"}) {
    INFO(name);
    const auto model_dir = dir / "out" / name;
    for (const char* f :
         {"config.json", "model.safetensors", "tokenizer.model", "train_log.csv", "eval_log.csv"})
      CHECK(std::filesystem::exists(model_dir / f));
    const auto val = column(model_dir / "train_log.csv", 2);
    const auto tokens = column(model_dir / "train_log.csv", 3);
    REQUIRE(val.size() == 3);  // steps 20, 40, 60
    CHECK(val[2] < val[0]);
    CHECK(val[0] < 8.32);  // below ln(4096) = uniform guessing
    CHECK(tokens[2] == 60 * 4 * 64);
    const Model m = Model::load(model_dir);
    CHECK(m.tokenizer().is_sentencepiece());
    CHECK(m.config().vocab_size == 4096);
  }
}

TEST_CASE("train --keep-every: each N-th step's weights stay as a model folder of their own", "[train]") {
  test::ScratchDir dir("trainkeep");
  make_corpus(dir.path());
  TrainOptions o = tiny(dir.path(), dir / "out", 30);
  o.keep_every = 10;
  o.save_every = 10;
  CHECK(train_pair(o, nullptr, nullptr) == 30);
  for (const char* name : {"diff-small", "baseline-small"}) {
    INFO(name);
    const auto run = dir / "out" / name;
    for (int step : {10, 20, 30}) {
      char folder[32];
      std::snprintf(folder, sizeof folder, "step-%08d", step);
      const auto kept = run / "checkpoints" / folder;
      CHECK(test::read_all(kept / "step.json").find("\"step\": " + std::to_string(step)) !=
            std::string::npos);
      CHECK_FALSE(std::filesystem::exists(kept / "optimizer.safetensors"));  // the weights alone
      const Model m = Model::load(kept);  // a model folder: its tokenizer reads text
      CHECK(m.tokenizer().is_sentencepiece());
    }
    CHECK_FALSE(std::filesystem::exists(run / "checkpoints" / "step-00000005"));
    // The last kept step is the published weights; an earlier one is another model.
    CHECK(max_weight_difference(run / "checkpoints" / "step-00000030", run) == 0);
    CHECK(max_weight_difference(run / "checkpoints" / "step-00000010", run) > 0);
    // The run's timeline, from the model folder or from any of its kept steps (the app's step slider).
    for (const auto& from :
         {run, run / "checkpoints" / "step-00000020", run / "checkpoints/step-00000020/"}) {
      const KeptSteps k = kept_steps(from);
      CHECK(k.model.filename() == name);
      REQUIRE(k.steps.size() == 3);
      CHECK(k.steps[0].first == 10);
      CHECK(k.steps[2].first == 30);
      CHECK(k.step_of(run / "checkpoints" / "step-00000020") == 20);
      CHECK(k.step_of(run) == -1);
    }
  }
  // A step whose step.json is missing (a run stopped while keeping it) is not offered; a folder of no run
  // has no steps.
  std::filesystem::remove(dir / "out" / "diff-small" / "checkpoints" / "step-00000030" / "step.json");
  CHECK(kept_steps(dir / "out" / "diff-small").steps.size() == 2);
  std::filesystem::create_directories(dir / "out" / "diff-small" / "checkpoints" / "step-x");
  CHECK(kept_steps(dir / "out" / "diff-small").steps.size() == 2);
  CHECK(kept_steps(dir.path()).steps.empty());
  // --fresh removes the run's kept steps with its state, so that none mixes with a new run's.
  o.resume = false;
  o.steps = 5;
  o.keep_every = 0;
  CHECK(train_pair(o, nullptr, nullptr) == 5);
  CHECK_FALSE(std::filesystem::exists(dir / "out" / "diff-small" / "checkpoints"));
  o.keep_every = -1;
  CHECK_THROWS_WITH(train_pair(o, nullptr, nullptr), Catch::Contains("keep_every must be 0 (none)"));
}

TEST_CASE("train: a stopped run resumes to exactly the weights of an uninterrupted one", "[train]") {
  test::ScratchDir dir("resume");
  make_corpus(dir.path());
  // Two phases, the second (drills, weighted answers) starting after the interruption.
  auto with_phases = [](TrainOptions o) {
    TrainPhase drills;
    drills.from_step = 12;
    drills.mix = DataMix{0.25, 0.5, NameSet::SingleToken};
    drills.answer_weight = 3;
    o.phases.front().mix.names = NameSet::Original;
    o.phases.push_back(drills);
    o.eval_every = 10;
    return o;
  };
  const TrainOptions full = with_phases(tiny(dir.path(), dir / "full", 20));
  train_pair(full, nullptr, nullptr);

  const TrainOptions part = with_phases(tiny(dir.path(), dir / "part", 20));
  std::atomic<bool> stop{false};
  CHECK(train_pair(part, &stop, [&](const TrainProgress& p) { stop = p.step >= 8; }) == 8);
  CHECK(train_pair(part, nullptr, nullptr) == 20);  // resumes from step 8

  for (const char* name : {"diff-small", "baseline-small"}) {
    INFO(name);
    CHECK(max_weight_difference(dir / "full" / name, dir / "part" / name) < 1e-5);
  }
  CHECK(column(dir / "part/diff-small/train_log.csv", 0) == std::vector<double>{10, 20});
  // A time limit stops after the step in progress and saves; runs under a limit resume one another to the
  // same weights too (here a limit that every step exceeds: one step per run).
  TrainOptions timed = with_phases(tiny(dir.path(), dir / "timed", 20));
  timed.max_seconds = 1e-6;
  for (int64_t expect = 1; expect <= 3; ++expect) CHECK(train_pair(timed, nullptr, nullptr) == expect);
  timed.max_seconds = 0;
  CHECK(train_pair(timed, nullptr, nullptr) == 20);
  for (const char* name : {"diff-small", "baseline-small"}) {
    INFO(name);
    CHECK(max_weight_difference(dir / "full" / name, dir / "timed" / name) < 1e-5);
  }
  // Each evaluation names the needle set of the phase that produced the weights; digit accuracy is a
  // fraction.
  const std::string log = test::read_all(dir / "full/diff-small/eval_log.csv");
  CHECK(log.rfind("step,tokens_seen,needle_acc_96,digit_acc_96,names\n", 0) == 0);
  CHECK(log.find("\n10,2560,") != std::string::npos);
  CHECK(log.find(",original\n20,5120,") != std::string::npos);
  CHECK(log.substr(log.size() - 14) == ",single-token\n");
  const auto digits = column(dir / "full/diff-small/eval_log.csv", 3);
  REQUIRE(digits.size() == 2);
  for (double d : digits) CHECK((d >= 0 && d <= 1));
}

TEST_CASE("train: a save cut short by a full disk resumes from the last complete step", "[train][disk]") {
  test::ScratchDir dir("cutsave");
  make_corpus(dir.path());
  TrainOptions full = tiny(dir.path(), dir / "full", 12);
  full.save_every = 4;
  REQUIRE(train_pair(full, nullptr, nullptr) == 12);
  TrainOptions part = tiny(dir.path(), dir / "part", 12);
  part.save_every = 4;
  // When step 8 is about to be saved, a file-size limit (a disk filling up) lets the weights of DIFF's step
  // through and not its optimizer state (twice their size): the save stops in the middle of the first model.
  const auto weights = std::filesystem::file_size(dir / "full/diff-small/model.safetensors");
  rlimit old{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  bool limited = false;
  std::string error;
  try {
    train_pair(part, nullptr, [&](const TrainProgress& p) {
      if (p.step != 8 || limited) return;
      rlimit cap = old;
      cap.rlim_cur = weights + 4096;
      limited = setrlimit(RLIMIT_FSIZE, &cap) == 0;
    });
  } catch (const Error& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  REQUIRE(limited);
  CHECK_THAT(error,
             Catch::Contains("step-00000008/optimizer.safetensors") && Catch::Contains("cannot write"));
  const auto state = dir / "part/diff-small/train_state";
  CHECK(std::filesystem::exists(state / "step-00000008/model.safetensors"));  // cut short: no state.json
  CHECK(!std::filesystem::exists(state / "step-00000008/state.json"));
  CHECK(std::filesystem::exists(state / "step-00000004/state.json"));  // the last complete step stays
  // The published weights are still step 4's, whole.
  CHECK(max_weight_difference(dir / "part/diff-small", state / "step-00000004") == 0);
  // Run again: it resumes from step 4 (both models' last complete step) to the uninterrupted run's weights,
  // and keeps only its last step.
  CHECK(train_pair(part, nullptr, nullptr) == 12);
  for (const char* name : {"diff-small", "baseline-small"}) {
    INFO(name);
    CHECK(max_weight_difference(dir / "full" / name, dir / "part" / name) < 1e-5);
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::directory_iterator(dir / "part" / name / "train_state"))
      left.push_back(e.path().filename().string());
    CHECK(left == std::vector<std::string>{"step-00000012"});
  }
}

TEST_CASE("train: a trained checkpoint reloads to identical logits", "[train][checkpoint]") {
  test::ScratchDir dir("reload");
  make_corpus(dir.path());
  train_pair(tiny(dir.path(), dir / "out", 10), nullptr, nullptr);
  const Model m = Model::load(dir / "out/diff-small");
  test::ScratchDir copy("reload-copy");
  m.save(copy.path());
  std::filesystem::copy_file(dir / "out/diff-small/tokenizer.model", copy / "tokenizer.model");
  const Model back = Model::load(copy.path());
  const auto ids = m.tokenizer().encode("The secret code of Mira is 4821.", true).ids;
  CaptureOptions opt;
  opt.next_token_top_k = 4096;
  const Trace a = m.capture(ids, opt), b = back.capture(ids, opt);
  for (size_t i = 0; i < a.next_token.size(); ++i) {
    REQUIRE(a.next_token[i].id == b.next_token[i].id);
    REQUIRE(a.next_token[i].probability == b.next_token[i].probability);
  }
}

TEST_CASE("train: bad options are refused", "[train][errors]") {
  test::ScratchDir dir("trainbad");
  TrainOptions o = tiny(dir.path(), dir / "out", 10);
  CHECK_THROWS_WITH(train_pair(o, nullptr, nullptr), Catch::Contains("tokenizer file not found"));
  o.steps = 0;
  CHECK_THROWS_WITH(train_pair(o, nullptr, nullptr), Catch::Contains("must be positive"));
  o.steps = 10;
  o.train_diff = o.train_baseline = false;
  CHECK_THROWS_WITH(train_pair(o, nullptr, nullptr), Catch::Contains("nothing to train"));
  o.train_diff = true;
  o.phases.push_back(o.phases.front());  // a second phase also starting at step 0
  CHECK_THROWS_WITH(train_pair(o, nullptr, nullptr), Catch::Contains("increasing from_step"));
  o.phases.pop_back();
  // A batch the machine cannot hold is refused with the numbers before any step.
  make_corpus(dir.path());
  o.batch = 1000000;
  CHECK_THROWS_WITH(train_pair(o, nullptr, nullptr),
                    Catch::Contains("train: a step of 1000000 rows of 64 tokens needs about") &&
                        Catch::Contains("is available: lower --batch (about"));
  o.batch = 4;
  o.precision = "fp16";
  CHECK_THROWS_WITH(train_pair(o, nullptr, nullptr), Catch::Contains("precision must be auto, fp32 or bf16"));
}

TEST_CASE("train: batches built ahead by several workers are the serial ones", "[train]") {
  test::ScratchDir dir("prefetch");
  make_corpus(dir.path());
  TrainOptions one = tiny(dir.path(), dir / "one", 12), four = tiny(dir.path(), dir / "four", 12);
  TrainPhase drills;  // episode rows too: the rows whose building takes time
  drills.from_step = 6;
  drills.mix = DataMix{0.25, 0.5, NameSet::SingleToken};
  one.phases.push_back(drills);
  four.phases.push_back(drills);
  one.data_workers = 1;
  four.data_workers = 4;
  train_pair(one, nullptr, nullptr);
  train_pair(four, nullptr, nullptr);
  for (const char* name : {"diff-small", "baseline-small"}) {
    INFO(name);
    CHECK(max_weight_difference(dir / "one" / name, dir / "four" / name) == 0.0);
  }
}

TEST_CASE("train: bf16 matmuls train the same models in fp32 master weights", "[train]") {
  test::ScratchDir dir("bf16");
  make_corpus(dir.path());
  TrainOptions fp32 = tiny(dir.path(), dir / "fp32", 40), bf16 = tiny(dir.path(), dir / "bf16", 40);
  fp32.precision = "fp32";
  bf16.precision = "bf16";
  train_pair(fp32, nullptr, nullptr);
  train_pair(bf16, nullptr, nullptr);
  for (const char* name : {"diff-small", "baseline-small"}) {
    INFO(name);
    // bf16 products round: the weights move apart, a little.
    const double d = max_weight_difference(dir / "fp32" / name, dir / "bf16" / name);
    CHECK(d > 0);
    CHECK(d < 0.05);
    const auto v32 = column(dir / "fp32" / name / "train_log.csv", 2);
    const auto v16 = column(dir / "bf16" / name / "train_log.csv", 2);
    REQUIRE(v16.size() == 2);
    CHECK(v16[1] < v16[0]);                        // it learns
    CHECK(v16[1] == Approx(v32[1]).margin(0.05));  // as much as fp32 does
    CHECK(test::read_all(dir / "bf16" / name / "train_state/step-00000040/state.json")
              .find("\"precision\": \"bf16\"") != std::string::npos);
  }
}

TEST_CASE("text loss is the mean next-token cross-entropy of consecutive windows", "[train]") {
  test::ScratchDir dir("textloss");
  make_corpus(dir.path());
  train_pair(tiny(dir.path(), dir / "out", 4), nullptr, nullptr);
  const Model m = Model::load(dir / "out/diff-small");
  const std::string text =
      "The jury said it did find that many of the voters.\nThe secret code of Mary is 4821.";
  std::vector<int64_t> ids;  // lines encoded without BOS, then concatenated
  for (const char* line :
       {"The jury said it did find that many of the voters.", "The secret code of Mary is 4821."}) {
    const auto e = m.tokenizer().encode(line, false).ids;
    ids.insert(ids.end(), e.begin(), e.end());
  }
  const int64_t window = 5;
  const int64_t windows = static_cast<int64_t>(ids.size()) / (window + 1);
  REQUIRE(windows >= 2);
  // By hand: -log p(target | the window's earlier tokens), from the full next-token distribution.
  CaptureOptions all;
  all.next_token_top_k = 4096;
  all.keep_maps = false;
  double sum = 0;
  for (int64_t w = 0; w < windows; ++w)
    for (int64_t k = 1; k <= window; ++k) {
      const auto begin = ids.begin() + w * (window + 1);
      const Trace t = m.capture(std::vector<int64_t>(begin, begin + k), all);
      for (const auto& p : t.next_token)
        if (p.id == *(begin + k)) sum -= std::log(static_cast<double>(p.probability));
    }
  const TextLoss l = text_loss(m, text, window);
  CHECK(l.windows == windows);
  CHECK(l.tokens == windows * window);
  CHECK(l.nats_per_token == Approx(sum / static_cast<double>(windows * window)).epsilon(1e-4));
  const TextLoss first = text_loss(m, text, window, 1);
  CHECK(first.windows == 1);
  CHECK_THROWS_WITH(text_loss(m, "The jury", 50), Catch::Contains("fewer than one window of 51"));
  // Progress after every pass of (up to 8) windows; a stop ends the run with the windows scored so far, whose
  // loss is theirs alone (here the first window's: the same as max_windows 1 gives).
  std::vector<std::pair<int64_t, int64_t>> seen;
  const TextLoss all_windows = text_loss(m, text, window, 0, [&](int64_t d, int64_t n) {
    seen.push_back({d, n});
  });
  REQUIRE_FALSE(seen.empty());
  CHECK(seen.back() == std::make_pair(windows, windows));
  CHECK(all_windows.planned == windows);
  REQUIRE(static_cast<int64_t>(ids.size()) / 2 > 8);  // more than one pass of 1-token windows
  std::atomic<bool> stop{false};
  const TextLoss stopped = text_loss(
      m, text, 1, 0, [&](int64_t d, int64_t) { stop = d >= 8; }, &stop);
  CHECK(stopped.windows == 8);
  CHECK(stopped.planned > 8);
  CHECK(stopped.nats_per_token == Approx(text_loss(m, text, 1, 8).nats_per_token).epsilon(1e-6));
  stop = true;  // stopped before any window: nothing to report
  CHECK_THROWS_AS(text_loss(m, text, window, 0, nullptr, &stop), Cancelled);
}

TEST_CASE("train: a JSON config with phases inherits what a phase does not name", "[train][config]") {
  test::ScratchDir dir("trainjson");
  test::write_all(dir / "t.json", R"({"steps": 100, "episode_fraction": 0.4, "names": "original",
    "phases": [{"from_step": 50, "drill_fraction": 0.3, "answer_weight": 4},
               {"from_step": 80, "names": "single-token"}]})");
  const TrainOptions o = train_options_from_json(dir / "t.json");
  REQUIRE(o.phases.size() == 3);
  CHECK(o.phases[0].from_step == 0);
  CHECK(o.phases[0].mix.names == NameSet::Original);
  CHECK(o.phases[0].answer_weight == 1);
  CHECK(o.phases[1].mix.episode_fraction == 0.4);
  CHECK(o.phases[1].mix.drill_fraction == 0.3);
  CHECK(o.phases[1].answer_weight == 4);
  CHECK(o.phases[1].mix.names == NameSet::Original);
  CHECK(o.phases[2].mix.names == NameSet::SingleToken);
  CHECK(o.phases[2].answer_weight == 4);
  CHECK(o.phases[1].lr == 0);

  // Schedules: the first one's cosine may end before the last step (lr_horizon), a phase with "lr"
  // restarts warm-up and cosine from its first step.
  test::write_all(dir / "lr.json", R"({"steps": 300, "lr": 0.002, "warmup": 10, "lr_horizon": 200,
    "min_lr_ratio": 0.1, "phases": [{"from_step": 150, "lr": 0.001}]})");
  const TrainOptions s = train_options_from_json(dir / "lr.json");
  CHECK(learning_rate(s, 0) == Approx(0.0002));  // warm-up: 1/10 of the peak
  CHECK(learning_rate(s, 9) == Approx(0.002));
  CHECK(learning_rate(s, 105) == Approx(0.0011));  // half-way through 10..200: (0.1 + 0.9 · 0.5) · peak
  CHECK(learning_rate(s, 149) < learning_rate(s, 105));
  CHECK(learning_rate(s, 150) == Approx(0.0001));  // restart: 1/10 of the new peak
  CHECK(learning_rate(s, 159) == Approx(0.001));
  CHECK(learning_rate(s, 299) == Approx(0.0001).margin(1e-6));  // cosine to the last step
  test::write_all(dir / "bad.json", R"({"phases": [{"from_step": 0}]})");
  CHECK_THROWS_WITH(train_options_from_json(dir / "bad.json"), Catch::Contains("increasing from_step"));
  test::write_all(dir / "bad2.json", R"({"names": "long"})");
  CHECK_THROWS_WITH(train_options_from_json(dir / "bad2.json"), Catch::Contains("unknown needle name set"));
  // The wordings widen by phase (six, 24, 32), each level needing the one before.
  test::write_all(dir / "w.json", R"({"steps": 100, "varied_wording": true,
    "phases": [{"from_step": 40, "wide_wording": true}, {"from_step": 70, "wider_wording": true}]})");
  const TrainOptions w = train_options_from_json(dir / "w.json");
  REQUIRE(w.phases.size() == 3);
  CHECK((w.phases[0].mix.varied_wording && !w.phases[0].mix.wide_wording && !w.phases[0].mix.wider_wording));
  CHECK((w.phases[1].mix.wide_wording && !w.phases[1].mix.wider_wording));
  CHECK((w.phases[2].mix.wide_wording && w.phases[2].mix.wider_wording));
  test::write_all(dir / "bad3.json", R"({"varied_wording": true, "wider_wording": true})");
  CHECK_THROWS_WITH(train_options_from_json(dir / "bad3.json"), Catch::Contains("set wide_wording too"));
}

TEST_CASE("train: a curriculum's phases set rows, batch, mix and a flat or decaying schedule",
          "[train][config]") {
  test::ScratchDir dir("curriculum");
  test::write_all(dir / "c.json", R"({"steps": 1000, "seq_len": 128, "batch": 16, "lr": 0.002, "warmup": 100,
    "schedule": "flat", "names": "vocabulary", "drill_fraction": 0.6, "episode_fraction": 0.15,
    "drill_needles": [2, 2], "episode_tokens": [64, 128], "episode_needles": 1, "zipf_fraction": 0.5,
    "answer_weight": 8,
    "phases": [{"from_step": 400, "seq_len": 256, "batch": 8, "drill_needles": [2, 5]},
               {"from_step": 700, "seq_len": 512, "batch": 4},
               {"from_step": 900, "lr": 0.002, "warmup": 0, "schedule": "cosine", "episode_fraction": 0.1,
                "drill_fraction": 0.3}]})");
  const TrainOptions o = train_options_from_json(dir / "c.json");
  REQUIRE(o.phases.size() == 4);
  const DataMix& a = o.phases[0].mix;
  CHECK(a.names == NameSet::Vocabulary);
  CHECK(a.drill_needles_min == 2);
  CHECK(a.drill_needles_max == 2);
  CHECK(a.episode_tokens_min == 64);
  CHECK(a.episode_tokens_max == 128);
  CHECK(a.episode_needles == 1);
  CHECK(a.zipf_fraction == 0.5);
  CHECK(o.phases[1].mix.drill_needles_max == 5);
  CHECK(o.phases[2].mix.drill_needles_max == 5);  // inherited
  CHECK(o.phases[3].mix.drill_fraction == 0.3);
  CHECK(o.phases[3].answer_weight == 8);
  // Rows per phase: 128 x 16, 256 x 8, 512 x 4 (2,048 tokens a step throughout), the last inheriting.
  for (const auto& [step, len, batch] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {0, 128, 16}, {399, 128, 16}, {400, 256, 8}, {699, 256, 8}, {700, 512, 4}, {999, 512, 4}}) {
    INFO("step " << step);
    CHECK(phase_seq_len(o, phase_at(o, step)) == len);
    CHECK(phase_batch(o, phase_at(o, step)) == batch);
  }
  // Flat after warm-up through the phases that name no rate; the last restarts without warm-up and decays
  // by cosine to 0.1 of its peak at the last step.
  CHECK(learning_rate(o, 0) == Approx(0.002 / 100));
  CHECK(learning_rate(o, 99) == Approx(0.002));
  CHECK(learning_rate(o, 500) == Approx(0.002));
  CHECK(learning_rate(o, 899) == Approx(0.002));
  CHECK(learning_rate(o, 900) == Approx(0.002));
  CHECK(learning_rate(o, 950) == Approx(0.002 * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 50.0 / 100.0)))));
  CHECK(learning_rate(o, 999) < 0.00025);
  // Refusals name the field.
  test::write_all(dir / "bad1.json", R"({"schedule": "linear"})");
  CHECK_THROWS_WITH(train_options_from_json(dir / "bad1.json"), Catch::Contains("'schedule' must be"));
  test::write_all(dir / "bad2.json", R"({"drill_needles": [2]})");
  CHECK_THROWS_WITH(train_options_from_json(dir / "bad2.json"),
                    Catch::Contains("'drill_needles' must be [min, max]"));
  test::write_all(dir / "bad3.json", R"({"phases": [{"from_step": 5, "drill_needles": [4, 2]}]})");
  CHECK_THROWS_WITH(train_options_from_json(dir / "bad3.json"),
                    Catch::Contains("drill_needles must be [min, max]"));
  test::write_all(dir / "bad4.json", R"({"phases": [{"from_step": 5, "seq_len": 8}]})");
  CHECK_THROWS_WITH(train_options_from_json(dir / "bad4.json"), Catch::Contains("seq_len must be >= 16"));
  test::write_all(dir / "bad5.json", R"({"phases": [{"from_step": 5, "schedule": "cosine"}]})");
  CHECK_THROWS_WITH(train_options_from_json(dir / "bad5.json"), Catch::Contains("must name its 'lr' too"));
}

TEST_CASE("train: a phase that changes the row length trains on, counts its tokens and resumes exactly",
          "[train]") {
  test::ScratchDir dir("phaselen");
  make_corpus(dir.path());
  auto curriculum = [](TrainOptions o) {
    o.seq_len = 32;
    o.batch = 4;
    TrainPhase longer = o.phases.front();
    longer.from_step = 6;
    longer.seq_len = 64;
    longer.batch = 3;
    longer.mix.drill_fraction = 0.5;
    o.phases.push_back(longer);
    o.eval_every = 5;
    return o;
  };
  const TrainOptions full = curriculum(tiny(dir.path(), dir / "full", 10));
  CHECK(train_pair(full, nullptr, nullptr) == 10);
  // Steps 0-5 (0-based) at 32 x 4, from step 6 at 64 x 3: after 5 steps 5 x 128 tokens, after 10 6 x 128 +
  // 4 x 192.
  CHECK(column(dir / "full/diff-small/train_log.csv", 3) == std::vector<double>{5 * 128, 6 * 128 + 4 * 192});
  const TrainOptions part = curriculum(tiny(dir.path(), dir / "part", 10));
  std::atomic<bool> stop{false};
  CHECK(train_pair(part, &stop, [&](const TrainProgress& p) { stop = p.step >= 4; }) == 4);
  CHECK(train_pair(part, nullptr, nullptr) == 10);
  for (const char* name : {"diff-small", "baseline-small"}) {
    INFO(name);
    CHECK(max_weight_difference(dir / "full" / name, dir / "part" / name) < 1e-5);
  }
  CHECK(column(dir / "part/diff-small/train_log.csv", 3) == std::vector<double>{5 * 128, 6 * 128 + 4 * 192});
}

TEST_CASE("train --arch diff-v2: the V2 model's loss falls and its λ distribution moves", "[train][v2]") {
  test::ScratchDir dir("trainv2");
  make_corpus(dir.path());
  TrainOptions o = tiny(dir.path(), dir / "out", 60);
  o.diff_arch = AttentionKind::DiffV2;
  o.train_baseline = false;
  o.lr = 1e-2;
  // λ over a fixed prompt, before (the same seed's initial weights) and after.
  std::vector<int64_t> ids;
  auto lambdas = [&](const Model& m) {
    std::vector<double> out;
    const Trace t = m.capture(ids);
    for (const LayerTrace& l : t.layers)
      out.insert(out.end(), l.lambda_rows.data.begin(), l.lambda_rows.data.end());
    return out;
  };
  CHECK(train_pair(o, nullptr, nullptr) == 60);
  const auto model_dir = dir / "out" / "diff-v2-small";
  const Model trained = Model::load(model_dir);
  REQUIRE(trained.config().is_diff_v2());
  CHECK(trained.config().map_heads() == 4);  // the baseline's 2H heads
  const auto val = column(model_dir / "train_log.csv", 2);
  REQUIRE(val.size() == 3);
  CHECK(val[2] < val[0]);
  ids = trained.tokenizer().encode("The secret code of Mira is 4821. The code is", true).ids;
  const Model initial =
      Model::from_tensors(trained.config(), Model::random(trained.config(), o.seed).tensors());
  const std::vector<double> before = lambdas(initial), after = lambdas(trained);
  REQUIRE(before.size() == after.size());
  double moved = 0;
  for (size_t i = 0; i < before.size(); ++i) moved = std::max(moved, std::fabs(after[i] - before[i]));
  CHECK(moved > 0.05);
  for (double x : after) {
    REQUIRE(x > 0.0);
    REQUIRE(x < 1.0);
  }
}

TEST_CASE("train: never overwrites weights it did not write, resumes only its own model", "[train][errors]") {
  test::ScratchDir dir("trainguard");
  make_corpus(dir.path());
  // The shipped pair in an output folder, as the old config's "out": "." put it.
  const std::filesystem::path out = dir / "out";
  std::filesystem::create_directories(out);
  for (const char* name : {"diff-small", "baseline-small"})
    std::filesystem::copy(kAssets / "models" / name, out / name, std::filesystem::copy_options::recursive);
  const std::string shipped = test::read_all(out / "diff-small/model.safetensors");
  TrainOptions o = tiny(dir.path(), out, 2);
  CHECK_THROWS_WITH(
      train_pair(o, nullptr, nullptr),
      Catch::Contains("diff-small holds a model that train did not write (no train_state/ to resume from"));
  o.resume = false;  // --fresh alone does not license it either
  CHECK_THROWS_WITH(train_pair(o, nullptr, nullptr), Catch::Contains("refusing to overwrite it"));
  CHECK(test::read_all(out / "diff-small/model.safetensors") == shipped);
  CHECK(test::read_all(out / "diff-small/eval_log.csv") ==
        test::read_all(kAssets / "models/diff-small/eval_log.csv"));
  o.overwrite = true;  // asked for: replaced
  CHECK(train_pair(o, nullptr, nullptr) == 2);
  CHECK(test::read_all(out / "diff-small/model.safetensors") != shipped);
  // Now train's own: resumed without --overwrite; a different shape there is refused by key.
  o.overwrite = false;
  o.resume = true;
  o.steps = 3;
  CHECK(train_pair(o, nullptr, nullptr) == 3);
  TrainOptions wider = o;
  wider.model.hidden_size = 48;
  CHECK_THROWS_WITH(train_pair(wider, nullptr, nullptr), Catch::Contains("hidden_size 32 there, 48 asked"));
  wider.resume = false;  // --fresh over train's own folder starts it over
  CHECK(train_pair(wider, nullptr, nullptr) == 3);
  // An --out that is a file, before any work.
  test::write_all(dir / "a-file", "x");
  TrainOptions to_file = tiny(dir / "no-corpus-here", dir / "a-file", 2);
  CHECK_THROWS_WITH(train_pair(to_file, nullptr, nullptr), Catch::Contains("is a file, not a folder"));
}

TEST_CASE("train: the shipped config trains into build/train-small, never beside itself", "[train][config]") {
  const TrainOptions o = train_options_from_json(kAssets / "models/train-small.json");
  CHECK(o.out_dir == std::filesystem::path(DIFFLENS_SOURCE_DIR) / "build/train-small");
  CHECK(o.corpus_dir == std::filesystem::path(DIFFLENS_SOURCE_DIR) / "build/corpus");
  // The fair trio's recipe (issue 46): into build/train-fair; 2,048 tokens a step in every phase, rows of
  // 128, 256, 512 and 1024; a flat rate decayed at the end of the 512 phase, restarted (warm-up 50 steps)
  // for the 1024 phase and decayed again at its end; the key pool and drills of the probe.
  const TrainOptions f = train_options_from_json(kAssets / "models/train-fair.json");
  CHECK(f.out_dir == std::filesystem::path(DIFFLENS_SOURCE_DIR) / "build/train-fair");
  CHECK(f.corpus_dir == std::filesystem::path(DIFFLENS_SOURCE_DIR) / "build/corpus");
  std::set<int64_t> lengths;
  for (size_t k = 0; k < f.phases.size(); ++k) {
    CHECK(phase_seq_len(f, k) * phase_batch(f, k) == 2048);
    lengths.insert(phase_seq_len(f, k));
    CHECK(f.phases[k].mix.names == NameSet::Vocabulary);
    CHECK(f.phases[k].answer_weight == 8);
  }
  CHECK(lengths == std::set<int64_t>{128, 256, 512, 1024});
  CHECK(f.phases.front().mix.drill_needles_max == 2);
  CHECK(learning_rate(f, 3000) == Approx(0.002));
  CHECK(learning_rate(f, 3999) < 0.0003);  // the first decay ends at step 4000 (its lr_horizon) ...
  CHECK(learning_rate(f, 4000) == Approx(0.001 / 50));  // ... the 1024 phase warms up again
  CHECK(learning_rate(f, 4300) == Approx(0.001));
  CHECK(learning_rate(f, 4999) < 0.00015);
  CHECK(phase_seq_len(f, phase_at(f, 4000)) == 1024);
}

TEST_CASE("train --rows-out: every step's rows, as trained, with their loss weights, never over a file",
          "[train]") {
  test::ScratchDir dir("rowsout");
  make_corpus(dir.path());
  TrainOptions o = tiny(dir.path(), dir / "out", 5);
  o.seq_len = 32;
  o.batch = 3;
  TrainPhase drills = o.phases.front();
  drills.from_step = 3;
  drills.seq_len = 128;  // two needles, asked and answered, need 82 tokens
  drills.batch = 2;
  drills.mix.drill_fraction = 1.0;
  drills.mix.episode_fraction = 0.0;
  drills.answer_weight = 8;
  o.phases.push_back(drills);
  o.train_baseline = false;
  o.rows_out = dir / "rows.jsonl";
  CHECK(train_pair(o, nullptr, nullptr) == 5);

  std::ifstream in(o.rows_out);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  // Steps 0-2: 3 rows of 33 ids, no weights (all 1); steps 3-4: 2 rows of 129 ids, weights 1 or 8.
  REQUIRE(rows.size() == 3 * 3 + 2 * 2);
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const int64_t step = r["step"];
    CHECK(step == (i < 9 ? static_cast<int64_t>(i / 3) : 3 + static_cast<int64_t>(i - 9) / 2));
    CHECK(r["row"] == (i < 9 ? i % 3 : (i - 9) % 2));
    const auto ids = r["ids"].get<std::vector<int64_t>>();
    CHECK(ids.size() == (step < 3 ? 33u : 129u));
    for (int64_t id : ids) CHECK((id >= 0 && id < 4096));
    if (step < 3) {
      CHECK_FALSE(r.contains("weights"));
    } else {
      const auto w = r["weights"].get<std::vector<double>>();
      CHECK(w.size() == 128);
      const auto eights = std::count(w.begin(), w.end(), 8.0);
      CHECK(eights >= 4);  // a drill's answers: at least two needles' codes of several tokens each
      CHECK(eights + std::count(w.begin(), w.end(), 1.0) == 128);
    }
  }
  // The rows depend only on (seed, step): a second run writes the same lines.
  TrainOptions again = o;
  again.out_dir = dir / "again";
  again.rows_out = dir / "rows-again.jsonl";
  CHECK(train_pair(again, nullptr, nullptr) == 5);
  CHECK(test::read_all(o.rows_out) == test::read_all(again.rows_out));
  // An existing file is refused before any step and left as it was.
  test::write_all(dir / "mine.txt", "my notes\n");
  again.out_dir = dir / "third";
  again.rows_out = dir / "mine.txt";
  CHECK_THROWS_WITH(train_pair(again, nullptr, nullptr),
                    Catch::Contains("mine.txt exists; refusing to overwrite"));
  CHECK(test::read_all(dir / "mine.txt") == "my notes\n");
}
