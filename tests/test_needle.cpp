// Needle lab: episodes put the asked needles at the requested depth, a run's numbers are consistent with
// what the model produced, summaries average correctly, and the report and CLI write what they promise.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/reports/needle_report.h"
#include "core/formats/trace_io.h"
#include "core/model/model.h"
#include "core/model/needle.h"
#include "helpers.h"

using namespace difflens;

namespace {

const std::filesystem::path kAssets = DIFFLENS_SOURCE_DIR "/assets";

struct Lab {
  Tokenizer tok = Tokenizer::bytes(259);
  std::string text = test::read_all(kAssets / "haystack.txt").substr(0, 60000);
  Haystack hay{text, tok};
  EpisodeBuilder builder{hay, tok, NeedleSplit::Eval};
};

}  // namespace

TEST_CASE("needle lab: asked needles sit at the requested depth, others anywhere", "[needle][lab]") {
  const Lab lab;
  for (const double depth : {0.0, 0.5, 1.0}) {
    const Episode e = needle_episode(lab.builder, {2000, depth, 3, 2}, 7);
    INFO("depth " << depth);
    REQUIRE(e.needles.size() == 3);
    REQUIRE(e.queried.size() == 2);
    CHECK(static_cast<int64_t>(e.ids.size()) <= 2000);
    const double hay_end = static_cast<double>(e.question_spans.front().begin);
    for (int q : e.queried) {  // both asked needles at the depth
      const double at = static_cast<double>(e.needle_spans[static_cast<size_t>(q)].begin) / hay_end;
      CHECK(std::fabs(at - depth) < 0.1);
      CHECK(e.depths[static_cast<size_t>(q)] == depth);
    }
  }
  // The same cell and seed give the same episode; another seed another one.
  CHECK(needle_episode(lab.builder, {300, 0.5, 1, 1}, 3).ids ==
        needle_episode(lab.builder, {300, 0.5, 1, 1}, 3).ids);
  CHECK(needle_episode(lab.builder, {300, 0.5, 1, 1}, 3).ids !=
        needle_episode(lab.builder, {300, 0.5, 1, 1}, 4).ids);
  CHECK_THROWS_WITH(needle_episode(lab.builder, {300, 0.5, 1, 2}, 1), Catch::Contains("queried <= needles"));
  CHECK_THROWS_WITH(needle_episode(lab.builder, {300, 1.5, 1, 1}, 1),
                    Catch::Contains("depths lie in [0, 1]"));
}

TEST_CASE("needle lab: a run reports what the model answered and where it looked", "[needle][lab]") {
  const Lab lab;
  const Model m = Model::random(test::tiny_config(AttentionKind::Diff), 5);
  const NeedleRun r = run_needle(m, lab.builder, {256, 0.25, 2, 2}, 1);
  CHECK(r.asked == 2);
  REQUIRE(r.replies.size() == 2);
  REQUIRE(r.truths.size() == 2);
  int same = 0;
  for (size_t q = 0; q < 2; ++q) {
    CHECK(r.truths[q].size() == 4);  // four digits
    same += r.replies[q] == r.truths[q];
  }
  CHECK(r.answered == same);
  REQUIRE(r.attention.per_layer.size() == 2);  // both layers, all heads
  for (const auto& l : r.attention.per_layer) {
    CHECK(std::isfinite(l.answer));
    CHECK(std::fabs(l.answer) + std::fabs(l.noise) <= 1.0 + 1e-9);  // shares of Σ|A|
  }
  CHECK(r.attention.mean.answer ==
        Approx((r.attention.per_layer[0].answer + r.attention.per_layer[1].answer) / 2));
  // While answering: the rows that produce the last code, the true code given, by hand for one head.
  const Episode ep = needle_episode(lab.builder, {256, 0.25, 2, 2}, 1);
  const Span reply = ep.answer_spans.back(), question = ep.question_spans.back();
  const Span code = ep.needle_code_spans[static_cast<size_t>(ep.queried.back())];
  const Trace t = m.capture(std::vector<int64_t>(ep.ids.begin(), ep.ids.begin() + reply.end - 1));
  std::vector<int64_t> rows;
  for (int64_t i = reply.begin - 1; i < reply.end - 1; ++i) rows.push_back(i);
  REQUIRE(rows.size() == 4);  // the space before the code (its own piece here) and three digits
  const int64_t T = t.length();
  const AttentionShare h1 = attention_share(t.layers[1].a.data.data() + T * T, T, rows,
                                            {code.begin, code.end}, {question.begin, reply.end - 1});
  REQUIRE(r.answering.per_head.size() == 2);
  CHECK(r.answering.per_head[1][1].answer == Approx(h1.answer));
  CHECK(r.answering.per_head[1][1].noise == Approx(h1.noise));
}

TEST_CASE("needle lab: summaries average seeds and count questions", "[needle][lab]") {
  std::vector<NeedleRun> runs(3);
  for (size_t i = 0; i < 3; ++i) {
    runs[i].cell = {128, i < 2 ? 0.5 : 1.0, 2, 2};
    runs[i].asked = 2;
    runs[i].answered = static_cast<int>(i);  // 0, 1 | 2
    runs[i].attention.mean = {0.1 * static_cast<double>(i + 1), 0.5};
    runs[i].answering.layers = {2};
    runs[i].answering.heads = {{0, 1}};
    runs[i].answering.per_head = {{{0.1, 0.2}, {0.3 * static_cast<double>(i + 1), 0.1}}};
    for (AttentionShare& h : runs[i].answering.per_head[0]) h.answer_mass = h.answer;
    runs[i].answering.mean = {0.2, 0.3};
  }
  const auto s = summarize(runs);
  REQUIRE(s.size() == 2);
  CHECK(s[0].cell.depth == 0.5);
  CHECK(s[0].runs == 2);
  CHECK(s[0].accuracy == Approx(0.25));  // 1 of 4 questions
  CHECK(s[0].attention.answer == Approx(0.15));
  CHECK(s[0].answering.noise == Approx(0.3));
  CHECK(s[0].answering_head == Approx((0.3 + 0.6) / 2));  // head 1 is the strongest in both runs
  CHECK(s[1].answering_head == Approx(0.9));
  CHECK(s[1].accuracy == Approx(1.0));
}

TEST_CASE("needle lab: the report writes JSON, CSV, tables and heatmaps", "[needle][lab][export]") {
  test::ScratchDir dir("needlereport");
  std::vector<NeedleRun> runs(2);
  runs[0].cell = {128, 0.0, 1, 1};
  runs[1].cell = {256, 0.0, 1, 1};
  for (auto& r : runs) {
    r.asked = 1;
    r.answered = 1;
    r.attention.layers = {0};
    r.attention.per_layer = {{0.2, 0.3}};
    r.attention.mean = {0.2, 0.3};
    r.attention.mean.answer_mass =
        0.25;  // the tables show the masses (the net shares: the CSV's first columns)
    r.attention.mean.noise_mass = 0.35;
    r.answering.layers = {0};
    r.answering.heads = {{0}};
    r.answering.per_head = {{{0.7, 0.05}}};
    r.answering.per_head[0][0].answer_mass = 0.7;
    r.answering.mean = {0.7, 0.05};
    r.answering.mean.answer_mass = 0.7;
    r.answering.mean.noise_mass = 0.05;
  }
  const std::string md = app::write_needle_report(dir / "out", {"m1"}, {runs});
  CHECK(md.find("| m1 | 0.250 / 0.350 | 1.00 |") != std::string::npos);
  CHECK(md.find("## Attention while answering") != std::string::npos);
  CHECK(md.find("| m1 | 1, 1 | 0.700 / 0.050 / 0.70 | 0.700 / 0.050 / 0.70 |") != std::string::npos);
  const auto j = nlohmann::json::parse(test::read_all(dir / "out/needle.json"));
  CHECK(j["models"][0]["runs"].size() == 2);
  CHECK(j["models"][0]["cells"][1]["length"] == 256);
  // The net shares keep their first columns; the measures and intervals follow (accuracy 1 of 1: Wilson
  // [0.2065, 1]).
  const std::string csv = test::read_all(dir / "out/needle.csv");
  CHECK(csv.find("m1,128,0,1,1,1,1,0.2,0.3,0.7,0.05,0.7,0,0.206549,1,") != std::string::npos);
  CHECK(csv.find("noise_mass,noise_mass_low,noise_mass_high,answer_output,noise_output") !=
        std::string::npos);
  CHECK(test::read_all(dir / "out/episodes.csv").find("m1,128,0,1,1,0,1,") != std::string::npos);
  CHECK(j["models"][0]["runs"][0]["answering_strongest_head"]["answer"] == 0.7);
  CHECK(std::filesystem::file_size(dir / "out/m1-accuracy-N1R1.png") > 500);
  CHECK(std::filesystem::file_size(dir / "out/m1-attention-N1R1.png") > 500);
  const std::string svg = test::read_all(dir / "out/m1-accuracy-N1R1.svg");
  size_t cells = 0;
  for (size_t p = svg.find("class=\"cell\""); p != std::string::npos; p = svg.find("class=\"cell\"", p + 1))
    ++cells;
  CHECK(cells == 2);  // one depth × two lengths
  CHECK(svg.find(">1.00</text>") != std::string::npos);
  // The cell size sets the PNG resolution.
  const std::string small = test::read_all(dir / "out/m1-accuracy-N1R1.png");
  app::write_needle_report(dir / "big", {"m1"}, {runs}, 200);
  auto png_width = [](const std::string& png) {  // IHDR width, big-endian at byte 16
    return (static_cast<unsigned char>(png[16]) << 24) | (static_cast<unsigned char>(png[17]) << 16) |
           (static_cast<unsigned char>(png[18]) << 8) | static_cast<unsigned char>(png[19]);
  };
  REQUIRE(small.size() > 24);
  CHECK(png_width(test::read_all(dir / "big/m1-accuracy-N1R1.png")) > png_width(small) + 2 * (200 - 72));
  CHECK_THROWS_WITH(app::write_needle_report(dir / "bad", {"m1"}, {runs}, 4),
                    Catch::Contains("between 16 and 512"));
  CHECK_THROWS_WITH(app::write_needle_report(dir / "bad", {"m1", "m2"}, {runs}),
                    Catch::Contains("one list of runs"));
}

TEST_CASE("needle lab: sweeps parse from typed fields and expand in a fixed order", "[needle][lab]") {
  const NeedleSweep s = parse_needle_sweep("128, 256", "0,50 ,100", "1,2,4", "1,2", 2);
  CHECK(s.lengths == std::vector<int64_t>{128, 256});
  CHECK(s.depths == std::vector<double>{0.0, 0.5, 1.0});
  // Every (N, R) with R <= N: (1,1), (2,1), (2,2), (4,1), (4,2).
  CHECK(s.needles_queried == std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {2, 2}, {4, 1}, {4, 2}});
  const std::vector<NeedleJob> jobs = expand(s);
  REQUIRE(jobs.size() == 2 * 3 * 5 * 2);
  CHECK(jobs[0].cell.length == 128);
  CHECK(jobs[0].seed == 1);
  CHECK(jobs[1].seed == 2);  // seeds vary fastest, then depths, then (N, R), then lengths
  CHECK(jobs[2].cell.depth == 0.5);
  CHECK(jobs[6].cell.needles == 2);
  CHECK(jobs[30].cell.length == 256);
  // Fresh episodes: seeds from a first seed on, the same episodes as a longer sweep's later ones.
  const std::vector<NeedleJob> fresh = expand(parse_needle_sweep("128", "0", "1", "1", 3, 41));
  REQUIRE(fresh.size() == 3);
  CHECK(fresh[0].seed == 41);
  CHECK(fresh[2].seed == 43);
  CHECK_THROWS_WITH(parse_needle_sweep("128", "0", "1", "1", 3, 0),
                    Catch::Contains("first seed must lie in"));
  const std::pair<const char*, const char*> bad[] = {
      {"lengths", "each length must be an integer of at least 64"},
      {"depths", "percentages in [0, 100]"},
      {"needles", "no combination"},
      {"text", "comma-separated numbers, got 'x'"},
      {"empty", "comma-separated numbers, got ''"},
      {"seeds", "seeds must be at least 1"},
      {"huge", "more than 100,000 episodes"},
  };
  for (const auto& [what, message] : bad) {
    INFO(what);
    const std::string w = what;
    CHECK_THROWS_WITH(parse_needle_sweep(w == "lengths" ? "32"
                                         : w == "text"  ? "128,x"
                                         : w == "empty" ? ""
                                                        : "128",
                                         w == "depths" ? "150"
                                         : w == "huge" ? "0,1,2,3,4,5,6,7,8,9"
                                                       : "50",
                                         w == "needles" ? "1" : "1", w == "needles" ? "2" : "1",
                                         w == "seeds"  ? 0
                                         : w == "huge" ? 20000
                                                       : 1),
                      Catch::Contains(message));
  }
}

TEST_CASE("needle --keep-traces: the kept bundle and episode.json recompute episodes.csv", "[needle][lab]") {
  test::ScratchDir dir("needlekeep");
  std::vector<std::string> names;
  std::vector<std::vector<NeedleRun>> runs;
  for (const char* name : {"diff-small", "baseline-small"}) {
    const Model m = Model::load(kAssets / "models" / name);
    const Haystack hay(test::read_all(kAssets / "haystack.txt").substr(0, 60000), m.tokenizer());
    const EpisodeBuilder builder(hay, m.tokenizer(), NeedleSplit::Eval);
    names.push_back(name);
    runs.emplace_back();
    for (uint64_t seed : {1, 2}) {
      NeedleRun r = run_needle(m, builder, {128, 0.5, 1, 1}, seed, nullptr, {}, true);
      REQUIRE(r.trace);
      app::write_kept_episode(dir / "keep" / name / std::to_string(seed), name, r);
      runs.back().push_back(r);
    }
  }
  app::write_needle_report(dir / "out", names, runs);
  // Every row of episodes.csv, recomputed from its bundle and episode.json alone.
  std::istringstream csv(test::read_all(dir / "out/episodes.csv"));
  std::string line;
  std::getline(csv, line);
  CHECK(line ==
        "model,length,depth,needles,queried,seed,accuracy,answer_mass,noise_mass,answer_output,"
        "noise_output,noise_net,net_budget,a1_noise_mass,a1_noise_output");
  int rows = 0;
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    REQUIRE(f.size() == 15);
    const std::filesystem::path kept = dir / "keep" / f[0] / f[5];
    const auto ep = nlohmann::json::parse(test::read_all(kept / "episode.json"));
    const Trace t = read_trace_bundle(kept);
    CHECK(t.token_ids == ep["ids"].get<std::vector<int64_t>>());
    const NoiseReadout r = attention_noise(t, {ep["answer_span"][0], ep["answer_span"][1]},
                                           {ep["question_rows"][0], ep["question_rows"][1]});
    INFO(line);
    CHECK(std::stod(f[7]) == Approx(r.mean.answer_mass).margin(1e-6));
    CHECK(std::stod(f[8]) == Approx(r.mean.noise_mass).margin(1e-6));
    CHECK(std::stod(f[9]) == Approx(r.mean.answer_output).margin(1e-6));
    CHECK(std::stod(f[10]) == Approx(r.mean.noise_output).margin(1e-6));
    CHECK(std::stod(f[11]) == Approx(r.mean.noise).margin(1e-6));
    CHECK(std::stod(f[12]) == Approx(r.mean.budget).margin(1e-6));
    if (f[0] == "diff-small") {  // A1 alone, the same rows of the same run
      CHECK(std::stod(f[13]) == Approx(r.mean.a1_noise_mass).margin(1e-6));
      CHECK(std::stod(f[14]) == Approx(r.mean.a1_noise_output).margin(1e-6));
      Trace first = t;  // the bundle's A1 maps measured as if they were A
      for (LayerTrace& l : first.layers) l.a = l.a1;
      const NoiseReadout r1 = attention_noise(first, {ep["answer_span"][0], ep["answer_span"][1]},
                                              {ep["question_rows"][0], ep["question_rows"][1]});
      CHECK(r.mean.a1_noise_mass == Approx(r1.mean.noise_mass).margin(1e-9));
      CHECK(r.mean.a1_noise_output == Approx(r1.mean.noise_output).margin(1e-9));
    } else {
      CHECK(f[13] == "nan");
    }
    CHECK(std::isfinite(r.mean.noise_output));
    if (f[0] == "baseline-small") CHECK(r.mean.noise_mass == Approx(r.mean.noise).margin(1e-9));
    ++rows;
  }
  CHECK(rows == 4);
  const std::string md = test::read_all(dir / "out/tables.md");
  CHECK(md.find("## Attention noise as mass, as output share and as net share") != std::string::npos);
  CHECK(md.find("## Each model against diff-small on the same episodes") != std::string::npos);
  // Both answer both episodes: McNemar has no discordant pair.
  CHECK(md.find("| baseline-small | 128 | 0 / 0 (p = 1, no significant difference) |") != std::string::npos);
}
