// Which DiffLens this is, without LibTorch: the version number and the version line for a LibTorch version
// and the GPUs it sees, given (the launcher, app/launcher.cpp, and version.h's version_line() share it).
#pragma once

#include <string>
#include <vector>

namespace difflens {

// "0.1.0": project() in the top-level CMakeLists.txt, the one place the version is written.
std::string version_number();
// "DiffLens 0.1.0 (commit C), LibTorch L, CPU AVX2, CUDA: GPUS or no GPU, SentencePiece module PATH": the
// version, the git commit built from (when known; "modified" when the tree had uncommitted changes), the
// LibTorch version given, the CPU instruction set the attention pass uses, the GPUs given, and the
// SentencePiece module found (or why none was). The launcher prints it for a build whose LibTorch has no CUDA
// (it sees no GPU, ever).
std::string version_line_for(const std::string& libtorch, const std::vector<std::string>& gpus);

}  // namespace difflens
