// The source tree's layers, read from the files themselves: core/ is one folder per library, each file
// including only its own library's headers and those of the libraries it links; viz/ includes only the
// LibTorch-free formats; core/ and viz/ never include app/, and each
// library of app/ (its sub-folders' CMakeLists.txt: difflens_app_library(NAME files...) and what NAME links)
// includes only its own headers and those of the libraries it links, directly or through them. A static
// library that includes a header of one it does not link still builds (every target sees the whole tree),
// so without this check "the server may not use the GUI" would hold only until someone broke it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/helpers.h"

namespace fs = std::filesystem;
namespace test = difflens::test;

namespace {

const fs::path kRoot = DIFFLENS_SOURCE_DIR;

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  const std::regex word(R"([A-Za-z0-9_.:$\{\}/-]+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), word); it != std::sregex_iterator(); ++it)
    out.push_back(it->str());
  return out;
}

// Every `#include "app/..."` of a file (the path after app/).
std::vector<std::string> app_includes(const fs::path& file) {
  const std::string text = test::read_all(file);
  std::vector<std::string> out;
  const std::regex inc(R"re(#include\s+"app/([^"]+)")re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), inc); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str());
  return out;
}

struct Libraries {
  std::map<std::string, std::string> owner;            // "desktop/layout.h" -> difflens_desktop_logic
  std::map<std::string, std::set<std::string>> links;  // library -> what it links (any library)
};

// The app libraries as app/*/CMakeLists.txt declare them. A header with no source file of its own
// belongs to the folder's library named in its first comment line ("(library NAME)"), else to the
// folder's first library.
Libraries read_libraries() {
  Libraries libs;
  const std::regex call(R"((difflens_app_library|target_link_libraries)\(([^)]*)\))");
  for (const auto& dir : fs::directory_iterator(kRoot / "app")) {
    if (!dir.is_directory() || !fs::exists(dir.path() / "CMakeLists.txt")) continue;
    const std::string folder = dir.path().filename().string();
    const std::string text = test::read_all(dir.path() / "CMakeLists.txt");
    std::string first;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), call); it != std::sregex_iterator(); ++it) {
      const std::vector<std::string> w = words((*it)[2].str());
      if (w.empty()) continue;
      if ((*it)[1].str() == "difflens_app_library") {
        if (first.empty()) first = w[0];
        for (size_t i = 1; i < w.size(); ++i) {
          const std::string stem = folder + "/" + fs::path(w[i]).stem().string();
          libs.owner[stem + ".cpp"] = w[0];
          libs.owner[stem + ".h"] = w[0];
        }
        libs.links[w[0]];
      } else {
        for (size_t i = 1; i < w.size(); ++i)
          if (w[i] != "PUBLIC" && w[i] != "PRIVATE" && w[i] != "INTERFACE") libs.links[w[0]].insert(w[i]);
      }
    }
    for (const auto& f : fs::directory_iterator(dir.path())) {
      const std::string name = folder + "/" + f.path().filename().string();
      if (f.path().extension() != ".h" || libs.owner.count(name)) continue;
      const std::string head = test::read_all(f.path()).substr(0, 400);
      std::smatch m;
      libs.owner[name] =
          std::regex_search(head, m, std::regex(R"(\(library (difflens_\w+)\))")) ? m[1].str() : first;
    }
  }
  return libs;
}

// What `lib` links, directly or through what it links (itself included).
using Links = std::map<std::string, std::set<std::string>>;
std::set<std::string> closure(const Links& links, const std::string& lib) {
  std::set<std::string> seen{lib};
  std::vector<std::string> todo{lib};
  while (!todo.empty()) {
    const std::string l = todo.back();
    todo.pop_back();
    const auto it = links.find(l);
    if (it == links.end()) continue;
    for (const std::string& d : it->second)
      if (seen.insert(d).second) todo.push_back(d);
  }
  return seen;
}

// Every `#include "core/FOLDER/..."` of a file: the folder.
std::vector<std::string> core_include_folders(const fs::path& file) {
  const std::string text = test::read_all(file);
  std::vector<std::string> out;
  const std::regex inc(R"re(#include\s+"core/([^"/]+)/[^"]+")re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), inc); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str());
  return out;
}

// core/'s libraries, one per folder, as core/*/CMakeLists.txt declare them (add_library,
// target_link_libraries); cuda/ is declared by the top-level CMakeLists.txt (difflens_cuda, which links no
// library of ours).
struct CoreLibraries {
  std::map<std::string, std::string> of_folder;        // "formats" -> difflens_formats
  std::map<std::string, std::set<std::string>> links;  // library -> what it links
};

CoreLibraries read_core_libraries() {
  CoreLibraries libs;
  libs.of_folder["cuda"] = "difflens_cuda";
  libs.links["difflens_cuda"];
  const std::regex call(R"((add_library|target_link_libraries)\(([^)]*)\))");
  for (const auto& dir : fs::directory_iterator(kRoot / "core")) {
    if (!dir.is_directory() || !fs::exists(dir.path() / "CMakeLists.txt")) continue;
    const std::string text = test::read_all(dir.path() / "CMakeLists.txt");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), call); it != std::sregex_iterator(); ++it) {
      const std::vector<std::string> w = words((*it)[2].str());
      if (w.empty() || w[0].rfind("difflens_", 0) != 0) continue;
      if ((*it)[1].str() == "add_library") {
        if (w.size() > 1 && w[1] == "MODULE") continue;  // the SentencePiece module: loaded, never linked
        libs.of_folder.emplace(dir.path().filename().string(), w[0]);
        libs.links[w[0]];
      } else {
        for (size_t i = 1; i < w.size(); ++i)
          if (w[i].rfind("difflens_", 0) == 0) libs.links[w[0]].insert(w[i]);
      }
    }
  }
  return libs;
}

}  // namespace

TEST_CASE("layers: core/ is one folder per library, each file including only its library's and what it links",
          "[build]") {
  const CoreLibraries libs = read_core_libraries();
  CHECK(libs.of_folder == std::map<std::string, std::string>{{"cpu", "difflens_cpu"},
                                                             {"cuda", "difflens_cuda"},
                                                             {"formats", "difflens_formats"},
                                                             {"model", "difflens_core"}});
  // The arrows the folders exist for: the readers and the CPU kernels link no Model (nor LibTorch).
  CHECK(closure(libs.links, "difflens_formats") == std::set<std::string>{"difflens_formats"});
  CHECK(closure(libs.links, "difflens_cpu") == std::set<std::string>{"difflens_cpu", "difflens_formats"});
  CHECK(closure(libs.links, "difflens_core").count("difflens_cpu") == 1);
  // Only the CMakeLists.txt and the formats' reference sit in core/ itself.
  for (const auto& f : fs::directory_iterator(kRoot / "core"))
    if (f.is_regular_file()) {
      INFO(f.path());
      CHECK((f.path().filename() == "CMakeLists.txt" || f.path().filename() == "FORMATS.md"));
    }
  size_t files = 0;
  const std::regex torch(R"re(#include\s+<(torch|ATen|c10)/)re");
  for (const auto& [folder, lib] : libs.of_folder) {
    const std::set<std::string> allowed = closure(libs.links, lib);
    for (const auto& f : fs::recursive_directory_iterator(kRoot / "core" / folder)) {
      const std::string ext = f.path().extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".inc") continue;
      ++files;
      INFO(f.path());
      for (const std::string& inc : core_include_folders(f.path())) {
        INFO("includes core/" << inc << "/");
        const auto target = libs.of_folder.find(inc);
        REQUIRE(target != libs.of_folder.end());
        CHECK(allowed.count(target->second) == 1);
      }
      // LibTorch's headers only in the Model's folder (and the CUDA kernels' own runtime there).
      if (lib != "difflens_core") CHECK_FALSE(std::regex_search(test::read_all(f.path()), torch));
    }
  }
  CHECK(files > 70);
  // viz/ links difflens_formats alone (viz/CMakeLists.txt): it includes nothing else of core/.
  for (const auto& f : fs::recursive_directory_iterator(kRoot / "viz")) {
    const std::string ext = f.path().extension().string();
    if (ext != ".h" && ext != ".cpp") continue;
    INFO(f.path());
    for (const std::string& inc : core_include_folders(f.path())) CHECK(inc == "formats");
  }
}

TEST_CASE("layers: core and viz never include app, and each app library only what it links", "[build]") {
  for (const char* lower : {"core", "viz"})
    for (const auto& f : fs::recursive_directory_iterator(kRoot / lower)) {
      const std::string ext = f.path().extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".cu") continue;
      INFO(f.path());
      CHECK(app_includes(f.path()).empty());
    }

  const Libraries libs = read_libraries();
  // The parts as docs/development.md maps them; a new library must be added there and here.
  for (const char* lib : {"difflens_app_base", "difflens_app_common", "difflens_remote", "difflens_worker",
                          "difflens_reports", "difflens_desktop_logic", "difflens_desktop", "difflens_cli"})
    CHECK(libs.links.count(lib) == 1);
  // The launcher's part links no Model, so no LibTorch: core's CPU kernels and readers at most.
  CHECK(closure(libs.links, "difflens_app_base").count("difflens_core") == 0);
  CHECK(closure(libs.links, "difflens_app_base").count("difflens_app_common") == 0);
  // The rules the split exists for.
  CHECK(closure(libs.links, "difflens_remote").count("difflens_desktop") == 0);  // the server has no GUI
  CHECK(closure(libs.links, "difflens_remote").count("difflens_worker") == 0);   // nor the app's worker
  CHECK(closure(libs.links, "difflens_reports").count("difflens_worker") == 0);
  CHECK(closure(libs.links, "difflens_desktop").count("difflens_cli") == 0);

  size_t files = 0;
  for (const auto& f : fs::recursive_directory_iterator(kRoot / "app")) {
    const std::string ext = f.path().extension().string();
    if (ext != ".h" && ext != ".cpp") continue;
    const std::string name = fs::relative(f.path(), kRoot / "app").string();
    if (name == "main.cpp") continue;  // the main program links everything
    ++files;
    INFO(name);
    // The launcher (app/CMakeLists.txt) links difflens_app_base alone; every other file belongs to a library
    // of its folder.
    const auto owner = libs.owner.find(name);
    REQUIRE((name == "launcher.cpp" || owner != libs.owner.end()));
    const std::set<std::string> allowed =
        closure(libs.links, name == "launcher.cpp" ? std::string("difflens_app_base") : owner->second);
    for (const std::string& inc : app_includes(f.path())) {
      INFO("includes app/" << inc);
      const auto target = libs.owner.find(inc);
      REQUIRE(target != libs.owner.end());
      CHECK(allowed.count(target->second) == 1);
    }
  }
  CHECK(files > 80);
}
