// Entry point of the headless command-line interface.
#pragma once

#include <string>

namespace difflens::cli {

// Runs `difflens COMMAND ...`; returns the exit status. Throws difflens::Error on user errors.
int run(int argc, char** argv);

// The texts the launcher (app/launcher.cpp) prints without loading LibTorch, as a C++ header the build
// writes (`difflens --write-launcher-texts FILE`, run by the main program): the overview (--help), each
// command's usage (COMMAND --help), the manual page and LibTorch's version. The one machine-dependent
// number, --threads' default core count, is written as kThreadsMark (app/common/cores.h) for the launcher
// to fill in.
std::string launcher_texts_source();
// `text` as a C++ string literal (non-ASCII, control bytes, quotes, backslashes and '?' escaped in octal).
std::string cpp_literal(const std::string& text);

}  // namespace difflens::cli
