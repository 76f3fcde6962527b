// Every `difflens` example in README.md and docs/*.md is run as printed: extracted from the pages (code
// blocks, the command table, inline code), run by bash in a scratch copy of the repository's layout with
// DIFFLENS_QUICK=1 (the one switch that shrinks sizes, docs/development.md), and checked to exit 0 and to
// write every file or folder it names with --out, --screenshot, --export-dir, --html or --export-page (or
// ./difflens-exports for
// --export-all). An example that cannot run here says "not run in CI" on its line of the page. The
// examples must leave the bundled models byte-identical (README's `train` once overwrote them).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>

#include "helpers.h"

namespace fs = std::filesystem;
using namespace difflens;

namespace {

const fs::path kSource = DIFFLENS_SOURCE_DIR;

struct Example {
  std::string command;  // one line, as bash reads it
  int line = 0;         // where it starts on the page (1-based)
  bool not_run = false;
  std::string reason;  // why not run, from the page
};

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// A command of its own whose first word names difflens itself (`difflens`, `build/app/difflens`, ...), or
// commands joined by "&&" one of which does.
bool runs_difflens(const std::string& command) {
  for (size_t from = 0; from != std::string::npos;) {
    const size_t and_then = command.find("&&", from);
    const std::string part =
        trim(command.substr(from, and_then == std::string::npos ? and_then : and_then - from));
    const std::string first = part.substr(0, part.find(' '));
    if (first == "difflens" || (first.size() > 9 && first.compare(first.size() - 9, 9, "/difflens") == 0))
      return true;
    from = and_then == std::string::npos ? and_then : and_then + 2;
  }
  return false;
}

// A shell line without its trailing "# comment" (a '#' outside quotes after a blank).
std::string without_comment(const std::string& line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '#' && (i == 0 || line[i - 1] == ' ')) {
      return trim(line.substr(0, i));
    }
  }
  return trim(line);
}

// The reason after "not run in CI" in `text` ("not run in CI: needs a GPU" -> "needs a GPU"); false when
// the text has no such mark.
bool marked_not_run(const std::string& text, std::string* reason) {
  const size_t at = text.find("not run in CI");
  if (at == std::string::npos) return false;
  std::string rest = text.substr(at + 13);
  rest = trim(rest.substr(0, rest.find_first_of(")`|")));
  if (!rest.empty() && rest[0] == ':') rest = trim(rest.substr(1));
  *reason = rest.empty() ? "marked on the page" : rest;
  return true;
}

void add_example(std::vector<Example>& out, const std::string& command, int line, const std::string& marks) {
  Example e{command, line, false, ""};
  e.not_run = marked_not_run(marks, &e.reason);
  out.push_back(e);
}

// The examples of a Markdown page, in page order. A code block's line (indented by four spaces after a
// blank line, or fenced) is one shell command: a "host$ " prompt dropped, "\" continuations joined, a
// trailing "# comment" dropped (its mark read). Inline code (in prose or a table cell; it may run over the
// lines of a paragraph) is an example when it runs difflens with at least one option; its mark is read
// from the lines it spans, to the end of the line where it ends.
std::vector<Example> extract_examples(const std::string& page) {
  std::vector<Example> out;
  const std::vector<std::string> lines = split_lines(page);
  bool fenced = false, in_block = false;
  std::string span, marks;  // an inline span still open, and the lines it started on
  int span_line = 0;
  bool in_span = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& raw = lines[i];
    if (trim(raw).rfind("```", 0) == 0) {
      fenced = !fenced;
      continue;
    }
    const bool blank = trim(raw).empty();
    in_block = !blank && raw.rfind("    ", 0) == 0 && (in_block || i == 0 || trim(lines[i - 1]).empty());
    if (blank) in_span = false;  // a tick left open at a paragraph's end was not a span
    if ((fenced || in_block) && !in_span) {
      std::string text = trim(raw);
      const size_t prompt = text.find("$ ");
      if (prompt != std::string::npos && text.find(' ') > prompt) text = trim(text.substr(prompt + 2));
      const int first = static_cast<int>(i) + 1;
      std::string line_marks = raw;
      while (!without_comment(text).empty() && without_comment(text).back() == '\\' && i + 1 < lines.size()) {
        std::string c = without_comment(text);
        c.pop_back();
        text = trim(c) + " " + trim(lines[++i]);
        line_marks += lines[i];
      }
      const std::string command = without_comment(text);
      if (runs_difflens(command)) add_example(out, command, first, line_marks);
      continue;
    }
    if (blank) continue;
    if (in_span) marks += " " + raw;
    std::vector<std::pair<std::string, int>> closed;  // spans that ended on this line
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] != '`') {
        if (in_span) span += raw[k];
        continue;
      }
      if (in_span) {
        closed.emplace_back(trim(span), span_line);
      } else {
        span.clear();
        span_line = static_cast<int>(i) + 1;
        marks = raw;
      }
      in_span = !in_span;
    }
    if (in_span) span += " ";
    for (const auto& [command, line] : closed)
      if (runs_difflens(command) && command.find(" --") != std::string::npos)
        add_example(out, command, line, marks);
  }
  return out;
}

}  // namespace

namespace {

// The paths an example says it writes: the value after --out, --screenshot, --export-dir, --html,
// --export-page; --export-all
// without --export-dir writes ./difflens-exports.
std::vector<std::string> written_paths(const std::string& command) {
  std::vector<std::string> words;
  std::string word;
  char quote = 0;
  for (char c : command + " ") {
    if (quote) {
      if (c == quote)
        quote = 0;
      else
        word += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == ' ') {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  std::vector<std::string> paths;
  for (size_t w = 0; w + 1 < words.size(); ++w)
    if (words[w] == "--out" || words[w] == "--screenshot" || words[w] == "--export-dir" ||
        words[w] == "--html" || words[w] == "--export-page")
      paths.push_back(words[w + 1]);
  if (std::find(words.begin(), words.end(), "--export-all") != words.end() &&
      std::find(words.begin(), words.end(), "--export-dir") == words.end())
    paths.push_back("difflens-exports");
  return paths;
}

// Every file under `dir` with its bytes, by path relative to it.
std::map<std::string, std::string> tree_bytes(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = test::read_all(e.path());
  return files;
}

// A scratch copy of what the examples read: assets/ (copied, so that a command writing into it shows), the
// executable as `difflens` on PATH and at build/app/difflens, and a small corpus in build/corpus made from
// the held-out haystack and the bundled tokenizer (what scripts/prepare-corpus writes there, smaller).
void lay_out(const test::ScratchDir& dir) {
  fs::copy(kSource / "assets", dir / "assets", fs::copy_options::recursive);
  fs::create_directories(dir / "docs");
  fs::copy(kSource / "docs/examples", dir / "docs/examples", fs::copy_options::recursive);  // prompt sets
  fs::create_directories(dir / "build/app");
  fs::create_symlink(DIFFLENS_EXE, dir / "build/app/difflens");
  fs::create_directories(dir / "bin");
  fs::create_symlink(DIFFLENS_EXE, dir / "bin/difflens");
  const fs::path corpus = dir / "build/corpus";
  fs::create_directories(corpus);
  const std::string hay = test::read_all(kSource / "assets/haystack.txt");
  REQUIRE(hay.size() > 150000);
  test::write_all(corpus / "train.txt", hay.substr(0, 100000));
  test::write_all(corpus / "val.txt", hay.substr(100000, 30000));
  test::write_all(corpus / "val-kjv.txt", hay.substr(130000, 20000));
  fs::copy_file(kSource / "assets/models/diff-small/tokenizer.model", corpus / "tokenizer.model");
}

// Runs every example of `page` (relative to the source tree) in order in one scratch layout; returns how
// many ran.
int run_page(const std::string& page, bool app_examples) {
  const std::string text = test::read_all(kSource / page);
  REQUIRE(!text.empty());
  const std::vector<Example> examples = extract_examples(text);
  if (std::getenv("DIFFLENS_DOCS_DRY")) {  // list what would run, run nothing
    for (const Example& e : examples)
      std::printf("%s:%d %s: %s\n", page.c_str(), e.line,
                  e.not_run ? ("not run (" + e.reason + ")").c_str() : "runs", e.command.c_str());
    return 0;
  }
  test::ScratchDir dir("docs");
  lay_out(dir);
  const auto assets_before = tree_bytes(kSource / "assets");
  int ran = 0;
  for (const Example& e : examples) {
    const bool app = e.command.find(" ") == std::string::npos ||
                     e.command.substr(e.command.find(' ') + 1).rfind("--", 0) == 0;
    if (e.not_run || (app && !app_examples)) {
      std::printf("%s:%d not run (%s): %s\n", page.c_str(), e.line,
                  e.not_run ? e.reason.c_str() : "the desktop app is not built here", e.command.c_str());
      continue;
    }
    INFO(page << ":" << e.line << ": " << e.command);
    const std::string log = (dir / "example.log").string();
    const std::string cmd = "cd '" + dir.path().string() + "' && HOME='" + dir.path().string() +
                            "' DIFFLENS_QUICK=1 PATH='" + (dir / "bin").string() +
                            "':\"$PATH\" timeout 600 bash -c " + "'" +
                            [&] {
                              std::string q;
                              for (char c : e.command)
                                q += c == '\'' ? std::string("'\\''") : std::string(1, c);
                              return q;
                            }() +
                            "' > '" + log + "' 2>&1";
    const auto t0 = std::chrono::steady_clock::now();
    const int raw = std::system(cmd.c_str());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    const std::string output = test::read_all(log);
    INFO(output.substr(output.size() > 4000 ? output.size() - 4000 : 0));
    CHECK(status == 0);
    for (const std::string& p : written_paths(e.command)) {
      INFO("writes " << p);
      const fs::path f = dir / p;
      CHECK(fs::exists(f));
      if (fs::is_directory(f))
        CHECK(!fs::is_empty(f));
      else if (fs::exists(f))
        CHECK(fs::file_size(f) > 0);
    }
    std::printf("%s:%d ran in %.1f s: %s\n", page.c_str(), e.line, seconds, e.command.c_str());
    ++ran;
  }
  // Nothing the examples did changed the bundled models, or anything else under assets/: neither the copy
  // the examples name nor the source tree's, which difflens falls back to for its defaults.
  for (const fs::path& assets : {dir / "assets", kSource / "assets"}) {
    const auto assets_after = tree_bytes(assets);
    INFO(assets.string());
    CHECK(assets_after.size() == assets_before.size());
    for (const auto& [name, bytes] : assets_before) {
      INFO("assets/" << name);
      const auto it = assets_after.find(name);
      CHECK((it != assets_after.end() && it->second == bytes));
    }
  }
  return ran;
}

}  // namespace

TEST_CASE("docs: examples are found in code blocks, tables and inline code, marks read", "[docs]") {
  const std::string page =
      "Intro `difflens needle` names a command; `difflens --help` lists them.\n"
      "\n"
      "    scripts/run     # not difflens\n"
      "    build/app/difflens --prompt \"a # b\" \\\n"
      "                       --screenshot s.png   # a comment\n"
      "    gpu$ difflens serve --models A --device cuda   # not run in CI: needs a GPU\n"
      "\n"
      "| `capture` | one model | `difflens capture --model M --out t/` |\n"
      "A span over lines: `difflens bench --models a,b\n"
      "--lengths 256` and `difflens loss --text-file f` (not run in CI: twenty minutes).\n";
  const std::vector<Example> e = extract_examples(page);
  REQUIRE(e.size() == 6);
  CHECK(e[0].command == "difflens --help");
  CHECK(e[1].command == "build/app/difflens --prompt \"a # b\" --screenshot s.png");
  CHECK(e[1].line == 4);
  CHECK(!e[1].not_run);
  CHECK(e[2].command == "difflens serve --models A --device cuda");
  CHECK(e[2].not_run);
  CHECK(e[2].reason == "needs a GPU");
  CHECK(e[3].command == "difflens capture --model M --out t/");
  CHECK(e[4].command == "difflens bench --models a,b --lengths 256");
  CHECK(e[4].line == 9);
  CHECK(e[5].command == "difflens loss --text-file f");
  CHECK(e[5].not_run);
  CHECK(written_paths(e[1].command) == std::vector<std::string>{"s.png"});
  CHECK(written_paths("difflens --export-all --out 'a b'") ==
        std::vector<std::string>{"a b", "difflens-exports"});
}

TEST_CASE("docs: README.md's examples run as printed and leave the bundled models alone", "[docs][gui]") {
  const int ran = run_page("README.md", true);
  if (!std::getenv("DIFFLENS_DOCS_DRY")) CHECK(ran >= 20);
}

TEST_CASE("docs: docs/views.md's examples run as printed (the app headless, each view's export)",
          "[docs][gui]") {
  const int ran = run_page("docs/views.md", true);
  if (!std::getenv("DIFFLENS_DOCS_DRY")) CHECK(ran >= 8);
}

TEST_CASE("docs: docs/commands.md's examples run as printed", "[docs]") {
  const int ran = run_page("docs/commands.md", false);
  if (!std::getenv("DIFFLENS_DOCS_DRY")) CHECK(ran >= 2);
}

TEST_CASE("docs: docs/for-a-paper.md's examples run as printed", "[docs]") {
  const int ran = run_page("docs/for-a-paper.md", false);
  if (!std::getenv("DIFFLENS_DOCS_DRY")) CHECK(ran >= 3);
}

TEST_CASE("docs: docs/benchmarks.md's examples run as printed", "[docs][bench]") {
  run_page("docs/benchmarks.md", false);
}

TEST_CASE("docs: docs/development.md's and docs/robustness.md's examples run as printed", "[docs]") {
  run_page("docs/development.md", false);
  run_page("docs/robustness.md", false);
}
