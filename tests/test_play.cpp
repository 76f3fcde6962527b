// Scripted sessions (--play): the script language read and refused line by line, the soak's generator, and
// a script played in a real window (under Xvfb) doing what its lines say.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "app/desktop/play_script.h"
#include "core/formats/error.h"
#include "core/formats/trace_io.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;
using namespace difflens::app;

namespace {

std::string refusal(const std::string& script) {
  try {
    (void)parse_play_script(script, "s.play");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

struct Run {
  int status;
  std::string out;
};

Run run_difflens(const std::string& args, const test::ScratchDir& dir) {
  const std::string log = (dir / "play.log").string();
  for (int attempt = 0;; ++attempt) {
    const int raw = std::system((std::string(DIFFLENS_EXE) + " " + args + " > '" + log + "' 2>&1").c_str());
    Run r{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, test::read_all(log)};
    if (r.status == 0 || attempt == 1 || !test::display_refused(r.out)) return r;
    std::this_thread::sleep_for(std::chrono::seconds(1));  // the X server turned the window away: once more
  }
}

// Skips a test that plays the desktop app where there is none: a build without it, or no display.
void need_the_app_and_a_display(const char* what) {
#ifndef DIFFLENS_GUI
  test::skip(std::string("built with DIFFLENS_GUI=OFF: ") + what + " plays the desktop app");
#endif
  (void)what;
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
}

uint32_t png_be32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(bytes[at + i]);
  return v;
}

}  // namespace

TEST_CASE("play scripts: every action read with its values, comments and blank lines skipped", "[play]") {
  const PlayScript s = parse_play_script(
      "# a comment\n\n  type The code is\\x20 4821.\\n\n"
      "paste \\xff\\xfe\nprompt  two spaces\nclear\nneedle 256,50,2,1,7,0\n"
      "query last\nquery 12\nanswer 10 14\nanswer clear\nlayer 3\nhead 2\nhead right 5\n"
      "view text\nview 3\nsplit beside\nside off\nlecture on\ntext-size 1.5\ntext-direction to\n"
      "text-heads all\nopen left model assets/models/my model\nopen right remote remote://h:1/0 SECRET\n"
      "device cpu\nlogits 6\npooling mean\nbudget 64\nsize 640x480\nlab grid 64,128 0,100 1 1 2\n"
      "lab start\nlab cancel\nexplain next\nexplain 4\npresent on\nexport maps\nexport page p.html\n"
      "export folder out dir\nwait\nwait 250\nscreenshot a.png\nquit\r\n"
      "continue right 8\ncontinue left 12 0.7 5\nstep back\nstep last\n",
      "s.play");
  REQUIRE(s.actions.size() == 44);
  const auto& a = s.actions;
  CHECK(a[0].verb == PlayVerb::Type);
  CHECK(a[0].line == 3);
  CHECK(a[0].text == "The code is  4821.\n");
  CHECK(a[1].text == "\xff\xfe");
  CHECK(a[2].text == " two spaces");  // TEXT is everything after the one space that ends the word
  CHECK(a[3].verb == PlayVerb::Clear);
  CHECK(a[4].ints == std::vector<int>{256, 50, 2, 1, 7, 0});
  CHECK(a[5].ints == std::vector<int>{-1});
  CHECK(a[6].ints == std::vector<int>{12});
  CHECK(a[7].ints == std::vector<int>{10, 14});
  CHECK(a[8].ints.empty());
  CHECK(a[9].ints == std::vector<int>{3});
  CHECK(a[10].ints == std::vector<int>{-1, 2});
  CHECK(a[11].ints == std::vector<int>{1, 5});
  CHECK(a[12].ints == std::vector<int>{8});  // text is the ninth view
  CHECK(a[13].ints == std::vector<int>{2});  // "view 3": the third (models)
  CHECK(a[14].ints == std::vector<int>{2});
  CHECK(a[15].ints == std::vector<int>{0});
  CHECK(a[17].number == 1.5);
  CHECK(a[20].ints == std::vector<int>{0, 0});
  CHECK(a[20].text == "assets/models/my model");  // a folder's spaces kept
  CHECK(a[21].ints == std::vector<int>{1, 2});
  CHECK(a[21].text == "remote://h:1/0");
  CHECK(a[21].token == "SECRET");
  CHECK(a[26].ints == std::vector<int>{640, 480});
  CHECK(a[27].words == std::vector<std::string>{"64,128", "0,100", "1", "1", "2"});
  CHECK(a[30].ints == std::vector<int>{0, 1});
  CHECK(a[31].ints == std::vector<int>{4, 0});
  CHECK(a[34].text == "p.html");
  CHECK(a[35].verb == PlayVerb::ExportDir);
  CHECK(a[36].ints == std::vector<int>{-1});
  CHECK(a[37].ints == std::vector<int>{250});
  CHECK(a[38].text == "a.png");
  CHECK(a[39].verb == PlayVerb::Quit);
  CHECK(a[39].source == "quit");  // a Windows line end is not part of the line
  CHECK(a[40].verb == PlayVerb::Continue);
  CHECK(a[40].ints == std::vector<int>{1, 8, 1});  // the right model, 8 tokens, seed 1
  CHECK(a[40].number == 0.0);                      // greedy
  CHECK(a[41].ints == std::vector<int>{0, 12, 5});
  CHECK(a[41].number == 0.7);
  CHECK(a[42].ints == std::vector<int>{-1});
  CHECK(a[43].ints == std::vector<int>{2});
}

TEST_CASE("play scripts: one-y-scale sets Figure 1's shared y scale, on or off", "[play]") {
  const PlayScript s = parse_play_script("one-y-scale on\none-y-scale off\n", "s.play");
  REQUIRE(s.actions.size() == 2);
  CHECK(s.actions[0].verb == PlayVerb::OneYScale);
  CHECK(s.actions[0].ints == std::vector<int>{1});
  CHECK(s.actions[1].ints == std::vector<int>{0});
  CHECK_THROWS_WITH(parse_play_script("one-y-scale maybe\n", "s.play"),
                    Catch::Contains("expected: one-y-scale on|off"));
}

TEST_CASE("play scripts: specials reads special tokens in the prompt as text, or matches them", "[play]") {
  const PlayScript s = parse_play_script("specials text\nspecials match\n", "s.play");
  REQUIRE(s.actions.size() == 2);
  CHECK(s.actions[0].verb == PlayVerb::Specials);
  CHECK(s.actions[0].ints == std::vector<int>{1});
  CHECK(s.actions[1].ints == std::vector<int>{0});
  CHECK_THROWS_WITH(parse_play_script("specials all\n", "s.play"),
                    Catch::Contains("expected: specials match|text"));
}

TEST_CASE("play scripts: lab interventions sets the lab's also-under box, on or off", "[play]") {
  const PlayScript s = parse_play_script("lab interventions off\nlab interventions on\n", "s.play");
  REQUIRE(s.actions.size() == 2);
  CHECK(s.actions[0].verb == PlayVerb::LabInterventions);
  CHECK(s.actions[0].ints == std::vector<int>{0});
  CHECK(s.actions[1].ints == std::vector<int>{1});
  CHECK_THROWS_WITH(parse_play_script("lab interventions maybe\n", "s.play"),
                    Catch::Contains("'lab interventions' takes on or off, not 'maybe'"));
  CHECK_THROWS_WITH(parse_play_script("lab interventions\n", "s.play"),
                    Catch::Contains("'lab' takes 2 words, got 1"));
}

TEST_CASE("play scripts: a bad line is refused with its file, line and what was expected", "[play][errors]") {
  CHECK(
      refusal("wait\n\njump 3\n") ==
      "s.play:3: unknown action 'jump' (actions: type, paste, paste-file, prompt, clear, needle, query, "
      "answer, layer, head, view, split, side, lecture, one-y-scale, specials, text-size, text-direction, text-heads, open, "
      "device, "
      "logits, pooling, budget, size, lab, explain, present, export, continue, step, intervene, corrupt, checkpoint, steps, prompt-set, wait, screenshot, "
      "quit)");
  CHECK(
      refusal("view 11\n") ==
      "s.play:1: '11' is not a view: maps, query-row, models, lambda, noise, lab, outliers, explain, text or "
      "why or 1 to 10 (expected: view NAME)");
  CHECK(refusal("size 300x200\n") ==
        "s.play:1: '300' is not a whole number from 320 to 16384 (expected: size "
        "WIDTHxHEIGHT)");
  CHECK(refusal("answer 14 10\n") ==
        "s.play:1: the answer's END must be after its BEGIN (expected: answer BEGIN END|clear)");
  CHECK(refusal("type bad \\q\n") == "s.play:1: unknown escape '\\q' (escapes: \\n \\t \\r \\\\ \\xHH)");
  CHECK(refusal("type \\x4\n") == "s.play:1: \\x needs two hex digits (\\x41 is 'A')");
  CHECK(refusal("screenshot a.jpg\n") ==
        "s.play:1: 'a.jpg' does not end in .png (expected: screenshot FILE.png)");
  CHECK(refusal("needle 256,50,1,2,1\n").find("s.play:1: '256,50,1,2,1' is not TOKENS >= 64") == 0);
  CHECK(
      refusal("open middle model x\n") ==
      "s.play:1: 'middle' is not left or right (expected: open left|right model|bundle|remote PATH [TOKEN])");
  CHECK(refusal("lecture maybe\n") == "s.play:1: 'maybe' is not one of off|on (expected: lecture on|off)");
  CHECK(
      refusal("continue middle 8\n") ==
      "s.play:1: 'middle' is not left or right (expected: continue left|right TOKENS [TEMPERATURE [SEED]])");
  CHECK(
      refusal("continue left 300\n") ==
      "s.play:1: '300' is not a whole number from 1 to 256 (expected: continue left|right TOKENS [TEMPERATURE "
      "[SEED]])");
  CHECK(refusal("continue left 8 hot\n") ==
        "s.play:1: 'hot' is not a temperature from 0 (greedy) to 100 (expected: continue left|right TOKENS "
        "[TEMPERATURE [SEED]])");
  CHECK(
      refusal("step sideways\n") ==
      "s.play:1: 'sideways' is not one of back|forward|first|last (expected: step back|forward|first|last)");
  CHECK(refusal("wait 1 2\n") == "s.play:1: 'wait' takes 0 to 1 words, got 2 (expected: wait [MS])");
  CHECK(refusal("text-size 9\n") ==
        "s.play:1: '9' is not a number from 0.75 to 3 (expected: text-size X (0.75 to 3))");
  CHECK(refusal("# only a comment\n\n") ==
        "s.play: the script has no actions (one a line; the language: share/doc/difflens/play.md)");
}

TEST_CASE("play scripts: text escapes round-trip every byte", "[play]") {
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  const std::string escaped = escape_play_text(all);
  CHECK(escaped.find('\n') == std::string::npos);  // one line
  for (const char c : escaped) CHECK((c >= 0x20 && c < 0x7f));
  CHECK(unescape_play_text(escaped) == all);
  CHECK(unescape_play_text("a\\\\b\\tc") == "a\\b\tc");
}

TEST_CASE("soak: only LeakSanitizer's own fatal error, with no report, plays the script again", "[play]") {
  const std::string fatal =
      "play: done: 525 of 525 actions\nTracer caught signal 11: addr=0x0 pc=0x4f5070\n"
      "==8160==LeakSanitizer has encountered a fatal error.\n";
  CHECK(leak_check_could_not_run(fatal));
  CHECK_FALSE(leak_check_could_not_run("play: done: 525 of 525 actions\n"));
  CHECK_FALSE(leak_check_could_not_run(fatal + "==8160==ERROR: LeakSanitizer: detected memory leaks\n"));
  CHECK_FALSE(leak_check_could_not_run(fatal + "==8160==ERROR: AddressSanitizer: heap-use-after-free\n"));
  CHECK_FALSE(leak_check_could_not_run("x.cpp:3:5: runtime error: signed integer overflow\n" + fatal));
}

TEST_CASE("soak scripts: seeded, every line a valid action, the inputs all used", "[play]") {
  SoakInputs in;
  in.models = {"assets/models/diff-small"};
  in.bad = {"tests/data/missing"};
  in.bundles = {"trace/"};
  in.remotes = {"remote://127.0.0.1:9/0"};
  in.paste_file = "big.txt";
  in.export_dir = "out";
  const std::string a = soak_script(7, 3000, in);
  CHECK(a == soak_script(7, 3000, in));
  CHECK(a != soak_script(8, 3000, in));
  const PlayScript s = parse_play_script(a, "soak.play");
  CHECK(s.actions.size() >= 3000);
  std::set<PlayVerb> seen;
  for (const PlayAction& x : s.actions) seen.insert(x.verb);
  for (PlayVerb v : {PlayVerb::Type,       PlayVerb::Paste,      PlayVerb::PasteFile,    PlayVerb::Prompt,
                     PlayVerb::Clear,      PlayVerb::Needle,     PlayVerb::Query,        PlayVerb::Answer,
                     PlayVerb::Layer,      PlayVerb::Head,       PlayVerb::View,         PlayVerb::Split,
                     PlayVerb::Side,       PlayVerb::Lecture,    PlayVerb::TextSize,     PlayVerb::TextFrom,
                     PlayVerb::TextHeads,  PlayVerb::Open,       PlayVerb::Device,       PlayVerb::Logits,
                     PlayVerb::Pooling,    PlayVerb::Budget,     PlayVerb::Size,         PlayVerb::LabGrid,
                     PlayVerb::LabStart,   PlayVerb::LabCancel,  PlayVerb::Explain,      PlayVerb::Present,
                     PlayVerb::ExportMaps, PlayVerb::ExportPage, PlayVerb::ExportWindow, PlayVerb::Wait,
                     PlayVerb::Screenshot, PlayVerb::Continue,   PlayVerb::Step}) {
    INFO(static_cast<int>(v));
    CHECK(seen.count(v) == 1);
  }
  for (const char* s2 : {"paste-file big.txt", "open left remote remote://127.0.0.1:9/0", "size 320x240",
                         "model tests/data/missing", "\\xff"})
    CHECK(a.find(s2) != std::string::npos);
  CHECK(a.substr(a.size() - 5) == "quit\n");
}

TEST_CASE("play: a bad script or option is refused before a window opens", "[play][cli]") {
  test::ScratchDir dir("play-cli");
  test::write_all(dir / "bad.play", "size 1280x800\n# two\nview mapz\n");
  Run r = run_difflens("--play " + (dir / "bad.play").string(), dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("bad.play:3: 'mapz' is not a view") != std::string::npos);
  r = run_difflens("--play " + (dir / "none.play").string(), dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("none.play: cannot read the script (missing or unreadable)") != std::string::npos);
  test::write_all(dir / "ok.play", "quit\n");
  r = run_difflens("--play " + (dir / "ok.play").string() + " --screenshot x.png", dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("give --play or --screenshot, not both") != std::string::npos);
  r = run_difflens("--play-delay 100 --screenshot x.png", dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("--play-delay, --play-seconds and --play-exit go with --play FILE") != std::string::npos);
}

TEST_CASE("play: a script typed, selected, resized, exported and screenshotted in a window", "[gui][play]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("play");
  const std::string d = dir.path().string();
  test::write_all(dir / "s.play",
                  "size 1280x800\n"
                  "prompt The secret code of Mira is 4821.\n"
                  "type \\x20Q: the code?\n"
                  "wait\n"
                  "view text\n"
                  "text-heads layer\n"
                  "query 3\n"
                  "answer 6 8\n"
                  "screenshot " +
                      d +
                      "/a.png\n"
                      "size 640x480\n"
                      "export page " +
                      d +
                      "/p.html\n"
                      "prompt Hi.\n"
                      "wait\n"
                      "export page " +
                      d +
                      "/p2.html\n"
                      "open right model " +
                      d +
                      "/no-such-model\n"
                      "wait\n"
                      "screenshot " +
                      d +
                      "/b.png\n"
                      "quit\n");
  const Run r = run_difflens("--play " + (dir / "s.play").string() + " --threads 1", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("play: 9: screenshot") != std::string::npos);
  CHECK(r.out.find("play: done: 18 of 18 actions") != std::string::npos);
  CHECK(r.out.find("0 screenshots not written, 0 with layout faults, 0 waits for results ended") !=
        std::string::npos);
  const std::string a = test::read_all(dir / "a.png"), b = test::read_all(dir / "b.png");
  REQUIRE(a.size() > 10000);
  CHECK(png_be32(a, 16) == 1280);
  CHECK(png_be32(a, 20) == 800);
  REQUIRE(b.size() > 5000);  // the window after the resize, still answering after the failed open
  CHECK(png_be32(b, 16) == 640);
  CHECK(png_be32(b, 20) == 480);
  // The page the Text view exported holds the typed prompt and the selections the script made.
  const std::string page = test::read_all(dir / "p.html");
  CHECK(page.find("\"query\":3") != std::string::npos);
  CHECK(page.find("\"answer\":[6,8]") != std::string::npos);
  CHECK(page.find("code") != std::string::npos);
  // A shorter prompt drops the answer span it no longer reaches (as a query beyond it becomes the last
  // token), so the next page is written, without the span.
  const std::string page2 = test::read_all(dir / "p2.html");
  CHECK(page2.find("\"answer\":[-1,-1]") != std::string::npos);
}

TEST_CASE("soak: hundreds of random actions over broken inputs, a server killed and restarted",
          "[soak][play]") {
  need_the_app_and_a_display("the soak");
  test::ScratchDir dir("soak");
  const Run r = run_difflens("soak --out " + (dir / "run").string() + " --seed 3 --actions 500 --corpus " +
                                 DIFFLENS_SOURCE_DIR "/tests/data/fuzz",
                             dir);
  // Why it failed, first: a report cut short after a few lines (a CI log's excerpt) still names the cause.
  std::string why;
  for (size_t at = r.out.find("soak: FAILED"); at != std::string::npos;
       at = r.out.find("soak: FAILED", at + 1))
    why += r.out.substr(at, r.out.find('\n', at) - at) + "\n";
  for (const char* report : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"}) {
    const size_t at = r.out.find(report);
    if (at == std::string::npos) continue;
    size_t end = at;
    for (int line = 0; line < 12 && end != std::string::npos; ++line) end = r.out.find('\n', end + 1);
    why += r.out.substr(at, end == std::string::npos ? std::string::npos : end - at) + "\n";
  }
  INFO(why);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("soak: passed: no crash, no sanitizer report, the app answered at the end") !=
        std::string::npos);
  CHECK(r.out.find("MB after action 1") != std::string::npos);  // the mark: a quarter of the script
  // The script is the seed's, and it opened the broken inputs the soak prepared.
  const std::string script = test::read_all(dir / "run/soak.play");
  CHECK(script.rfind("# soak script: seed 3, 500 actions", 0) == 0);
  CHECK(script.find("/bad/") != std::string::npos);
  CHECK(script.find("remote://127.0.0.1:") != std::string::npos);
  const std::string log = test::read_all(dir / "run/app.log");
  CHECK(log.find("play: done: ") != std::string::npos);
}

TEST_CASE("play: exports into a full disk or a file where the folder should be fail, the app goes on",
          "[gui][play][disk]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("play-disk");
  const std::string d = dir.path().string();
  std::filesystem::create_directories(dir / "out");
  test::write_all(dir / "out/diff-small-L1-H0-A1.png", "earlier export");  // a user's earlier file
  test::write_all(dir / "not-a-folder", "a file");
  test::write_all(dir / "s.play",
                  "size 640x480\n"
                  "prompt The secret code of Mira is 4821.\n"
                  "wait\n"
                  "layer 1\n"
                  "head 0\n"
                  "view maps\n"
                  "export folder " +
                      d +
                      "/out\n"
                      "export maps\n"
                      "wait 100\n"
                      "export folder " +
                      d +
                      "/not-a-folder/sub\n"
                      "export page\n"
                      "wait 100\n"
                      "view text\n"
                      "quit\n");
  // A file-size limit of 4 blocks (2 KB; SIGXFSZ ignored, so a write past it fails with EFBIG); the app's own
  // log goes through a pipe to a `cat` outside the limit.
  const std::string log = (dir / "log").string();
  const std::string cmd = "sh -c \"trap '' XFSZ; ulimit -f 4; exec " + std::string(DIFFLENS_EXE) +
                          " --play '" + (dir / "s.play").string() + "' --threads 1\" 2>&1 | cat > '" + log +
                          "'";
  (void)std::system(cmd.c_str());
  const std::string out = test::read_all(log);
  INFO(out);
  CHECK(out.find("cannot write (File too large); an earlier file there is left as it was") !=
        std::string::npos);
  CHECK(test::read_all(dir / "out/diff-small-L1-H0-A1.png") == "earlier export");
  for (const auto& e : std::filesystem::directory_iterator(dir / "out"))
    CHECK(e.path().filename().string().find(".part") == std::string::npos);  // no temporary left behind
  CHECK(out.find("not-a-folder/sub") != std::string::npos);                  // the page's refusal names it
  CHECK(out.find("play: done: 14 of 14 actions") != std::string::npos);      // and the app went on
  // The first screen's needle episode was replaced before its result came: its answer head is not sought
  // in the new prompt (that once selected layer 0, head 0 at "0.000 to the answer").
  CHECK(out.find("to the answer over the question") == std::string::npos);
}

TEST_CASE("play: Continue writes on with each model, the query steps through what it wrote, typing stops it",
          "[gui][play][generate]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("play-continue");
  const std::string d = dir.path().string();
  test::write_all(
      dir / "s.play",
      "size 1280x800\n"
      "prompt The secret code of Rachel is 4823. The river was high that spring. Q: What is the "
      "secret code of Rachel?\\nA: The secret code of Rachel is\n"
      "wait\n"
      "continue left 6\n"
      "wait\n"
      "step first\n"
      "step forward\n"
      "step last\n"
      "step back\n"
      "screenshot " +
          d +
          "/a.png\n"
          "continue right 3\n"
          "wait\n"
          "step first\n"
          "continue left 200\n"
          "type x\n"
          "wait\n"
          "step first\n"
          "continue left 8\n"
          "needle 256,50,1,1,1\n"
          "wait\n"
          "prompt The secret code of Rachel is 4823. Q: What is the secret code of Rachel?\\nA: The "
          "secret code of Rachel is\\x20\n"
          "wait\n"
          "continue left 3\n"
          "wait\n"
          "quit\n");
  const Run r = run_difflens("--play " + (dir / "s.play").string() + " --threads 1", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  // The left model wrote 6 tokens (DIFF retrieves the code); the prompt then has 41 + 6 tokens.
  const Model diff = Model::load(DIFFLENS_SOURCE_DIR "/assets/models/diff-small");
  const std::string prompt =
      "The secret code of Rachel is 4823. The river was high that spring. Q: What is the secret code of "
      "Rachel?\nA: The secret code of Rachel is";
  const std::vector<int64_t> ids = diff.tokenizer().encode(prompt, true).ids;
  std::vector<int64_t> all = ids;
  for (int64_t id : diff.generate(ids, 6)) all.push_back(id);
  const std::string wrote = diff.tokenizer().decode(all).substr(diff.tokenizer().decode(ids).size());
  std::string shown = wrote;
  for (char& ch : shown)
    if (ch == '\n') ch = ' ';
  CHECK(r.out.find("play: continue: the left model wrote 6 tokens in ") != std::string::npos);
  CHECK(r.out.find(" ms: '" + shown + "'") != std::string::npos);
  const int first = static_cast<int>(ids.size());  // the first written token follows the prompt's
  const std::vector<int64_t> retokenized = diff.tokenizer().encode(prompt + wrote, true).ids;
  const int n = static_cast<int>(retokenized.size()) - first;
  CHECK(n >= 1);
  CHECK(r.out.find("play: step: the query on token " + std::to_string(first) + ", new token 1 of " +
                   std::to_string(n)) != std::string::npos);
  if (n >= 2)
    CHECK(r.out.find("play: step: the query on token " + std::to_string(first + 1) + ", new token 2 of " +
                     std::to_string(n)) != std::string::npos);
  CHECK(r.out.find("play: step: the query on token " + std::to_string(first + n - 1) + ", new token " +
                   std::to_string(n) + " of " + std::to_string(n)) != std::string::npos);
  CHECK(r.out.find("play: continue: the right model wrote 3 tokens in ") != std::string::npos);
  // Typing while the left model writes 200 tokens stops it; the typed text stays the user's (nothing marked).
  CHECK(r.out.find("play: continue: stopped: the prompt was edited") != std::string::npos);
  CHECK(r.out.find("play: status: step: no written tokens in the prompt on screen (continue first)") !=
        std::string::npos);
  CHECK(test::read_all(dir / "a.png").size() > 1000);
  // A needle prompt replacing the text while the model writes stops it too; the wait after it ends.
  CHECK(r.out.find("play: continue: stopped: a needle prompt replaced the text") != std::string::npos);
  CHECK(r.out.find("0 waits for results ended after") != std::string::npos);
  // A prompt ending in a space: SentencePiece reads it without the space, so the model writes it back first,
  // a token that adds nothing to the text; the message says so.
  const std::string spaced =
      "The secret code of Rachel is 4823. Q: What is the secret code of Rachel?\nA: The secret code of Rachel is";
  const std::vector<int64_t> spaced_ids = diff.tokenizer().encode(spaced + " ", true).ids;
  CHECK(spaced_ids == diff.tokenizer().encode(spaced, true).ids);
  const std::vector<int64_t> three = diff.generate(spaced_ids, 3);
  REQUIRE(three.size() == 3);
  const bool space_first = diff.tokenizer().decode({three[0]}).find_first_not_of(" ") == std::string::npos;
  INFO("the first token written after the space: '" << diff.tokenizer().decode({three[0]}) << "'");
  CHECK(space_first);  // the bundled DIFF model does, so the note below is tested
  if (space_first) {
    CHECK(r.out.find("play: continue: the left model wrote 3 tokens in ") != std::string::npos);
    CHECK(r.out.find("ms (the first writes back the space the prompt ended with, so 2 are new): '") !=
          std::string::npos);
  }
}

TEST_CASE("play: open takes a bundled model by name from any folder, as File > Bundled model does",
          "[gui][play][bundled]") {
  need_the_app_and_a_display("the script");
  test::ScratchDir dir("playbundled");
  test::write_all(dir / "baseline-small",
                  "a file here, not a model folder\n");  // does not hide the bundled one
  const std::string d = dir.path().string();
  test::write_all(dir / "s.play",
                  "size 800x600\nopen left model diff-v2-small/\nopen right model baseline-small\n"
                  "wait\nneedle 256,50,1,1,1,1\nwait\nexport page " +
                      d + "/p.html\nquit\n");
  const Run r = run_difflens("--play " + (dir / "s.play").string() + " --threads 1", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("play: done: 8 of 8 actions") != std::string::npos);
  CHECK(r.out.find("play: status: layer 1: diff-v2-small head ") != std::string::npos);
  const std::string page = test::read_all(dir / "p.html");
  CHECK(page.find("diff-v2-small") != std::string::npos);  // the page names the models it shows
  CHECK(page.find("baseline-small") != std::string::npos);
  CHECK(page.find("diff-small\"") == std::string::npos);  // the left slot's DIFF model was replaced
}

TEST_CASE("play: the needle story at 1280x800 in lecture mode keeps every slide's point on screen",
          "[gui][play][layout]") {
  need_the_app_and_a_display("the needle story");
  test::ScratchDir dir("story");
  // The bundled story as shipped, less its pauses for the lecturer to talk ("wait 4000"; a bare "wait"
  // for results stays).
  std::string story, line;
  {
    std::istringstream in(test::read_all(DIFFLENS_SOURCE_DIR "/assets/needle-story.play"));
    while (std::getline(in, line))
      if (line.rfind("wait ", 0) != 0) story += line + "\n";
  }
  test::write_all(dir / "story.play", story);
  const Run r = run_difflens("--play " + (dir / "story.play").string() + " --play-exit", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  // Thirteen screenshots, each followed by its layout check: nothing clipped, cut, half shown at a scroll
  // edge, over other text (an Explain slide's texts included) or past the window. Before this check counted
  // the last three, steps 2, 3 and 6 had 18 half lines, 3 half lines and the baseline's grid below the fold.
  int shots = 0;
  for (size_t at = r.out.find("play: wrote "); at != std::string::npos;
       at = r.out.find("play: wrote ", at + 1)) {
    ++shots;
    const size_t check = r.out.find("layout check: ", at);
    REQUIRE(check != std::string::npos);
    const std::string verdict = r.out.substr(check, r.out.find('\n', check) - check);
    INFO(r.out.substr(at, r.out.find('\n', at) - at));
    CHECK_THAT(verdict, Catch::Contains("0 outside or clipped, 0 texts cut, 0 lines half shown at a scroll "
                                        "edge, 0 texts over each other, 0 regions past the window"));
    // ... and no text on screen older than the run it stands beside (the status line after an intervention).
    CHECK_THAT(verdict, Catch::EndsWith(", 0 texts older than the run on screen"));
  }
  CHECK(shots == 13);
  CHECK_THAT(r.out, Catch::Contains("0 screenshots not written, 0 with layout faults"));
}

TEST_CASE("play: a run saved as trace bundles reads back as the traces the app showed", "[gui][play]") {
  need_the_app_and_a_display("saving a run");
  test::ScratchDir dir("bundles");
  const std::string out = (dir / "out").string();
  const std::string prompt = "The secret code of Mira is 4821. Q: What is the secret code of Mira? A: 4821";
  test::write_all(dir / "s.play", "prompt " + prompt + "\nwait\nexport folder " + out +
                                      "\nexport bundle\nexport bundle\nwait\n");
  const Run r = run_difflens("--play " + (dir / "s.play").string() + " --play-exit --threads 1", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("play: status: saved " + out + "/run/left-diff-small and " + out +
                   "/run/right-baseline-small") != std::string::npos);
  CHECK(r.out.find(out + "/run-2/left-diff-small") != std::string::npos);  // the second save: a new folder
  // Each bundle is the trace of that prompt: the same tokens and maps as capturing it here.
  for (const char* m : {"diff-small", "baseline-small"}) {
    INFO(m);
    const Trace saved = read_trace_bundle(
        dir / "out" / "run" / ((std::string(m) == "diff-small" ? "left-" : "right-") + std::string(m)));
    const Model model =
        Model::load(DIFFLENS_SOURCE_DIR "/assets/models/" + std::string(m), DeviceChoice::Cpu);
    const Trace direct = model.capture(model.tokenizer().encode(prompt, true).ids);
    REQUIRE(saved.length() == direct.length());
    CHECK(saved.tokens == direct.tokens);
    REQUIRE(saved.layers.size() == direct.layers.size());
    const FloatArray &a = saved.layers[1].a, &b = direct.layers[1].a;
    REQUIRE(a.data.size() == b.data.size());
    float worst = 0;
    for (size_t i = 0; i < a.data.size(); ++i) worst = std::max(worst, std::fabs(a.data[i] - b.data[i]));
    CHECK(worst <= 1e-5f);
  }
}

TEST_CASE("play: the Why view's interventions re-run both models, and the runs saved equal the core's",
          "[gui][play][interventions]") {
  need_the_app_and_a_display("the Why view");
  test::ScratchDir dir("why");
  const std::string out = (dir / "out").string();
  const std::string prompt =
      "The secret code of Mira is 4821. The river was high that spring. Q: What is the secret code of Mira? A: "
      "The secret code of Mira is 4821";
  test::write_all(dir / "s.play",
                  "size 1280x800\nprompt " + prompt +
                      "\nwait\nanswer 10 14\nquery 44\nview why\nintervene knockout=not-answer\n"
                      "intervene lambda:1=0\nwait\nscreenshot " +
                      (dir / "why.png").string() + "\nexport folder " + out +
                      "\nexport bundle\nwait\nview query-row\nexport figure\nexport figure\nview why\n"
                      "intervene clear\nwait\nexport bundle\nwait\nview query-row\nexport figure\n");
  const Run r = run_difflens("--play " + (dir / "s.play").string() + " --play-exit --threads 1", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("0 screenshots not written, 0 with layout faults"));
  // A bad spec is refused where the script is read, with its line.
  test::write_all(dir / "bad.play", "view why\nintervene lambda:x=0\n");
  const Run bad = run_difflens("--play " + (dir / "bad.play").string() + " --play-exit", dir);
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("bad.play:2") && Catch::Contains("the layer 'x' is not a number"));

  // The first save ran under the interventions the baseline could take (it has no λ); the second as trained.
  const std::string tag = "-under-knockout_not-answer_lambda_1_0";  // in the names of what it exported
  const Trace left = read_trace_bundle(dir / "out" / ("run" + tag) / "left-diff-small");
  const Trace right = read_trace_bundle(dir / "out" / ("run" + tag) / "right-baseline-small");
  using Applied = std::vector<std::pair<std::string, std::string>>;
  CHECK(left.interventions ==
        Applied{{"knockout=not-answer", "knockout=drop:10-14@44-"}, {"lambda:1=0", "lambda:1=0"}});
  CHECK(right.interventions == Applied{{"knockout=not-answer", "knockout=drop:10-14@44-"}});
  CHECK(read_trace_bundle(dir / "out" / "run" / "left-diff-small").interventions.empty());
  // Figure 1 under the interventions: named for them in its file and title, the second export beside the
  // first (never over it); as trained again: the plain name.
  std::string fig;  // "diff-small-baseline-small-L<layer on screen>-query44-figure1"
  for (const auto& e : std::filesystem::directory_iterator(dir / "out")) {
    const std::string name = e.path().filename().string();
    if (name.find("-query44-figure1") != std::string::npos) fig = name.substr(0, name.find("-figure1") + 8);
  }
  INFO(fig);
  const std::string svg = test::read_all(dir / "out" / (fig + tag + ".svg"));
  CHECK_THAT(
      svg, Catch::Contains("INTERVENED: left: knockout=not-answer, lambda:1=0; right: knockout=not-answer"));
  CHECK(std::filesystem::exists(dir / "out" / (fig + tag + "-2.png")));
  CHECK_THAT(test::read_all(dir / "out" / (fig + ".svg")), !Catch::Contains("INTERVENED"));
  // The app's run is the core's under the same interventions.
  const Model diff = Model::load(DIFFLENS_SOURCE_DIR "/assets/models/diff-small", DeviceChoice::Cpu);
  PromptMarks marks;
  marks.answer = {10, 14};
  marks.query = 44;
  CaptureOptions o;
  o.interventions = resolve_interventions(std::vector<std::string>{"knockout=not-answer", "lambda:1=0"},
                                          diff.config(), marks, left.length());
  const Trace direct = diff.capture(left.token_ids, o);
  float worst = 0;
  for (size_t l = 0; l < direct.layers.size(); ++l)
    for (size_t i = 0; i < direct.layers[l].a.data.size(); ++i)
      worst = std::max(worst, std::fabs(direct.layers[l].a.data[i] - left.layers[l].a.data[i]));
  CHECK(worst <= 1e-5f);
}

TEST_CASE("play: the Why view patches a corrupt prompt, whole at 1280x800 with and without lecture mode",
          "[gui][play][patch]") {
  need_the_app_and_a_display("the Why view's patching");
  test::ScratchDir dir("why-patch");
  const std::string prompt =
      "The secret code of Thomas is 7182. The secret code of Rachel is 2233. Q: What is the secret code of "
      "Thomas? A: The secret code of Thomas is";
  std::string corrupt = prompt;
  corrupt.replace(corrupt.find("7182"), 4, "4821");
  test::write_all(dir / "s.play", "size 1280x800\nprompt " + prompt + "\nwait\nview why\ncorrupt " + corrupt +
                                      "\nwait\nscreenshot " + (dir / "a.png").string() +
                                      "\nlecture on\nwait\nscreenshot " + (dir / "b.png").string() +
                                      "\ncorrupt clear\nwait\nscreenshot " + (dir / "c.png").string() + "\n");
  const Run r = run_difflens("--play " + (dir / "s.play").string() + " --play-exit --threads 1", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("0 screenshots not written, 0 with layout faults"));
  test::write_all(dir / "bad.play", "view why\ncorrupt\n");
  const Run bad = run_difflens("--play " + (dir / "bad.play").string() + " --play-exit", dir);
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("bad.play:2") && Catch::Contains("give the corrupt prompt, or clear"));
}

// A training run of two kept steps per model, as train --keep-every leaves it: random weights of a tiny
// shape, steps 100 and 200.
static void tiny_run(const std::filesystem::path& run) {
  for (const auto& [name, kind] : {std::pair<const char*, AttentionKind>{"diff-small", AttentionKind::Diff},
                                   {"baseline-small", AttentionKind::Baseline}}) {
    const auto model = run / name;
    Model::random(test::tiny_config(kind), 3).save(model);
    for (int step : {100, 200}) {
      const auto kept = model / "checkpoints" / ("step-00000" + std::to_string(step));
      Model::random(test::tiny_config(kind), static_cast<uint64_t>(step)).save(kept);
      test::write_all(kept / "step.json", "{\"step\": " + std::to_string(step) + "}\n");
    }
  }
}

TEST_CASE("play: a training run's kept steps load into both slots, the figures from the step on screen",
          "[gui][play][train]") {
  need_the_app_and_a_display("the training run's step slider");
  test::ScratchDir dir("timeline");
  tiny_run(dir / "run");
  const std::string run = (dir / "run").string();
  test::write_all(dir / "s.play",
                  "size 1280x800\nprompt 1, 2, 3, 4, 5\nwait\ncheckpoint 150\nwait\nexport folder " +
                      (dir / "out").string() + "\nexport bundle\nwait\nscreenshot " +
                      (dir / "a.png").string() + "\ncheckpoint last\nwait\nscreenshot " +
                      (dir / "b.png").string() + "\n");
  const Run r =
      run_difflens("--models " + run + " --play " + (dir / "s.play").string() + " --play-exit", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("0 screenshots not written, 0 with layout faults"));
  // Step 150 is not kept: each slot took step 100, the nearest before it; its run equals that model's own.
  const Trace left = read_trace_bundle(dir / "out" / "run" / "left-diff");
  const Model step100 =
      Model::load(dir / "run" / "diff-small" / "checkpoints" / "step-00000100", DeviceChoice::Cpu);
  const Trace direct = step100.capture(left.token_ids);
  REQUIRE(direct.layers.size() == left.layers.size());
  CHECK(direct.layers[0].a.data == left.layers[0].a.data);
  test::write_all(dir / "bad.play", "checkpoint soon\n");
  const Run bad = run_difflens("--play " + (dir / "bad.play").string() + " --play-exit", dir);
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("bad.play:1"));
}

TEST_CASE("play: the Noise view measures every kept step, and a prompt set runs into a folder",
          "[gui][play][train][batch]") {
  need_the_app_and_a_display("the steps measure and the prompt set window");
  test::ScratchDir dir("steps-set");
  tiny_run(dir / "run");
  test::write_all(dir / "items.jsonl",
                  "{\"prompt\": \"The code of Anna is 4821. Anna?\", \"answer\": \" 4821\"}\n"
                  "{\"prompt\": \"The code of Omar is 7305. Omar?\", \"answer\": \" 7305\"}\n");
  test::write_all(dir / "s.play",
                  "size 1280x800\nprompt The code of Anna is 4821. Anna? 4821\nwait\nanswer 21 25\n"
                  "view noise\nsteps measure\nwait\nscreenshot " +
                      (dir / "a.png").string() + "\nprompt-set " + (dir / "items.jsonl").string() + " " +
                      (dir / "set").string() + "\nwait\nscreenshot " + (dir / "b.png").string() +
                      "\nprompt-set cancel\n");
  const Run r = run_difflens("--models " + (dir / "run").string() + " --play " + (dir / "s.play").string() +
                                 " --play-exit --threads 1",
                             dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("0 screenshots not written"));
  // The prompt set: both slots' models, two items each, the summary written.
  const std::string csv = test::read_all(dir / "set" / "items.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 2 * 2);
  CHECK_THAT(test::read_all(dir / "set" / "summary.md"), Catch::Contains("| accuracy (greedy) |"));
  test::write_all(dir / "bad.play", "prompt-set only-one\n");
  const Run bad = run_difflens("--play " + (dir / "bad.play").string() + " --play-exit", dir);
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out,
             Catch::Contains("bad.play:1") && Catch::Contains("give the items file and the output folder"));
}

TEST_CASE("play: Continue writes under the Why view's interventions, as the core's generation does",
          "[gui][play][interventions]") {
  need_the_app_and_a_display("Continue under interventions");
  test::ScratchDir dir("why-continue");
  const std::string out = (dir / "out").string();
  const std::string prompt =
      "The secret code of Mira is 4821. Q: What is the secret code of Mira? A: The code is";
  test::write_all(dir / "s.play",
                  "prompt " + prompt +
                      "\nwait\nintervene lambda=0\nintervene ablate:0:0\nwait\ncontinue left 5\n"
                      "wait\nexport folder " +
                      out + "\nexport bundle\nwait\n");
  const Run r = run_difflens("--play " + (dir / "s.play").string() + " --play-exit --threads 1", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const Trace saved = read_trace_bundle(dir / "out" / "run-under-lambda_0_ablate_0_0" / "left-diff-small");
  const Model diff = Model::load(DIFFLENS_SOURCE_DIR "/assets/models/diff-small", DeviceChoice::Cpu);
  const std::vector<int64_t> ids = diff.tokenizer().encode(prompt, true).ids;
  GenerateOptions o;
  o.max_new = 5;
  o.temperature = 0;
  o.interventions = resolve_interventions(std::vector<std::string>{"lambda=0", "ablate:0:0"}, diff.config(),
                                          {}, static_cast<int64_t>(ids.size()));
  const Generation g = diff.generate(ids, o);
  o.interventions = {};
  const Generation plain = diff.generate(ids, o);
  REQUIRE(saved.token_ids.size() >= ids.size());
  const std::vector<int64_t> written(saved.token_ids.begin() + static_cast<long>(ids.size()),
                                     saved.token_ids.end());
  CHECK(written == g.ids);    // what the app wrote is the intervened model's greedy text
  CHECK(g.ids != plain.ids);  // and not the model's as trained
  CHECK(saved.interventions.size() == 2);
}

TEST_CASE("play: lecture mode toggled and the Why view intervened at 1280x800 keep every line whole",
          "[gui][play][layout]") {
  need_the_app_and_a_display("lecture mode and the Why view");
  test::ScratchDir dir("lecture-why");
  // L on and off (the font changes size: the token strip must come back to whole lines around the query),
  // then the Why view folded in lecture mode under two interventions, with their keys named on screen.
  const std::string d = dir.path().string() + "/";  // the screenshots into the scratch folder
  test::write_all(dir / "s.play",
                  "size 1280x800\nneedle 256,50,1,1,1\nwait\nview query-row\nlecture on\nwait 200\n"
                  "screenshot " +
                      d + "a.png\nlecture off\nwait 200\nscreenshot " + d +
                      "b.png\nlecture on\nwait 200\nscreenshot " + d +
                      "c.png\nview why\nintervene knockout=not-noise\nintervene lambda=0\nscreenshot " + d +
                      "d.png\nintervene clear\nscreenshot " + d + "e.png\n");
  const Run r = run_difflens("--play " + (dir / "s.play").string() + " --play-exit --threads 1", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  int checks = 0;
  for (size_t at = r.out.find("layout check: "); at != std::string::npos;
       at = r.out.find("layout check: ", at + 1)) {
    ++checks;
    const std::string verdict = r.out.substr(at, r.out.find('\n', at) - at);
    CHECK_THAT(verdict, Catch::Contains("0 texts cut, 0 lines half shown at a scroll edge, 0 texts over each "
                                        "other, 0 regions past the window"));
    CHECK_THAT(verdict, Catch::EndsWith(", 0 texts older than the run on screen"));
  }
  CHECK(checks == 5);
  CHECK_THAT(r.out, Catch::Contains("0 screenshots not written, 0 with layout faults"));
}
