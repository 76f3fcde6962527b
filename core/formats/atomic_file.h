// Files written whole or not at all: the bytes go to a temporary file beside the target, which is renamed
// over it only once complete. A failure (a full disk, a file-size limit, an unwritable folder) leaves any
// earlier file intact, removes the temporary, and throws Error naming the file and the system's reason.
// Every file DiffLens writes for a user (exports, pages, bundles, reports, settings) goes through it;
// safetensors files do the same in their own streaming writer. No LibTorch.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace difflens {

void write_file_atomically(const std::filesystem::path& path, const std::string& bytes);

// The temporary file beside `path` a write goes through (unique per process and call).
std::filesystem::path temporary_beside(const std::filesystem::path& path);

// Removes `path` and everything below it, not following symbolic links (a link goes, its target stays); a
// path that does not exist is no error. Plain POSIX (nftw), not std::filesystem::remove_all: PyTorch 2.x's
// libtorch_cpu.so defines its own unversioned std::filesystem, and binaries whose remove_all bound there
// crashed in it on a GPU server (docs/development.md, "PyTorch's LibTorch"). Returns false and sets `ec` (the
// first failure) when something could not be removed.
bool remove_tree(const std::filesystem::path& path, std::error_code& ec);

}  // namespace difflens
