// A whole file read for the app, the commands and the worker (app/common).
#pragma once

#include <string>

namespace difflens::cli {

// A whole file; refuses one over half the memory available. `what` names it in messages.
std::string read_file(const std::string& path, const char* what = "prompt file");

}  // namespace difflens::cli
