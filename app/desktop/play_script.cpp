// The --play script language: reading and checking a script (app/desktop/play_script.h), and the soak's
// generator.
#include "app/desktop/play_script.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "app/desktop/layout.h"
#include "core/formats/bounded_read.h"
#include "core/formats/error.h"
#include "core/formats/intervention.h"

namespace difflens::app {
namespace {

struct VerbName {
  const char* word;
  const char* usage;  // what follows the word
};
// The order of PlayVerb, except the verbs that share a word (explain, export, lab, wait) listed once.
constexpr VerbName kVerbs[] = {
    {"type", "TEXT"},
    {"paste", "TEXT"},
    {"paste-file", "FILE"},
    {"prompt", "TEXT"},
    {"clear", ""},
    {"needle", "TOKENS,DEPTH%,NEEDLES,ASKED,SEED[,ANSWER]"},
    {"query", "TOKEN|last"},
    {"answer", "BEGIN END|clear"},
    {"layer", "L"},
    {"head", "[left|right] H"},
    {"view", "NAME"},
    {"split", "off|below|beside"},
    {"side", "on|off"},
    {"lecture", "on|off"},
    {"one-y-scale", "on|off"},
    {"specials", "match|text"},
    {"text-size", "X (0.75 to 3)"},
    {"text-direction", "from|to"},
    {"text-heads", "head|layer|all"},
    {"open", "left|right model|bundle|remote PATH [TOKEN]"},
    {"device", "auto|cpu|cuda"},
    {"logits", "exact|8|6|4"},
    {"pooling", "max|mean"},
    {"budget", "MB"},
    {"size", "WIDTHxHEIGHT"},
    {"lab", "grid LENGTHS DEPTHS NEEDLES QUERIED SEEDS|start|steps|cancel|interventions on|off"},
    {"explain", "next|back|STEP"},
    {"present", "on|off"},
    {"export", "maps|heads|figure [WIDTHxHEIGHT [TEXT_PX]]|bundle|page [FILE.html]|window|folder DIR"},
    {"continue", "left|right TOKENS [TEMPERATURE [SEED]]"},
    {"step", "back|forward|first|last"},
    {"intervene", "SPEC|clear"},
    {"corrupt", "TEXT|clear"},
    {"checkpoint", "STEP|last"},
    {"steps", "measure|cancel"},
    {"prompt-set", "ITEMS OUT [resume]|cancel"},
    {"wait", "[MS]"},
    {"screenshot", "FILE.png"},
    {"quit", ""},
};

std::string verbs_list() {
  std::string out;
  for (const VerbName& v : kVerbs) out += std::string(out.empty() ? "" : ", ") + v.word;
  return out;
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// One of `words` (separated by '|'), as its index; -1 when `w` is none of them.
int pick(const std::string& w, const std::string& words) {
  int i = 0;
  size_t start = 0;
  while (true) {
    const size_t bar = words.find('|', start);
    if (words.compare(start, bar == std::string::npos ? std::string::npos : bar - start, w) == 0 &&
        w.size() == (bar == std::string::npos ? words.size() : bar) - start)
      return i;
    if (bar == std::string::npos) return -1;
    start = bar + 1;
    ++i;
  }
}

bool parse_int(const std::string& s, int lo, int hi, int& out) {
  if (s.empty() || s.size() > 10) return false;
  size_t used = 0;
  try {
    const long v = std::stol(s, &used);
    if (used != s.size() || v < lo || v > hi) return false;
    out = static_cast<int>(v);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<int> parse_int_list(const std::string& s, int lo, int hi) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    int v = 0;
    if (!parse_int(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start), lo, hi,
                   v))
      return {};
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// One line being read: its verb, the rest after one space (TEXT keeps every further space), the rest's
// words, and the checks that throw Error(what is wrong, and what the verb expects).
struct LineReader {
  explicit LineReader(const std::string& line)
      : verb(line.substr(0, line.find(' '))),
        rest(line.find(' ') == std::string::npos ? "" : line.substr(line.find(' ') + 1)),
        w(split_words(rest)) {}
  const std::string verb, rest;
  const std::vector<std::string> w;

  std::string usage() const {
    for (const VerbName& n : kVerbs)
      if (verb == n.word) return std::string("expected: ") + verb + (*n.usage ? " " : "") + n.usage;
    return "";
  }
  [[noreturn]] void bad(const std::string& what) const { throw Error(what + " (" + usage() + ")"); }
  void words(size_t lo, size_t hi) const {
    if (w.size() < lo || w.size() > hi)
      bad("'" + verb + "' takes " +
          (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)) + " word" +
          (lo == 1 && hi == 1 ? "" : "s") + ", got " + std::to_string(w.size()));
  }
  int one_of(const std::string& choices) const {
    words(1, 1);
    const int i = pick(w[0], choices);
    if (i < 0) bad("'" + w[0] + "' is not one of " + choices);
    return i;
  }
  int integer(const std::string& s, int lo, int hi) const {
    int v = 0;
    if (!parse_int(s, lo, hi, v))
      bad("'" + s + "' is not a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
    return v;
  }
};

// The prompt and the selection: type, paste, paste-file, prompt, clear, needle, query, answer, layer, head.
// False: not one of these verbs.
bool parse_prompt_and_selection(const LineReader& r, PlayAction& a) {
  if (r.verb == "type" || r.verb == "paste" || r.verb == "prompt") {
    a.verb = r.verb == "type" ? PlayVerb::Type : r.verb == "paste" ? PlayVerb::Paste : PlayVerb::Prompt;
    a.text = unescape_play_text(r.rest);
  } else if (r.verb == "paste-file") {
    a.verb = PlayVerb::PasteFile;
    if (r.rest.empty()) r.bad("no file named");
    a.text = r.rest;
  } else if (r.verb == "clear") {
    a.verb = PlayVerb::Clear;
    r.words(0, 0);
  } else if (r.verb == "needle") {
    a.verb = PlayVerb::Needle;
    r.words(1, 1);
    a.ints = parse_int_list(r.w[0], 0, 1 << 20);
    const auto& n = a.ints;
    if (n.size() < 5 || n.size() > 6 || n[0] < 64 || n[1] > 100 || n[2] < 1 || n[2] > 6 || n[3] < 1 ||
        n[3] > n[2] || (n.size() == 6 && n[5] > 1))
      r.bad("'" + r.w[0] + "' is not TOKENS >= 64, DEPTH 0..100, 1 <= ASKED <= NEEDLES <= 6, ANSWER 0 or 1");
  } else if (r.verb == "query") {
    a.verb = PlayVerb::Query;
    r.words(1, 1);
    a.ints = {r.w[0] == "last" ? -1 : r.integer(r.w[0], 0, 1 << 30)};
  } else if (r.verb == "answer") {
    a.verb = PlayVerb::Answer;
    if (r.w.size() == 1 && r.w[0] == "clear") return true;
    r.words(2, 2);
    a.ints = {r.integer(r.w[0], 0, 1 << 30), r.integer(r.w[1], 0, 1 << 30)};
    if (a.ints[1] <= a.ints[0]) r.bad("the answer's END must be after its BEGIN");
  } else if (r.verb == "checkpoint") {
    a.verb = PlayVerb::Checkpoint;
    r.words(1, 1);
    a.ints = {r.w[0] == "last" ? -1 : r.integer(r.w[0], 0, 1 << 30)};
  } else if (r.verb == "steps") {
    a.verb = PlayVerb::Steps;
    r.words(1, 1);
    if (r.w[0] != "measure" && r.w[0] != "cancel") r.bad("steps takes measure or cancel");
    a.ints = {r.w[0] == "measure" ? 1 : 0};
  } else if (r.verb == "prompt-set") {
    a.verb = PlayVerb::PromptSet;
    r.words(1, 3);
    if ((r.w.size() == 1) != (r.w[0] == "cancel"))
      r.bad("give the items file and the output folder, or cancel");
    if (r.w.size() == 3 && r.w[2] != "resume") r.bad("the third word can only be resume");
    if (r.w[0] != "cancel") a.words = r.w;
  } else if (r.verb == "corrupt") {
    a.verb = PlayVerb::Corrupt;
    if (r.rest.empty()) r.bad("give the corrupt prompt, or clear");
    a.text = r.rest == "clear" ? "" : unescape_play_text(r.rest);
  } else if (r.verb == "intervene") {
    a.verb = PlayVerb::Intervene;
    r.words(1, 1);
    if (r.w[0] != "clear") {
      try {
        a.text = parse_intervention(r.w[0]).text();
      } catch (const Error& e) {
        r.bad(e.what());
      }
    }
  } else if (r.verb == "layer") {
    a.verb = PlayVerb::Layer;
    r.words(1, 1);
    a.ints = {r.integer(r.w[0], 0, 1 << 20)};
  } else if (r.verb == "head") {
    a.verb = PlayVerb::Head;
    r.words(1, 2);
    const int slot = r.w.size() == 1 ? -1 : pick(r.w[0], "left|right");
    if (r.w.size() == 2 && slot < 0) r.bad("'" + r.w[0] + "' is not left or right");
    a.ints = {slot, r.integer(r.w.back(), 0, 1 << 20)};
  } else {
    return false;
  }
  return true;
}

// What is shown and how: view, split, one-y-scale, side, lecture, present, text-size, text-direction,
// text-heads. False: not one of these verbs.
bool parse_view_settings(const LineReader& r, PlayAction& a) {
  if (r.verb == "view") {
    a.verb = PlayVerb::View;
    r.words(1, 1);
    int n = 0;
    if (parse_int(r.w[0], 1, kViews, n)) {
      a.ints = {n - 1};
    } else {
      const auto v = parse_view(r.w[0]);
      if (!v) r.bad("'" + r.w[0] + "' is not a view: " + view_names() + " or 1 to " + std::to_string(kViews));
      a.ints = {static_cast<int>(*v)};
    }
  } else if (r.verb == "split") {
    a.verb = PlayVerb::Split;
    a.ints = {r.one_of("off|below|beside")};
  } else if (r.verb == "one-y-scale") {
    a.verb = PlayVerb::OneYScale;
    a.ints = {r.one_of("off|on")};
  } else if (r.verb == "specials") {
    a.verb = PlayVerb::Specials;
    a.ints = {r.one_of("match|text")};
  } else if (r.verb == "side" || r.verb == "lecture" || r.verb == "present") {
    a.verb = r.verb == "side" ? PlayVerb::Side : r.verb == "lecture" ? PlayVerb::Lecture : PlayVerb::Present;
    a.ints = {r.one_of("off|on")};
  } else if (r.verb == "text-size") {
    a.verb = PlayVerb::TextSize;
    r.words(1, 1);
    try {
      size_t used = 0;
      a.number = std::stod(r.w[0], &used);
      if (used != r.w[0].size() || !std::isfinite(a.number) || a.number < 0.75 || a.number > 3)
        throw Error("");
    } catch (const std::exception&) {
      r.bad("'" + r.w[0] + "' is not a number from 0.75 to 3");
    }
  } else if (r.verb == "text-direction") {
    a.verb = PlayVerb::TextFrom;
    a.ints = {r.one_of("from|to")};
  } else if (r.verb == "text-heads") {
    a.verb = PlayVerb::TextHeads;
    a.ints = {r.one_of("head|layer|all")};
  } else {
    return false;
  }
  return true;
}

// The models and the window: open, device, logits, pooling, budget, size. False: not one of these verbs.
bool parse_models_and_window(const LineReader& r, PlayAction& a) {
  if (r.verb == "open") {
    a.verb = PlayVerb::Open;
    if (r.w.size() < 3) r.bad("'open' needs a slot, a kind and a path");
    const int slot = pick(r.w[0], "left|right"), kind = pick(r.w[1], "model|bundle|remote");
    if (slot < 0) r.bad("'" + r.w[0] + "' is not left or right");
    if (kind < 0) r.bad("'" + r.w[1] + "' is not model, bundle or remote");
    a.ints = {slot, kind};
    // The path is the r.rest of the line after the kind (spaces kept), except a remote's token at its end.
    const size_t at = r.rest.find(r.w[1], r.rest.find(r.w[0]) + r.w[0].size()) + r.w[1].size() + 1;
    a.text = at < r.rest.size() ? r.rest.substr(at) : "";
    if (kind == 2 && r.w.size() == 4) {
      a.text = r.w[2];
      a.token = r.w[3];
    } else if (kind == 2 && r.w.size() > 4) {
      r.bad("a remote address has no spaces: remote://HOST:PORT/N [TOKEN]");
    }
  } else if (r.verb == "device") {
    a.verb = PlayVerb::Device;
    a.ints = {r.one_of("auto|cpu|cuda")};
  } else if (r.verb == "logits") {
    a.verb = PlayVerb::Logits;
    a.ints = {r.one_of("exact|8|6|4")};
  } else if (r.verb == "pooling") {
    a.verb = PlayVerb::Pooling;
    a.ints = {r.one_of("max|mean")};
  } else if (r.verb == "budget") {
    a.verb = PlayVerb::Budget;
    r.words(1, 1);
    a.ints = {r.integer(r.w[0], 0, 65536)};
  } else if (r.verb == "size") {
    a.verb = PlayVerb::Size;
    r.words(1, 1);
    const size_t x = r.w[0].find('x');
    if (x == std::string::npos) r.bad("'" + r.w[0] + "' is not WIDTHxHEIGHT");
    a.ints = {r.integer(r.w[0].substr(0, x), 320, 16384), r.integer(r.w[0].substr(x + 1), 240, 16384)};
  } else {
    return false;
  }
  return true;
}

// The lab, Explain and the exports: lab, explain, export. False: not one of these verbs.
bool parse_lab_explain_export(const LineReader& r, PlayAction& a) {
  if (r.verb == "lab") {
    if (r.w.empty()) r.bad("'lab' needs grid, start, steps, cancel or interventions");
    if (r.w[0] == "grid") {
      a.verb = PlayVerb::LabGrid;
      r.words(6, 6);
      a.words.assign(r.w.begin() + 1, r.w.end());
      (void)r.integer(r.w[5], 1, 100);
    } else if (r.w[0] == "interventions") {  // the lab's "also under the interventions" box
      a.verb = PlayVerb::LabInterventions;
      r.words(2, 2);
      const int on = pick(r.w[1], "on|off");
      if (on < 0) r.bad("'lab interventions' takes on or off, not '" + r.w[1] + "'");
      a.ints = {on == 0 ? 1 : 0};
    } else {
      const int which = r.one_of("start|cancel|steps");
      a.verb = which == 0 ? PlayVerb::LabStart : which == 1 ? PlayVerb::LabCancel : PlayVerb::LabSteps;
    }
  } else if (r.verb == "explain") {
    a.verb = PlayVerb::Explain;
    r.words(1, 1);
    if (r.w[0] == "next" || r.w[0] == "back")
      a.ints = {0, r.w[0] == "next" ? 1 : -1};
    else
      a.ints = {r.integer(r.w[0], 1, 6), 0};
  } else if (r.verb == "export") {
    if (r.w.empty()) r.bad("'export' needs what to export");
    const int what = pick(r.w[0], "maps|heads|page|window|folder|figure|bundle");
    if (what < 0) r.bad("'" + r.w[0] + "' is not maps, heads, figure, bundle, page, window or folder");
    const PlayVerb verbs[] = {PlayVerb::ExportMaps,   PlayVerb::ExportHeads, PlayVerb::ExportPage,
                              PlayVerb::ExportWindow, PlayVerb::ExportDir,   PlayVerb::ExportFigure,
                              PlayVerb::ExportBundle};
    a.verb = verbs[what];
    if (what == 5) {  // the figure's size and text size (none: as the File menu has them)
      r.words(1, 3);
      a.ints = {0, 0};
      a.number = -1;
      if (r.w.size() >= 2) {
        const size_t x = r.w[1].find('x');
        if (x == std::string::npos) r.bad("'" + r.w[1] + "' is not WIDTHxHEIGHT");
        a.ints = {r.integer(r.w[1].substr(0, x), 200, 8192), r.integer(r.w[1].substr(x + 1), 200, 8192)};
      }
      if (r.w.size() == 3) a.number = r.integer(r.w[2], 6, 200);
    } else if (what == 2) {
      r.words(1, 2);
      if (r.w.size() == 2) {
        a.text = r.w[1];
        if (!ends_with(a.text, ".html") && !ends_with(a.text, ".htm")) r.bad("a page is written to F.html");
      }
    } else if (what == 4) {  // the folder: the r.rest of the line (spaces kept)
      if (r.w.size() < 2) r.bad("no folder named");
      a.text = r.rest.substr(r.rest.find(r.w[0]) + r.w[0].size() + 1);
    } else {
      r.words(1, 1);
    }
  } else {
    return false;
  }
  return true;
}

// Continue and the script's pace: continue, step, wait, screenshot, quit. False: not one of these verbs.
bool parse_writing_and_pacing(const LineReader& r, PlayAction& a) {
  if (r.verb == "continue") {
    a.verb = PlayVerb::Continue;
    r.words(2, 4);
    const int slot = pick(r.w[0], "left|right");
    if (slot < 0) r.bad("'" + r.w[0] + "' is not left or right");
    a.ints = {slot, r.integer(r.w[1], 1, 256), r.w.size() == 4 ? r.integer(r.w[3], 0, 1 << 30) : 1};
    if (r.w.size() >= 3) {
      try {
        size_t used = 0;
        a.number = std::stod(r.w[2], &used);
        if (used != r.w[2].size() || !std::isfinite(a.number) || a.number < 0 || a.number > 100)
          throw Error("");
      } catch (const std::exception&) {
        r.bad("'" + r.w[2] + "' is not a temperature from 0 (greedy) to 100");
      }
    }
  } else if (r.verb == "step") {
    a.verb = PlayVerb::Step;
    a.ints = {std::array<int, 4>{-1, 1, 0, 2}[static_cast<size_t>(r.one_of("back|forward|first|last"))]};
  } else if (r.verb == "wait") {
    a.verb = PlayVerb::Wait;
    r.words(0, 1);
    a.ints = {r.w.empty() ? -1 : r.integer(r.w[0], 0, 3600 * 1000)};
  } else if (r.verb == "screenshot") {
    a.verb = PlayVerb::Screenshot;
    r.words(1, 1);
    if (!ends_with(r.w[0], ".png")) r.bad("'" + r.w[0] + "' does not end in .png");
    a.text = r.w[0];
  } else if (r.verb == "quit") {
    a.verb = PlayVerb::Quit;
    r.words(0, 0);
  } else {
    return false;
  }
  return true;
}

// Reads one non-blank, non-comment line into `a`; a problem is thrown as Error(what is wrong).
void parse_line(const std::string& line, PlayAction& a) {
  const LineReader r(line);
  if (!parse_prompt_and_selection(r, a) && !parse_view_settings(r, a) && !parse_models_and_window(r, a) &&
      !parse_lab_explain_export(r, a) && !parse_writing_and_pacing(r, a))
    throw Error("unknown action '" + r.verb + "' (actions: " + verbs_list() + ")");
}

}  // namespace

std::string unescape_play_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (i + 1 >= text.size()) throw Error("a '\\' ends the text (write \\\\ for a backslash)");
    const char c = text[++i];
    if (c == 'n') {
      out += '\n';
    } else if (c == 't') {
      out += '\t';
    } else if (c == 'r') {
      out += '\r';
    } else if (c == '\\') {
      out += '\\';
    } else if (c == 'x') {
      auto hex = [](char h) {
        return h >= '0' && h <= '9'   ? h - '0'
               : h >= 'a' && h <= 'f' ? h - 'a' + 10
               : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                      : -1;
      };
      if (i + 2 >= text.size() || hex(text[i + 1]) < 0 || hex(text[i + 2]) < 0)
        throw Error("\\x needs two hex digits (\\x41 is 'A')");
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else {
      throw Error(std::string("unknown escape '\\") + c + "' (escapes: \\n \\t \\r \\\\ \\xHH)");
    }
  }
  return out;
}

std::string escape_play_text(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

std::vector<std::string> play_verbs() {
  std::vector<std::string> out;
  for (const VerbName& v : kVerbs) out.push_back(v.word);
  return out;
}

PlayScript parse_play_script(const std::string& text, const std::string& path) {
  PlayScript script;
  script.path = path;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a script saved on Windows
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    line.erase(0, first);
    PlayAction a;
    a.line = number;
    a.source = line;
    try {
      parse_line(line, a);
    } catch (const std::exception& e) {
      throw Error(path + ":" + std::to_string(number) + ": " + e.what());
    }
    script.actions.push_back(std::move(a));
  }
  if (script.actions.empty())
    throw Error(path + ": the script has no actions (one a line; the language: share/doc/difflens/play.md)");
  return script;
}

PlayScript read_play_script(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error("--play " + path + ": is a folder, not a play script (a text file of actions)");
  if (!std::filesystem::exists(path, ec) && !ec)
    throw Error("--play " + path + ": cannot read the script (missing or unreadable)");
  std::string text;
  try {
    text = read_bounded(path, "play script", kScriptLimit);
  } catch (const Error& e) {
    throw Error("--play " + std::string(e.what()));
  }
  return parse_play_script(text, path);
}

bool leak_check_could_not_run(const std::string& log) {
  if (log.find("LeakSanitizer has encountered a fatal error") == std::string::npos) return false;
  for (const char* report : {"ERROR: LeakSanitizer", "ERROR: AddressSanitizer", "runtime error:"})
    if (log.find(report) != std::string::npos) return false;
  return true;
}

std::string soak_script(uint64_t seed, int actions, const SoakInputs& in) {
  std::mt19937_64 rng(seed);
  auto below = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  auto chance = [&](int percent) { return static_cast<int>(below(100)) < percent; };
  auto any = [&](const std::vector<std::string>& v) {
    return v.empty() ? std::string() : v[below(v.size())];
  };
  // Short texts: words, digits, a needle's wording, control characters, invalid UTF-8, lone continuation
  // bytes, a cut multi-byte character, right-to-left and astral characters.
  static const char* kTexts[] = {
      "The secret code of Ada is 7182.",
      " What is the secret code of Ada?",
      " the",
      "1, 450, 3",
      "\xff\xfe invalid",
      "\x80\x80\x80",
      "caf\xc3",
      "\xe2\x82",
      "\x01\x02\x1b[31m\x7f",
      "\t\r\n\n",
      "\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d",
      "\xf0\x9f\x98\x80 \xf0\x9f\x8e\x89",
      "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
      "",
  };
  std::ostringstream out;
  out << "# soak script: seed " << seed << ", " << actions << " actions (difflens soak-script)\n";
  const std::string dir = in.export_dir.empty() ? "soak-exports" : in.export_dir;
  out << "export folder " << dir << "\n";
  int screenshots = 0;
  for (int i = 0; i < actions; ++i) {
    const int kind = static_cast<int>(below(100));
    if (kind < 14) {
      out << "type " << escape_play_text(kTexts[below(std::size(kTexts))]) << "\n";
    } else if (kind < 18) {
      out << "paste " << escape_play_text(kTexts[below(std::size(kTexts))]) << "\n";
    } else if (kind < 19 && !in.paste_file.empty()) {
      out << "paste-file " << in.paste_file << "\n";
    } else if (kind < 22) {
      out << (chance(50) ? "clear" : "prompt " + escape_play_text(kTexts[below(std::size(kTexts))])) << "\n";
    } else if (kind < 24) {
      out << "needle " << 64 + below(400) << "," << below(101) << ",1,1," << 1 + below(9) << "\n";
    } else if (kind < 30) {
      out << "query " << (chance(20) ? std::string("last") : std::to_string(below(chance(10) ? 100000 : 300)))
          << "\n";
    } else if (kind < 33) {
      const size_t b = below(300);
      out << (chance(30) ? std::string("answer clear")
                         : "answer " + std::to_string(b) + " " + std::to_string(b + 1 + below(8)))
          << "\n";
    } else if (kind < 37) {
      out << "layer " << below(chance(10) ? 40 : 4) << "\n";
    } else if (kind < 41) {
      static const char* kSlot[] = {"", "left ", "right "};
      out << "head " << kSlot[below(3)] << below(chance(10) ? 40 : 8) << "\n";
    } else if (kind < 51) {
      out << "view " << 1 + below(kViews) << "\n";
    } else if (kind < 54) {
      static const char* kSplit[] = {"off", "below", "beside"};
      out << "split " << kSplit[below(3)] << "\n";
    } else if (kind < 56) {
      out << (chance(50) ? "side on" : "side off") << "\n";
    } else if (kind < 58) {
      out << (chance(50) ? "lecture on" : "lecture off") << "\n";
    } else if (kind < 59) {
      static const char* kSizes[] = {"0.75", "1", "1.5", "2.25", "3"};
      out << "text-size " << kSizes[below(5)] << "\n";
    } else if (kind < 61) {
      out << (chance(50) ? "text-direction from" : "text-direction to") << "\n";
      static const char* kHeads[] = {"head", "layer", "all"};
      out << "text-heads " << kHeads[below(3)] << "\n";
    } else if (kind < 66) {
      const char* slot = chance(50) ? "left" : "right";
      const int what = static_cast<int>(below(10));
      if (what < 4 && !in.models.empty())
        out << "open " << slot << " model " << any(in.models) << "\n";
      else if (what < 6 && !in.bad.empty())
        out << "open " << slot << " model " << any(in.bad) << "\n";
      else if (what < 8 && !in.bundles.empty())
        out << "open " << slot << " bundle " << any(chance(70) ? in.bundles : in.bad) << "\n";
      else if (!in.remotes.empty())
        out << "open " << slot << " remote " << any(in.remotes) << "\n";
      else if (!in.models.empty())
        out << "open " << slot << " model " << any(in.models) << "\n";
    } else if (kind < 67) {
      static const char* kDevices[] = {"auto", "cpu", "cuda"};
      out << "device " << kDevices[below(3)] << "\n";
    } else if (kind < 69) {
      static const char* kLogits[] = {"exact", "8", "6", "4"};
      out << "logits " << kLogits[below(4)] << "\n";
    } else if (kind < 70) {
      out << (chance(50) ? "pooling max" : "pooling mean") << "\n";
    } else if (kind < 71) {
      static const int kBudgets[] = {0, 1, 16, 256};
      out << "budget " << kBudgets[below(4)] << "\n";
    } else if (kind < 75) {
      static const char* kWindows[] = {"320x240",  "640x480",   "800x600", "1024x768",
                                       "1280x800", "1600x1000", "500x900"};
      out << "size " << kWindows[below(std::size(kWindows))] << "\n";
    } else if (kind < 77) {
      if (chance(50)) out << "lab grid 64," << 64 + below(200) << " 0,50,100 1 1 1\n";
      out << "lab start\n";
    } else if (kind < 79) {
      out << "lab cancel\n";
    } else if (kind < 82) {
      static const char* kSteps[] = {"next", "back", "1", "3", "6"};
      out << "explain " << kSteps[below(5)] << "\n";
    } else if (kind < 83) {
      out << (chance(30) ? "present on" : "present off") << "\n";
    } else if (kind < 86) {
      static const char* kExports[] = {"maps",  "heads", "page", "window", "figure", "figure 640x400 9",
                                       "bundle"};
      out << "export " << kExports[below(7)] << "\n";
    } else if (kind < 87 && screenshots < 20) {
      out << "screenshot " << dir << "/soak-" << screenshots++ << ".png\n";
    } else if (kind < 89) {
      out << "continue " << (chance(50) ? "left " : "right ") << 1 + below(chance(10) ? 64 : 12)
          << (chance(30) ? " 0.8 " + std::to_string(below(9)) : "") << "\n";
    } else if (kind < 91) {
      static const char* kSteps[] = {"back", "forward", "first", "last"};
      out << "step " << kSteps[below(4)] << "\n";
    } else if (kind < 95) {
      out << "wait " << below(chance(20) ? 400 : 40) << "\n";
    } else {
      out << "wait\n";
    }
  }
  out << "present off\nwait\nscreenshot " << dir << "/soak-end.png\nquit\n";
  return out.str();
}

}  // namespace difflens::app
