// The manual page from the option tables (see man_page.h).
#include "app/cli/man_page.h"

#include "app/common/keys.h"

namespace difflens::cli {

std::string troff_escape(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (char ch : text) {
    if (line_start && (ch == '.' || ch == '\'')) out += "\\&";
    if (ch == '\\')
      out += "\\e";
    else if (ch == '-')
      out += "\\-";
    else
      out += ch;
    line_start = ch == '\n';
  }
  return out;
}

std::string man_option_help(const Option& o) {
  // The manual is written where the package is built: what --help says of that machine ("every core, 2
  // here") is left out.
  std::string help = option_help(o);
  const size_t here = help.find(" here)");
  if (here != std::string::npos) {
    const size_t comma = help.rfind(", ", here);
    if (comma != std::string::npos && help.find_first_not_of("0123456789", comma + 2) == here)
      help.erase(comma, here + 5 - comma);
  }
  return help;
}

namespace {

void options_section(std::string& out, const std::vector<Option>& options) {
  for (const Option& o : options) {
    out += ".TP\n\\fB\\-\\-" + troff_escape(o.name) + "\\fR";
    if (o.kind != Kind::Flag) out += " \\fI" + troff_escape(o.value) + "\\fR";
    const std::string help = man_option_help(o);
    out += "\n" + troff_escape(help) + "\n";
  }
}

// Notes are lines as `--help` prints them: kept as lines, not refilled.
void notes_section(std::string& out, const std::string& notes) {
  if (notes.empty()) return;
  out += ".PP\n";
  std::string line;
  for (size_t i = 0; i <= notes.size(); ++i) {
    if (i < notes.size() && notes[i] != '\n') {
      line += notes[i];
      continue;
    }
    out += line.empty() ? ".sp\n" : troff_escape(line) + "\n.br\n";
    line.clear();
  }
}

}  // namespace

std::string man_page(const Command& app, const std::vector<Command>& commands, const std::string& version) {
  std::string out;
  out +=
      ".\\\" The manual page of DiffLens, written by `difflens man` from its option tables: do not edit.\n";
  out += ".TH DIFFLENS 1 \"\" \"" + troff_escape(version) + "\" \"User Commands\"\n";
  out += ".SH NAME\ndifflens \\- Differential Transformer and baseline attention explorer\n";
  out +=
      ".SH SYNOPSIS\n.B difflens\n[\\fIoptions\\fR]\n.br\n.B difflens\n\\fICOMMAND\\fR [\\fIoptions\\fR]\n"
      ".br\n.B difflens\n\\fICOMMAND\\fR \\fB\\-\\-help\\fR\n.br\n.B difflens \\-\\-version\n";
  out +=
      ".SH DESCRIPTION\n"
      "DiffLens runs a Differential Transformer (DIFF) and a matched baseline Transformer on the prompt you\n"
      "type and shows, as heatmaps, both softmax maps A1 and A2 of every DIFF head, their difference\n"
      "A1 \\- \\(*l\\(pcA2, \\(*l per layer, the baseline's maps beside them, and activation outliers.\n"
      "Without a command it opens the desktop app on the bundled pair; every view also has a headless path\n"
      "(\\fB\\-\\-view\\fR, \\fB\\-\\-screenshot\\fR, \\fB\\-\\-export\\-all\\fR).\n"
      "With a command it runs that command headless and exits.\n";
  out += ".SH OPTIONS\nThe desktop app's options (\\fBdifflens\\fR without a command).\n";
  options_section(out, app.options);
  notes_section(out, app.notes);
  out += ".SH COMMANDS\n";
  for (const Command& c : commands) {
    out += ".SS \"difflens " + troff_escape(c.name) + "\"\n" + troff_escape(c.summary) + "\n";
    options_section(out, c.options);
    notes_section(out, c.notes);
  }
  out += ".SH KEYS\nIn the desktop app (its Help menu shows the same):\n.PP\n.nf\n" +
         troff_escape(app::kKeysText) + "\n.fi\n";
  out +=
      ".SH FILES\n"
      ".TP\n\\fIPREFIX\\fR/share/difflens/\n"
      "The bundled models (models/diff-small, models/diff-v2-small, models/baseline-small, their recipe\n"
      "models/train-fair.json and their card models/README.md; models/train-small.json is the recipe of\n"
      "the pair shipped before them), the needle\n"
      "haystack (haystack.txt) and the lecture script (needle-story.play: \\fBdifflens \\-\\-play\n"
      "\\fIPREFIX\\fB/share/difflens/needle-story.play\\fR); PREFIX is the folder that holds\n"
      "bin/difflens, the command (/usr for the Debian package).\n"
      ".TP\n\\fIPREFIX\\fR/share/doc/difflens/play.md\n"
      "The language of \\fB\\-\\-play\\fR scripts: one app action a line, with the needle story as its example.\n"
      ".TP\n\\fIPREFIX\\fR/lib/difflens/difflens\n"
      "The main program. \\fIPREFIX\\fR/bin/difflens prints the help texts, this page and (with a LibTorch\n"
      "built without CUDA) the version itself, without loading LibTorch, and runs it for everything else.\n"
      ".TP\n\\fIPREFIX\\fR/lib/difflens/libdifflens_spm.so\n"
      "The SentencePiece module, loaded when a model's tokenizer is a SentencePiece model.\n"
      ".TP\n\\fI$XDG_CONFIG_HOME\\fR/difflens/layout.ini\n"
      "The app's layout as last left (default ~/.config/difflens/layout.ini; \\fB\\-\\-settings\\fR names another).\n"
      ".SH ENVIRONMENT\n"
      ".TP\n.B DIFFLENS_DATA_DIR\n"
      "A folder laid out as PREFIX/share/difflens, looked in before it.\n"
      ".TP\n.B DIFFLENS_SPM_MODULE\nThe SentencePiece module's path, tried first.\n"
      ".TP\n.B DIFFLENS_FONT_DIR\n"
      "A folder searched first for DejaVu Sans and Droid Sans Fallback (exported figures and the app).\n"
      ".TP\n.B DIFFLENS_TOKEN\nThe bearer token of \\fBdifflens serve\\fR and of remote:// models.\n"
      ".TP\n.B XDG_CONFIG_HOME\nWhere the layout settings go (default ~/.config).\n"
      ".TP\n.B XDG_CACHE_HOME\nWhere a remote:// model's tokenizer is cached (default ~/.cache/difflens/remote).\n"
      ".SH SEE ALSO\n"
      "\\fBdifflens \\-\\-help\\fR, \\fBdifflens\\fR \\fICOMMAND\\fR \\fB\\-\\-help\\fR; the documentation in\n"
      "the source tree (README.md, docs/commands.md).\n";
  return out;
}

}  // namespace difflens::cli
