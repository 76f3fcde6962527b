// difflens as a user runs it (PREFIX/bin/difflens): a launcher without LibTorch. It prints the texts that
// need no model itself - `difflens --help`, `difflens COMMAND --help`, `difflens help [COMMAND]`, `difflens
// man` to standard output and, where this build's LibTorch has no CUDA (so it can see no GPU), `difflens
// --version`
// - which spares them LibTorch's ~0.4 s of loading (docs/benchmarks.md, start-up). Everything else it hands
// to the main program, PREFIX/lib/difflens/difflens (app/main.cpp), by exec: same arguments, environment,
// standard streams and exit status. The texts are the main program's own, written at build time
// (`--write-launcher-texts`, app/cli/cli.h); the tests compare the two programs' answers.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "app/common/cores.h"
#include "app/common/version_text.h"
#include "difflens_launcher_texts.h"

namespace {

using difflens::launcher::kCommands;

bool is_help_flag(const char* word) {
  return std::strcmp(word, "--help") == 0 || std::strcmp(word, "-h") == 0;
}

const char* usage_of(const char* name) {
  for (const auto& c : kCommands)
    if (std::strcmp(c.name, name) == 0) return c.usage;
  return nullptr;
}

// A text with --threads' default filled in: the cores this process may run on, as the main program counts.
std::string with_threads(const char* text) {
  std::string out = text;
  const std::string n = std::to_string(difflens::default_threads());
  for (size_t at = out.find(difflens::kThreadsMark); at != std::string::npos;
       at = out.find(difflens::kThreadsMark, at + n.size()))
    out.replace(at, 1, n);
  return out;
}

// The text the main program would print for these arguments, where it needs nothing of LibTorch; false when
// the main program must run (a command, the app, a mistake it explains).
bool own_text(int argc, char** argv, std::string& text) {
  if (argc < 2) return false;  // the desktop app
  const char* first = argv[1];
  if (std::strcmp(first, "--write-launcher-texts") == 0) return false;  // the build step (app/main.cpp)
#if DIFFLENS_LAUNCHER_VERSION
  if (argc == 2 && (std::strcmp(first, "--version") == 0 || std::strcmp(first, "-V") == 0 ||
                    std::strcmp(first, "version") == 0)) {
    text = difflens::version_line_for(difflens::launcher::kLibTorch, {}) + "\n";
    return true;
  }
#endif
  if (is_help_flag(first) || std::strcmp(first, "help") == 0) {  // difflens help [COMMAND]
    const char* usage = argc >= 3 ? usage_of(argv[2]) : difflens::launcher::kOverview;
    if (!usage) return false;  // no such command: the main program says so
    text = with_threads(usage);
    return true;
  }
  const bool app = std::strncmp(first, "--", 2) == 0;  // the desktop app's options
  const char* usage = app ? difflens::launcher::kOverview : usage_of(first);
  if (!usage) return false;
  for (int i = app ? 1 : 2; i < argc; ++i)
    if (is_help_flag(argv[i])) {
      text = with_threads(usage);
      return true;
    }
  if (!app && argc == 2 && std::strcmp(first, "man") == 0) {
    text = difflens::launcher::kManPage;
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string text;
  if (own_text(argc, argv, text)) {
    // What was printed must have arrived (> /dev/full, a closed pipe): else it failed, as in the main
    // program.
    if (std::fputs(text.c_str(), stdout) < 0 || std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "difflens: writing to standard output failed: %s\n", std::strerror(errno));
      return 1;
    }
    return 0;
  }
  // The main program: PREFIX/lib/difflens/difflens for this PREFIX/bin/difflens (a build tree has the same
  // layout: build/app/difflens and build/lib/difflens/difflens).
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::fprintf(stderr, "difflens: cannot find this executable (/proc/self/exe): %s\n",
                 std::strerror(errno));
    return 127;
  }
  const std::filesystem::path main_program =
      std::filesystem::path(std::string(self, static_cast<size_t>(n))).parent_path().parent_path() / "lib" /
      "difflens" / "difflens";
  ::execv(main_program.c_str(), argv);
  const int err = errno;
  std::fprintf(stderr, "difflens: cannot run the main program %s: %s%s\n", main_program.c_str(),
               std::strerror(err), err == ENOENT ? " (DiffLens is installed in part: install it again)" : "");
  return err == ENOENT ? 127 : 126;
}
