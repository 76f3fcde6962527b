// `train` on a tiny pair: the loss goes down for both models, logs are written, a stopped run resumes
// to exactly the weights of an uninterrupted one, and the saved checkpoint reloads to identical logits.
#include <catch2/catch.hpp>

#include <fstream>

#include "core/model.h"
#include "core/train.h"
#include "helpers.h"

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

TEST_CASE("train: a stopped run resumes to exactly the weights of an uninterrupted one", "[train]") {
  test::ScratchDir dir("resume");
  make_corpus(dir.path());
  const TrainOptions full = tiny(dir.path(), dir / "full", 20);
  train_pair(full, nullptr, nullptr);

  const TrainOptions part = tiny(dir.path(), dir / "part", 20);
  std::atomic<bool> stop{false};
  CHECK(train_pair(part, &stop, [&](const TrainProgress& p) { stop = p.step >= 8; }) == 8);
  CHECK(train_pair(part, nullptr, nullptr) == 20);  // resumes from step 8

  for (const char* name : {"diff-small", "baseline-small"}) {
    const auto a = Model::load(dir / "full" / name).tensors(), b = Model::load(dir / "part" / name).tensors();
    REQUIRE(a.size() == b.size());
    double max_diff = 0;
    for (size_t i = 0; i < a.size(); ++i)
      for (size_t j = 0; j < a[i].data.size(); ++j)
        max_diff = std::max<double>(max_diff, std::fabs(a[i].data[j] - b[i].data[j]));
    INFO(name);
    CHECK(max_diff < 1e-5);
  }
  CHECK(column(dir / "part/diff-small/train_log.csv", 0) == std::vector<double>{20});
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
}
