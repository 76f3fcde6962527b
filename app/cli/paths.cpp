// Where the bundled assets are, and output paths checked before any work.
#include "app/cli/paths.h"

#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/formats/error.h"

namespace difflens::cli {

std::vector<std::filesystem::path> data_dirs() {
  std::vector<std::filesystem::path> dirs;
  if (const char* env = std::getenv("DIFFLENS_DATA_DIR"); env && *env) dirs.emplace_back(env);
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    // Installed: the main program PREFIX/lib/difflens/difflens, or a program in PREFIX/bin (a test in
    // build/tests), beside PREFIX/share/difflens; a build tree links its own.
    std::filesystem::path prefix =
        std::filesystem::path(std::string(exe, static_cast<size_t>(n))).parent_path();
    if (prefix.filename() == "difflens" && prefix.parent_path().filename() == "lib")
      prefix = prefix.parent_path();
    dirs.push_back(prefix.parent_path() / "share" / "difflens");
  }
  return dirs;
}

std::string default_export_dir(bool cwd_writable, const char* home) {
  if (cwd_writable || !home || !*home) return "";
  return (std::filesystem::path(home) / "difflens-exports").string();
}

std::string bundled_asset(const std::string& relative) {
  std::string tried;
  for (const auto& dir : data_dirs()) {
    std::error_code ec;
    if (std::filesystem::exists(dir / relative, ec))
      return std::filesystem::weakly_canonical(dir / relative).string();
    tried += "\n  " + (dir / relative).string();
  }
  throw Error("the bundled " + relative + " was not found; looked in:" + tried +
              "\n(set DIFFLENS_DATA_DIR to a folder laid out as PREFIX/share/difflens, or name the file)");
}

std::string bundled_model(const char* name) {
  return bundled_asset(std::string("models/") + name);
}

void check_output_dir(const std::string& path, const char* flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string named = std::string(flag) + " " + path;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec))
    throw Error(named + ": is a file; give a folder (it is created when missing)");
  // Nothing is created here (a command refused later leaves no empty folder behind): the folder, or the
  // nearest part of its path that exists, must be a folder this process can write into.
  fs::path existing = fs::path(path).lexically_normal();
  while (!existing.empty() && !fs::exists(existing, ec)) existing = existing.parent_path();
  if (existing.empty()) existing = ".";
  if (!fs::is_directory(existing, ec))
    throw Error(named + ": " + existing.string() + " is a file, so the folder cannot be created there");
  if (access(existing.c_str(), W_OK | X_OK) != 0)
    throw Error(named + ": " + existing.string() + " is not writable");
}

std::string lowercase_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

void check_output_file(const std::string& path, const char* flag,
                       const std::vector<std::string>& extensions) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw Error(std::string(flag) + ": give a file name");
  if (fs::is_directory(path, ec))
    throw Error(std::string(flag) + " " + path + ": is a folder; give a file name");
  const std::string ext = lowercase_extension(path);
  if (!extensions.empty() && std::find(extensions.begin(), extensions.end(), ext) == extensions.end()) {
    std::string list;
    for (const auto& e : extensions) list += (list.empty() ? "" : " or ") + e;
    throw Error(std::string(flag) + " " + path + ": writes " + list + " files; name it " +
                fs::path(path).replace_extension(extensions.front()).string());
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) check_output_dir(parent.string(), flag);
}

}  // namespace difflens::cli
