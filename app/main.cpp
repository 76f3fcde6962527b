// difflens: the executable. Dispatches to the headless CLI; user errors become a message + exit 1.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "app/cli/cli.h"
#include "core/formats/error.h"
#include "core/model/model.h"

int main(int argc, char** argv) {
  difflens::tune_allocator();  // before any thread: the inference worker must share the tuned heap
  try {
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
