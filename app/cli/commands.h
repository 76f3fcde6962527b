// The command line's commands, by family: each family's file (app/cli/*_command(s).cpp) keeps its commands'
// option tables beside the code that reads them; cli.cpp dispatches on the command word.
#pragma once

#include <vector>

#include "app/cli/options.h"

namespace difflens::cli {

// The commands, by family (each file keeps its commands' tables beside the code that reads them).
std::vector<Command> model_commands();    // capture, init-pair, generate, tokenize, info, convert
std::vector<Command> measure_commands();  // needle, outliers, quantize, loss, bench
std::vector<Command> batch_commands();    // batch
std::vector<Command> figure_commands();   // render, explain
std::vector<Command> train_commands();    // train
std::vector<Command> serve_commands();    // serve
std::vector<Command> soak_commands();     // soak
std::vector<Command> lens_commands();     // lens
std::vector<Command> patch_commands();    // patch
std::vector<Command> install_commands();  // version, man, icon
Command gui_command();                    // the desktop app's options (no command word)
// Every command in the order `difflens --help` lists them.
const std::vector<Command>& all_commands();

}  // namespace difflens::cli
