// The difflens command line: `difflens [options]` opens the desktop app, `difflens COMMAND [options]` runs a
// headless command. Each command is a table of its options beside the code that reads them (app/cli/:
// model_commands, measure_commands, figure_commands, train_command, gui_command, ...); this file dispatches
// and prints the overview. Errors from core (difflens::Error) are caught in main() and printed; the exit
// status is non-zero.
#include "app/cli/cli.h"

#include <cstdio>
#include <string>

#include "app/cli/commands.h"
#include "app/cli/man_page.h"
#include "app/cli/options.h"
#include "app/common/cores.h"
#include "app/common/version.h"
#include "core/formats/error.h"
#include "core/model/model.h"

namespace difflens::cli {
namespace {

bool is_help(const std::string& word) {
  return word == "--help" || word == "-h" || word == "help";
}

// `difflens --help`: the app's options, then one line per command.
std::string overview() {
  std::string out =
      "DiffLens - Differential Transformer vs baseline attention explorer\n\n"
      "usage: difflens [options]             open the desktop app (the bundled models by default)\n"
      "       difflens COMMAND [options]     a headless command\n"
      "       difflens COMMAND --help        its options\n"
      "       difflens --version             the version, LibTorch, CPU, GPUs\n\n";
  const std::string app = command_usage(gui_command());
  out += "desktop app " + app.substr(app.find("options:\n"));
  out += "\ncommands:\n";
  for (const Command& c : all_commands()) {
    std::string line = "  " + c.name + std::string(c.name.size() < 11 ? 11 - c.name.size() : 1, ' ');
    // The summary, wrapped under itself at 100 columns.
    size_t column = line.size();
    for (size_t i = 0; i < c.summary.size();) {
      size_t end = c.summary.find(' ', i);
      if (end == std::string::npos) end = c.summary.size();
      if (column > 13 && column + 1 + (end - i) > 100) {
        line += "\n" + std::string(13, ' ');
        column = 13;
      } else if (column > 13) {
        line += ' ';
        ++column;
      }
      line += c.summary.substr(i, end - i);
      column += end - i;
      i = end + 1;
    }
    out += line + "\n";
  }
  out +=
      "\nMore in docs/commands.md; every view of the app has a headless path (--view, --screenshot, "
      "--export-all).\n";
  return out;
}

}  // namespace

int run(int argc, char** argv) {
  if (argc == 2 && (std::string(argv[1]) == "--version" || std::string(argv[1]) == "-V")) {
    std::printf("%s\n", version_line().c_str());
    return 0;
  }
  if (argc >= 2 && is_help(argv[1])) {
    if (argc >= 3) {  // difflens help COMMAND
      for (const Command& c : all_commands())
        if (c.name == argv[2]) return std::fputs(command_usage(c).c_str(), stdout), 0;
      throw Error(std::string("no command '") + argv[2] + "' (difflens --help lists them)");
    }
    std::fputs(overview().c_str(), stdout);
    return 0;
  }
  const bool app = argc < 2 || std::string(argv[1]).rfind("--", 0) == 0;
  const std::string name = app ? "" : argv[1];
  std::string names;
  for (const Command& c : app ? std::vector<Command>{gui_command()} : all_commands()) {
    if (c.name == name) {
      const int first = app ? 1 : 2;
      for (int i = first; i < argc; ++i)
        if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
          std::fputs((app ? overview() : command_usage(c)).c_str(), stdout);
          return 0;
        }
      return c.run(Args(c, argc, argv, first));
    }
    names += (names.empty() ? "" : ", ") + c.name;
  }
  throw Error("unknown command '" + name + "' (commands: " + names + "; difflens --help shows them)");
}

// A C++ string literal of `text`, one source line per line of text: every byte outside printable ASCII, and
// the quote and the backslash, as a three-digit octal escape (so no digit after it can extend it).
std::string cpp_literal(const std::string& text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n\"";
      if (i + 1 < text.size()) out += "\n    \"";
    } else if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '?') {  // '?': no trigraph
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\%03o", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.empty() || text.back() != '\n') out += '"';
  return out;
}

std::string launcher_texts_source() {
  // The one text that depends on the machine: --threads' default ("every core, 2 here)"), marked for the
  // launcher to fill in with its own count.
  const std::string here = "every core, " + std::to_string(default_threads()) + " here)";
  const std::string marked = std::string("every core, ") + difflens::kThreadsMark + " here)";
  auto mark = [&](std::string text) {
    for (size_t at = text.find(here); at != std::string::npos; at = text.find(here, at + marked.size()))
      text.replace(at, here.size(), marked);
    return text;
  };
  std::string out =
      "// Written at build time by the main program (difflens --write-launcher-texts FILE), from its option\n"
      "// tables: what the launcher (app/launcher.cpp) prints without loading LibTorch. Not in the sources.\n"
      "#pragma once\n\nnamespace difflens::launcher {\n\n";
  out += "constexpr char kOverview[] =\n    " + cpp_literal(mark(overview())) + ";\n\n";
  out +=
      "struct CommandText {\n  const char* name;\n  const char* usage;\n};\nconstexpr CommandText kCommands[] = {\n";
  for (const Command& c : all_commands())
    out += "    {" + cpp_literal(c.name) + ",\n     " + cpp_literal(mark(command_usage(c))) + "},\n";
  out += "};\n\n";
  out += "constexpr char kManPage[] =\n    " +
         cpp_literal(man_page(gui_command(), all_commands(), "DiffLens " + version_number())) + ";\n\n";
  out += "constexpr char kLibTorch[] = " + cpp_literal(libtorch_version()) + ";\n\n";
  out += "}  // namespace difflens::launcher\n";
  return out;
}

const std::vector<Command>& all_commands() {
  static const std::vector<Command> commands = [] {
    std::vector<Command> all;
    for (auto family : {model_commands, measure_commands, batch_commands, figure_commands, train_commands,
                        serve_commands, lens_commands, patch_commands, soak_commands, install_commands})
      for (Command& c : family()) all.push_back(std::move(c));
    return all;
  }();
  return commands;
}

}  // namespace difflens::cli
