// A running command's lines and stops: progress on a terminal or in a log, DIFFLENS_QUICK, Ctrl-C, loading a
// model with both.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include "core/formats/config.h"
#include "core/model/model.h"

namespace difflens::cli {

// A progress update on stderr: on a terminal one line rewritten in place ("\r"), ended by progress_done();
// in a log (not a terminal) one whole line per update, so that no "\r" lands in a file.
void progress(const char* format, ...) __attribute__((format(printf, 1, 2)));
void progress_done();

// DIFFLENS_QUICK=1 (set by the docs-examples test, docs/development.md): commands whose examples would
// take minutes shrink their sizes. quick_cap returns min(value, cap) in quick mode, else value, and says
// on stderr what it shrank ("DIFFLENS_QUICK: steps 8000 -> 2").
bool quick_mode();
int64_t quick_cap(const char* what, int64_t value, int64_t cap);
std::string mb(size_t bytes);  // "12.3 MB"

// Set by SIGINT (and SIGTERM while training) once a command installs on_interrupt.
extern std::atomic<bool> g_stop;
void on_interrupt(int);
// Model::load with a progress line on a terminal for checkpoints of over 50 tensors, and Ctrl-C to stop.
Model load_model(const std::string& dir, DeviceChoice device);

}  // namespace difflens::cli
