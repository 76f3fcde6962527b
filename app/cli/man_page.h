// difflens.1, the manual page, written from the command line's own tables (app/common/options.h): every
// command and option with its value, range and default exactly as `--help` prints them, so the two cannot
// drift. A build step runs `difflens man --out build/app/difflens.1`; `man -l` renders it.
#pragma once

#include <string>
#include <vector>

#include "app/cli/options.h"

namespace difflens::cli {

// The page in troff (man macros): NAME, SYNOPSIS, DESCRIPTION, the desktop app's OPTIONS, COMMANDS (each
// with its options and notes), FILES, ENVIRONMENT, SEE ALSO. `version` heads the page's footer.
std::string man_page(const Command& app, const std::vector<Command>& commands, const std::string& version);

// An option's help as the page gives it: --help's words, less what they say of the machine they run on.
std::string man_option_help(const Option& o);

// Text made safe for troff: backslashes, a leading '.' or '\'', and '-' (as \-, so that options can be
// searched and copied) escaped.
std::string troff_escape(const std::string& text);

}  // namespace difflens::cli
