// Which DiffLens this is, in one line: `difflens --version`, `difflens version` and Help > About print it.
#pragma once

#include <string>

#include "app/common/version_text.h"

namespace difflens {

// version_line_for() with what LibTorch says of itself: its version and the GPUs it sees.
std::string version_line();

}  // namespace difflens
