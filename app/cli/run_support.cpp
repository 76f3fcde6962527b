// A running command's lines and stops: progress on a terminal or in a log, DIFFLENS_QUICK, Ctrl-C, loading a
// model with both.
#include "app/cli/run_support.h"

#include <unistd.h>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/formats/error.h"

namespace difflens::cli {

void progress(const char* format, ...) {
  char line[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  if (isatty(fileno(stderr)))
    std::fprintf(stderr, "\r%s   ", line);
  else
    std::fprintf(stderr, "%s\n", line);
  std::fflush(stderr);
}

void progress_done() {
  if (isatty(fileno(stderr))) std::fprintf(stderr, "\n");
}

bool quick_mode() {
  const char* v = std::getenv("DIFFLENS_QUICK");
  return v && *v && std::string(v) != "0";
}

int64_t quick_cap(const char* what, int64_t value, int64_t cap) {
  if (!quick_mode() || value <= cap) return value;
  std::fprintf(stderr, "DIFFLENS_QUICK: %s %lld -> %lld\n", what, static_cast<long long>(value),
               static_cast<long long>(cap));
  return cap;
}

std::string mb(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::atomic<bool> g_stop{false};

void on_interrupt(int) {
  g_stop = true;
}

Model load_model(const std::string& dir, DeviceChoice device) {
  auto previous = std::signal(SIGINT, on_interrupt);
  bool shown = false;
  try {
    Model m = Model::load(
        dir, device,
        [&](int64_t done, int64_t total) {
          if (total < 50 || !isatty(2)) return;  // a live line for people, nothing for logs
          std::fprintf(stderr, "\rloading %s: %lld/%lld tensors", dir.c_str(), static_cast<long long>(done),
                       static_cast<long long>(total));
          shown = true;
        },
        &g_stop);
    if (shown) std::fprintf(stderr, "\n");
    std::signal(SIGINT, previous);
    return m;
  } catch (const Cancelled&) {
    std::signal(SIGINT, previous);
    throw Error("loading " + dir + " stopped by Ctrl-C");
  } catch (...) {
    if (shown) std::fprintf(stderr, "\n");
    std::signal(SIGINT, previous);
    throw;
  }
}

}  // namespace difflens::cli
