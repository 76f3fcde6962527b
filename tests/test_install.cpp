// DiffLens installed as a user installs it: `cmake --install` into a temporary prefix that is then moved
// elsewhere, and the Debian package unpacked with dpkg-deb -x (no root, nothing installed on the machine);
// each runs --version, a capture with its own bundled model and (with a display) a headless screenshot.
// Also: the version line, the manual page against the option tables, the desktop entry.
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include "app/cli/cli.h"
#include "app/cli/commands.h"
#include "app/cli/man_page.h"
#include "app/cli/options.h"
#include "app/cli/paths.h"
#include "app/common/keys.h"
#include "tests/helpers.h"

using namespace difflens;
namespace fs = std::filesystem;

namespace {

struct Run {
  int status;
  std::string out;
};

Run sh(const std::string& command, const test::ScratchDir& dir) {
  const std::string log = (dir / "sh.log").string();
  const int raw = std::system((command + " > '" + log + "' 2>&1").c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, test::read_all(log)};
}

bool have(const std::string& program) {
  return std::system(("command -v " + program + " > /dev/null 2>&1").c_str()) == 0;
}

// Every file under `root`, relative to it, sorted.
std::set<std::string> files_under(const fs::path& root) {
  std::set<std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it)
    if (!it->is_directory()) out.insert(fs::relative(it->path(), root).string());
  return out;
}

// This build has the desktop app (DIFFLENS_GUI=ON).
bool gui_build() {
#ifdef DIFFLENS_GUI
  return true;
#else
  return false;
#endif
}

// What an installed tree under `prefix` must do, wherever it lies.
void check_installed(const fs::path& prefix, const test::ScratchDir& dir) {
  const std::string exe = (prefix / "bin" / "difflens").string();
  Run r = sh("'" + exe + "' --version", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.rfind("DiffLens 0.", 0) == 0);
  CHECK(r.out.find("LibTorch ") != std::string::npos);
  // Its own SentencePiece module, not the build tree's.
  CHECK(r.out.find("SentencePiece module " +
                   fs::weakly_canonical(prefix / "lib/difflens/libdifflens_spm.so").string()) !=
        std::string::npos);
  r = sh("'" + exe + "' capture --model '" + (prefix / "share/difflens/models/diff-small").string() +
             "' --prompt 'The secret code of Mira is 4821. What is the code of Mira?' --out '" +
             (dir / "trace").string() + "'",
         dir);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(fs::exists(dir / "trace" / "trace.json"));
  // The bundled pair by default (needle uses both, and the haystack): found under the moved prefix.
  r = sh("'" + exe + "' needle --lengths 128 --depths 50 --needles 1 --queried 1 --seeds 1 --out '" +
             (dir / "needle").string() + "'",
         dir);
  INFO(r.out);
  CHECK(r.status == 0);
  if (std::getenv("DISPLAY") && gui_build()) {
    r = sh("'" + exe + "' --size 640x400 --exit-after-frames 2 --screenshot '" + (dir / "shot.png").string() +
               "'",
           dir);
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(r.out.find("diff-small head") != std::string::npos);  // the bundled pair ran
    CHECK(fs::file_size(dir / "shot.png") > 10000);
  }
}

}  // namespace

TEST_CASE("install: cmake --install into a prefix that is then moved still finds models, module and data",
          "[install]") {
  test::ScratchDir dir("install");
  const fs::path first = dir / "first", moved = dir / "elsewhere" / "opt";
  Run r =
      sh("'" DIFFLENS_CMAKE "' --install '" DIFFLENS_BINARY_DIR "' --prefix '" + first.string() + "'", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  // Exactly these, nothing else (no headers, libraries or test binaries).
  const std::set<std::string> files = files_under(first);
  std::set<std::string> expected = {"bin/difflens",
                                    "lib/difflens/difflens",
                                    "lib/difflens/libdifflens_spm.so",
                                    "share/applications/difflens.desktop",
                                    "share/icons/hicolor/48x48/apps/difflens.png",
                                    "share/icons/hicolor/256x256/apps/difflens.png",
                                    "share/icons/hicolor/scalable/apps/difflens.svg",
                                    "share/man/man1/difflens.1.gz",
                                    "share/doc/difflens/copyright",
                                    "share/doc/difflens/changelog.gz",
                                    "share/doc/difflens/play.md",
                                    "share/difflens/haystack.txt",
                                    "share/difflens/needle-story.play"};
  for (const std::string& f : files) {
    INFO(f);
    CHECK((expected.count(f) || f.rfind("share/difflens/models/", 0) == 0));
  }
  for (const std::string& f : expected) {
    INFO(f);
    CHECK(files.count(f));
  }
  for (const char* model : {"diff-small", "diff-v2-small", "baseline-small"})
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.model"}) {
      INFO(model << "/" << f);
      CHECK(files.count(std::string("share/difflens/models/") + model + "/" + f));
    }
  CHECK(files.count("share/difflens/models/train-small.json"));
  CHECK(files.count("share/difflens/models/retrieval_curves.png"));  // the models' README.md shows it
  fs::create_directories(moved.parent_path());
  fs::rename(first, moved);
  check_installed(moved, dir);

  // Without its data the binary says every place it looked in; DIFFLENS_DATA_DIR is looked in first.
  fs::rename(moved / "share" / "difflens", dir / "data");
  const std::string exe = (moved / "bin" / "difflens").string();
  r = sh("'" + exe + "' needle --lengths 128 --seeds 1 --out '" + (dir / "n2").string() + "'", dir);
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK(r.out.find("the bundled models/diff-small was not found; looked in:") != std::string::npos);
  CHECK(r.out.find((moved / "share" / "difflens" / "models" / "diff-small").string()) != std::string::npos);
  r = sh("DIFFLENS_DATA_DIR='" + (dir / "nowhere").string() + "' '" + exe +
             "' needle --lengths 128 --seeds 1 --out '" + (dir / "n3").string() + "'",
         dir);
  INFO(r.out);
  CHECK(r.out.find((dir / "nowhere" / "models" / "diff-small").string()) != std::string::npos);
  r = sh("DIFFLENS_DATA_DIR='" + (dir / "data").string() + "' '" + exe +
             "' needle --lengths 128 --depths 50 --needles 1 --queried 1 --seeds 1 --out '" +
             (dir / "n4").string() + "'",
         dir);
  INFO(r.out);
  CHECK(r.status == 0);
}

TEST_CASE("install: the Debian package unpacked with dpkg-deb -x runs from there", "[install][package]") {
  if (!have("dpkg-deb") || !have("dpkg-shlibdeps"))
    test::skip("no dpkg-deb or dpkg-shlibdeps (Debian's dpkg-dev) to build and unpack the package with");
  test::ScratchDir dir("package");
  Run r = sh(
      "cd '" DIFFLENS_BINARY_DIR "' && '" DIFFLENS_CPACK "' -G DEB -B '" + (dir / "deb").string() + "'", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  fs::path deb;
  for (const auto& e : fs::directory_iterator(dir / "deb"))
    if (e.path().extension() == ".deb") deb = e.path();
  REQUIRE(!deb.empty());
  CHECK(deb.filename().string().rfind("difflens_0.", 0) == 0);
  CHECK(deb.filename().string().find("_amd64.deb") != std::string::npos);
  r = sh("dpkg-deb -f '" + deb.string() + "' Depends", dir);
  INFO(r.out);
  // Run-time packages found by dpkg-shlibdeps, not -dev ones.
  CHECK(r.out.find("libtorch") != std::string::npos);
  if (gui_build()) CHECK(r.out.find("libglfw3") != std::string::npos);  // a headless build links no GLFW
  CHECK(r.out.find("libopenblas0-openmp") != std::string::npos);
  CHECK(r.out.find("-dev") == std::string::npos);
  r = sh("dpkg-deb -x '" + deb.string() + "' '" + (dir / "root").string() + "'", dir);
  REQUIRE(r.status == 0);
  check_installed(dir / "root" / "usr", dir);
  if (have("lintian")) {
    // Errors only: the warnings left are reported in docs/development.md, not failed on.
    r = sh("lintian --tag-display-limit 0 '" + deb.string() + "' 2>/dev/null | grep '^E:' || true", dir);
    INFO(r.out);
    CHECK(r.out.empty());
  }
}

TEST_CASE("install: the desktop entry passes desktop-file-validate and opens the icon the build installs",
          "[install]") {
  test::ScratchDir dir("desktop");
  const std::string entry = test::read_all(DIFFLENS_SOURCE_DIR "/app/difflens.desktop");
  CHECK(entry.find("\nExec=difflens\n") != std::string::npos);
  CHECK(entry.find("\nIcon=difflens\n") != std::string::npos);
  CHECK(entry.find("\nStartupWMClass=difflens\n") != std::string::npos);  // the window's X11 class
  if (!have("desktop-file-validate")) test::skip("no desktop-file-validate (Debian's desktop-file-utils)");
  const Run r = sh("desktop-file-validate '" DIFFLENS_SOURCE_DIR "/app/difflens.desktop'", dir);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.empty());
}

TEST_CASE(
    "version: difflens --version and difflens version print one line: version, commit, LibTorch, CPU, GPUs",
    "[install][cli]") {
  test::ScratchDir dir("version");
  const Run a = sh("'" DIFFLENS_EXE "' --version", dir), b = sh("'" DIFFLENS_EXE "' version", dir);
  INFO(a.out);
  REQUIRE(a.status == 0);
  CHECK(a.out == b.out);
  CHECK(std::count(a.out.begin(), a.out.end(), '\n') == 1);
  CHECK(a.out.rfind("DiffLens 0.1.0 (commit ", 0) == 0);
  CHECK(a.out.find(", LibTorch ") != std::string::npos);
  CHECK(a.out.find(", CPU ") != std::string::npos);
  CHECK(a.out.find(", CUDA: ") != std::string::npos);
  CHECK(a.out.find("libdifflens_spm.so") != std::string::npos);
}

namespace {

// The shared libraries an ELF file names (DT_NEEDED), as readelf prints them.
std::string needed_of(const std::string& binary, const test::ScratchDir& dir) {
  const Run r = sh("readelf -d '" + binary + "' | grep NEEDED", dir);
  REQUIRE(r.status == 0);
  return r.out;
}

}  // namespace

TEST_CASE("launcher: bin/difflens prints help, man and version as the main program does, without LibTorch",
          "[install][cli]") {
  test::ScratchDir dir("launcher");
  // The launcher names no LibTorch (nor BLAS); the main program does.
  const std::string launcher = needed_of(DIFFLENS_EXE, dir), main_program = needed_of(DIFFLENS_MAIN_EXE, dir);
  INFO(launcher);
  CHECK(launcher.find("libtorch") == std::string::npos);
  CHECK(launcher.find("libc10") == std::string::npos);
  CHECK(launcher.find("blas") == std::string::npos);
  CHECK(main_program.find("libtorch") != std::string::npos);
  // Every text it answers itself is the main program's, byte for byte, with the same status: the overview,
  // each command's usage (asked one way each, and every way for one: the main program's start costs ~0.4 s
  // a run), the manual page, the version line and the mistakes it leaves to the main program. Under
  // `taskset -c 0` the --threads default it fills in says 1 core, as the main program's does.
  std::vector<std::string> asks = {
      "--help",    "-h",        "help",    "--size 640x400 --help", "man",
      "version",   "--version", "-V",      "help nosuch",           "nosuch --help",
      "man --out", "help lens", "-h lens", "lens --out x -h"};
  for (const cli::Command& c : cli::all_commands()) asks.push_back(c.name + " --help");
  if (have("taskset"))
    for (const char* args : {"capture --help", "--help"}) asks.push_back(std::string("taskset -c 0 ") + args);
  for (const std::string& ask : asks) {
    const bool pinned = ask.rfind("taskset", 0) == 0;
    const std::string prefix = pinned ? "taskset -c 0 " : "", args = pinned ? ask.substr(13) : ask;
    const Run a = sh(prefix + "'" DIFFLENS_EXE "' " + args, dir),
              b = sh(prefix + "'" DIFFLENS_MAIN_EXE "' " + args, dir);
    INFO(ask << "\nlauncher:\n" << a.out.substr(0, 600) << "\nmain program:\n" << b.out.substr(0, 600));
    CHECK(a.status == b.status);
    CHECK(a.out == b.out);
    if (pinned && args == "capture --help")
      CHECK(a.out.find("CPU threads (default: every core, 1 here)") != std::string::npos);
  }
  CHECK(asks.size() >= 35);
  // The texts' escaping, by hand: a line a source line; quotes, backslashes, '?' (no trigraph) and bytes
  // outside printable ASCII as three octal digits, so that a digit after one cannot extend it.
  CHECK(cli::cpp_literal("") == "\"\"");
  CHECK(cli::cpp_literal("a\"b\\c?\?=\n") == "\"a\\042b\\134c\\077\\077=\\n\"");
  CHECK(cli::cpp_literal("x\ny") == "\"x\\n\"\n    \"y\"");
  CHECK(cli::cpp_literal("\x1e"
                         "1 \xc3\xa9") == "\"\\0361 \\303\\251\"");
  // A launcher whose main program is missing says so and where it looked; what it prints itself still works.
  fs::create_directories(dir / "prefix" / "bin");
  fs::copy_file(DIFFLENS_EXE, dir / "prefix" / "bin" / "difflens");
  const std::string alone = (dir / "prefix" / "bin" / "difflens").string();
  Run r = sh("'" + alone + "' capture --prompt hi --out x", dir);
  INFO(r.out);
  CHECK(r.status == 127);
  CHECK(r.out == "difflens: cannot run the main program " +
                     (dir / "prefix" / "lib" / "difflens" / "difflens").string() +
                     ": No such file or directory (DiffLens is installed in part: install it again)\n");
  r = sh("'" + alone + "' capture --help", dir);
  CHECK(r.status == 0);
  CHECK(r.out.rfind("usage: difflens capture", 0) == 0);
  // A full standard output is an error, as in the main program.
  if (fs::exists("/dev/full")) {
    r = sh("( '" DIFFLENS_EXE "' --help > /dev/full )", dir);
    CHECK(r.status == 1);
    CHECK(r.out.find("difflens: writing to standard output failed") != std::string::npos);
  }
}

TEST_CASE("man page: every command and option of the tables is in it, as --help words them",
          "[install][cli]") {
  const std::string page = cli::man_page(cli::gui_command(), cli::all_commands(), "DiffLens 0.1.0");
  CHECK(page.rfind(".\\\" ", 0) == 0);
  for (const char* section : {".SH NAME", ".SH SYNOPSIS", ".SH OPTIONS", ".SH COMMANDS", ".SH KEYS",
                              ".SH FILES", ".SH ENVIRONMENT"})
    CHECK(page.find(section) != std::string::npos);
  // What --help says of the machine it runs on ("every core, 2 here") is not baked into the package's page.
  CHECK(page.find(" here)") == std::string::npos);
  CHECK(page.find("CPU threads (default: every core)") != std::string::npos);
  // The keys are the Help menu's text, line for line; the files are where the package puts them, not the
  // source tree's paths (an installed reader has no docs/ or assets/).
  {
    std::istringstream keys(difflens::app::kKeysText);
    std::string line;
    int lines = 0;
    while (std::getline(keys, line)) {
      INFO(line);
      CHECK(page.find("\n" + cli::troff_escape(line) + "\n") != std::string::npos);
      ++lines;
    }
    CHECK(lines >= 12);
  }
  CHECK(page.find("share/doc/difflens/play.md") != std::string::npos);
  CHECK(page.find("share/difflens/needle-story.play") != std::string::npos);
  CHECK(page.find("docs/play.md") == std::string::npos);
  CHECK(page.find("assets/haystack") == std::string::npos);
  int options = 0;
  std::vector<cli::Command> all = cli::all_commands();
  all.push_back(cli::gui_command());
  for (const cli::Command& c : all) {
    if (!c.name.empty())
      CHECK(page.find(".SS \"difflens " + cli::troff_escape(c.name) + "\"") != std::string::npos);
    for (const cli::Option& o : c.options) {
      INFO(c.name << " --" << o.name);
      CHECK(page.find("\\fB\\-\\-" + cli::troff_escape(o.name) + "\\fR") != std::string::npos);
      CHECK(page.find(cli::troff_escape(cli::man_option_help(o))) != std::string::npos);
      ++options;
    }
  }
  CHECK(options > 150);
  // troff's control characters are escaped: no line of text starts a request by accident.
  CHECK(cli::troff_escape(".hidden\n'quote\\x-y") == "\\&.hidden\n\\&'quote\\ex\\-y");
  // The build's page renders (man-db's man or groff, where installed).
  test::ScratchDir dir("man");
  const std::string file = DIFFLENS_BINARY_DIR "/app/difflens.1";
  REQUIRE(fs::exists(file));
  if (have("man")) {
    const Run r = sh("MANWIDTH=100 man -l '" + file + "' | col -b", dir);
    INFO(r.out.substr(0, 2000));
    CHECK(r.status == 0);
    CHECK(r.out.find("difflens - Differential Transformer and baseline attention explorer") !=
          std::string::npos);
    CHECK(r.out.find("--pooled-budget") != std::string::npos);
  }
}

TEST_CASE("install: exports go to ./difflens-exports, or to ~/difflens-exports where the app cannot write",
          "[install][cli]") {
  CHECK(cli::default_export_dir(true, "/home/ada").empty());  // the app's own relative default
  CHECK(cli::default_export_dir(false, "/home/ada") == "/home/ada/difflens-exports");
  CHECK(cli::default_export_dir(false, nullptr).empty());
  CHECK(cli::default_export_dir(false, "").empty());
}
