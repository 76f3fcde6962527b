// difflens's main program (PREFIX/lib/difflens/difflens; the launcher PREFIX/bin/difflens, app/launcher.cpp,
// runs it for everything but the texts it prints itself). Dispatches to the headless CLI; user errors become
// a message + exit 1.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include "app/cli/cli.h"
#include "app/common/files.h"
#include "core/formats/atomic_file.h"
#include "core/formats/error.h"
#include "core/model/model.h"

int main(int argc, char** argv) {
  difflens::tune_allocator();  // before any thread: the inference worker must share the tuned heap
  try {
    // A build step, not a command: the launcher's texts (app/CMakeLists.txt runs it).
    if (argc == 3 && std::strcmp(argv[1], "--write-launcher-texts") == 0) {
      // Rewritten only when the texts changed: a relink of this program recompiles no launcher.
      const std::string texts = difflens::cli::launcher_texts_source();
      if (!std::filesystem::exists(argv[2]) || difflens::cli::read_file(argv[2], "launcher texts") != texts)
        difflens::write_file_atomically(argv[2], texts);
      return 0;
    }
    const int status = difflens::cli::run(argc, argv);
    // What the command printed must have arrived (> /dev/full, a closed pipe, a full disk): else it failed.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "difflens: writing to standard output failed: %s\n", std::strerror(errno));
      return status == 0 ? 1 : status;
    }
    return status;
  } catch (const difflens::Cancelled&) {
    std::fprintf(stderr, "difflens: cancelled\n");
    return 130;
  } catch (const difflens::Error& e) {
    std::fprintf(stderr, "difflens: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "difflens: internal error: %s\n", difflens::user_message(e).c_str());
    return 3;
  }
}
