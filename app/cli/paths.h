// Where the bundled assets are, and output paths checked before any work.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace difflens::cli {

// Where the bundled assets are looked for, in order - the one rule for an installed tree and a build tree:
// $DIFFLENS_DATA_DIR when set, then PREFIX/share/difflens for the main program at
// PREFIX/lib/difflens/difflens (or a program at PREFIX/bin/...; a build tree has build/share/difflens, a link
// to the source tree's assets/). An installed tree copied to another prefix still finds its own.
std::vector<std::filesystem::path> data_dirs();
// The app's export folder when none is given: "" (the app's own ./difflens-exports) where the working folder
// is writable, else HOME/difflens-exports (the desktop menu may start the app in /); "" without a HOME.
std::string default_export_dir(bool cwd_writable, const char* home);
// A bundled asset (e.g. "models/diff-small", "haystack.txt") under the first of data_dirs() that has it;
// an Error listing every place looked in when none does.
std::string bundled_asset(const std::string& relative);
std::string bundled_model(const char* name);

// Output paths, checked before any work so that a long run never fails at its end. An output folder
// (`flag` names it in messages, e.g. "--out"): refused when it is a file or cannot be created or written;
// created. An output file: refused when it is a folder, when its folder cannot be created, or when its
// extension is not one of `extensions` (".png", ".svg"; empty: any).
void check_output_dir(const std::string& path, const char* flag);
std::string lowercase_extension(const std::string& path);  // "F.SVG" -> ".svg"
void check_output_file(const std::string& path, const char* flag, const std::vector<std::string>& extensions);

}  // namespace difflens::cli
