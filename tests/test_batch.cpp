// Prompt sets (core/model/batch.h, `difflens batch`): items read and refused by line, the answer's tokens and
// span, every readout against an independent recomputation on the bundled models (the answer's probability
// from a capture of each prefix's next-token distribution, the attention measures from a capture of the
// prompt alone), and the command: files, errors, --resume, interventions, the summary's intervals.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/formats/data.h"
#include "core/formats/error.h"
#include "core/formats/patch_site.h"
#include "core/model/batch.h"
#include "core/model/model.h"
#include "core/model/needle.h"
#include "helpers.h"

using namespace difflens;

namespace {

const std::string kDiff = std::string(DIFFLENS_SOURCE_DIR) + "/assets/models/diff-small";
const std::string kBase = std::string(DIFFLENS_SOURCE_DIR) + "/assets/models/baseline-small";
const std::string kNeedle =
    "The secret code of Thomas is 7182. The secret code of Rachel is 2233.\nQ: What is the secret code of "
    "Thomas?\nA: The secret code of Thomas is";

std::string refusal(const std::string& line) {
  try {
    parse_batch_item(line, 7);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

using test::run_cli;

}  // namespace

TEST_CASE("batch: an item is read with its tags, and what is wrong with one is said with its line",
          "[batch][errors]") {
  const BatchItem i = parse_batch_item(
      R"({"id": 12, "prompt": "The jury said", "answer": " that", "answer_span": [1, 2], "query": [2, 3],)"
      R"( "topic": "law", "n": [1, 2]})",
      3);
  CHECK(i.id == "12");
  CHECK(i.line == 3);
  CHECK(*i.prompt == "The jury said");
  CHECK(i.answer == " that");
  CHECK((i.answer_span->begin == 1 && i.answer_span->end == 2));
  CHECK((i.query->begin == 2 && i.query->end == 3));
  CHECK(i.tags == R"({"n":[1,2],"topic":"law"})");
  CHECK(parse_batch_item(R"({"token_ids": [1, 5], "answer": "x"})", 4).id == "4");  // the line by default
  CHECK_THAT(refusal("[1]"), Catch::StartsWith("line 7: an item is a JSON object"));
  CHECK_THAT(refusal("{\"prompt\": \"x\""), Catch::StartsWith("line 7: not valid JSON"));
  CHECK_THAT(refusal(R"({"answer": "x"})"),
             Catch::Contains("exactly one of 'prompt' (text) and 'token_ids'"));
  CHECK_THAT(refusal(R"({"prompt": "a", "token_ids": [1], "answer": "x"})"),
             Catch::Contains("exactly one of"));
  CHECK_THAT(refusal(R"({"prompt": "a"})"), Catch::Contains("'answer' is missing"));
  CHECK_THAT(refusal(R"({"prompt": "a", "answer": ""})"), Catch::Contains("'answer' must be the text"));
  CHECK_THAT(refusal(R"({"prompt": "a", "answer": "x", "answer_span": [3, 3]})"),
             Catch::Contains("'answer_span' must be [BEGIN, END] token positions with 0 <= BEGIN < END"));
  CHECK_THAT(refusal(R"({"prompt": "a", "answer": "x", "query": [-1, 2]})"),
             Catch::Contains("'query' must be"));
  CHECK_THAT(refusal(R"({"token_ids": [1, -2], "answer": "x"})"), Catch::Contains("non-negative integers"));
  CHECK_THAT(refusal(R"({"prompt": "", "answer": "x"})"), Catch::Contains("'prompt' is empty"));
  CHECK_THAT(refusal(R"({"prompt": "a", "answer": "x", "id": [1]})"),
             Catch::Contains("'id' must be a string"));
  // A corrupt prompt for patching goes with its answer.
  const BatchItem p =
      parse_batch_item(R"({"prompt": "a b", "answer": " 1", "corrupt": "a c", "corrupt_answer": " 2"})", 2);
  CHECK(p.has_corrupt());
  CHECK(*p.corrupted().prompt == "a c");
  CHECK(p.corrupted().answer == " 2");
  CHECK(p.tags == "{}");
  CHECK_THAT(refusal(R"({"prompt": "a", "answer": "x", "corrupt": "b"})"),
             Catch::Contains("'corrupt' (or 'corrupt_ids') and 'corrupt_answer' go together"));
  CHECK_THAT(refusal(R"({"prompt": "a", "answer": "x", "corrupt_answer": "y"})"),
             Catch::Contains("go together"));
  CHECK_THAT(
      refusal(R"({"prompt": "a", "answer": "x", "corrupt": "b", "corrupt_ids": [1], "corrupt_answer": "y"})"),
      Catch::Contains("give one of 'corrupt' and 'corrupt_ids'"));
}

TEST_CASE("batch: items with a corrupt prompt patch every head, as Model::patch does, and resume whole",
          "[batch][cli][patch]") {
  test::ScratchDir dir("batch-patch");
  const std::string corrupt =
      "The secret code of Thomas is 4821. The secret code of Rachel is 2233.\nQ: What is the secret code of "
      "Thomas?\nA: The secret code of Thomas is";
  std::string items;
  for (int i = 0; i < 3; ++i)
    items += nlohmann::json{{"id", "p" + std::to_string(i)},
                            {"prompt", kNeedle},
                            {"answer", " 7182"},
                            {"corrupt", corrupt},
                            {"corrupt_answer", " 4821"}}
                 .dump() +
             "\n";
  items += nlohmann::json{{"prompt", kNeedle}, {"answer", " 7182"}}.dump() + "\n";  // no corrupt prompt
  // A corrupt prompt of another length: the item's readouts stand, its patching is refused in errors.csv.
  items += nlohmann::json{{"id", "long"},
                          {"prompt", kNeedle},
                          {"answer", " 7182"},
                          {"corrupt", "A much longer prompt. " + corrupt},
                          {"corrupt_answer", " 4821"}}
               .dump() +
           "\n";
  test::write_all(dir / "items.jsonl", items);
  const std::string out = (dir / "out").string();
  test::CliRun r =
      run_cli("batch --items " + (dir / "items.jsonl").string() + " --out " + out + " --threads 2", dir);
  INFO(r.out);
  CHECK(r.status == 1);  // one item not patched
  CHECK_THAT(r.out, Catch::Contains("0 failed, 2 not patched (errors.csv says why)"));
  CHECK_THAT(r.out, Catch::Contains("patch.csv"));
  const std::string errors = test::read_all(dir / "out/errors.csv");
  CHECK_THAT(errors, Catch::Contains("5,long,diff-small,\"patching: the clean prompt reads as"));
  CHECK_THAT(test::read_all(dir / "out/items.jsonl"),
             Catch::Contains("\"patch_error\":\"the clean prompt reads as"));
  const std::string csv = test::read_all(dir / "out/patch.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 3 * (16 + 32));  // diff 4x4, baseline 4x8 heads
  // The core's own patching of the same pair: DIFF's layer 2 head 1.
  const Model diff = Model::load(kDiff);
  BatchItem clean;
  clean.prompt = kNeedle;
  clean.answer = " 7182";
  BatchItem bad = clean;
  bad.prompt = corrupt;
  bad.answer = " 4821";
  const PatchPair pair = patch_pair(diff, clean, bad);
  CHECK(pair.shared == 1);  // "▁" before the digits
  PatchOptions o;
  o.target = pair.target;
  o.alternative = pair.alternative;
  const PatchReport core = diff.patch(pair.clean, pair.corrupt, {{{PatchComponent::Head, 2, 1, {}}}}, o);
  const std::string row = "1,p0,diff-small,2,1,";
  const size_t at = csv.find(row);
  REQUIRE(at != std::string::npos);
  const std::string rest = csv.substr(at + row.size(), csv.find('\n', at) - at - row.size());
  CHECK(std::fabs(std::stod(rest.substr(rest.find(',') + 1)) - core.results[0].normalized) < 1e-5);
  const nlohmann::json s = nlohmann::json::parse(test::read_all(dir / "out/summary.json"));
  REQUIRE(s["patching"]["diff-small"].size() == 16);
  CHECK(s["patching"]["diff-small"][0]["items"] == 3);
  CHECK_THAT(test::read_all(dir / "out/summary.md"),
             Catch::Contains("Activation patching, on the items with a corrupt prompt"));
  // The figure: layers x heads per model, every model on one scale, no "-0.00".
  const std::string svg = test::read_all(dir / "out/patch-diff-small.svg");
  size_t cells = 0;
  for (size_t at = svg.find("class=\"cell\""); at != std::string::npos;
       at = svg.find("class=\"cell\"", at + 1))
    ++cells;
  CHECK(cells == 16);
  CHECK(svg.find(">-0.00<") == std::string::npos);
  CHECK(std::filesystem::exists(dir / "out/patch-baseline-small.png"));
  const std::string records = test::read_all(dir / "out/items.jsonl");
  CHECK_THAT(records, Catch::Contains("\"patch\":{\"alternative\":\"4\""));
  // A run killed before the last patched item's record: --resume drops its patch rows and runs it again.
  {
    std::string kept;
    std::istringstream in(records);
    std::string line;
    while (std::getline(in, line))
      if (line.find("\"p2\"") == std::string::npos || line.find("baseline-small") == std::string::npos)
        kept += line + "\n";
    test::write_all(dir / "out/items.jsonl", kept);
  }
  r = run_cli("batch --items " + (dir / "items.jsonl").string() + " --out " + out + " --resume", dir);
  CHECK_THAT(r.out, Catch::Contains("1 ran, 9 done before (--resume), 0 failed"));
  const std::string after = test::read_all(dir / "out/patch.csv");
  CHECK(std::count(after.begin(), after.end(), '\n') == 1 + 3 * (16 + 32));
}

TEST_CASE("batch: an item's readouts equal an independent recomputation on the bundled models",
          "[batch][attention]") {
  for (const std::string& dir : {kDiff, kBase}) {
    INFO(dir);
    const Model m = Model::load(dir);
    const BatchItem item =
        parse_batch_item(nlohmann::json{{"prompt", kNeedle}, {"answer", " 7182"}}.dump(), 1);
    const BatchIds ids = batch_ids(m, item);
    // The prompt's tokens are the prompt's own; the answer's are what the prompt and answer add together.
    CHECK(ids.prompt == m.tokenizer().encode(kNeedle, true).ids);
    std::vector<int64_t> all = ids.prompt;
    all.insert(all.end(), ids.answer.begin(), ids.answer.end());
    CHECK(all == m.tokenizer().encode(kNeedle + " 7182", true).ids);
    // The answer's span: the tokens of " 7182" in the needle sentence (its last place in the prompt).
    REQUIRE(ids.answer_span);
    std::vector<int64_t> span(ids.prompt.begin() + ids.answer_span->begin,
                              ids.prompt.begin() + ids.answer_span->end);
    CHECK(m.tokenizer().decode(span).find("7182") != std::string::npos);
    CHECK(ids.answer_span->end < 20);  // the first sentence, not the question

    const BatchResult r = run_batch_item(m, item, ids);
    const int64_t P = static_cast<int64_t>(ids.prompt.size());
    CHECK(r.prompt_tokens == P);
    CHECK(r.query.begin == P - 1);
    // Each answer token's probability from a capture of its prefix alone (the full next-token distribution).
    double p = 1;
    bool greedy = true;
    for (size_t k = 0; k < ids.answer.size(); ++k) {
      std::vector<int64_t> prefix(all.begin(), all.begin() + P + static_cast<std::ptrdiff_t>(k));
      CaptureOptions o;
      o.keep_maps = false;
      o.next_token_top_k = static_cast<int>(m.config().vocab_size);
      const Trace t = m.capture(prefix, o);
      double pk = 0, best_other = 0;
      int64_t rank = 1;
      for (const auto& tp : t.next_token)
        if (tp.id == ids.answer[k]) pk = tp.probability;
      for (const auto& tp : t.next_token) {
        if (tp.id != ids.answer[k]) best_other = std::max(best_other, static_cast<double>(tp.probability));
        if (tp.probability > pk) ++rank;
      }
      p *= pk;
      greedy = greedy && rank == 1;
      if (static_cast<int64_t>(k) == r.first) {
        CHECK(std::fabs(r.p_first - pk) < 1e-5);
        CHECK(r.rank_first == rank);
        CHECK(std::fabs(r.logit_diff - (std::log(pk) - std::log(best_other))) < 1e-3);
      }
    }
    CHECK(std::fabs(r.p_answer - p) < 1e-5 * std::max(1.0, p));
    CHECK(r.greedy_right == greedy);
    // " 7182" is "▁", "7", ...: the first token that writes more than a space is the "7".
    CHECK(r.first == 1);
    // The attention measures: every layer and head, equal to a capture of the prompt alone (the rows measured
    // are the prompt's, which never see the answer's tokens).
    CaptureOptions o;
    o.keep_qkv = true;
    const Trace alone = m.capture(ids.prompt, o);
    const NoiseReadout n = attention_noise(alone, *ids.answer_span, r.query);
    REQUIRE(r.heads.size() == static_cast<size_t>(m.config().num_hidden_layers * m.config().map_heads()));
    size_t i = 0;
    for (size_t l = 0; l < n.layers.size(); ++l)
      for (size_t h = 0; h < n.per_head[l].size(); ++h, ++i) {
        CHECK(r.heads[i].layer == n.layers[l]);
        CHECK(r.heads[i].head == n.heads[l][h]);
        CHECK(std::fabs(r.heads[i].share.noise_mass - n.per_head[l][h].noise_mass) < 1e-6);
        CHECK(std::fabs(r.heads[i].share.answer_mass - n.per_head[l][h].answer_mass) < 1e-6);
        CHECK(std::fabs(r.heads[i].share.noise_output - n.per_head[l][h].noise_output) < 1e-5);
      }
    CHECK(std::fabs(r.mean.noise_mass - n.mean.noise_mass) < 1e-6);
  }
}

TEST_CASE(
    "batch: the command writes per item and head, a summary with intervals, errors by line, and resumes",
    "[batch][cli]") {
  test::ScratchDir dir("batch");
  std::string items;
  for (int i = 0; i < 6; ++i)
    items += nlohmann::json{{"id", "needle-" + std::to_string(i)},
                            {"prompt", kNeedle},
                            {"answer", " 7182"},
                            {"set", "thomas"}}
                 .dump() +
             "\n";
  items += "\n{\"prompt\": 5, \"answer\": \"x\"}\n";  // a blank line, then a bad item at line 8
  test::write_all(dir / "items.jsonl", items);
  const std::string out = (dir / "out").string();
  test::CliRun r =
      run_cli("batch --items " + (dir / "items.jsonl").string() + " --out " + out + " --threads 2", dir);
  INFO(r.out);
  CHECK(r.status == 1);  // an item failed
  CHECK_THAT(r.out, Catch::Contains("batch: 7 items x 2 models: 12 ran, 0 done before (--resume), 2 failed"));
  CHECK(test::read_all(dir / "out/errors.csv") ==
        "line,id,model,error\n8,8,diff-small,line 8: 'prompt' must be a string\n"
        "8,8,baseline-small,line 8: 'prompt' must be a string\n");
  const std::string csv = test::read_all(dir / "out/items.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 13);  // the header and 6 items x 2 models
  CHECK_THAT(csv, Catch::Contains("1,needle-0,diff-small,"));
  CHECK_THAT(csv, Catch::Contains("\"{\"\"set\"\":\"\"thomas\"\"}\""));  // the tags, as JSON in one field
  const std::string heads = test::read_all(dir / "out/heads.csv");
  CHECK(std::count(heads.begin(), heads.end(), '\n') == 1 + 6 * (16 + 32));  // diff 4x4, baseline 4x8
  // The same item six times: every interval collapses onto its value; the two models differ in noise mass.
  const nlohmann::json s = nlohmann::json::parse(test::read_all(dir / "out/summary.json"));
  CHECK(s["diff-small"]["items"] == 6);
  const double acc = s["diff-small"]["accuracy"]["estimate"];
  CHECK((acc == 0.0 || acc == 1.0));
  CHECK(s["diff-small"]["noise_mass"]["low"] == s["diff-small"]["noise_mass"]["high"]);
  CHECK(s["paired"]["baseline-small vs diff-small"]["items"] == 6);
  CHECK_THAT(test::read_all(dir / "out/summary.md"), Catch::Contains("| diff-small | 6 | "));
  // A second run refuses to write over the first; --resume goes on, with nothing left but the bad item.
  r = run_cli("batch --items " + (dir / "items.jsonl").string() + " --out " + out, dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("items.jsonl is there already; give --resume"));
  r = run_cli("batch --items " + (dir / "items.jsonl").string() + " --out " + out + " --resume", dir);
  CHECK_THAT(r.out, Catch::Contains("0 ran, 12 done before (--resume), 2 failed"));
  const std::string again = test::read_all(dir / "out/items.csv");
  CHECK(std::count(again.begin(), again.end(), '\n') == 13);
  // A run killed after an item's CSV rows but before its record in items.jsonl (written last), in the middle
  // of that record: --resume drops the cut record and the item's CSV rows, and runs the item again whole.
  {
    std::string records = test::read_all(dir / "out/items.jsonl");
    records.pop_back();  // the last record's newline
    const std::string last = records.substr(records.rfind('\n') + 1);
    records = records.substr(0, records.rfind('\n') + 1) + last.substr(0, last.size() / 2);
    test::write_all(dir / "out/items.jsonl", records);
  }
  r = run_cli("batch --items " + (dir / "items.jsonl").string() + " --out " + out + " --resume", dir);
  CHECK_THAT(r.out, Catch::Contains("1 ran, 11 done before (--resume), 2 failed"));
  const std::string after = test::read_all(dir / "out/items.csv"),
                    records = test::read_all(dir / "out/items.jsonl");
  CHECK(std::count(after.begin(), after.end(), '\n') == 13);  // no row twice
  CHECK(std::count(records.begin(), records.end(), '\n') == 12);
  const std::string heads_after = test::read_all(dir / "out/heads.csv");
  CHECK(std::count(heads_after.begin(), heads_after.end(), '\n') == 1 + 6 * (16 + 32));
  // Interventions: the DIFF model runs with λ = 0, the baseline (no λ) as trained, said once.
  r = run_cli("batch --items " + (dir / "items.jsonl").string() + " --out " + (dir / "iv").string() +
                  " --intervene lambda=0",
              dir);
  CHECK_THAT(r.out,
             Catch::Contains("batch: baseline-small: skipped (it runs without it): --intervene 'lambda=0'"));
  const std::string ivcsv = test::read_all(dir / "iv/items.csv");
  CHECK_THAT(ivcsv, Catch::Contains(",lambda=0,"));
  // Refused before any work: no items, a missing file.
  test::write_all(dir / "empty.jsonl", "\n\n");
  r = run_cli("batch --items " + (dir / "empty.jsonl").string() + " --out " + (dir / "e").string(), dir);
  CHECK_THAT(r.out, Catch::Contains("no items (one JSON object a line)"));
  r = run_cli("batch --items " + (dir / "missing.jsonl").string() + " --out " + (dir / "e").string(), dir);
  CHECK_THAT(r.out, Catch::Contains("cannot be read"));
  CHECK_FALSE(std::filesystem::exists(dir / "e"));
}

// A training run as `train --keep-every` leaves it: the model folder and checkpoints/step-N folders, each a
// model with its step.json (written last).
void fake_run(const std::filesystem::path& run, const std::string& from, const std::vector<int>& steps) {
  namespace fs = std::filesystem;
  fs::create_directories(run);
  for (const auto& e : fs::directory_iterator(from)) fs::copy_file(e.path(), run / e.path().filename());
  for (int step : steps) {
    char name[32];
    std::snprintf(name, sizeof name, "step-%08d", step);
    const fs::path kept = run / "checkpoints" / name;
    fs::create_directories(kept);
    for (const auto& e : fs::directory_iterator(from)) fs::copy_file(e.path(), kept / e.path().filename());
    test::write_all(kept / "step.json", "{\"step\": " + std::to_string(step) + "}\n");
  }
}

TEST_CASE("batch --steps: every kept step of each run, the measures against the step with intervals",
          "[batch][cli]") {
  test::ScratchDir dir("batchsteps");
  fake_run(dir / "seed-1" / "diff-small", kDiff, {10, 20});
  fake_run(dir / "seed-1" / "baseline-small", kBase, {10, 20, 30});
  std::string items;
  for (int i = 0; i < 3; ++i)
    items += nlohmann::json{{"prompt", kNeedle}, {"answer", i == 2 ? " 2233" : " 7182"}}.dump() + "\n";
  test::write_all(dir / "items.jsonl", items);
  test::CliRun r =
      run_cli("batch --steps --models " + (dir / "seed-1/diff-small").string() + "," +
                  (dir / "seed-1/baseline-small/checkpoints/step-00000020").string() + " --items " +
                  (dir / "items.jsonl").string() + " --out " + (dir / "out").string(),
              dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("3 items x 5 models: 15 ran"));
  CHECK_THAT(r.out, Catch::Contains("steps.csv, steps.png, steps.svg"));
  // Every step's weights are the bundled model's: its numbers at each step are the plain batch's.
  r = run_cli("batch --items " + (dir / "items.jsonl").string() + " --out " + (dir / "plain").string(), dir);
  REQUIRE(r.status == 0);
  const nlohmann::json plain = nlohmann::json::parse(test::read_all(dir / "plain/summary.json"));
  const std::string csv = test::read_all(dir / "out/steps.csv");
  std::istringstream rows(csv);
  std::string row;
  std::getline(rows, row);
  CHECK(row.rfind("run,step,items,accuracy,accuracy_low,accuracy_high,p_answer,", 0) == 0);
  std::vector<std::string> got;
  while (std::getline(rows, row)) got.push_back(row.substr(0, row.find(',', row.find(',') + 1)));
  CHECK(got == std::vector<std::string>{"seed-1/diff-small,10", "seed-1/diff-small,20",
                                        "seed-1/baseline-small,10", "seed-1/baseline-small,20",
                                        "seed-1/baseline-small,30"});
  const nlohmann::json s = nlohmann::json::parse(test::read_all(dir / "out/summary.json"));
  for (const char* step : {"seed-1/diff-small step 10", "seed-1/diff-small step 20"}) {
    INFO(step);
    CHECK(s[step]["items"] == 3);
    CHECK(s[step]["noise_mass"]["estimate"].get<double>() ==
          Approx(plain["diff-small"]["noise_mass"]["estimate"].get<double>()).epsilon(1e-12));
    CHECK(s[step]["accuracy"]["estimate"] == plain["diff-small"]["accuracy"]["estimate"]);
  }
  CHECK(s["seed-1/baseline-small step 30"]["p_answer"]["estimate"].get<double>() ==
        Approx(plain["baseline-small"]["p_answer"]["estimate"].get<double>()).epsilon(1e-12));
  CHECK(std::filesystem::file_size(dir / "out/steps.png") > 1000);
  CHECK_THAT(test::read_all(dir / "out/steps.svg"), Catch::Contains(">step 30<"));
  // Two runs of one name in different places stay two series; a run given twice is refused.
  fake_run(dir / "other" / "seed-1" / "diff-small", kDiff, {10});
  r = run_cli("batch --steps --models " + (dir / "seed-1/diff-small").string() + "," +
                  (dir / "other/seed-1/diff-small").string() + " --items " + (dir / "items.jsonl").string() +
                  " --out " + (dir / "two").string(),
              dir);
  REQUIRE(r.status == 0);
  CHECK_THAT(test::read_all(dir / "two/steps.csv"), Catch::Contains("\nseed-1/diff-small (2),10,3,"));
  r = run_cli("batch --steps --models " + (dir / "seed-1/diff-small").string() + "," +
                  (dir / "seed-1/diff-small/checkpoints/step-00000010").string() + " --items " +
                  (dir / "items.jsonl").string() + " --out " + (dir / "twice").string(),
              dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("is given twice"));
  // A folder that kept no steps is refused before any work, naming what keeps them.
  r = run_cli("batch --steps --models " + kDiff + " --items " + (dir / "items.jsonl").string() + " --out " +
                  (dir / "none").string(),
              dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("holds no kept steps") && Catch::Contains("train --keep-every N"));
  CHECK_FALSE(std::filesystem::exists(dir / "none"));
}

TEST_CASE("episodes: the needle sweep's episodes as a prompt set that batch reads, with corrupt prompts",
          "[batch][cli][needle]") {
  test::ScratchDir dir("episodes");
  const std::string set = (dir / "set.jsonl").string();
  test::CliRun r =
      run_cli("episodes --out " + set + " --lengths 128,256 --depths 0,100 --seeds 2 --corrupt", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("8 items (diff-small's tokenizer), 8 with a corrupt prompt"));
  const Model diff = Model::load(kDiff);
  std::istringstream in(test::read_all(set));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const nlohmann::json j = nlohmann::json::parse(line);
    const BatchItem item = parse_batch_item(line, n);
    INFO(item.id);
    // The prompt and the answer read together are the episode needle runs: as many tokens as its length.
    const BatchIds ids = batch_ids(diff, item);
    const int64_t length = j["length"];
    CHECK(static_cast<int64_t>(ids.prompt.size() + ids.answer.size()) <= length);
    CHECK(static_cast<int64_t>(ids.prompt.size() + ids.answer.size()) >= length - 8);
    REQUIRE(ids.answer_span);  // the needle's code, found in the prompt
    // The corrupt prompt: the needle's code changed digit by digit, as many tokens, a patch pair.
    const std::string code = item.answer.substr(1), other = item.corrupt_answer.substr(1);
    REQUIRE(code.size() == other.size());
    for (size_t k = 0; k < code.size(); ++k) CHECK((code[k] - '0' + 5) % 10 == other[k] - '0');
    const PatchPair p = patch_pair(diff, item, item.corrupted());
    CHECK(p.clean.size() == p.corrupt.size());
  }
  CHECK(n == 8);
  // The first item is needle's first episode of the same cell and seed.
  const Haystack hay(test::read_all(std::string(DIFFLENS_SOURCE_DIR) + "/assets/haystack.txt"),
                     diff.tokenizer());
  const EpisodeBuilder builder(hay, diff.tokenizer(), NeedleSplit::Eval);
  const Episode ep = needle_episode(builder, {128, 0.0, 1, 1}, 1);
  const nlohmann::json first =
      nlohmann::json::parse(test::read_all(set).substr(0, test::read_all(set).find('\n')));
  CHECK(ep.text.rfind(first["prompt"].get<std::string>(), 0) == 0);
  CHECK(first["answer"] == " " + ep.needles[0].code);
  // Refused: written over, two questions an item.
  r = run_cli("episodes --out " + set + " --seeds 1", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("is there already"));
  r = run_cli("episodes --out " + (dir / "two.jsonl").string() + " --needles 2 --queried 2", dir);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("an item asks one question (--queried 1)"));
}
