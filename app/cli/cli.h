// Entry point of the headless command-line interface.
#pragma once

namespace difflens::cli {

// Runs `difflens COMMAND ...`; returns the exit status. Throws difflens::Error on user errors.
int run(int argc, char** argv);

}  // namespace difflens::cli
