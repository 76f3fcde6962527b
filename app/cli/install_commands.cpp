// What an installed DiffLens is made of, as commands: `version` (also `difflens --version`), `man` (the
// manual page from the option tables) and `icon` (the icon drawn by viz/icon). The build runs `man` and
// `icon` to make the files `cmake --install` and the Debian package install.
#include <cstdio>
#include <filesystem>

#include "app/cli/commands.h"
#include "app/cli/man_page.h"
#include "app/cli/options.h"
#include "app/cli/paths.h"
#include "app/common/version.h"
#include "core/formats/atomic_file.h"
#include "core/formats/error.h"
#include "viz/export.h"
#include "viz/icon.h"

namespace difflens::cli {
namespace {

int cmd_version(const Args&) {
  std::printf("%s\n", version_line().c_str());
  return 0;
}

int cmd_man(const Args& a) {
  const std::string page = man_page(gui_command(), all_commands(), "DiffLens " + version_number());
  if (!a.has("out")) return std::fputs(page.c_str(), stdout), 0;
  const std::filesystem::path out = a.get("out");
  check_output_file(out.string(), "--out", {});  // a folder, or a file where its folder belongs: named
  write_file_atomically(out, page);
  std::printf("wrote %s\n", out.string().c_str());
  return 0;
}

int cmd_icon(const Args& a) {
  const std::filesystem::path dir = a.require("out");
  check_output_dir(dir.string(), "--out");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!std::filesystem::is_directory(dir))
    throw Error(dir.string() + ": cannot make the folder" + (ec ? " (" + ec.message() + ")" : ""));
  std::vector<int> sizes = a.get_int_list("sizes");
  if (sizes.empty()) sizes = {48, 256};
  for (const int size : sizes) {
    const std::filesystem::path png = dir / ("difflens-" + std::to_string(size) + ".png");
    viz::write_png_rgba(png, viz::render_icon(size), size, size);
    std::printf("wrote %s (%dx%d)\n", png.string().c_str(), size, size);
  }
  write_file_atomically(dir / "difflens.svg", viz::icon_svg());
  std::printf("wrote %s\n", (dir / "difflens.svg").string().c_str());
  return 0;
}

}  // namespace

std::vector<Command> install_commands() {
  return {
      {"version",
       "print the version, the commit built from, LibTorch, the CPU's instruction set, the GPUs and "
       "the SentencePiece module (as difflens --version)",
       {},
       "",
       cmd_version},
      {"man",
       "write the manual page (troff) made from these option tables; man -l FILE shows it",
       {text("out", "FILE", "where to write it (default: standard output)")},
       "",
       cmd_man},
      {"icon",
       "draw DiffLens's icon (A1, A2 and A1 - lambda A2 of a small head in the app's colour maps) as PNGs "
       "and an SVG",
       {required(text("out", "DIR", "the folder for difflens-SIZE.png and difflens.svg")),
        int_list("sizes", "N,...", 16, 1024, 1, 8, "the PNGs' sizes in pixels [default 48,256]")},
       "",
       cmd_icon}};
}

}  // namespace difflens::cli
