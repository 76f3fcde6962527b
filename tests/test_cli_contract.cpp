// What the docs promise is what the commands do: the places a newcomer's audit found them apart (issue
// 40), each held here. Output paths are checked before any work, folders given as files are named, limits
// are refused with the limit or said, token spans read [begin, end) everywhere, zoomed figures say what
// they draw, captures follow --layers for everything they keep, and logs get whole lines.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <sched.h>

#include <cstdlib>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/options.h"
#include "app/reports/head_figures.h"
#include "app/reports/needle_report.h"
#include "app/reports/text_page.h"
#include "core/formats/data.h"
#include "core/formats/metrics.h"
#include "core/formats/tokenizer.h"
#include "core/formats/trace_io.h"
#include "core/model/needle.h"
#include "helpers.h"
#include "viz/figure.h"
#include "viz/token_text.h"

namespace fs = std::filesystem;
using namespace difflens;

namespace {

const fs::path kSource = DIFFLENS_SOURCE_DIR;
const std::string kModel = (kSource / "assets/models/diff-small").string();

struct Result {
  int status;
  std::string out;  // stdout and stderr
};

Result run(const std::string& args, const test::ScratchDir& dir, const std::string& env = "") {
  const std::string log = (dir / "cli.log").string();
  const std::string cmd = env + " " + std::string(DIFFLENS_EXE) + " " + args + " > '" + log + "' 2>&1";
  const int raw = std::system(cmd.c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, test::read_all(log)};
}

std::string quoted(const fs::path& p) {
  return "'" + p.string() + "'";
}

// The desktop app headless at 1280x800: one frame after the result, written to DIR/s.png. Skips the test
// without a display.
Result run_app(const std::string& args, const test::ScratchDir& dir) {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  return run(args + " --size 1280x800 --exit-after-frames 1 --screenshot " + quoted(dir / "s.png"), dir);
}

}  // namespace

TEST_CASE("contract: every command checks its output path before any work", "[cli][errors]") {
  test::ScratchDir dir("contract-out");
  const fs::path file = dir / "a-file";
  test::write_all(file, "mine\n");
  const std::string f = quoted(file);
  const std::pair<std::string, std::string> cases[] = {
      {"needle --lengths 128 --seeds 1 --out " + f, "--out " + file.string() + ": is a file; give a folder"},
      {"outliers --max-windows 1 --out " + f, "is a file; give a folder"},
      {"capture --model " + kModel + " --prompt 'The code' --out " + f, "is a file; give a folder"},
      {"explain --prompt 'The code' --out " + f, "is a file; give a folder"},
      {"quantize --prompt 'The code' --out " + f, "is a file; give a folder"},
      {"init-pair --hidden 32 --layers 1 --heads 2 --vocab 300 --out " + f, "is a file; give a folder"},
      {"convert --from " + kModel + " --to " + f, "exists and is not empty"},
      {"render --trace " + quoted(dir.path()) + " --out " + quoted(dir.path()),
       "is a folder; give a file name"},
      {"render --trace " + quoted(dir.path()) + " --out x.jpg", "writes .png or .svg files; name it x.png"},
      {"--screenshot shot.jpg", "--screenshot shot.jpg: writes .png files; name it shot.png"},
      {"train --corpus " + quoted(dir.path()) + " --out " + f, "is a file, not a folder"},
      {"heads --prompt 'The code' --out " + quoted(file / "h.csv"), "is a file; give a folder"},
      {"lens --prompt 'The code' --out " + quoted(file / "l.csv"), "is a file; give a folder"},
      {"man --out " + quoted(dir.path()), "is a folder; give a file name"},
      {"man --out " + quoted(file / "difflens.1"), "is a file; give a folder"},
      {"icon --out " + f, "is a file; give a folder"},
      {"--export-all --export-dir " + f, "is a file; give a folder"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = run(args, dir);
    INFO(args << "\n" << r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find(message) != std::string::npos);
    CHECK(r.out.find("[1/") == std::string::npos);        // no episode ran before the refusal
    CHECK(r.out.find("window 1/") == std::string::npos);  // nor a window of the text
  }
#ifdef DIFFLENS_GUI
  {  // soak checks its folder before it asks for a display
    const Result r = run("soak --seconds 1 --out " + f, dir);
    INFO(r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find("--out " + file.string() + ": is a file; give a folder") != std::string::npos);
  }
#endif
  CHECK(test::read_all(file) == "mine\n");
  // A refusal leaves no empty output folder behind; an upper-case extension writes what it names.
  Result r = run("needle --lengths 5 --out " + quoted(dir / "new"), dir);
  CHECK(r.status == 1);
  CHECK(!fs::exists(dir / "new"));
  REQUIRE(run("capture --model " + kModel + " --prompt 'The code' --out " + quoted(dir / "t"), dir).status ==
          0);
  r = run("render --trace " + quoted(dir / "t") + " --out " + quoted(dir / "fig/H.SVG"), dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(test::read_all(dir / "fig/H.SVG").find("<svg") != std::string::npos);
}

TEST_CASE("contract: a folder given where a file is expected is named as a folder", "[cli][errors]") {
  test::ScratchDir dir("contract-folder");
  const std::string d = quoted(dir.path());
  const std::pair<std::string, std::string> cases[] = {
      {"capture --model " + kModel + " --prompt-file " + d + " --out " + quoted(dir / "t"),
       "is a folder; the prompt file must be a file"},
      {"outliers --text-file " + d + " --out " + quoted(dir / "o"),
       "is a folder; the text file must be a file"},
      {"loss --text-file " + d, "is a folder; the text must be a file"},
      {"needle --lengths 128 --seeds 1 --haystack " + d + " --out " + quoted(dir / "n"),
       "is a folder; the haystack text must be a file"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = run(args, dir);
    INFO(args << "\n" << r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find(message) != std::string::npos);
    CHECK(r.out.find("prompt is empty") == std::string::npos);
  }
}

TEST_CASE("contract: limits are refused with the limit, not applied without a word", "[cli][errors]") {
  test::ScratchDir dir("contract-limits");
  Result r = run("outliers --window 10000 --max-windows 1 --out " + quoted(dir / "o"), dir);
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK(r.out.find("longer than the 8192 positions") != std::string::npos);
  CHECK(r.out.find("give --window 8192 or less") != std::string::npos);
  // The default window (512) fits a model that reads fewer positions; a window given is refused.
  REQUIRE(run("init-pair --hidden 32 --layers 1 --heads 2 --vocab 300 --out " + quoted(dir / "short"), dir)
              .status == 0);
  {
    const fs::path cfg = dir / "short/diff/config.json";
    std::string json = test::read_all(cfg);
    const size_t at = json.find("\"max_position_embeddings\"");
    REQUIRE(at != std::string::npos);
    const size_t v = json.find_first_of("0123456789", at), e = json.find_first_not_of("0123456789", v);
    json.replace(v, e - v, "128");
    test::write_all(cfg, json);
  }
  r = run("outliers --models " + quoted(dir / "short/diff") + " --text-file " +
              quoted(kSource / "assets/haystack.txt") + " --max-windows 1 --out " + quoted(dir / "o128"),
          dir);
  INFO(r.out);
  CHECK(r.status == 0);
  r = run("outliers --models " + quoted(dir / "short/diff") + " --window 512 --max-windows 1 --out " +
              quoted(dir / "o512"),
          dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("give --window 128 or less") != std::string::npos);
  r = run("generate --model " + kModel + " --prompt 'The jury said' --tokens 100000", dir);
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK(r.out.find("pass the 8192 positions") != std::string::npos);
  CHECK(r.out.find("give --tokens 8188 or less") != std::string::npos);  // BOS + 3 tokens of prompt
  // init-pair over a pair refuses, as convert does, unless --overwrite.
  const std::string pair =
      "init-pair --hidden 32 --layers 1 --heads 2 --vocab 300 --out " + quoted(dir / "p");
  REQUIRE(run(pair, dir).status == 0);
  const std::string before = test::read_all(dir / "p/diff/model.safetensors");
  r = run(pair + " --seed 9", dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("exists and is not empty; refusing to overwrite it") != std::string::npos);
  CHECK(test::read_all(dir / "p/diff/model.safetensors") == before);
  CHECK(run(pair + " --seed 9 --overwrite", dir).status == 0);
  CHECK(test::read_all(dir / "p/diff/model.safetensors") != before);
}

TEST_CASE("contract: the app says what it showed instead of an out-of-range --select or --zoom",
          "[cli][gui]") {
  test::ScratchDir dir("contract-select");
  const Result r =
      run_app("--prompt 'The code of Mira is 4821.' --select 9,9 --zoom 24,0,16 --threads 1", dir);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("layer 9 is beyond the model's 4 layers: showing layer 3") != std::string::npos);
  CHECK(r.out.find("head 9 is beyond the left model's 4 heads: showing head 3") != std::string::npos);
  CHECK(r.out.find("--zoom 24,0,16 asks for rows [24, 40) and keys [0, 16), but the prompt has 14 tokens: "
                   "the maps show rows [0, 14), keys [0, 14)") != std::string::npos);
}

TEST_CASE("contract: --export-all that exports nothing fails and says why, with the maps it exports",
          "[cli][gui][export]") {
  test::ScratchDir dir("contract-export");
  const std::string common =
      "--prompt 'The code of Mira is 4821.' --threads 1 --export-all --export-dir " + quoted(dir / "figs");
  Result r = run_app(common + " --view outliers", dir);
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK(r.out.find("--export-all wrote nothing to") != std::string::npos);
  CHECK(r.out.find("--view maps, or --split below") != std::string::npos);
  r = run_app(common + " --view outliers --split below", dir);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("exported ") != std::string::npos);
  CHECK(fs::exists(dir / "figs"));
  CHECK(!fs::is_empty(dir / "figs"));
}

TEST_CASE("contract: --bundle puts the bundle's text in the prompt box", "[cli][gui]") {
  CHECK(viz::text_of_pieces({"<s>", "\xE2\x96\x81The",
                             "\xE2\x96\x81"
                             "code",
                             "<0x0A>", "x"},
                            true) == "The code\nx");
  CHECK(viz::text_of_pieces({"a", "b"}, false) == "ab");
  test::ScratchDir dir("contract-bundle");
  REQUIRE(
      run("capture --model " + kModel + " --prompt 'The code of Mira is 4821.' --out " + quoted(dir / "b"),
          dir)
          .status == 0);
  const Result r = run_app("--bundle " + quoted(dir / "b") + " --threads 1", dir);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("prompt box: 25 bytes: The code of Mira is 4821.\n") != std::string::npos);
}

TEST_CASE("contract: token spans are half-open in the help, figure titles and the app", "[cli][figure]") {
  CHECK(viz::token_range(10, 13) == "[10, 13)");
  CHECK(viz::region_caption({0, 0, 0, 0}, 14).empty());
  CHECK(viz::region_caption({0, 0, 14, 14}, 14).empty());
  CHECK(viz::region_caption({24, 0, 16, 16}, 50) == "(rows [24, 40), keys [0, 16))");
  // A pooled map's region is in cells: the caption says the tokens they cover.
  CHECK(viz::region_caption({2, 0, 2, 2}, 4, {0, 3, 6, 9, 12}) == "(rows [6, 12), keys [0, 6))");
  CHECK(app::cell_labels({"a", "b", "c", "d", "e", "f", "g"}, 3) ==
        std::vector<std::string>{"[0, 2)", "[2, 4)", "[4, 7)"});
  test::ScratchDir dir("contract-span");
  CHECK(run("--help", dir).out.find("[BEGIN, END), END excluded (10,13 marks") != std::string::npos);
  CHECK(run("explain --help", dir).out.find("[BEGIN, END), END excluded") != std::string::npos);
  // render --zoom: the title names the rows and keys drawn.
  REQUIRE(
      run("capture --model " + kModel + " --prompt 'The code of Mira is 4821.' --out " + quoted(dir / "t"),
          dir)
          .status == 0);
  const Result r = run("render --trace " + quoted(dir / "t") + " --layer 1 --head 3 --zoom 6,2,4 --out " +
                           quoted(dir / "z.svg"),
                       dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const std::string svg = test::read_all(dir / "z.svg");
  CHECK(svg.find("(rows [6, 10), keys [2, 6))") != std::string::npos);
}

TEST_CASE("contract: commands run on every core by default and say so", "[cli]") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  const int cores = CPU_COUNT(&set);
  test::ScratchDir dir("contract-threads");
  Result r = run(
      "capture --model " + kModel + " --prompt 'The code of Mira is 4821.' --out " + quoted(dir / "t") + "/",
      dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("on " + std::to_string(cores) + " CPU threads") != std::string::npos);
  // The files written, named once each (no "t//trace.json").
  CHECK(r.out.find((dir / "t/trace.json").string() + ", " + (dir / "t/maps.safetensors").string()) !=
        std::string::npos);
  CHECK(r.out.find("//") == std::string::npos);
  r = run("capture --model " + kModel + " --prompt 'The code' --threads 1 --out " + quoted(dir / "t"), dir);
  CHECK(r.out.find("on 1 CPU threads") != std::string::npos);
  CHECK(run("capture --help", dir)
            .out.find("CPU threads (default: every core, " + std::to_string(cores) + " here)") !=
        std::string::npos);
}

TEST_CASE("contract: capture --layers selects what --keep-qkv, --keep-hidden and --keep-logits keep",
          "[cli][trace]") {
  test::ScratchDir dir("contract-keep");
  const Result r =
      run("capture --model " + kModel +
              " --prompt 'The code of Mira is 4821.' --layers 1 --heads 3 --keep-qkv --keep-hidden "
              "--keep-logits --out " +
              quoted(dir / "t"),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const Trace t = read_trace_bundle((dir / "t").string());
  REQUIRE(t.layers.size() == 4);
  for (const LayerTrace& l : t.layers) {
    INFO("layer " << l.index);
    const bool kept = l.index == 1;
    CHECK(l.q1.empty() != kept);
    CHECK(l.k2.empty() != kept);
    CHECK(l.v.empty() != kept);
    CHECK(l.subln_weight.empty() != kept);
    CHECK(l.hidden.empty() != kept);
    CHECK(l.logits1.empty() != kept);
    CHECK(l.a.empty() != kept);
  }
  // Every head of the kept layer: --heads selects maps only.
  CHECK(t.layers[1].q1.shape == std::vector<int64_t>{4, 14, 16});
  CHECK(t.layers[1].v.shape == std::vector<int64_t>{4, 14, 32});
  CHECK(t.layers[1].a.shape == std::vector<int64_t>{1, 14, 14});
  // FORMATS.md lists what --keep-qkv writes and says the selection.
  const std::string formats = test::read_all(kSource / "core/FORMATS.md");
  for (const char* s : {"`layers.{i}.q1`, `layers.{i}.k1` (and `q2`, `k2` for DIFF)", "`layers.{i}.v`",
                        "`layers.{i}.subln_weight`", "follow `--layers`"})
    CHECK(formats.find(s) != std::string::npos);
}

TEST_CASE("contract: noise is defined for signed maps where it is shown and in FORMATS.md", "[metrics]") {
  const std::string def = kAttentionShareDefinition;
  for (const char* s : {"attention mass", "output share", "net share", "budget",
                        "Attention noise is the "
                        "noise's attention mass"})
    CHECK(def.find(s) != std::string::npos);
  const std::string formats = test::read_all(kSource / "core/FORMATS.md");
  CHECK(formats.find("### Attention to the answer and attention noise") != std::string::npos);
  CHECK(formats.find("A negative net share means the keys counted carry net negative weight") !=
        std::string::npos);
  CHECK(formats.find("**\"Attention noise\" is the noise's attention mass.**") != std::string::npos);
  CHECK(formats.find("the first screen's −0.27") ==
        std::string::npos);  // no fixed example beside live numbers
  // A hand-made signed row: A = [0.1, 0.6, -0.2, 0.3] at query 3, the answer key 1: Σ|A| = 1.2.
  const float row[] = {0.1f, 0.6f, -0.2f, 0.3f};
  const AttentionShare s = query_row_share(row, 3, {1, 2});
  CHECK(s.answer == Approx(0.6 / 1.2));
  CHECK(s.noise == Approx((0.1 - 0.2) / 1.2));  // negative: the query's own token is neither
}

TEST_CASE("contract: needle depths are distinct places, each reported where it was put", "[needle][lab]") {
  const Tokenizer tok = Tokenizer::sentencepiece(kSource / "assets/models/diff-small/tokenizer.model");
  const std::string text = test::read_all(kSource / "assets/haystack.txt");
  const Haystack hay(text, tok);
  const EpisodeBuilder builder(hay, tok, NeedleSplit::Eval);
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    std::vector<std::vector<int64_t>> seen;
    for (const double depth : {0.0, 0.25, 0.5, 0.75, 1.0}) {
      const Episode e = needle_episode(builder, {128, depth, 1, 1}, seed);
      INFO("seed " << seed << " depth " << depth);
      REQUIRE(e.placed_depths.size() == 1);
      CHECK(std::fabs(e.placed_depths[0] - depth) <= kDepthTolerance + 1e-9);
      for (const auto& other : seen) CHECK(other != e.ids);  // never one episode in two cells
      seen.push_back(e.ids);
    }
  }
  // The report's tables give the placed depth beside the asked one.
  std::vector<NeedleRun> runs(1);
  runs[0].cell = {128, 0.25, 1, 1};
  runs[0].placed_depth = 0.3;
  runs[0].asked = runs[0].answered = 1;
  test::ScratchDir dir("contract-needle");
  const std::string md = app::write_needle_report(dir / "out", {"m"}, {runs});
  CHECK(md.find("| *placed at* | *30%* |") != std::string::npos);
  CHECK(test::read_all(dir / "out/needle.csv").find(",placed_depth,") != std::string::npos);
}

TEST_CASE("contract: needle's attention heatmaps share one colour scale across models", "[needle][export]") {
  std::vector<std::vector<NeedleRun>> runs(2, std::vector<NeedleRun>(2));
  const double shares[2][2] = {{0.002, 0.006}, {0.010, 0.030}};
  for (int m = 0; m < 2; ++m)
    for (int k = 0; k < 2; ++k) {
      NeedleRun& r = runs[static_cast<size_t>(m)][static_cast<size_t>(k)];
      r.cell = {k == 0 ? 128 : 256, 0.5, 1, 1};
      r.asked = 1;
      r.attention.mean = {shares[m][k], 0.1};
      r.attention.mean.answer_mass = shares[m][k];  // the heatmaps show the attention mass on the answer
    }
  test::ScratchDir dir("contract-scale");
  app::write_needle_report(dir / "out", {"diff", "base"}, runs);
  // The colour bar's end labels: the same for both models, spanning both.
  auto legend = [&](const std::string& file) {
    const std::string svg = test::read_all(dir / "out" / file);
    std::vector<std::string> labels;
    for (size_t at = svg.find("<text"); at != std::string::npos; at = svg.find("<text", at + 1)) {
      const size_t b = svg.find('>', at) + 1;
      labels.push_back(svg.substr(b, svg.find('<', b) - b));
    }
    return std::vector<std::string>(labels.end() - 2, labels.end());
  };
  const auto a = legend("diff-attention-N1R1.svg"), b = legend("base-attention-N1R1.svg");
  CHECK(a == b);
  CHECK(a == std::vector<std::string>{"0.000", "0.030"});
}

TEST_CASE("contract: help states each default once, and progress in a log is whole lines", "[cli]") {
  test::ScratchDir dir("contract-help");
  // Each option's entry (its help, and the usage's "[default X]" when the table has a fallback) names a
  // default at most once: serve's --models once said "(default: the bundled pair)" twice.
  std::vector<cli::Command> commands = cli::all_commands();
  commands.push_back(cli::gui_command());
  for (const auto& c : commands)
    for (const cli::Option& o : c.options) {
      INFO((c.name.empty() ? "the app" : c.name) << " --" << o.name << ": " << o.help);
      size_t count = o.fallback.empty() ? 0 : 1;
      for (size_t at = o.help.find("default"); at != std::string::npos; at = o.help.find("default", at + 1))
        ++count;
      CHECK(count <= 1);
    }
  const Result r = run("needle --lengths 128 --depths 0,50 --seeds 1 --out " + quoted(dir / "n"), dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find('\r') == std::string::npos);
  CHECK(r.out.find("[1/4] diff-small") != std::string::npos);
  CHECK(r.out.find("\n[2/4] diff-small") != std::string::npos);
}

TEST_CASE("contract: a long prompt's maps, notes and colour-bar labels fit their panel at 1280x800",
          "[cli][gui][long]") {
  test::ScratchDir dir("contract-long");
  const Result r = run_app("--needle 2048,50,1,1,1 --pooled-budget 1 --zoom 1500,1400,400 --threads 2", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("head view shows an exact tile") != std::string::npos);
  CHECK(r.out.find("clips its contents") == std::string::npos);
  // (8: the maps, their panels, the side panel, the prompt's wrapped text, ...: a count that changes only
  // with the layout.)
  CHECK(r.out.find("layout check: 8 windows, 0 outside or clipped") != std::string::npos);
}

TEST_CASE("contract: render --html writes a page of one or two bundles, and refuses what belongs elsewhere",
          "[cli][page]") {
  test::ScratchDir dir("contract-page");
  const std::string prompt =
      " --prompt 'The secret code of Mira is 4821. Q: What is the secret code of Mira?'";
  REQUIRE(run("capture --model " + kModel + prompt + " --out " + quoted(dir / "d"), dir).status == 0);
  const std::string base = (kSource / "assets/models/baseline-small").string();
  REQUIRE(run("capture --model " + base + prompt + " --out " + quoted(dir / "b"), dir).status == 0);
  Result r =
      run("render --trace " + quoted(dir / "d") + " --compare " + quoted(dir / "b") +
              " --layers 0,1 --head 3 --compare-head 4 --answer 7,11 --pool layer --direction to --html " +
              quoted(dir / "p" / "page.html"),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("wrote " + (dir / "p" / "page.html").string() + " (") != std::string::npos);
  const auto data = nlohmann::json::parse(app::page_data_json(test::read_all(dir / "p" / "page.html")));
  CHECK(data["models"].size() == 2);
  CHECK(data["models"][0]["name"] == "diff-small");
  CHECK(data["models"][1]["head"] == 4);
  CHECK(data["models"][0]["layers"].size() == 2);
  CHECK(data["layer"] == 0);  // --layers without --layer: the first shown first
  CHECK(data["pool"] == "layer");
  CHECK(data["direction"] == "to");
  CHECK(data["answer"] == nlohmann::json::array({7, 11}));
  CHECK(std::distance(fs::directory_iterator(dir / "p"), fs::directory_iterator()) ==
        1);  // no temporary left
  // Refusals, each before anything is written.
  const std::string d = " --trace " + quoted(dir / "d");
  r = run("render" + d + " --out " + quoted(dir / "a.png") + " --html " + quoted(dir / "a.html"), dir);
  CHECK(r.status != 0);
  CHECK(r.out.find("give --out (a figure) or --html (a page), not both") != std::string::npos);
  r = run("render" + d, dir);
  CHECK(r.out.find("give --out F.png|F.svg (a figure) or --html F.html (a page)") != std::string::npos);
  r = run("render" + d + " --out " + quoted(dir / "a.png") + " --pool layer", dir);
  CHECK(r.out.find("--pool belongs to the page: give --html F.html with it") != std::string::npos);
  r = run("render" + d + " --html " + quoted(dir / "a.txt"), dir);
  CHECK(r.status != 0);
  CHECK(r.out.find(".html") != std::string::npos);
  r = run("render" + d + " --head 9 --html " + quoted(dir / "a.html"), dir);
  CHECK(r.out.find("diff-small: head 9 of layer 0 is not in this trace (kept: 0, 1, 2, 3)") !=
        std::string::npos);
  r = run("render" + d + " --max-mb 1 --html " + quoted(dir / "a.html"), dir);  // fits: 23 tokens
  CHECK(r.status == 0);
  CHECK_FALSE(fs::exists(dir / "a.png"));
  CHECK_FALSE(fs::exists(dir / "a.txt"));
}

TEST_CASE("contract: the app's --export-page writes the Text view's page, and needs a headless run",
          "[cli][gui][page]") {
  test::ScratchDir dir("contract-app-page");
  Result r = run("--export-page " + quoted(dir / "x.html"), dir);
  CHECK(r.status != 0);
  CHECK(r.out.find("--export-page is for headless runs: give --screenshot F.png with it") !=
        std::string::npos);
  r = run_app(
      "--prompt 'The secret code of Mira is 4821. Q: What is the secret code of Mira?' --select 1,3 "
      "--view text --text-heads all --text-direction to --query 5 --threads 1 --export-page " +
          quoted(dir / "x.html"),
      dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("status line: wrote " + (dir / "x.html").string()) != std::string::npos);
  CHECK(r.out.find("layout: text.0 ") != std::string::npos);
  CHECK(r.out.find("layout: text.1 ") != std::string::npos);
  const auto data = nlohmann::json::parse(app::page_data_json(test::read_all(dir / "x.html")));
  CHECK(data["pool"] == "all");
  CHECK(data["direction"] == "to");
  CHECK(data["query"] == 5);
  CHECK(data["layer"] == 1);
  CHECK(data["models"][0]["head"] == 3);
}

TEST_CASE("contract: hovering a token in the Text view makes it the query only while the pointer stays",
          "[cli][gui][text]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("contract-text-hover");
  // Three frames: the token's box is drawn, the pointer placed on it, then the view follows it.
  const std::string shot =
      " --size 1280x800 --threads 1 --exit-after-frames 3 --screenshot " + quoted(dir / "t.png");
  Result r = run("--view text --hover-token 100" + shot, dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  // The hovered token is the query shown; the kept one (the episode's, from the needle builder) stays.
  CHECK(r.out.find("text view: query 100 shown, kept query ") != std::string::npos);
  CHECK(r.out.find("kept query 100\n") == std::string::npos);
  CHECK(r.out.find("layout: text.probe ") != std::string::npos);
  // Without the pointer there, the kept query is shown.
  r = run("--view text --query 100" + shot, dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("text view: query 100 shown, kept query 100\n") != std::string::npos);
  // Refused: a token index that is not a number.
  r = run("--hover-token x --screenshot " + quoted(dir / "x.png"), dir);
  CHECK(r.status != 0);
  CHECK(r.out.find("--hover-token") != std::string::npos);
}

TEST_CASE(
    "contract: a write that fails (a file-size limit, a file for a folder) leaves the earlier file whole",
    "[cli][disk]") {
  test::ScratchDir dir("contract-disk");
  REQUIRE(
      run("capture --model " + kModel + " --prompt 'The code of Mira is 4821.' --out " + quoted(dir / "t"),
          dir)
          .status == 0);
  // Earlier files, as a user would have them.
  for (const char* name : {"head.png", "head.svg", "page.html"})
    std::ofstream(dir / name) << "earlier " << name;
  const std::string earlier_json = test::read_all(dir / "t" / "trace.json");
  const std::string earlier_maps = test::read_all(dir / "t" / "maps.safetensors");
  // sh: the file-size limit (512-byte blocks) with SIGXFSZ ignored, so a write past it fails with EFBIG.
  const std::string limit = "trap '' XFSZ; ulimit -f 4; ";
  auto no_temporaries = [&](const fs::path& folder) {
    for (const auto& e : fs::directory_iterator(folder))
      if (e.path().filename().string().find(".part") != std::string::npos) return false;
    return true;
  };
  const std::string t = " --trace " + quoted(dir / "t") + " --layer 1 --head 3";
  for (const auto& [args, file] :
       {std::pair<std::string, std::string>{"render" + t + " --size 512 --out " + quoted(dir / "head.png"),
                                            "head.png"},
        {"render" + t + " --out " + quoted(dir / "head.svg"), "head.svg"},
        {"render" + t + " --html " + quoted(dir / "page.html"), "page.html"}}) {
    const Result r = run(args, dir, limit);
    INFO(args << "\n" << r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find((dir / file).string() +
                     ": cannot write (File too large); an earlier file there is left as it was") !=
          std::string::npos);
    CHECK(test::read_all(dir / file) == "earlier " + file);
  }
  // A bundle written again over the earlier one: its maps do not fit, both files stay as they were.
  Result r =
      run("capture --model " + kModel +
              " --prompt 'The code of Thomas is 7182, and more words here.' --out " + quoted(dir / "t"),
          dir, limit);
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK(r.out.find("cannot write (") != std::string::npos);
  CHECK(test::read_all(dir / "t" / "trace.json") == earlier_json);
  CHECK(test::read_all(dir / "t" / "maps.safetensors") == earlier_maps);
  CHECK(no_temporaries(dir.path()));
  CHECK(no_temporaries(dir / "t"));
  // A file where the output's folder should be: said, nothing written.
  std::ofstream(dir / "plain") << "x";
  r = run("render" + t + " --out " + quoted(dir / "plain" / "head.png"), dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("plain") != std::string::npos);
  CHECK(test::read_all(dir / "plain") == "x");
}

TEST_CASE("contract: the app keeps its last good layout file when the new one cannot be written",
          "[cli][gui][disk]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("contract-layout-disk");
  std::ofstream(dir / "layout.ini") << "view=lambda\nside_panel=0\n";
  // The limit applies to whatever the limited process writes, its log included: its output goes through a
  // pipe to a `cat` outside the limit.
  const std::string log = (dir / "log").string();
  const std::string cmd = "sh -c \"trap '' XFSZ; ulimit -f 0; exec " + std::string(DIFFLENS_EXE) +
                          " --settings " + quoted(dir / "layout.ini") +
                          " --view maps --size 640x480 --threads 1 --exit-after-frames 1 --screenshot " +
                          quoted(dir / "s.png") + "\" 2>&1 | cat > '" + log + "'";
  (void)std::system(cmd.c_str());
  const Result r{0, test::read_all(log)};
  INFO(r.out);
  // Nothing can be written: the screenshot and the layout each say so, and the earlier layout stays.
  CHECK(r.out.find("s.png: cannot write (File too large)") != std::string::npos);
  CHECK(r.out.find("the layout was not saved: ") != std::string::npos);
  CHECK(test::read_all(dir / "layout.ini") == "view=lambda\nside_panel=0\n");
  CHECK_FALSE(fs::exists(dir / "s.png"));
}
