// The difflens executable end to end: init-pair, capture (text, ids, options), info, bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <stb_image.h>

#include "app/reports/head_figures.h"
#include "core/formats/head_scores.h"
#include "core/formats/intervention.h"
#include "core/formats/patch_site.h"
#include "core/formats/tokenizer.h"
#include "core/formats/trace_io.h"
#include "core/model/batch.h"
#include "core/model/model.h"
#include "helpers.h"
#include "viz/export.h"

using namespace difflens;

namespace {

struct Result {
  int status;
  std::string out;
};

// Runs difflens with `args` (after `prefix`, e.g. a wrapper command); its status and all it printed.
Result run_with_prefix(const std::string& prefix, const std::string& args, const test::ScratchDir& dir) {
  const std::string log = (dir / "cli.log").string();
  const std::string cmd = prefix + std::string(DIFFLENS_EXE) + " " + args + " > '" + log + "' 2>&1";
  for (int attempt = 0;; ++attempt) {
    const int raw = std::system(cmd.c_str());
    Result r{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, test::read_all(log)};
    if (r.status == 0 || attempt == 1 || !test::display_refused(r.out)) return r;
    std::this_thread::sleep_for(std::chrono::seconds(1));  // the X server turned the window away: once more
  }
}

Result run(const std::string& args, const test::ScratchDir& dir) {
  return run_with_prefix("", args, dir);
}

// Each command must fail with status 1 and print its message.
template <typename Cases>
void expect_failures(const Cases& cases, const test::ScratchDir& dir) {
  for (const auto& [args, message] : cases) {
    const Result r = run(args, dir);
    INFO(args << "\n" << r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find(message) != std::string::npos);
  }
}

struct Region {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  float w() const { return x1 - x0; }
  float h() const { return y1 - y0; }
};
std::map<std::string, Region> layout_regions(const std::string& out) {
  std::map<std::string, Region> regions;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("layout: ", 0) != 0) continue;
    std::istringstream l(line.substr(8));
    std::string name;
    Region r;
    if (l >> name >> r.x0 >> r.y0 >> r.x1 >> r.y1) regions[name] = r;
  }
  return regions;
}

}  // namespace

TEST_CASE("cli: init-pair then capture writes a readable trace bundle", "[cli]") {
  test::ScratchDir dir("cli");
  const std::string models = (dir / "models").string();
  Result r = run("init-pair --out " + models + " --hidden 32 --layers 2 --heads 2 --vocab 300 --seed 3", dir);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("untrained") != std::string::npos);
  const Model d = Model::load(models + "/diff"), b = Model::load(models + "/baseline");
  CHECK(d.parameter_count() - b.parameter_count() == 2 * (4 * 8 + 2 * 8));

  const std::string out = (dir / "trace").string();
  r = run("capture --model " + models + "/diff --prompt 'Mira is 4821.' --out " + out + " --threads 1", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("tokens    14") != std::string::npos);  // BOS + 13 bytes
  CHECK(r.out.find("lambda") != std::string::npos);
  const Trace t = read_trace_bundle(out);
  CHECK(t.length() == 14);
  CHECK(t.tokens[1] == "M");
  REQUIRE(t.layers.size() == 2);
  CHECK(t.layers[1].a.shape == std::vector<int64_t>{2, 14, 14});
  // The bundle holds exactly what the model computes for these ids.
  const Trace direct = d.capture(t.token_ids);
  CHECK(direct.layers[1].a.data == t.layers[1].a.data);

  r = run("capture --model " + models + "/baseline --token-ids 1,50,60,70 --heads 1 --layers 0 --out " + out,
          dir);
  REQUIRE(r.status == 0);
  const Trace t2 = read_trace_bundle(out);
  CHECK(t2.config.attention == AttentionKind::Baseline);
  CHECK(t2.layers[0].a.shape == std::vector<int64_t>{1, 4, 4});
  CHECK(t2.layers[1].a.empty());

  r = run("info --model " + models + "/diff", dir);
  CHECK(r.status == 0);
  CHECK(r.out.find("\"attention\": \"diff\"") != std::string::npos);
}

TEST_CASE(
    "cli: capture pools exact maps over the default budget and says so, and refuses full logits over it",
    "[cli][long]") {
  // The bundled DIFF keeps 4 layers x 4 heads x 3 maps: 1,200 tokens' exact maps are 1200² x 48 x 4 bytes =
  // 264 MB, over the default 256 MB.
  test::ScratchDir dir("cli-budget");
  std::string ids = "1";
  for (int i = 1; i < 1200; ++i) ids += "," + std::to_string(300 + (i * 37) % 2000);
  const std::string model = " --model " DIFFLENS_SOURCE_DIR "/assets/models/diff-small --threads 2";
  Result r = run("capture" + model + " --token-ids " + ids + " --out " + (dir / "pooled").string(), dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out,
             Catch::Contains("exact maps of 1200 tokens would take 263.7 MB: pooled maps written instead") &&
                 Catch::Contains("--pooled-budget 0 keeps them exact") &&
                 !Catch::Contains("not finite"));  // the grids' empty (future) cells are NaN by design
  const Trace t = read_trace_bundle(dir / "pooled");
  CHECK(t.layers[0].pooled > 0);
  CHECK(t.layers[0].a.empty());
  CHECK(t.pooled_budget == size_t{256} << 20);
  // --keep-logits has no pooled form: refused with the size, before any work.
  r = run("capture" + model + " --token-ids " + ids + " --keep-logits --out " + (dir / "logits").string(),
          dir);
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Catch::Contains("--keep-logits: this prompt's exact maps and logits take") &&
                        Catch::Contains("--pooled-budget 0"));
  CHECK(!std::filesystem::exists(dir / "logits" / "maps.safetensors"));
  // A short prompt stays exact, with no word about pooling.
  r = run("capture" + model + " --token-ids 1,400,500 --out " + (dir / "short").string(), dir);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("pooled") == std::string::npos);
  CHECK(read_trace_bundle(dir / "short").layers[0].pooled == 0);
}

namespace {
// RFC 4648 base64 back to bytes (the SVG's embedded PNGs).
std::string base64_decode(const std::string& text) {
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t bits = 0;
  int have = 0;
  for (char c : text) {
    const size_t v = alphabet.find(c);
    if (v == std::string::npos) continue;  // '=' padding
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if ((have += 6) >= 8) out += static_cast<char>((bits >> (have -= 8)) & 0xff);
  }
  return out;
}
}  // namespace

TEST_CASE("cli: render --compare shares one colour scale, names it, and writes a small SVG of embedded maps",
          "[cli][figure][svg]") {
  test::ScratchDir dir("cli-compare");
  // A 251-token prompt: the issue's four-map figure.
  std::vector<std::string> ids = {"1"};
  for (int i = 1; i < 251; ++i) ids.push_back(std::to_string(300 + (i * 53) % 1500));
  std::string list;
  for (const auto& id : ids) list += (list.empty() ? "" : ",") + id;
  for (const char* m : {"diff-small", "baseline-small"})
    REQUIRE(run(std::string("capture --model ") + DIFFLENS_SOURCE_DIR + "/assets/models/" + m +
                    " --token-ids " + list + " --out " + (dir / m).string() + " --threads 2",
                dir)
                .status == 0);
  const std::string base = "render --trace " + (dir / "diff-small").string() + " --compare " +
                           (dir / "baseline-small").string() + " --layer 2 --head 1 --size 400";
  Result r = run(base + " --out " + (dir / "cmp.svg").string(), dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const std::string svg = test::read_all(dir / "cmp.svg");
  CHECK(svg.size() < 500 * 1024);
  CHECK(svg.find("class=\"cell\"") == std::string::npos);
  size_t images = 0, first = std::string::npos;
  for (size_t p = svg.find("<image class=\"map-cells\""); p != std::string::npos;
       p = svg.find("<image class=\"map-cells\"", p + 1), ++images)
    if (first == std::string::npos) first = p;
  CHECK(images == 4);
  // The first map's embedded PNG: one pixel per token, its colours the PNG export's.
  const size_t b64 = svg.find("base64,", first) + 7;
  const std::string png = base64_decode(svg.substr(b64, svg.find('"', b64) - b64));
  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load_from_memory(reinterpret_cast<const unsigned char*>(png.data()),
                                            static_cast<int>(png.size()), &w, &h, &n, 3);
  REQUIRE(px);
  stbi_image_free(px);
  CHECK(w == 251);
  CHECK(h == 251);
  CHECK_THAT(svg, Catch::Contains("colour: sqrt scale; softmax maps 0 to ") &&
                      Catch::Contains("(p99.5), one scale for all"));
  // Both models' softmax maps end at one value, as the figure's own ranges say.
  const Trace d = read_trace_bundle(dir / "diff-small"), b = read_trace_bundle(dir / "baseline-small");
  app::FigureOptions o;
  o.size = 400;
  viz::HeadFigure fig = app::compare_figure(d, 1, b, 1, 2, o);
  REQUIRE(fig.panels.size() == 4);
  CHECK(!fig.panels[0].style.range.diverging);
  CHECK(fig.panels[0].style.range.hi == fig.panels[1].style.range.hi);
  CHECK(fig.panels[0].style.range.hi == fig.panels[3].style.range.hi);  // the baseline's A
  o.shared_scale = false;  // --per-map-scale: each its own, as before
  fig = app::compare_figure(d, 1, b, 1, 2, o);
  CHECK(fig.panels[0].style.range.hi != fig.panels[3].style.range.hi);
  // --vmax: every scale ends there, saturation marked.
  r = run(base + " --vmax 0.05 --out " + (dir / "vmax.svg").string(), dir);
  REQUIRE(r.status == 0);
  CHECK_THAT(test::read_all(dir / "vmax.svg"),
             Catch::Contains("0.05 (vmax)") && Catch::Contains("0.05 (set by --vmax)"));
  CHECK(run(base + " --vmax 0.05 --per-map-scale --out " + (dir / "x.svg").string(), dir)
            .out.find("not both") != std::string::npos);
  // For print: 7 inches wide, every text at least 8 pt there (the SVG's font sizes are ems in viewBox units).
  r = run(base.substr(0, base.find(" --size")) +
              " --width-in 7 --font-pt 8 --answer 10,14 --query 200 --out " + (dir / "print.svg").string(),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const std::string print = test::read_all(dir / "print.svg");
  CHECK(print.find("width=\"7in\"") != std::string::npos);
  const size_t vb = print.find("viewBox=\"0 0 ") + 13;
  const double view_w = std::stod(print.substr(vb, print.find(' ', vb) - vb));
  double smallest = 1e9;
  size_t texts = 0;
  for (size_t p = print.find("font-size=\""); p != std::string::npos;
       p = print.find("font-size=\"", p + 1), ++texts)
    smallest = std::min(smallest, std::stod(print.substr(p + 11)) * 7 * 72 / view_w);
  CHECK(texts > 20);
  CHECK(smallest >= 8 - 1e-3);
  CHECK(smallest < 8.2);
  r = run(base.substr(0, base.find(" --size")) + " --width-in 7 --font-pt 8 --out " +
              (dir / "print.png").string(),
          dir);
  REQUIRE(r.status == 0);
  int pw = 0, ph = 0, pn = 0;
  unsigned char* pp = stbi_load((dir / "print.png").c_str(), &pw, &ph, &pn, 3);
  REQUIRE(pp);
  stbi_image_free(pp);
  CHECK(std::abs(pw - 7 * 300) <= 3);  // 300 dpi
  // Every text of the print layout apart and inside the figure.
  app::FigureOptions marks;
  marks.answer_begin = 10;
  marks.answer_end = 14;
  marks.query = 200;
  viz::HeadFigure printed = app::compare_figure(d, 1, b, 1, 2, marks);
  viz::size_for_print(printed, viz::FigureFont::standard(), 7, 8);
  const viz::SceneTextFaults faults =
      viz::scene_text_faults(viz::layout_head_figure(printed, viz::FigureFont::standard()));
  INFO((faults.examples.empty() ? "" : faults.examples[0]));
  CHECK(faults.clean());
  CHECK(run(base + " --width-in 7 --font-pt 8 --out " + (dir / "x.svg").string(), dir)
            .out.find("leave out --size") != std::string::npos);
  CHECK(run(base.substr(0, base.find(" --size")) + " --width-in 7 --out " + (dir / "x.svg").string(), dir)
            .out.find("together") != std::string::npos);
  // --vector-cells keeps one rectangle per (pooled) cell.
  r = run(base + " --vector-cells --max-cells 16 --out " + (dir / "vec.svg").string(), dir);
  REQUIRE(r.status == 0);
  const std::string vec = test::read_all(dir / "vec.svg");
  size_t cells = 0;
  for (size_t p = vec.find("class=\"cell\""); p != std::string::npos; p = vec.find("class=\"cell\"", p + 1))
    ++cells;
  CHECK(cells == 4 * 16 * 16);
}

TEST_CASE("cli: init-pair --arch diff-v2, then capture, info and convert of a DIFF V2 model", "[cli][v2]") {
  test::ScratchDir dir("cliv2");
  const std::string models = (dir / "models").string();
  Result r =
      run("init-pair --out " + models + " --arch diff-v2 --hidden 32 --layers 2 --heads 2 --vocab 300", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const Model v2 = Model::load(models + "/diff-v2"), b = Model::load(models + "/baseline");
  CHECK(v2.config().is_diff_v2());
  CHECK(v2.config().map_heads() == b.config().map_heads());  // the baseline's 4 heads of width 8
  // The baseline's parameters plus q_proj's extra 4·8·32 and lambda_proj's 4·32 per layer.
  CHECK(v2.parameter_count() - b.parameter_count() == 2 * (4 * 8 * 32 + 4 * 32));
  const std::string out = (dir / "trace").string();
  r = run("capture --model " + models + "/diff-v2 --prompt 'Mira is 4821.' --out " + out + " --threads 1",
          dir);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("(mean [range] of sigma") != std::string::npos);
  const Trace t = read_trace_bundle(out);
  CHECK(t.layers[1].lambda_rows.shape == std::vector<int64_t>{4, 14});
  CHECK(v2.capture(t.token_ids).layers[1].a.data == t.layers[1].a.data);
  r = run("info --model " + models + "/diff-v2", dir);
  CHECK(r.out.find("\"attention\": \"diff-v2\"") != std::string::npos);
  r = run("convert --from " + models + "/diff-v2 --to " + (dir / "hf").string() + " --format hf", dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("no Hugging Face architecture") != std::string::npos);
}

TEST_CASE("gui: the λ view shows a DIFF V2 model's λ(token, head) heatmap beside a V1 model's λ plot",
          "[gui][cli][v2]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guiv2");
  const std::string models = (dir / "models").string();
  REQUIRE(
      run("init-pair --out " + models + " --arch diff-v2 --hidden 32 --layers 2 --heads 2 --vocab 300", dir)
          .status == 0);
  // The second pair's baseline replaces the first's (the same seed and shape): --overwrite says so.
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 2 --heads 2 --vocab 300 --overwrite", dir)
              .status == 0);
  const std::string png = (dir / "shot.png").string();
  const Result r = run("--models " + models + "/diff-v2," + models +
                           "/diff --prompt 'The secret code of Mira is 4821.' --view lambda --size 1280x800 "
                           "--screenshot " +
                           png + " --exit-after-frames 2 --threads 1",
                       dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("0 outside or clipped") != std::string::npos);
  // The heatmap's data area (layout record) is most of the view's width; the V1 plot is drawn too.
  const size_t at = r.out.find("layout: lambda.heat.0 ");
  REQUIRE(at != std::string::npos);
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  REQUIRE(std::sscanf(r.out.c_str() + at, "layout: lambda.heat.0 %d %d %d %d", &x0, &y0, &x1, &y1) == 4);
  CHECK(x1 - x0 > 500);
  CHECK(y1 - y0 > 100);
  CHECK(r.out.find("layout: lambda.1 ") != std::string::npos);
  // Inside it: the colormap's colours, many of them (λ differs from token to token and head to head).
  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load(png.c_str(), &w, &h, &n, 3);
  REQUIRE(px);
  std::set<std::array<int, 3>> colours;
  for (int y = y0 + 2; y < y1 - 2; y += 7)
    for (int x = x0 + 2; x < x1 - 2; x += 5) {
      const unsigned char* p =
          px + (static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x)) * 3;
      colours.insert({p[0], p[1], p[2]});
    }
  stbi_image_free(px);
  CHECK(colours.size() > 20);
}

namespace {
// The shared libraries `binary` needs (DT_NEEDED), in the order the dynamic loader searches them.
std::vector<std::string> needed_libraries(const std::string& binary, const test::ScratchDir& dir) {
  const std::string log = (dir / "readelf.txt").string();
  REQUIRE(std::system(("readelf -d '" + binary + "' > '" + log + "' 2>&1").c_str()) == 0);
  std::vector<std::string> libs;
  std::istringstream in(test::read_all(log));
  for (std::string line; std::getline(in, line);)
    if (line.find("(NEEDED)") != std::string::npos) {
      const size_t a = line.find('['), b = line.find(']');
      if (a != std::string::npos && b > a) libs.push_back(line.substr(a + 1, b - a - 1));
    }
  return libs;
}
}  // namespace

// What the tests' scratch folders and training's old steps are removed with (core/formats/atomic_file.h): not
// std::filesystem::remove_all, which crashed inside PyTorch's LibTorch on a GPU server.
TEST_CASE("remove_tree removes a folder's whole tree, links as links, and a missing path is no error",
          "[build]") {
  test::ScratchDir dir("remove-tree");
  const std::filesystem::path keep = dir / "keep", tree = dir / "tree";
  std::filesystem::create_directories(keep);
  std::ofstream(keep / "kept.txt") << "stays";
  std::filesystem::create_directories(tree / "a" / "b" / "c");
  for (const char* f : {"x.txt", "a/y.txt", "a/b/z.txt", "a/b/c/w.txt"}) std::ofstream(tree / f) << f;
  std::filesystem::create_directory_symlink(keep, tree / "a" / "link-to-keep");
  std::filesystem::create_symlink(keep / "kept.txt", tree / "file-link");
  std::error_code ec;
  CHECK(remove_tree(tree, ec));
  CHECK_FALSE(ec);
  CHECK_FALSE(std::filesystem::exists(std::filesystem::symlink_status(tree)));
  CHECK(test::read_all((keep / "kept.txt").string()) == "stays");  // the links' targets stay
  CHECK(remove_tree(tree, ec));                                    // gone already: nothing to do
  CHECK_FALSE(ec);
  std::ofstream(dir / "single.txt") << "1";
  CHECK(remove_tree(dir / "single.txt", ec));  // a file alone
  CHECK_FALSE(std::filesystem::exists(dir / "single.txt"));
  // A folder that cannot be read (not as root, who reads anything): false, with the system's reason.
  if (::geteuid() != 0) {
    std::filesystem::create_directories(dir / "locked" / "inner");
    std::filesystem::permissions(dir / "locked",
                                 std::filesystem::perms::owner_write | std::filesystem::perms::owner_exec);
    CHECK_FALSE(remove_tree(dir / "locked", ec));
    CHECK(ec == std::errc::permission_denied);
    std::filesystem::permissions(dir / "locked", std::filesystem::perms::owner_all);
  }
}

TEST_CASE("build: the C++ runtime comes before LibTorch, so its symbols bind to libstdc++", "[build]") {
  // PyTorch's libtorch.so exports its own copies of libstdc++ symbols (std::filesystem among them); an
  // executable that lists libtorch first binds to those, and std::filesystem::remove_all crashed there.
  test::ScratchDir dir("binding");
  for (const std::string binary :
       {std::string(DIFFLENS_MAIN_EXE), std::filesystem::read_symlink("/proc/self/exe").string()}) {
    INFO(binary);
    const auto libs = needed_libraries(binary, dir);
    const auto first = [&](const char* prefix) {
      for (size_t i = 0; i < libs.size(); ++i)
        if (libs[i].rfind(prefix, 0) == 0) return static_cast<int>(i);
      return -1;
    };
    const int stdcxx = first("libstdc++"), torch = std::max(first("libtorch"), first("libc10"));
    REQUIRE(stdcxx >= 0);
    REQUIRE(torch >= 0);
    CHECK(stdcxx < first("libtorch"));
    CHECK(stdcxx < first("libc10"));
  }
  // And as the loader does it: no C++ runtime reference binds into LibTorch, neither a versioned one nor
  // any std::filesystem symbol (PyTorch 2.11's libtorch_cpu.so defines those unversioned: an executable
  // linked with it first took them from there and crashed in remove_all). Seen running: the main program's
  // --help, and this test binary running a test that makes and removes a folder.
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (const auto& [binary, args] : {std::pair<std::string, std::string>{DIFFLENS_MAIN_EXE, "--help"},
                                     {self, "'safetensors round trip of F32 tensors with metadata'"}}) {
    const std::string log = (dir / "bindings.txt").string();
    std::system(("LD_DEBUG=bindings " + binary + " " + args + " > /dev/null 2> '" + log + "'").c_str());
    std::istringstream in(test::read_all(log));
    int bindings = 0, filesystem = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.find("binding file " + binary) == std::string::npos) continue;
      ++bindings;
      const size_t to = line.find(" to ");
      const std::string target = line.substr(to + 4, line.find(": ", to) - to - 4);
      const bool runtime_symbol = line.find("[GLIBCXX_") != std::string::npos ||
                                  line.find("[CXXABI_") != std::string::npos ||
                                  line.find("St10filesystem") != std::string::npos;
      filesystem += line.find("St10filesystem") != std::string::npos;
      INFO(binary << ": " << line);
      CHECK_FALSE((runtime_symbol && (target.find("libtorch") != std::string::npos ||
                                      target.find("libc10") != std::string::npos)));
    }
    INFO(binary);
    CHECK(bindings > 100);                      // the loader did report the binary's bindings
    if (binary == self) CHECK(filesystem > 0);  // the folder's removal went through std::filesystem
  }
}

TEST_CASE("cli: bad input gives a message and a non-zero status, never a crash", "[cli][errors]") {
  test::ScratchDir dir("clibad");
  const std::string models = (dir / "m").string();
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 1 --heads 2 --vocab 300", dir).status ==
          0);
  const std::string model = " --model " + models + "/diff --out " + (dir / "t").string();
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"capture --model /nonexistent --prompt hi --out x", "not a model directory"},
      {"capture" + model, "give exactly one of --prompt"},
      {"capture" + model + " --prompt ''", "the prompt is empty"},
      {"capture" + model + " --prompt-file /nonexistent", "cannot open the prompt file"},
      {"capture" + model + " --token-ids 1,abc", "comma-separated"},
      {"capture" + model + " --token-ids 1,300", "outside the vocabulary"},
      {"capture" + model + " --prompt hi --promt typo", "unknown option --promt"},
      {"capture" + model + " --prompt hi --heads 9", "head 9 does not exist"},
      {"capture" + model + " --prompt hi --threads x", "expects an integer"},
      {"capture" + model + " --prompt hi --device tpu", "device must be auto, cpu or cuda"},
      {"frobnicate", "unknown command 'frobnicate'"},
      {"capture --model", "needs a value"},
  };
  std::vector<std::pair<std::string, std::string>> failing;
  for (const auto& c : cases) failing.push_back({c.args, c.message});
  expect_failures(failing, dir);
  // A prompt longer than the model's context is refused with the numbers.
  test::write_all(dir / "long.txt", std::string(5000, 'a'));
  const Result r = run("capture" + model + " --prompt-file " + (dir / "long.txt").string(), dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("5001 tokens; this model supports at most 4096") != std::string::npos);
}

TEST_CASE("gui: headless screenshot of both bundled models", "[gui][cli]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("gui");
  const std::string png = (dir / "shot.png").string();
  const std::string exports = (dir / "exports").string();
  const Result r =
      run("--prompt 'The secret code of Mira is 4821.' --select 1,0 --size 1280x800 --screenshot " + png +
              " --exit-after-frames 2 --threads 1 --export-all --export-dir " + exports,
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const std::string bytes = test::read_all(png);
  REQUIRE(bytes.size() > 20000);  // a real picture, not an empty frame
  CHECK(bytes.substr(1, 3) == "PNG");
  auto be32 = [&](size_t o) {
    return (static_cast<uint32_t>(static_cast<uint8_t>(bytes[o])) << 24) |
           (static_cast<uint8_t>(bytes[o + 1]) << 16) | (static_cast<uint8_t>(bytes[o + 2]) << 8) |
           static_cast<uint8_t>(bytes[o + 3]);
  };
  CHECK(be32(16) == 1280);  // IHDR width and height
  CHECK(be32(20) == 800);
  // --export-all wrote every map of the head view: DIFF A1, A2, A and the baseline's A at layer 1, head 0,
  // and the NPY holds exactly the map the model computes.
  for (const char* f :
       {"diff-small-L1-H0-A1", "diff-small-L1-H0-A2", "diff-small-L1-H0-A", "baseline-small-L1-H0-A"})
    for (const char* ext : {".png", ".npy", ".csv"}) {
      INFO(f << ext);
      CHECK(std::filesystem::exists(std::filesystem::path(exports) / (std::string(f) + ext)));
    }
  // The exported PNG (rendered by the app from the data) shows the causal triangle empty at the top
  // right and a non-uniform map below the diagonal.
  int w = 0, h = 0, n = 0;
  unsigned char* px =
      stbi_load((std::filesystem::path(exports) / "diff-small-L1-H0-A1.png").c_str(), &w, &h, &n, 3);
  REQUIRE(px);
  CHECK(w == 1024);
  CHECK(h == 1024);
  auto rgb = [&](int x, int y) {
    const unsigned char* p =
        px + (static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x)) * 3;
    return std::array<int, 3>{p[0], p[1], p[2]};
  };
  CHECK(rgb(w - 4, 4) == std::array<int, 3>{236, 236, 236});  // masked future
  CHECK(rgb(4, h - 4) != std::array<int, 3>{236, 236, 236});  // first key of the last query: a value
  std::set<std::array<int, 3>> colours;
  for (int y = h / 2; y < h; y += 16) colours.insert(rgb(8, y));
  CHECK(colours.size() > 3);
  stbi_image_free(px);
  const Model diff = Model::load(DIFFLENS_SOURCE_DIR "/assets/models/diff-small");
  const Trace t = diff.capture(diff.tokenizer().encode("The secret code of Mira is 4821.", true).ids);
  int64_t rows = 0, cols = 0;
  const auto a2 = viz::read_npy(std::filesystem::path(exports) / "diff-small-L1-H0-A2.npy", &rows, &cols);
  REQUIRE(rows == t.length());
  REQUIRE(cols == t.length());
  for (int64_t i = 0; i < rows * cols; ++i)
    REQUIRE(a2[static_cast<size_t>(i)] == Approx(t.layers[1].a2.data[static_cast<size_t>(i)]).margin(1e-6));
  // The export wrote the labelled head views too.
  for (const char* f : {"diff-small-L1-H0-headview.png", "baseline-small-L1-H0-headview.png"})
    CHECK(std::filesystem::file_size(std::filesystem::path(exports) / f) > 20000);
  // Bad GUI options are refused before any window opens.
  const std::pair<std::string, std::string> bad[] = {
      {"--size 10x10 --screenshot x.png", "option --size expects WIDTHxHEIGHT with each from 240 to 16384"},
      {"--needle 256,50,2,3,1 --screenshot x.png", "1 <= ASKED <= NEEDLES <= 6"},
      {"--logit-bits 5 --screenshot x.png", "option --logit-bits must be 0, 8, 6 or 4, got '5'"},
      {"--maps-height 0.99 --screenshot x.png", "option --maps-height expects a number from 0.2 to 0.85"},
      {"--size 300x400 --screenshot x.png", "the window must be at least 320x240"},
  };
  expect_failures(bad, dir);
}

TEST_CASE("gui: a needle prompt marks question and answer, and quantized logits run headless",
          "[gui][cli][needle]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guineedle");
  const Result r =
      run("--needle 200,25,2,1,4 --tab noise --logit-bits 6 --size 1280x800 --exit-after-frames 2 "
          "--threads 1 --screenshot " +
              (dir / "n.png").string(),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("tokens: both models") != std::string::npos);
  CHECK(r.out.find("could not build") == std::string::npos);
  CHECK(std::filesystem::file_size(dir / "n.png") > 20000);
}

TEST_CASE("gui: with no prompt the app opens on a needle episode and shows the heads that attend to its code",
          "[gui][cli][needle][bundled]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guifirst");
  const Result r =
      run("--size 1280x800 --exit-after-frames 1 --threads 1 --screenshot " + (dir / "f.png").string(), dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("could not build") == std::string::npos);
  // "status line: layer L: diff-small head H 0.xyz, baseline-small head H' 0.xyz to the answer ..."
  const size_t at = r.out.find("status line: layer ");
  REQUIRE(at != std::string::npos);
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  auto share_of = [&](const std::string& model) {
    const size_t m = line.find(model + " head ");
    REQUIRE(m != std::string::npos);
    const size_t value = line.find(' ', m + model.size() + 6) + 1;
    return std::stod(line.substr(value));
  };
  // The layer where both models' strongest heads together give the code the most: the bundled baseline's
  // retrieval heads (layer 1, about half of the question's rows on the code); the DIFF model's strongest
  // head is in another layer, which the line names, and gives the code less (the model card's finding).
  CHECK(line.find("status line: layer 1: ") == 0);
  CHECK(share_of("baseline-small") > 0.3);
  const size_t elsewhere = line.find("diff-small's strongest: layer ");
  REQUIRE(elsewhere != std::string::npos);
  const double diff_best = std::stod(line.substr(line.find(' ', line.find("head ", elsewhere) + 5) + 1));
  CHECK(diff_best > 0.1);
  CHECK(line.find("diff-small's strongest: layer 1 ") == std::string::npos);  // named: another layer
  CHECK(diff_best < share_of("baseline-small"));
  CHECK(line.find("baseline-small's strongest") == std::string::npos);  // its strongest is in the layer shown
  // --select wins over the automatic choice; a needle prompt that stops before the code still builds.
  const Result sel =
      run("--needle 256,50,1,1,1,0 --select 0,2 --size 1280x800 --exit-after-frames 1 --threads 1 "
          "--screenshot " +
              (dir / "g.png").string(),
          dir);
  INFO(sel.out);
  REQUIRE(sel.status == 0);
  CHECK(sel.out.find("status line: layer") == std::string::npos);
  CHECK(sel.out.find("could not build") == std::string::npos);
  const std::pair<std::string, std::string> bad[] = {
      {"--needle 256,50,1,1,1,2 --screenshot x.png", "ANSWER 1"},
      {"--needle 256,50,1,1,1,1,1 --screenshot x.png",
       "option --needle expects T,D,N,R,S[,A] (5 to 6 integers)"},
      {"--needle 32,50,1,1,1 --screenshot x.png",
       "TOKENS,DEPTH%,NEEDLES,ASKED,SEED[,ANSWER] with TOKENS >= 64"},
  };
  expect_failures(bad, dir);
}

TEST_CASE("cli: render draws a saved trace's head as PNG and SVG with labels, and refuses bad requests",
          "[cli][figure]") {
  test::ScratchDir dir("clirender");
  const std::string models = (dir / "m").string();
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 2 --heads 2 --vocab 300", dir).status ==
          0);
  const std::string trace = (dir / "t").string();
  REQUIRE(run("capture --model " + models + "/diff --prompt 'a cat sat' --out " + trace, dir).status == 0);
  Result r = run(
      "render --trace " + trace + " --layer 1 --head 1 --size 200 --out " + (dir / "h.png").string(), dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("3 panels") != std::string::npos);
  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load((dir / "h.png").c_str(), &w, &h, &n, 3);
  REQUIRE(px);
  stbi_image_free(px);
  CHECK(w > 3 * 200);  // three 200-pixel maps, labels and gaps
  CHECK(h > 200);
  r = run("render --trace " + trace + " --layer 0 --head 0 --map A2 --scale log --vector-cells --out " +
              (dir / "a2.svg").string(),
          dir);
  REQUIRE(r.status == 0);
  const std::string svg = test::read_all(dir / "a2.svg");
  CHECK(svg.find("A2 (softmax 2)") != std::string::npos);
  CHECK(svg.find("A1 (softmax 1)") == std::string::npos);
  const Trace t = read_trace_bundle(trace);
  size_t cells = 0;
  for (size_t p = svg.find("class=\"cell\""); p != std::string::npos; p = svg.find("class=\"cell\"", p + 1))
    ++cells;
  CHECK(cells == static_cast<size_t>(t.length() * t.length()));
  const std::string base = "render --trace " + trace + " --out " + (dir / "x.png").string();
  const std::pair<std::string, std::string> bad[] = {
      {base + " --layer 5", "layer 5 does not exist (the trace has 2 layers)"},
      {base + " --head 7", "head 7 of layer 0 has no maps in this trace (kept heads: 0,1)"},
      {base + " --map B", "option --map must be all, A1, A2 or A, got 'B'"},
      {base + " --size 10", "option --size expects an integer from 64 to 8192, got '10'"},
      {base + " --zoom 0,0,99", "reaches beyond the 10-token prompt (tokens 0-9)"},
      {base + " --scale cubic", "option --scale must be linear, sqrt or log, got 'cubic'"},
      {"render --trace " + trace + " --out x.jpg", "--out x.jpg: writes .png or .svg files; name it x.png"},
      {"render --trace /nonexistent --out x.png", "cannot open"},
  };
  expect_failures(bad, dir);
}

TEST_CASE("cli: needle sweeps a pair end to end and refuses bad grids", "[cli][needle][lab]") {
  test::ScratchDir dir("clineedle");
  const std::string models = (dir / "m").string();
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 1 --heads 2 --vocab 300", dir).status ==
          0);
  const std::string pair = " --models " + models + "/diff," + models + "/baseline";
  const std::string out = (dir / "lab").string();
  Result r = run(
      "needle" + pair + " --lengths 160,200 --depths 0,100 --needles 1,2 --queried 1 --seeds 2 --out " + out,
      dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("## Multi-needle accuracy") != std::string::npos);
  const std::string csv = test::read_all(dir / "lab/needle.csv");
  size_t rows = 0;
  for (char c : csv) rows += c == '\n';
  CHECK(rows == 1 + 2 * (2 * 2 * 2));  // header + 2 models × 2 lengths × 2 depths × 2 (N, R) cells
  CHECK(std::filesystem::exists(dir / "lab/tables.md"));
  // Own wording: the needle and question sentences change, the sweep runs the same way.
  r = run("needle" + pair + " --lengths 200 --depths 50 --seeds 1 --out " + (dir / "own").string() +
              " --needle-template \"Keep in mind: {name} uses PIN {code}.\" --question-template "
              "\"Which PIN does {name} use?\\nPIN:\"",
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(test::read_all(dir / "own/needle.csv").find(",200,0.5,1,1,1,") != std::string::npos);
  const std::pair<std::string, std::string> bad[] = {
      {"needle" + pair + " --out x --lengths 10", "at least 64"},
      {"needle" + pair + " --out x --lengths 1e9", "exceeds the model's"},
      {"needle" + pair + " --out x --depths 150", "percentages in [0, 100]"},
      {"needle" + pair + " --out x --depths a,b", "comma-separated numbers"},
      {"needle" + pair + " --out x --needles 1 --queried 2", "no combination"},
      {"needle" + pair + " --out x --seeds 0", "option --seeds expects an integer from 1 to 10000, got '0'"},
      {"needle" + pair + " --out x --cell 5", "option --cell expects an integer from 16 to 512, got '5'"},
      {"needle" + pair + " --out x --needle-template 'no placeholders'", "{code} exactly once"},
      {"needle --models /nonexistent --out x", "not a model directory"},
      {"needle" + pair + " --out x --haystack /nonexistent", "cannot open"},
  };
  expect_failures(bad, dir);
}

TEST_CASE("cli: outliers measures a pair over a text file and refuses bad input", "[cli][outliers][lab]") {
  test::ScratchDir dir("clioutliers");
  const std::string models = (dir / "m").string();
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 1 --heads 2 --vocab 300", dir).status ==
          0);
  test::write_all(dir / "text.txt", std::string(1000, 'q'));
  const std::string base = "outliers --models " + models + "/diff," + models + "/baseline --text-file " +
                           (dir / "text.txt").string();
  Result r = run(base + " --window 200 --out " + (dir / "o").string(), dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("| attention logits | diff (untrained") != std::string::npos);
  CHECK(r.out.find("1006 tokens in 6 windows") != std::string::npos);  // 199 text tokens per window
  CHECK(std::filesystem::exists(dir / "o/hidden.png"));
  test::write_all(dir / "empty.txt", "");
  const std::pair<std::string, std::string> bad[] = {
      {base + " --out x --window 1", "option --window expects an integer from 2 to 1048576, got '1'"},
      {base + " --out x --max-windows -1", "option --max-windows expects an integer from 0 to"},
      {"outliers --models " + models + "/diff --text-file " + (dir / "empty.txt").string() + " --out x",
       "the text is empty"},
      {"outliers --models " + models + "/diff --text-file /nonexistent --out x", "cannot open"},
  };
  expect_failures(bad, dir);
}

TEST_CASE("cli: quantize reports map drift per width and refuses bad widths", "[cli][quantize]") {
  test::ScratchDir dir("cliquant");
  const std::string models = (dir / "m").string();
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 1 --heads 2 --vocab 300", dir).status ==
          0);
  const std::string base =
      "quantize --models " + models + "/diff," + models + "/baseline --prompt 'the cat sat on it'";
  Result r = run(base + " --bits 8,3 --out " + (dir / "q").string(), dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("| diff (untrained, seed 1) | 8 |") != std::string::npos);
  CHECK(r.out.find("| baseline (untrained, seed 1) | 3 |") != std::string::npos);
  CHECK(std::filesystem::exists(dir / "q/quantize.md"));
  const std::pair<std::string, std::string> bad[] = {
      {base + " --bits 1", "option --bits: each item is an integer from 2 to 32, got '1'"},
      {base + " --bits 4.5", "option --bits expects comma-separated integers (8,6,4), got '4.5'"},
      {base + " --needle-seeds -1", "option --needle-seeds expects an integer from 0 to 10000"},
      {"quantize --models " + models + "/diff", "give exactly one of --prompt"},
  };
  expect_failures(bad, dir);
}

TEST_CASE("gui: the needle lab sweeps headless and exports the same numbers as the needle command",
          "[gui][cli][needle][lab]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guilab");
  const std::string models = (dir / "m").string();
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 1 --heads 2 --vocab 300", dir).status ==
          0);
  const std::string pair = " --models " + models + "/diff," + models + "/baseline";
  const std::string grid = " --lengths 160,200 --depths 0,100 --needles 1,2 --queried 1 --seeds 2";
  Result r =
      run(pair +
              " --tab lab --lab-run --lab-lengths 160,200 --lab-depths 0,100 --lab-needles 1,2 "
              "--lab-queried 1 --lab-seeds 2 --export-all --export-dir " +
              (dir / "gui").string() + " --size 1280x800 --exit-after-frames 2 --threads 1 --screenshot " +
              (dir / "lab.png").string(),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("needle lab: 32/32 episodes") !=
        std::string::npos);  // 2 × 2 × 2 cells × 2 seeds × 2 models
  CHECK(std::filesystem::file_size(dir / "lab.png") > 20000);
  std::filesystem::path exported;
  for (const auto& e : std::filesystem::directory_iterator(dir / "gui"))
    if (e.path().filename().string().rfind("needle-lab-", 0) == 0) exported = e.path();
  REQUIRE(!exported.empty());
  for (const char* f : {"needle.json", "tables.md", "diff_untrained_seed_1-accuracy-N2R1.png",
                        "baseline_untrained_seed_1-attention-N1R1.svg"}) {
    INFO(f);
    CHECK(std::filesystem::exists(exported / f));
  }
  r = run("needle" + pair + grid + " --threads 1 --out " + (dir / "cli").string(), dir);
  REQUIRE(r.status == 0);
  // Same cells, same numbers: compare needle.csv without the model-name column (the CLI names a model by
  // its directory, the app by its kind).
  auto numbers = [](const std::string& csv) {
    std::vector<std::string> rows;
    size_t start = csv.find('\n') + 1;
    while (start < csv.size()) {
      const size_t end = csv.find('\n', start);
      const std::string line = csv.substr(start, end - start);
      rows.push_back(line.substr(line.find(',') + 1));
      start = end + 1;
    }
    return rows;
  };
  const auto from_gui = numbers(test::read_all(exported / "needle.csv"));
  const auto from_cli = numbers(test::read_all(dir / "cli/needle.csv"));
  CHECK(from_gui.size() == 16);
  CHECK(from_gui == from_cli);
}

TEST_CASE("gui: the needle lab sweeps under the interventions too, with the needle command's numbers",
          "[gui][cli][needle][lab][intervene]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guilabiv");
  const std::string models = (dir / "m").string();
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 1 --heads 2 --vocab 300", dir).status ==
          0);
  // Both slots get the list; the baseline cannot take λ: it runs as trained only and the lab says why.
  Result r =
      run(" --models " + models + "/diff," + models +
              "/baseline --intervene lambda=0 --tab lab --lab-run --lab-lengths 160 --lab-depths 0,100 "
              "--lab-needles 1 --lab-queried 1 --lab-seeds 2 --export-all --export-dir " +
              (dir / "gui").string() + " --size 1280x800 --exit-after-frames 2 --threads 1 --screenshot " +
              (dir / "lab.png").string(),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("needle lab: 12/12 episodes; right slot: skipped") !=
        std::string::npos);  // 2 × 2 × 3 lanes
  CHECK(r.out.find("right slot: skipped --intervene 'lambda=0': a layer of this baseline model has no λ") !=
        std::string::npos);
  std::filesystem::path exported;
  for (const auto& e : std::filesystem::directory_iterator(dir / "gui"))
    if (e.path().filename().string().rfind("needle-lab-", 0) == 0) exported = e.path();
  REQUIRE(!exported.empty());
  const std::string tables = test::read_all(exported / "tables.md");
  CHECK(tables.find("| diff (untrained, seed 1) under lambda=0 |") != std::string::npos);
  CHECK(tables.find("baseline (untrained, seed 1) under") == std::string::npos);
  r = run("needle --models " + models +
              "/diff --intervene lambda=0 --lengths 160 --depths 0,100 --needles 1 --queried 1 --seeds 2 "
              "--threads 1 --out " +
              (dir / "cli").string(),
          dir);
  REQUIRE(r.status == 0);
  // needle.csv rows: the model's name first. The app's diff rows (as trained, then under λ = 0) are the
  // command's, number for number; the app names a model by its config, the command by it too.
  auto rows = [](const std::string& csv, const std::string& model) {
    std::vector<std::string> out;
    size_t start = csv.find('\n') + 1;
    while (start < csv.size()) {
      const size_t end = csv.find('\n', start);
      const std::string line = csv.substr(start, end - start);
      if (line.rfind(model, 0) == 0) out.push_back(line);
      start = end + 1;
    }
    return out;
  };
  const auto from_gui = rows(test::read_all(exported / "needle.csv"), "\"diff");
  const auto from_cli = rows(test::read_all(dir / "cli/needle.csv"), "\"diff");
  REQUIRE(from_gui.size() == 4);  // 2 depths, as trained and under λ = 0
  CHECK(from_gui == from_cli);
  CHECK(from_gui[2].rfind("\"diff (untrained, seed 1) under lambda=0\",160,0,", 0) == 0);
}

TEST_CASE("cli: convert writes Hugging Face and official-layout checkpoints with the same maps",
          "[cli][convert][hf]") {
  test::ScratchDir dir("cliconvert");
  const std::string models = (dir / "m").string();
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 2 --heads 2 --vocab 300", dir).status ==
          0);
  Result r = run("convert --from " + models + "/diff --to " + (dir / "hf").string() + " --format hf", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("DiffLlamaForCausalLM") != std::string::npos);
  CHECK(r.out.find("folded into o_proj") != std::string::npos);
  r = run("info --model " + (dir / "hf").string(), dir);
  CHECK(r.out.find("architecture: DiffLlamaForCausalLM") != std::string::npos);
  CHECK(r.out.find("components in halves") != std::string::npos);
  r = run("convert --from " + (dir / "hf").string() + " --to " + (dir / "official").string() +
              " --format official",
          dir);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("official DIFF layout") != std::string::npos);
  const Model a = Model::load(models + "/diff"), b = Model::load(dir / "hf"),
              c = Model::load(dir / "official");
  const std::vector<int64_t> ids = {1, 80, 81, 82, 83, 84, 85, 86};
  const Trace ta = a.capture(ids), tb = b.capture(ids), tc = c.capture(ids);
  for (size_t l = 0; l < ta.layers.size(); ++l)
    for (size_t i = 0; i < ta.layers[l].a.data.size(); ++i) {
      REQUIRE(tb.layers[l].a.data[i] == Approx(ta.layers[l].a.data[i]).margin(1e-5));
      REQUIRE(tc.layers[l].a.data[i] == Approx(ta.layers[l].a.data[i]).margin(1e-5));
    }
  CHECK(tc.next_token[0].id == ta.next_token[0].id);
  const std::pair<std::string, std::string> bad[] = {
      {"convert --from " + models + "/diff --to " + (dir / "hf").string(), "exists and is not empty"},
      {"convert --from " + models + "/diff --to " + (dir / "x").string() + " --format onnx",
       "--format must be"},
      {"convert --from " + models + "/diff --to " + (dir / "y").string() + " --dtype f8", "--dtype must be"},
      {"convert --from /nonexistent --to " + (dir / "w").string(), "not a model directory"},
  };
  expect_failures(bad, dir);
  // The native format in BF16 (what a GPU run brings back in half the bytes): read back as BF16, the same
  // maps to BF16's precision.
  r = run("convert --from " + models + "/diff --to " + (dir / "z").string() + " --dtype bf16", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  r = run("info --model " + (dir / "z").string(), dir);
  CHECK(r.out.find("weights on disk: BF16") != std::string::npos);
  const Trace tz = Model::load(dir / "z").capture(ids);
  double worst = 0;
  for (size_t l = 0; l < ta.layers.size(); ++l)
    for (size_t i = 0; i < ta.layers[l].a.data.size(); ++i)
      worst =
          std::max(worst, static_cast<double>(std::fabs(tz.layers[l].a.data[i] - ta.layers[l].a.data[i])));
  CHECK(worst > 0);     // rounded
  CHECK(worst < 0.02);  // ... to BF16's 8 bits of mantissa
}

TEST_CASE("gui: a long prompt shows pooled maps and, zoomed in, an exact tile", "[gui][cli][long]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guilong");
  const std::string models = (dir / "m").string();
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 2 --heads 2 --vocab 300", dir).status ==
          0);
  std::string prompt;
  for (int i = 0; i < 150; ++i) prompt += "abcdefghi ";  // 1500 bytes: 1501 tokens with BOS
  const std::string common =
      " --models " + models + "/diff," + models + "/baseline --prompt '" + prompt +
      "' --pooled-budget 1 --size 1280x800 --exit-after-frames 30 --threads 1 --screenshot ";
  Result r = run(common + (dir / "pooled.png").string(), dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("1501 tokens") != std::string::npos);
  CHECK(r.out.find("diff (untrained, seed 1): pooled") != std::string::npos);
  CHECK(r.out.find("head view shows pooled cells") != std::string::npos);
  r = run(common + (dir / "tile.png").string() + " --zoom 1000,900,200", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  size_t tiles = 0;
  for (size_t p = r.out.find("shows an exact tile"); p != std::string::npos;
       p = r.out.find("shows an exact tile", p + 1))
    ++tiles;
  CHECK(tiles == 2);  // both models, the same tokens
  CHECK(std::filesystem::file_size(dir / "tile.png") > 20000);
}

TEST_CASE(
    "cli: tokenize prints ids and byte ranges for a tokenizer.json, a model directory, and refuses bad input",
    "[cli][tokenizer]") {
  test::ScratchDir dir("clitok");
  const std::string tok = std::string(DIFFLENS_SOURCE_DIR) + "/tests/data/bpe/llama3-style.tokenizer.json";
  // "a DiffLens" in the llama3-style test tokenizer: "a" (id 97, its byte) and the whole-word entry "
  // DiffLens" (id 1456, after 256 bytes + 1200 merges), as the reference library gives them.
  Result r = run("tokenize --tokenizer " + tok + " --text 'a DiffLens' --format jsonl", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out == "{\"ids\":[97,1456],\"offsets\":[[0,1],[1,10]]}\n");
  // A special token written in the text: its id (1461), or with --specials text the characters it is made of,
  // the ids of the same characters with the token's brackets spaced out of it (no special token matches).
  r = run("tokenize --tokenizer " + tok + " --text 'x<|eot_id|>' --format ids --specials match", dir);
  REQUIRE(r.status == 0);
  CHECK(r.out == "120,1461\n");
  r = run("tokenize --tokenizer " + tok + " --text 'x<|eot_id|>' --format jsonl --specials text", dir);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("1461") == std::string::npos);
  CHECK(r.out.find("[10,11]]}") != std::string::npos);  // the last token ends at the text's last byte
  // --bench: the same tokens, timed (the whole text three times).
  test::write_all(dir / "bench.txt", "The secret code of Mira is 4821. <|eot_id|> a DiffLens\n");
  r = run("tokenize --tokenizer " + tok + " --input " + (dir / "bench.txt").string() + " --format ids", dir);
  REQUIRE(r.status == 0);
  const size_t count = static_cast<size_t>(std::count(r.out.begin(), r.out.end(), ',')) + 1;
  r = run("tokenize --tokenizer " + tok + " --input " + (dir / "bench.txt").string() + " --bench", dir);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::StartsWith("read the tokenizer in ") &&
                        Catch::Contains("; 55 bytes -> " + std::to_string(count) + " tokens in ") &&
                        Catch::Contains("(best of 3; "));
  r = run("tokenize --tokenizer " + tok + " --text x --specials all", dir);
  CHECK(r.status != 0);
  CHECK(r.out.find("--specials must be match or text") != std::string::npos);
  // --bos adds the given id with an empty range; --lines encodes each line on its own.
  test::write_all(dir / "two.txt", "a\n<|eot_id|>\n");
  r = run("tokenize --tokenizer " + tok + " --input " + (dir / "two.txt").string() +
              " --lines --format ids --bos 1459",
          dir);
  REQUIRE(r.status == 0);
  CHECK(r.out == "1459,97\n1459,1461\n");
  r = run("tokenize --tokenizer " + tok + " --text 'a DiffLens'", dir);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("     1     1456  [1, 10)") != std::string::npos);
  CHECK(r.out.find("2 tokens from 10 bytes") != std::string::npos);
  // A model directory uses its own tokenizer and BOS (the byte tokenizer here: id = 3 + byte, BOS 1).
  REQUIRE(
      run("init-pair --out " + (dir / "m").string() + " --hidden 32 --layers 1 --heads 2 --vocab 300", dir)
          .status == 0);
  r = run("tokenize --tokenizer " + (dir / "m" / "diff").string() + " --text hi --format ids", dir);
  CHECK(r.out == "1,107,108\n");
  r = run("tokenize --tokenizer " + (dir / "m" / "diff").string() + " --text hi --format ids --no-bos", dir);
  CHECK(r.out == "107,108\n");
  const std::vector<std::pair<std::string, std::string>> failing = {
      {"tokenize --tokenizer /nonexistent/tokenizer.json --text hi", "tokenizer file not found"},
      {"tokenize --tokenizer /nonexistent --text hi", "no such file or directory"},
      {"tokenize --tokenizer " + tok, "give exactly one of --text, --input"},
      {"tokenize --tokenizer " + tok + " --text a --input b", "give exactly one of --text, --input"},
      {"tokenize --tokenizer " + tok + " --text a --format xml", "--format must be table, jsonl or ids"},
      {"tokenize --tokenizer " + (dir / "m" / "diff").string() + " --text a --bos 3",
       "--bos is for a bare tokenizer.json"},
      {"tokenize --tokenizer " + (dir / "two.txt").string() + " --text a",
       "not a model directory, tokenizer.json"},
  };
  expect_failures(failing, dir);
}

// Hostile input in the app (issue "Hostile input never crashes DiffLens"): each case opens the window
// headless, shows a message in the slot (printed as "slot N: ..." / "slot N run: ...") or runs what can run,
// keeps the other model and writes its screenshot with status 0.
TEST_CASE("gui: corrupt models and bundles, a missing tokenizer and hostile prompts leave the app running",
          "[gui][cli][errors]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guibad");
  const std::filesystem::path models = DIFFLENS_SOURCE_DIR "/assets/models";
  const std::string baseline = (models / "baseline-small").string();
  // A model folder with a broken config.json and a truncated safetensors file.
  std::filesystem::create_directories(dir / "corrupt");
  test::write_all(dir / "corrupt/config.json", "{\"hidden_size\": 128, \"oops");
  test::write_all(dir / "corrupt/model.safetensors",
                  test::read_all(models / "diff-small/model.safetensors").substr(0, 1000));
  // The bundled DIFF without its tokenizer.model.
  std::filesystem::create_directories(dir / "notok");
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(models / "diff-small" / f, dir / "notok" / f);
  // Prompts: 100,000 characters, only control characters, invalid UTF-8.
  std::string big;
  const std::string hay = test::read_all(DIFFLENS_SOURCE_DIR "/assets/haystack.txt");
  while (big.size() < 100000) big += hay;
  big.resize(100000);
  test::write_all(dir / "big.txt", big);
  std::string control;
  for (int i = 0; i < 20; ++i)
    for (char c : {'\x01', '\x02', '\x07', '\x08', '\x0b', '\x0c', '\x1b', '\x1f', '\x7f'}) control += c;
  test::write_all(dir / "control.txt", control);
  test::write_all(dir / "utf8.txt",
                  std::string("caf\xc3 \xff\xfe ok \xed\xa0\x80 \xf0\x9f\x98 fin \xc0\xaf"));
  // Trace bundles: a broken trace.json, a folder that is not a bundle, and a good one.
  std::filesystem::create_directories(dir / "badbundle");
  test::write_all(dir / "badbundle/trace.json", "{\"format\": \"difflens-trace\", \"version\": 1}");
  REQUIRE(run("capture --model " + (models / "diff-small").string() +
                  " --prompt 'The code of Mira is 4821.' --out " + (dir / "good").string(),
              dir)
              .status == 0);

  const std::string shot =
      " --size 1280x800 --exit-after-frames 2 --threads 1 --screenshot " + (dir / "x.png").string();
  struct Case {
    std::string args;
    std::vector<std::string> expect;  // all of these in the output
  };
  const Case cases[] = {
      {"--models " + (dir / "corrupt").string() + "," + baseline + " --prompt 'The secret code'",
       {"slot 0: ", "config.json: not valid JSON", "slot 0 run: no model loaded", "; 5 tokens:"}},
      {"--models " + (dir / "notok").string() + "," + baseline + " --prompt 'The secret code'",
       {"slot 0 run: this model has no text tokenizer (tokenizer not usable (", "tokenizer file not found",
        "type token ids separated by commas or spaces", "; 5 tokens:"}},
      {"--models " + (dir / "notok").string() + "," + baseline + " --prompt '1, 450, 3 77'", {"; 4 tokens:"}},
      {"--prompt-file " + (dir / "big.txt").string(),
       {"slot 0 run: the prompt has", "this model supports at most 8192", "slot 1 run: the prompt has"}},
      {"--prompt-file " + (dir / "control.txt").string(), {"; 1 tokens:"}},
      {"--prompt-file " + (dir / "utf8.txt").string(), {"; 44 tokens:"}},
      {"--bundle " + (dir / "badbundle").string(),
       {"slot 0 run: ", "trace.json: missing or mistyped field", "key 'config' not found"}},
      {"--bundle " + (dir / "nothing").string(),
       {"slot 0 run: ", "cannot open (is this a trace bundle directory?)"}},
      {"--bundle " + (dir / "good").string(),
       {"; 14 tokens:", "slot 1 run: (showing a trace bundle in the other slot)"}},
  };
  for (const Case& c : cases) {
    std::filesystem::remove(dir / "x.png");
    const Result r = run(c.args + shot, dir);
    INFO(c.args << "\n" << r.out);
    CHECK(r.status == 0);
    for (const std::string& e : c.expect) CHECK(r.out.find(e) != std::string::npos);
    CHECK(std::filesystem::exists(dir / "x.png"));
    // A prompt's run counts from a (simulated) keystroke; a bundle shown as it is had none, and says none.
    const bool bundle = c.args.rfind("--bundle", 0) == 0;
    CHECK((r.out.find("keystroke -> maps on screen") != std::string::npos) == !bundle);
  }
}

TEST_CASE("cli: explain writes six slides of both models' heads, and refuses bad requests",
          "[cli][explain]") {
  test::ScratchDir dir("cliexplain");
  const std::string prompt =
      "'The secret code of Thomas is 7182. Q: What is the secret code of Thomas?\nA: 7'";
  const Result r =
      run("explain --prompt " + prompt + " --layer 1 --head 3 --base-head 4 --answer 7,11 --out " +
              (dir / "slides").string(),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("diff-small layer 1 head 3 query"));
  CHECK_THAT(r.out, Catch::Contains("baseline-small layer 1 head 4 query"));
  CHECK_THAT(r.out, Catch::Contains("wrote 12 files"));
  for (int step = 1; step <= 6; ++step)
    for (const char* ext : {".png", ".svg"})
      CHECK(std::filesystem::file_size(dir / "slides" / ("explain-step-" + std::to_string(step) + ext)) >
            2000);
  const std::pair<std::string, std::string> bad[] = {
      {"explain --out x", "give exactly one of --prompt, --prompt-file"},
      {"explain --prompt hi --out x --layer 9", "layer 9 is not in the trace"},
      {"explain --prompt hi --out x --head 7", "head 7 does not exist"},
      {"explain --prompt hi --out x --query 50", "query 50 is outside"},
      {"explain --prompt hi --out x --answer 3,1", "--answer expects BEGIN,END"},
      {"explain --prompt hi --out x --size 10x10",
       "option --size expects WIDTHxHEIGHT with each from 270 to 8192"},
      {"explain --prompt hi --out x --size 300x300", "slides are 480x270 to 8192x8192 pixels"},
  };
  expect_failures(bad, dir);
}

TEST_CASE("gui: the Explain tab steps, presents and exports its slides headless", "[gui][cli][explain]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guiexplain");
  const std::string prompt =
      "'The secret code of Thomas is 7182. Q: What is the secret code of Thomas?\nA: 7'";
  const std::string common =
      "--prompt " + prompt + " --select 1,3 --answer 7,11 --tab explain --threads 1 --exit-after-frames 2";
  Result r = run(common + " --explain-step 5 --size 1600x1000 --export-all --export-dir " +
                     (dir / "exports").string() + " --screenshot " + (dir / "tab.png").string(),
                 dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(std::filesystem::file_size(dir / "tab.png") > 20000);
  for (int step = 1; step <= 6; ++step)
    CHECK(
        std::filesystem::exists(dir / "exports/explain" / ("explain-step-" + std::to_string(step) + ".png")));
  r = run(
      common + " --explain-step 3 --present --size 1920x1080 --screenshot " + (dir / "present.png").string(),
      dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load((dir / "present.png").c_str(), &w, &h, &n, 3);
  REQUIRE(px);
  CHECK(w == 1920);
  CHECK(h == 1080);
  // The slide fills most of the window: white background across its middle.
  int white = 0;
  for (int x = 200; x < 1720; x += 40) {
    const unsigned char* p = px + (static_cast<size_t>(700) * 1920 + static_cast<size_t>(x)) * 3;
    white += p[0] == 255 && p[1] == 255 && p[2] == 255;
  }
  CHECK(white > 20);
  stbi_image_free(px);
  // At 1280x800 (a classroom projector) the slide takes the window's width, the token strip is folded away
  // and no pointer dot sits in the screenshot (nothing of its red: 255, 20, 20).
  r = run(common + " --explain-step 5 --present --size 1280x800 --screenshot " + (dir / "p1280.png").string(),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  auto regions = layout_regions(r.out);
  REQUIRE(regions.count("slide"));
  CHECK(regions["slide"].w() >= 0.97f * 1280);
  CHECK(regions.count("tokens") == 0);
  px = stbi_load((dir / "p1280.png").c_str(), &w, &h, &n, 3);
  REQUIRE(px);
  int red = 0;
  for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i)
    red += px[3 * i] > 240 && px[3 * i + 1] < 40 && px[3 * i + 2] < 40;
  CHECK(red == 0);
  stbi_image_free(px);
  const std::pair<std::string, std::string> bad[] = {
      {"--explain-step 7 --screenshot x.png",
       "option --explain-step expects an integer from 1 to 6, got '7'"},
      {"--tab explained --screenshot x.png",
       "--view must be maps, query-row, models, lambda, noise, lab, outliers, explain, text or why (got 'explained')"},
  };
  expect_failures(bad, dir);
}

namespace {

// The headless run's layout report: "layout: NAME X0 Y0 X1 Y1 (WxH)" per region drawn.
void check_layout_clean(const std::string& out, int width, int height) {
  CHECK(out.find(" 0 outside or clipped, 0 texts cut") != std::string::npos);  // no window nor text cut
  CHECK(out.find("clips its contents") == std::string::npos);
  for (const auto& [name, r] : layout_regions(out)) {
    INFO(name << " " << r.x0 << "," << r.y0 << "-" << r.x1 << "," << r.y1 << " in " << width << "x"
              << height);
    CHECK(r.x0 >= 0);
    CHECK(r.x1 <= width + 0.5f);
    if (name.rfind("grid.", 0) == 0 || name.rfind("modelgrid.", 0) == 0)
      continue;  // the Model view's grids scroll down when they are taller
    CHECK(r.y0 >= 0);
    CHECK(r.y1 <= height + 0.5f);
  }
}

}  // namespace

TEST_CASE("gui layout: the maps fill the central area and the first screen puts Figure 1 beside them",
          "[gui][cli][layout]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guilayout");
  // The maps as the selected view at 1600x1000: four maps of at least 340 px a side; the grid (maps with
  // their axes and legends) spans 90 % of the central area's width, the map images alone 85 %.
  Result r = run("--view maps --size 1600x1000 --threads 1 --exit-after-frames 1 --screenshot " +
                     (dir / "maps.png").string(),
                 dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  check_layout_clean(r.out, 1600, 1000);
  auto regions = layout_regions(r.out);
  REQUIRE(regions.count("central"));
  const Region central = regions["central"];
  float left = 1e9f, right = 0;
  for (int i = 0; i < 4; ++i) {
    const std::string name = "map." + std::to_string(i);
    INFO(name);
    REQUIRE(regions.count(name));
    CHECK(regions[name].w() >= 340);
    CHECK(regions[name].h() >= 340);
    left = std::min(left, regions[name].x0);
    right = std::max(right, regions[name].x1);
  }
  CHECK(right - left >= 0.85f * central.w());
  REQUIRE(regions.count("maps.grid"));
  CHECK(regions["maps.grid"].w() >= 0.9f * central.w());
  CHECK(r.out.find("layout: hover") == std::string::npos);  // no stray hover in a headless screenshot
  // The first screen: Figure 1 beside the maps, a tall chart per model, the answer's share on it.
  r = run("--size 1600x1000 --threads 1 --exit-after-frames 1 --screenshot " + (dir / "first.png").string(),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("layout: view query-row beside the maps") != std::string::npos);
  check_layout_clean(r.out, 1600, 1000);
  regions = layout_regions(r.out);
  for (const char* chart : {"chart.0", "chart.1"}) {
    INFO(chart);
    REQUIRE(regions.count(chart));
    CHECK(regions[chart].h() >= 250);
    CHECK(regions[chart].w() >= 400);
  }
  REQUIRE(regions.count("map.3"));
  CHECK(regions["map.3"].x1 <= regions["chart.0"].x0);  // the maps at the left, the charts at the right
  // --hover puts the mouse over a cell of the first map: the tooltip's query and key are the ones asked.
  r = run("--view maps --hover 200,100 --size 1280x800 --threads 1 --exit-after-frames 2 --screenshot " +
              (dir / "hover.png").string(),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("layout: hover.0 query 200 key 100 ") != std::string::npos);
  const std::pair<std::string, std::string> bad[] = {
      {"--view tables --screenshot x.png",
       "--view must be maps, query-row, models, lambda, noise, lab, outliers, explain, text or why"},
      {"--view maps --tab lab --screenshot x.png", "give --view or --tab (the same), not both"},
      {"--split sideways --screenshot x.png", "--split must be off, below or beside"},
      {"--hover 3,5 --screenshot x.png", "--hover expects ROW,COL with 0 <= COL <= ROW"},
      {"--head-metric loud --screenshot x.png",
       "--head-metric must be maps, answer, noise, entropy, sink, previous-token, duplicate-token or induction"},
      {"--metric-rows all --screenshot x.png", "--metric-rows must be query or question"},
  };
  expect_failures(bad, dir);
}

TEST_CASE("gui layout: every view fits 1280x800 and 1920x1080 (lecture or not) and 3840x2160, no text cut",
          "[gui][cli][layout]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guiviews");
  const char* views[] = {"maps", "query-row", "models",  "lambda", "noise",
                         "lab",  "outliers",  "explain", "text",   "why"};
  for (const auto& [size, w, h, extra] :
       {std::tuple<const char*, int, int, const char*>{"1280x800", 1280, 800, ""},
        std::tuple<const char*, int, int, const char*>{"1920x1080", 1920, 1080, ""},
        std::tuple<const char*, int, int, const char*>{"1280x800", 1280, 800, " --lecture"},
        std::tuple<const char*, int, int, const char*>{"1920x1080", 1920, 1080, " --lecture"},
        std::tuple<const char*, int, int, const char*>{"3840x2160", 3840, 2160, " --font-scale 2"}}) {
    for (const char* view : views) {
      const Result r = run(std::string("--view ") + view + " --size " + size + extra +
                               " --head-metric entropy --threads 1 --exit-after-frames 1 --screenshot " +
                               (dir / (std::string(view) + ".png")).string(),
                           dir);
      INFO(view << " at " << size << extra << "\n" << r.out);
      REQUIRE(r.status == 0);
      CHECK(r.out.find(std::string("layout: view ") + view) != std::string::npos);
      check_layout_clean(r.out, w, h);
      auto regions = layout_regions(r.out);
      const std::string key = std::string("view.") + view;
      REQUIRE(regions.count(key));
      // Alone in the central area (all but Figure 1, which shares it with the maps): 60 % of the height
      // (lecture mode at 800 px: 55 %, its prompt, four token lines and status line being 26 px text).
      const float share = std::string(extra) == " --lecture" && h <= 800 ? 0.55f : 0.6f;
      if (std::string(view) != "query-row") CHECK(regions[key].h() >= share * static_cast<float>(h));
    }
  }
}

TEST_CASE(
    "gui layout: lecture mode folds the side panel and gives Figure 1 the area when the maps would be small",
    "[gui][cli][layout][lecture]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guilecture");
  // 1280x800 (a classroom projector): no side panel, Figure 1 alone, its charts across the window.
  Result r = run("--lecture --size 1280x800 --threads 1 --exit-after-frames 1 --screenshot " +
                     (dir / "l1280.png").string(),
                 dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  auto regions = layout_regions(r.out);
  CHECK(regions.count("lecture.side-folded") == 1);
  CHECK(regions.count("side") == 0);
  CHECK(regions.count("lecture.figure1-alone") == 1);
  CHECK(regions.count("map.0") == 0);
  REQUIRE(regions.count("chart.0"));
  CHECK(regions["chart.0"].w() >= 0.7f * 1280);
  // 1920x1080: the maps beside Figure 1 are at least 200 px a side, so they stay.
  r = run("--lecture --size 1920x1080 --threads 1 --exit-after-frames 1 --screenshot " +
              (dir / "l1920.png").string(),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  regions = layout_regions(r.out);
  CHECK(regions.count("lecture.figure1-alone") == 0);
  for (int i = 0; i < 4; ++i) {
    const std::string name = "map." + std::to_string(i);
    REQUIRE(regions.count(name));
    CHECK(std::min(regions[name].w(), regions[name].h()) >= 200);
  }
  // Without lecture mode the side panel stays at 1280x800.
  r = run("--size 1280x800 --threads 1 --exit-after-frames 1 --screenshot " + (dir / "n1280.png").string(),
          dir);
  REQUIRE(r.status == 0);
  CHECK(layout_regions(r.out).count("side") == 1);
}

TEST_CASE("gui layout: Figure 1 labels answer, query and heaviest keys at their bars, under each model card",
          "[gui][cli][layout][labels]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guilabels");
  for (const char* size : {"1280x800", "1920x1080"}) {
    const Result r = run(std::string("--size ") + size + " --threads 1 --exit-after-frames 1 --screenshot " +
                             (dir / "f.png").string(),
                         dir);
    INFO(size << "\n" << r.out);
    REQUIRE(r.status == 0);
    CHECK(r.out.find("model card 1: trained ") != std::string::npos);
    // The DIFF model's card says where it disagrees with the paper, beside its chart.
    CHECK(r.out.find("model card 0: trained here") != std::string::npos);
    CHECK(r.out.find("unlike the paper's DIFF") != std::string::npos);
    auto regions = layout_regions(r.out);
    for (int c = 0; c < 2; ++c) {
      const std::string chart = "chart." + std::to_string(c);
      REQUIRE(regions.count(chart));
      std::vector<Region> labels;
      for (int i = 0; regions.count(chart + ".label." + std::to_string(i)); ++i)
        labels.push_back(regions[chart + ".label." + std::to_string(i)]);
      // The answer, the query and at least three of the eight heaviest keys: the rest may sit side by side
      // (the bundled DIFF's first-screen head puts its heaviest keys on the last few tokens before the query,
      // where their labels would overlap, and are left out).
      CHECK(labels.size() >= 5);
      for (size_t i = 0; i < labels.size(); ++i) {
        CHECK(labels[i].x0 >= regions[chart].x0 - 0.5f);
        CHECK(labels[i].x1 <= regions[chart].x1 + 0.5f);
        for (size_t j = 0; j < i; ++j) {
          const bool apart = labels[i].x0 >= labels[j].x1 || labels[j].x0 >= labels[i].x1 ||
                             labels[i].y0 >= labels[j].y1 || labels[j].y0 >= labels[i].y1;
          CHECK(apart);
        }
      }
      // Each chart carries its model's own line (card.json), above the chart, the baseline's caveat included.
      REQUIRE(regions.count("card." + std::to_string(c)));
      CHECK(regions["card." + std::to_string(c)].y1 <= regions[chart].y0);
      // The shares sit on the title line's right end or under it, never over the chart's data.
      REQUIRE(regions.count(chart + ".shares"));
      CHECK(regions[chart + ".shares"].y1 <= regions[chart].y0);
    }
  }
}

TEST_CASE("gui layout: the Model view's grid fills 85 % of its height at 1920x1080", "[gui][cli][layout]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guimodelgrid");
  const Result r = run("--view models --size 1920x1080 --threads 1 --exit-after-frames 1 --screenshot " +
                           (dir / "m.png").string(),
                       dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  auto regions = layout_regions(r.out);
  REQUIRE(regions.count("view.models"));
  REQUIRE(regions.count("modelgrid.0"));
  REQUIRE(regions.count("modelgrid.1"));
  const Region v = regions["view.models"];
  const float bottom = std::max(regions["modelgrid.0"].y1, regions["modelgrid.1"].y1);
  CHECK(bottom - v.y0 >= 0.85f * v.h());
  CHECK(bottom <= v.y1 + 0.5f);
}

TEST_CASE("gui: --repeated starts on the repeated random tokens that difflens heads scores",
          "[gui][cli][heads]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guirepeated");
  const Result r =
      run("--repeated 12,3 --view models --head-metric induction --size 1280x800 --threads 1 "
          "--exit-after-frames 2 --screenshot " +
              (dir / "m.png").string(),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const Tokenizer tok = Tokenizer::sentencepiece(std::filesystem::path(DIFFLENS_SOURCE_DIR) /
                                                 "assets/models/diff-small/tokenizer.model");
  const RepeatedPrompt p = repeated_random_prompt(tok, 12, 3);
  std::string shown = p.text.substr(0, 120);
  for (char& c : shown)
    if (c == '\n') c = ' ';
  CHECK(r.out.find("prompt box: " + std::to_string(p.text.size()) + " bytes: " + shown) != std::string::npos);
  CHECK(r.out.find("; 25 tokens: both models") != std::string::npos);
  const auto regions = layout_regions(r.out);
  CHECK(regions.count("modelgrid.0") == 1);
  CHECK(regions.count("modelgrid.1") == 1);
  CHECK(r.out.find("0 outside or clipped, 0 texts cut") != std::string::npos);
  const std::pair<std::string, std::string> refused[] = {
      {"--repeated 12,3 --prompt hi --screenshot x.png", "--repeated makes the prompt"},
      {"--repeated 0,3 --screenshot x.png", "--repeated expects N,SEED with 1 <= N <= 1024"},
      {"--repeated 2000,3 --screenshot x.png", "--repeated expects N,SEED with 1 <= N <= 1024"},
  };
  expect_failures(refused, dir);
}

TEST_CASE("gui layout: without --size the window takes 90 % of the screen it opens on",
          "[gui][cli][layout]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  if (std::system("command -v xvfb-run > /dev/null 2>&1") != 0) test::skip("xvfb-run is not installed");
  test::ScratchDir dir("guifit");
  // A 1366x768 laptop screen of its own (no window manager: the work area is the whole screen).
  const Result r = run_with_prefix(
      "xvfb-run -a -s '-screen 0 1366x768x24 -nolisten tcp' ",
      "--view maps --threads 1 --exit-after-frames 1 --screenshot " + (dir / "fit.png").string(), dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("(1229x691)") != std::string::npos);
  check_layout_clean(r.out, 1229, 691);
}

TEST_CASE("gui layout: the view, split and side panel are remembered in the settings file",
          "[gui][cli][layout]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("guisettings");
  const std::string settings = (dir / "cfg" / "layout.ini").string();
  // Each run in its own block: a failure shows that run's output alone.
  {
    const Result r = run("--settings " + settings +
                             " --view lambda --split below --maps-height 0.3 --size 1280x800 "
                             "--threads 1 --exit-after-frames 1 --screenshot " +
                             (dir / "a.png").string(),
                         dir);
    INFO(r.out);
    REQUIRE(r.status == 0);
    CHECK(r.out.find("layout: view lambda below the maps") != std::string::npos);
    const std::string text = test::read_all(settings);
    INFO(text);
    CHECK(text.find("view=lambda\n") != std::string::npos);
    CHECK(text.find("split=query-row,lambda\n") != std::string::npos);
    CHECK(text.find("side_by_side=0\n") != std::string::npos);
    CHECK(text.find("split_fraction=0.3\n") != std::string::npos);
    CHECK(text.find("window=1280x800\n") != std::string::npos);
  }
  {
    // The next start opens where the last one was left.
    const Result r =
        run("--settings " + settings + " --size 1280x800 --threads 1 --exit-after-frames 1 --screenshot " +
                (dir / "b.png").string(),
            dir);
    INFO(r.out);
    REQUIRE(r.status == 0);
    CHECK(r.out.find("layout: view lambda below the maps") != std::string::npos);
    const auto regions = layout_regions(r.out);
    REQUIRE(regions.count("view.maps"));
    REQUIRE(regions.count("central"));
    CHECK(regions.at("view.maps").h() == Approx(0.3 * (regions.at("central").h() - 7)).margin(3));
  }
  // A settings file that is not one (binary junk) is ignored: the app opens with its defaults.
  test::write_all(dir / "junk.ini", "\x01\xff view=\x80 \n\n=\nsplit_fraction=NaN\nwindow=99999x1\n");
  const Result r = run("--settings " + (dir / "junk.ini").string() +
                           " --size 1280x800 --threads 1 --exit-after-frames 1 "
                           "--screenshot " +
                           (dir / "c.png").string(),
                       dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("layout: view query-row beside the maps") != std::string::npos);
}

TEST_CASE("cli: loss shows its progress and Ctrl-C ends it with the windows scored so far", "[cli][train]") {
  test::ScratchDir dir("lossint");
  // 81 windows of 1024 tokens per model take seconds, scored 8 at a time. SIGINT is sent once the progress
  // line shows the first 8, however slowly the binary starts (a sanitizer build under load takes over a
  // second to load the model): it lands in the first model's windows.
  const std::string log = (dir / "loss.log").string();
  const std::string script =
      std::string(DIFFLENS_EXE) +
      " loss --text-file " DIFFLENS_SOURCE_DIR "/assets/haystack.txt --window 1024 --threads 1 > '" + log +
      "' 2>&1 & pid=$!; i=0; while ! grep -q 'window 8/81' '" + log +
      "' && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; kill -INT $pid; wait $pid";
  const int raw = std::system(script.c_str());  // sh: $! is the background difflens
  const Result r{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, test::read_all(log)};
  INFO(r.out);
  CHECK(r.status == 130);
  CHECK(r.out.find("window 8/81") != std::string::npos);  // the progress line
  CHECK(r.out.find("(stopped by Ctrl-C after ") != std::string::npos);
  CHECK(r.out.find("stopped by Ctrl-C: the figures above cover the windows scored") != std::string::npos);
  CHECK(r.out.find("baseline-small") == std::string::npos);  // the second model is not started
}

TEST_CASE("cli: numbers are checked by kind and range with the flag named", "[cli][errors]") {
  test::ScratchDir dir("clinumbers");
  const std::string model = " --model " DIFFLENS_SOURCE_DIR "/assets/models/diff-small";
  const std::string trace = (dir / "t").string();
  const Result made = run("capture" + model + " --prompt 'The secret code' --out " + trace, dir);
  INFO(made.out);
  REQUIRE(made.status == 0);
  const std::pair<std::string, std::string> bad[] = {
      // Each ended with exit 3 "internal error: stod", or was accepted silently.
      {"render --trace " + trace + " --out x.png --clamp abc",
       "option --clamp expects a number from 1e-09 to 100, got 'abc'"},
      {"train --corpus c --out o --lr abc", "option --lr expects a number from 1e-08 to 10, got 'abc'"},
      {"train --corpus c --out o --episode-fraction 1.5",
       "option --episode-fraction expects a number from 0 to 1"},
      {"train --corpus c --out o --drill-fraction x", "option --drill-fraction expects a number from 0 to 1"},
      {"train --corpus c --out o --answer-weight -1",
       "option --answer-weight expects a number from 0 to 1000"},
      {"capture" + model + " --prompt hi --out o --top-k -5",
       "option --top-k expects an integer from 1 to 1000000, got '-5'"},
      {"capture" + model + " --prompt hi --out o --threads 0",
       "option --threads expects an integer from 1 to 4096, got '0'"},
      {"capture" + model + " --prompt hi --out o --threads -2",
       "option --threads expects an integer from 1 to 4096"},
      {"capture" + model + " --token-ids 1,,2 --out o", "--token-ids: an empty item between commas"},
      {"generate" + model + " --prompt hi --temperature warm",
       "option --temperature expects a number from 0 to 100"},
  };
  expect_failures(bad, dir);
}

TEST_CASE("cli: the unknown-command message and --help list the same commands", "[cli][errors]") {
  test::ScratchDir dir("clicommands");
  const Result help = run("--help", dir);
  REQUIRE(help.status == 0);
  // --help's "commands:" section (to its first blank line): each command starts a line, indented two spaces.
  std::set<std::string> documented;
  std::istringstream in(help.out.substr(help.out.find("\ncommands:\n") + 11));
  for (std::string line; std::getline(in, line) && !line.empty();)
    if (line.size() > 3 && line[0] == ' ' && line[1] == ' ' && line[2] != ' ' && line[2] != '-')
      documented.insert(line.substr(2, line.find(' ', 2) - 2));
  const Result r = run("frobnicate", dir);
  INFO(r.out);
  CHECK(r.status == 1);
  const size_t open = r.out.find("(commands: "), close = r.out.find(';', open);
  REQUIRE(open != std::string::npos);
  std::set<std::string> listed;
  std::istringstream names(r.out.substr(open + 11, close - open - 11));
  for (std::string name; std::getline(names, name, ',');)
    listed.insert(name.substr(name.find_first_not_of(' ')));
  CHECK(listed.count("loss") == 1);
  CHECK(listed == documented);
}

TEST_CASE(
    "gui layout: lecture slides at 1280x800 keep their point on screen: the Text view its answer, the Noise view its chart",
    "[gui][cli][layout][lecture]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("lectureslides");
  // The first screen's episode: the code at tokens [135, 139), the query on token 246, 250 lines of text
  // apart at lecture size. The pointer over the code's first token: its box is noted only when drawn.
  Result r =
      run("--size 1280x800 --lecture --view text --split off --text-heads layer --hover-token 135 "
          "--threads 1 --exit-after-frames 2 --screenshot " +
              (dir / "t.png").string(),
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  auto regions = layout_regions(r.out);
  REQUIRE(regions.count("text.0"));
  REQUIRE(regions.count("text.probe"));  // the code is in view, not scrolled away behind the query
  CHECK(regions["text.probe"].y0 >= regions["text.0"].y0);
  CHECK(regions["text.probe"].y1 <= regions["text.0"].y1);
  // The Noise view: its chart first, below the builder, at least 8 text lines tall, within the window.
  r = run(
      "--size 1280x800 --lecture --view noise --split off --threads 1 --exit-after-frames 2 --screenshot " +
          (dir / "n.png").string(),
      dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  regions = layout_regions(r.out);
  REQUIRE(regions.count("noise.chart"));
  CHECK(regions["noise.chart"].y1 <= 800 - 40);  // above the status line
  CHECK(regions["noise.chart"].h() >= 100);
  for (int s = 0; s < 2; ++s) {  // the key sits above the plot, not over its bars
    INFO("noise.key." << s);
    REQUIRE(regions.count("noise.key." + std::to_string(s)));
    CHECK(regions["noise.key." + std::to_string(s)].y1 <= regions["noise.chart"].y0 + 0.5f);
  }
}

TEST_CASE("gui layout: lecture mode puts Figure 1's bars on one y scale unless --one-y-scale says otherwise",
          "[gui][cli][layout][lecture]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("oneyscale");
  // What the run left is in its settings file (shared_rows_scale): four starts, each from no settings.
  const std::pair<std::string, const char*> cases[] = {
      {"", "shared_rows_scale=0\n"},                             // the default outside lecture mode
      {"--lecture", "shared_rows_scale=1\n"},                    // lecture mode shares it
      {"--lecture --one-y-scale off", "shared_rows_scale=0\n"},  // unless told not to
      {"--one-y-scale on", "shared_rows_scale=1\n"},
  };
  int k = 0;
  for (const auto& [options, want] : cases) {
    const std::string settings = (dir / ("s" + std::to_string(k++) + ".ini")).string();
    const Result r =
        run(options + " --settings " + settings +
                " --size 1280x800 --threads 1 --exit-after-frames 1 --screenshot " + (dir / "a.png").string(),
            dir);
    INFO(options << "\n" << r.out);
    REQUIRE(r.status == 0);
    CHECK(test::read_all(settings).find(want) != std::string::npos);
  }
  // A choice made in the session (here a script's) is never undone by lecture mode turning on again.
  test::write_all(dir / "s.play", "lecture on\none-y-scale off\nlecture off\nlecture on\nwait\nquit\n");
  {
    const std::string settings = (dir / "played.ini").string();
    const Result r = run(
        "--play " + (dir / "s.play").string() + " --settings " + settings + " --size 1280x800 --threads 1",
        dir);
    INFO(r.out);
    REQUIRE(r.status == 0);
    CHECK(test::read_all(settings).find("shared_rows_scale=0\n") != std::string::npos);
  }
  const std::pair<std::string, std::string> bad[] = {
      {"--one-y-scale maybe --screenshot x.png", "--one-y-scale"}};
  expect_failures(bad, dir);
}

TEST_CASE(
    "gui figures: every view exports PNG and SVG at the size asked, and chromium draws each SVG as its PNG",
    "[gui][figure]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  std::string chromium;
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (std::filesystem::exists(p)) chromium = p;
  if (chromium.empty()) {
    if (std::getenv("CI")) FAIL("chromium is not installed, though scripts/install-deps installs it");
    test::skip("chromium is not installed (scripts/install-deps installs it)");
  }
  test::ScratchDir dir("figures");
  const std::string out = (dir / "out").string();
  test::write_all(dir / "f.play",
                  "size 1280x800\n"
                  "needle 256,50,1,1,1\n"
                  "wait\n"
                  "export folder " +
                      out +
                      "\n"
                      "view query-row\nexport figure 1200x700\n"
                      "view lambda\nexport figure\n"
                      "view noise\nexport figure\n"
                      "view outliers\nexport figure\n"
                      "view models\nexport figure\n"
                      "view query-row\nexport figure 900x600 18\n"  // a second one: a new name, larger text
                      "view maps\nexport figure\n"                  // the Maps view: its head views
                      "view text\nexport figure\n"
                      "view why\nwait\nexport figure\n"  // the lens chart and each model's shares
                      "wait\n");
  const Result r = run("--play " + (dir / "f.play").string() + " --play-exit --threads 1", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("figure export failed: this view (Text") !=
        std::string::npos);  // its own export: the page
  const std::string figure1 = out + "/diff-small-baseline-small-L1-query246-figure1";
  // The first screen's baseline head (the status line names it): the Maps view exports that head's views.
  std::smatch head;
  REQUIRE(std::regex_search(r.out, head, std::regex("baseline-small head ([0-9]+)")));
  struct Expect {
    std::string base;
    int w, h;  // 0: as laid out (the Model view's grid)
  };
  const std::vector<Expect> figures = {
      {figure1, 1200, 700},
      {figure1 + "-2", 900, 600},
      {out + "/diff-small-baseline-small-lambda", 1200, 700},
      {out + "/diff-small-baseline-small-noise", 1200, 700},
      {out + "/diff-small-baseline-small-outliers-logits", 1200, 700},
      {out + "/diff-small-baseline-small-outliers-hidden", 1200, 700},
      {out + "/diff-small-baseline-small-models", 0, 0},
      {out + "/diff-small-L1-H0-headview", 0, 0},
      {out + "/baseline-small-L1-H" + head[1].str() + "-headview", 0, 0},
      {out + "/diff-small-baseline-small-why-lens", 900, 600},  // the last size asked
      {out + "/diff-small-why-shares", 0, 0},
      {out + "/baseline-small-why-shares", 0, 0}};
  for (const Expect& e : figures) {
    INFO(e.base);
    int w = 0, h = 0, n = 0;
    unsigned char* png = stbi_load((e.base + ".png").c_str(), &w, &h, &n, 3);
    REQUIRE(png);
    if (e.w > 0) {
      CHECK(w == e.w);
      CHECK(h == e.h);
    }
    const std::string svg = test::read_all(e.base + ".svg");
    REQUIRE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\"") != std::string::npos);
    CHECK(svg.find("width=\"" + std::to_string(w) + "\"") != std::string::npos);
    // Chromium draws the SVG at its size: the same picture as the PNG, pixel for pixel but for the text's
    // anti-aliasing (two rasterisers of one font): under 3 % of the pixels differ by more than 64 levels.
    const std::string shot = e.base + "-chromium.png";
    const int status = std::system(
        ("timeout 120 " + chromium +
         " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
         "--hide-scrollbars --user-data-dir=" +
         (dir / "profile").string() + " --window-size=" + std::to_string(w) + "," + std::to_string(h) +
         " --screenshot=" + shot + " 'file://" + e.base + ".svg' > /dev/null 2>&1")
            .c_str());
    REQUIRE(status == 0);
    int cw = 0, ch = 0;
    unsigned char* drawn = stbi_load(shot.c_str(), &cw, &ch, &n, 3);
    REQUIRE(drawn);
    REQUIRE(cw == w);
    REQUIRE(ch == h);
    size_t differ = 0, inked = 0;
    for (size_t i = 0; i < static_cast<size_t>(w) * static_cast<size_t>(h); ++i) {
      int d = 0;
      for (int c = 0; c < 3; ++c) d = std::max(d, std::abs(png[i * 3 + c] - drawn[i * 3 + c]));
      differ += d > 64;
      inked += png[i * 3] < 200 || png[i * 3 + 1] < 200 || png[i * 3 + 2] < 200;
    }
    stbi_image_free(png);
    stbi_image_free(drawn);
    CHECK(inked > static_cast<size_t>(w) * static_cast<size_t>(h) / 50);  // a figure, not a blank page
    CHECK(differ < static_cast<size_t>(w) * static_cast<size_t>(h) * 3 / 100);
  }
}

TEST_CASE("cli: --intervene changes capture, generate and needle runs, and a bad spec is refused by name",
          "[cli][interventions]") {
  test::ScratchDir dir("cli-intervene");
  const std::string models = (dir / "models").string();
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 2 --heads 2 --vocab 300 --seed 3", dir)
              .status == 0);
  const std::string prompt = " --prompt 'Mira is 4821. Mira is' --threads 1";
  // capture: the bundle records what ran; the maps equal the model's own capture under the same
  // interventions.
  Result r = run("capture --model " + models + "/diff" + prompt + " --out " + (dir / "t").string() +
                     " --intervene lambda:1=0 --intervene knockout:0=not-answer --answer 9,13 --query 16",
                 dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("interventions  lambda:1=0; knockout:0=not-answer (as run: knockout:0=drop:9-13@16-)") !=
        std::string::npos);
  CHECK(r.out.find("L1=0.0000") != std::string::npos);
  const Trace t = read_trace_bundle(dir / "t");
  REQUIRE(t.interventions.size() == 2);
  const Model d = Model::load(models + "/diff");
  CaptureOptions o;
  PromptMarks marks;
  marks.answer = {9, 13};
  marks.query = 16;
  const std::vector<std::string> specs = {"lambda:1=0", "knockout:0=not-answer"};
  o.interventions = resolve_interventions(specs, d.config(), marks, t.length());
  CHECK(d.capture(t.token_ids, o).layers[1].a.data == t.layers[1].a.data);
  for (int64_t h = 0; h < 2; ++h)  // the query's row sees none of the answer's keys in layer 0
    for (int64_t j = 9; j < 13; ++j)
      CHECK(t.layers[0].a1.data[static_cast<size_t>((h * t.length() + 16) * t.length() + j)] == 0.0f);

  // Refusals name the spec and the part that is wrong; nothing is written.
  const std::string capture =
      "capture --model " + models + "/baseline" + prompt + " --out " + (dir / "u").string();
  for (const auto& [spec, why] : std::vector<std::pair<std::string, std::string>>{
           {"lambda:0=0", "layer 0 of this baseline model has no λ"},
           {"ablate:5:0", "layer 5 is out of range: this model has 2 layers (0-1)"},
           {"knockout=only-answer", "only-answer needs the answer's tokens"},
           {"squash:1=0", "unknown kind 'squash'"}}) {
    r = run(capture + " --intervene '" + spec + "'", dir);
    INFO(r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find(why) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir / "u" / "trace.json"));
  }

  // generate: the interventions hold for every written token; it says so on stderr.
  r = run("generate --model " + models + "/diff" + prompt +
              " --tokens 4 --temperature 0 --intervene ablate:1:0=mean",
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("interventions  ablate:1:0=mean") != std::string::npos);

  // needle: each model as trained, then under the interventions, as two rows of the report.
  r = run("needle --models " + models + "/diff --lengths 128 --depths 50 --seeds 1 --threads 1 --out " +
              (dir / "n").string() + " --intervene lambda=0",
          dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const std::string tables = test::read_all(dir / "n" / "tables.md"), name = d.config().name;
  CHECK(tables.find("| " + name + " | ") != std::string::npos);
  CHECK(tables.find("| " + name + " under lambda=0 | ") != std::string::npos);
  // Key ranges are resolved against each episode's prompt: keys 5-10 lie inside every 128-token episode (a
  // 2-token stand-in refused them); keys beyond the shortest length are refused naming it.
  r = run("needle --models " + models + "/diff --lengths 128 --depths 50 --seeds 1 --threads 1 --out " +
              (dir / "n2").string() + " --intervene knockout=drop:5-10",
          dir);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(test::read_all(dir / "n2" / "tables.md").find(" under knockout=drop:5-10 | ") != std::string::npos);
  r = run("needle --models " + models + "/diff --lengths 128 --depths 50 --seeds 1 --threads 1 --out " +
              (dir / "n3").string() + " --intervene knockout=drop:200-210",
          dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("128-token prompt") != std::string::npos);
}

TEST_CASE("cli: lens writes the logit lens and the direct shares, which add up to the logit", "[cli][lens]") {
  test::ScratchDir dir("cli-lens");
  const std::string models = (dir / "models").string();
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 2 --heads 2 --vocab 300 --seed 3", dir)
              .status == 0);
  const std::string lens = (dir / "lens.csv").string(), shares = (dir / "shares.csv").string();
  Result r = run("lens --models " + models + "/diff," + models +
                     "/baseline --prompt 'Mira is 4821. Mira is' --top-k 3" + " --query 16 --out " + lens +
                     " --attribution " + shares + " --intervene ablate:0:1",
                 dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("lens at the query: L0 ") != std::string::npos);
  CHECK(r.out.find("interventions  ablate:0:1") != std::string::npos);
  // 2 models x 2 layers x 22 positions, one header.
  const std::string csv = test::read_all(lens);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 2 * 2 * 22);
  CHECK(
      csv.rfind(
          "model,layer,position,token,target,target_text,target_probability,target_rank,top1,p1,top2,p2,top3,p3\n",
          0) == 0);
  // Per model, the embedding's, heads' and MLPs' shares add up to the logit row.
  std::istringstream in(test::read_all(shares));
  std::string line;
  std::getline(in, line);
  std::map<std::string, double> sum, logit;
  int ablated = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> f(1);  // fields; a quoted one ("diff (untrained, seed 3)") keeps its commas
    bool quoted = false;
    for (char ch : line) {
      if (ch == '"')
        quoted = !quoted;
      else if (ch == ',' && !quoted)
        f.emplace_back();
      else
        f.back() += ch;
    }
    REQUIRE(f.size() >= 5);
    if (f[1] == "logit")
      logit[f[0]] = std::stod(f[4]);
    else
      sum[f[0]] += std::stod(f[4]);
    if (f[1] == "head" && f[2] == "0" && f[3] == "1") ablated += std::stod(f[4]) == 0.0;
  }
  REQUIRE(logit.size() == 2);
  for (const auto& [model, l] : logit) CHECK(std::fabs(sum[model] - l) < 1e-4 * std::max(1.0, std::fabs(l)));
  CHECK(ablated == 2);
  // The same prompt given as its token ids (a kept needle episode's episode.json holds them): the same CSV.
  {
    const Model diff = Model::load(models + "/diff");
    std::string ids;
    for (int64_t id : diff.tokenizer().encode("Mira is 4821. Mira is", true).ids)
      ids += (ids.empty() ? "" : ",") + std::to_string(id);
    const std::string by_ids = (dir / "lens-ids.csv").string();
    r = run("lens --models " + models + "/diff," + models + "/baseline --token-ids " + ids +
                " --top-k 3 --query 16 --out " + by_ids + " --intervene ablate:0:1",
            dir);
    INFO(r.out);
    REQUIRE(r.status == 0);
    CHECK(test::read_all(by_ids) == csv);
    r = run("lens --models " + models + "/diff --token-ids 1,2 --prompt hi --out " + by_ids, dir);
    CHECK(r.status == 1);
    CHECK(r.out.find("give exactly one of --prompt, --prompt-file, --token-ids") != std::string::npos);
  }
  // Refusals before any work.
  r = run("lens --models " + models + "/diff --prompt hi --out " + (dir / "x.txt").string(), dir);
  CHECK(r.status == 1);
  CHECK(r.out.find(".csv") != std::string::npos);
  r = run("lens --models " + models + "/diff --prompt hi --query 9 --out " + lens, dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("--query 9 is beyond the 3-token prompt") != std::string::npos);
}

TEST_CASE("cli: patch writes every site's normalised logit difference, as the core computes it",
          "[cli][patch]") {
  test::ScratchDir dir("cli-patch");
  const std::string models = (dir / "models").string();
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 2 --heads 2 --vocab 300 --seed 3", dir)
              .status == 0);
  const std::string out = (dir / "patch.csv").string();
  const std::string clean = "Mira is 4821. Omar is 7310. Mira is",
                    corrupt = "Mira is 9056. Omar is 7310. Mira is";
  Result r = run("patch --models " + models + "/diff," + models + "/baseline --prompt '" + clean +
                     "' --corrupt '" + corrupt + "' --target ' 4821' --alternative ' 9056' --out " + out,
                 dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("lambda: left out (DIFF's lambda is a weight of the layer") != std::string::npos);
  CHECK(r.out.find("a2: left out (this model has none)") != std::string::npos);
  const std::string csv = test::read_all(out);
  REQUIRE(csv.rfind("model,direction,component,layer,head,positions,logit_diff,normalized\n", 0) == 0);
  // The same pair in the core: the prompts and answers read as the command read them.
  const Model diff = Model::load(models + "/diff");
  BatchItem c, k;
  c.prompt = clean;
  c.answer = " 4821";
  k.prompt = corrupt;
  k.answer = " 9056";
  const PatchPair pair = patch_pair(diff, c, k);
  const int64_t T = static_cast<int64_t>(pair.clean.size());
  PatchOptions o;
  o.target = pair.target;
  o.alternative = pair.alternative;
  const PatchReport core =
      diff.patch(pair.clean, pair.corrupt,
                 {{{PatchComponent::Head, 1, 0, {}}}, {{PatchComponent::Resid, 0, -1, {2}}}}, o);
  int diff_rows = 0;
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    const size_t comma = line.find(',');
    const std::string model = line.substr(0, comma);
    if (model.find("diff") == std::string::npos) continue;
    ++diff_rows;
    auto field = [&](int i) {
      size_t b = 0;
      for (int j = 0; j < i; ++j) b = line.find(',', b) + 1;
      return line.substr(b, line.find(',', b) - b);
    };
    if (field(2) == "head" && field(3) == "1" && field(4) == "0")
      CHECK(std::fabs(std::stod(field(7)) - core.results[0].normalized) < 1e-5);
    // The residual stream before the first token the prompts differ in (position 4 with BOS) changes nothing.
    if (field(2) == "resid" && std::stoi(field(5)) < 3) CHECK(std::stod(field(7)) == 0.0);
  }
  CHECK(core.results[1].normalized == 0.0);
  // DIFF: head, a1, a2 for 2 layers x 2 heads, 2 MLPs, the residual at 2 layers x T positions.
  CHECK(diff_rows == 3 * 2 * 2 + 2 + 2 * T);
  // Refusals: prompts of different lengths, one answer without the other.
  r = run("patch --models " + models + "/diff --prompt '" + clean +
              "' --corrupt 'Mira is 90561. Omar is 7310. Mira is' --out " + out,
          dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("patching copies position by position") != std::string::npos);
  r = run("patch --models " + models + "/diff --prompt '" + clean + "' --corrupt '" + corrupt +
              "' --target 4 --out " + out,
          dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("give both --target and --alternative") != std::string::npos);
  r = run("patch --models " + models + "/diff --prompt '" + clean + "' --corrupt '" + corrupt +
              "' --components attn --out " + out,
          dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("one of head, a1, a2, lambda, mlp, resid") != std::string::npos);
}

TEST_CASE("hostile: endless and huge inputs are refused at a limit, failed writes end non-zero",
          "[cli][hostile]") {
  test::ScratchDir dir("cli-hostile");
  const std::string tok = DIFFLENS_SOURCE_DIR "/assets/models/diff-small/tokenizer.model";
  // A device that never ends: read up to the limit, then refused by name (it was read until memory ran out).
  for (const auto& [args, what] : std::vector<std::pair<std::string, std::string>>{
           {"tokenize --tokenizer " + tok + " --input /dev/zero",
            "the input file is over the limit of 1.0 GB"},
           {"needle --models " DIFFLENS_SOURCE_DIR
            "/assets/models/diff-small --haystack /dev/zero --lengths 64 "
            "--seeds 1 --out " +
                (dir / "n").string(),
            "the haystack text is over the limit of 1.0 GB"},
           {"--play /dev/zero", "the play script is over the limit of 16 MB"},
           {"--play " + dir.path().string(), "is a folder, not a play script"}}) {
    const Result r = run(args, dir);
    INFO(args << "\n" << r.out);
    CHECK(r.status == 1);
    CHECK_THAT(r.out, Catch::Contains(what));
    CHECK_THAT(r.out, !Catch::Contains("internal error"));
  }
  // Standard output that cannot be written (a full disk): a message and status 1, not a silent 0.
  const std::string log = (dir / "full.log").string();
  const int raw = std::system((std::string(DIFFLENS_EXE) + " tokenize --tokenizer " + tok +
                               " --text hello > /dev/full 2> '" + log + "'")
                                  .c_str());
  INFO(test::read_all(log));
  CHECK((WIFEXITED(raw) ? WEXITSTATUS(raw) : -1) == 1);
  CHECK_THAT(test::read_all(log), Catch::Contains("writing to standard output failed"));
  // heads: the same for its --out file.
  const Result heads = run(
      "heads --prompt 'The code is 12 12' --threads 1 --out " + (dir / "h" / "x" / "h.csv").string(), dir);
  INFO(heads.out);
  CHECK(heads.status == 0);
  CHECK(std::filesystem::exists(dir / "h" / "x" / "h.csv"));
  // lens: an --out folder that does not exist yet is made (the path was checked before the run).
  const Result lens =
      run("lens --prompt 'The code is 12' --threads 1 --out " + (dir / "new" / "a.csv").string(), dir);
  INFO(lens.out);
  CHECK(lens.status == 0);
  CHECK(std::filesystem::exists(dir / "new" / "a.csv"));
}
