// Which DiffLens this is, in one line: `difflens --version`, `difflens version` and Help > About print it.
#pragma once

#include <string>

namespace difflens {

// "0.1.0": project() in the top-level CMakeLists.txt, the one place the version is written.
std::string version_number();
// The version, the git commit built from (when known; "modified" when the tree had uncommitted changes),
// LibTorch's version, the CPU instruction set the attention pass uses, the GPUs LibTorch sees (or none),
// and the SentencePiece module found (or why none was).
std::string version_line();

}  // namespace difflens
