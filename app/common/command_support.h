// What the commands, the worker and the panels share (app/common): option rows several commands take, where
// the bundled assets are, output checks, threads, progress lines, prompts, and loading a model with progress
// and Ctrl-C. The command tables themselves are in app/cli/commands.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "app/common/options.h"
#include "core/formats/config.h"
#include "core/formats/intervention.h"
#include "core/model/model.h"

namespace difflens::cli {

// Option rows several commands take, written once.
Option threads_option();                            // --threads N (absent: LibTorch's default)
Option device_option(const std::string& fallback);  // --device auto|cpu|cuda
Option models_option(const std::string& help);      // --models DIR1,DIR2,...
Option prompt_option();                             // --prompt TEXT
Option prompt_file_option();                        // --prompt-file F
Option specials_option();                           // --specials match|text
Option answer_option();                             // --answer BEGIN,END (half-open)
Option pooled_budget_option(const std::string& fallback);
Option haystack_option();
// --intervene SPEC (repeatable; core/formats/intervention.h) and --query I (the knockout presets' rows start
// there).
Option intervene_option();
Option query_option();
// --hidden, --layers, --heads, --kv-heads, --vocab: the shape of a matched pair (init-pair, bench), and
// the PairSpec they give.
std::vector<Option> pair_shape_options();
PairSpec pair_spec(const Args& a);

// Where the bundled assets are looked for, in order - the one rule for an installed tree and a build tree:
// $DIFFLENS_DATA_DIR when set, then PREFIX/share/difflens for the binary at PREFIX/bin/difflens (a build
// tree has build/share/difflens, a link to the source tree's assets/). An installed tree copied to another
// prefix still finds its own.
std::vector<std::filesystem::path> data_dirs();
// The app's export folder when none is given: "" (the app's own ./difflens-exports) where the working folder
// is writable, else HOME/difflens-exports (the desktop menu may start the app in /); "" without a HOME.
std::string default_export_dir(bool cwd_writable, const char* home);
// A bundled asset (e.g. "models/diff-small", "haystack.txt") under the first of data_dirs() that has it;
// an Error listing every place looked in when none does.
std::string bundled_asset(const std::string& relative);
std::string bundled_model(const char* name);

// A whole file; refuses one over half the memory available. `what` names it in messages.
std::string read_file(const std::string& path, const char* what = "prompt file");
// Output paths, checked before any work so that a long run never fails at its end. An output folder
// (`flag` names it in messages, e.g. "--out"): refused when it is a file or cannot be created or written;
// created. An output file: refused when it is a folder, when its folder cannot be created, or when its
// extension is not one of `extensions` (".png", ".svg"; empty: any).
void check_output_dir(const std::string& path, const char* flag);
std::string lowercase_extension(const std::string& path);  // "F.SVG" -> ".svg"
void check_output_file(const std::string& path, const char* flag, const std::vector<std::string>& extensions);

// The CPU threads a command uses: --threads N, else every core this process may run on (as the app does).
void apply_threads(const Args& a);
int default_threads();

// A progress update on stderr: on a terminal one line rewritten in place ("\r"), ended by progress_done();
// in a log (not a terminal) one whole line per update, so that no "\r" lands in a file.
void progress(const char* format, ...) __attribute__((format(printf, 1, 2)));
void progress_done();

// DIFFLENS_QUICK=1 (set by the docs-examples test, docs/development.md): commands whose examples would
// take minutes shrink their sizes. quick_cap returns min(value, cap) in quick mode, else value, and says
// on stderr what it shrank ("DIFFLENS_QUICK: steps 8000 -> 2").
bool quick_mode();
int64_t quick_cap(const char* what, int64_t value, int64_t cap);
DeviceChoice device(const Args& a);
// --models as a list (default: the bundled DIFF and baseline pair). `exactly` > 0 requires that many;
// `expects` names them in the message ("DIFF_DIR,BASELINE_DIR").
std::vector<std::string> model_dirs(const Args& a, size_t exactly = 0, const char* expects = "");
// The prompt's ids from exactly one of --prompt, --prompt-file, --token-ids (where the table has it).
std::vector<int64_t> prompt_ids(const Args& a, const Model& model);
// The text of --prompt or --prompt-file (exactly one).
std::string prompt_text(const Args& a);
// --specials: how special tokens written in the prompt are read (match when the command has no such option).
Specials prompt_specials(const Args& a);
size_t pooled_budget_bytes(const Args& a);  // --pooled-budget MB; 0 when absent
// The budget for a long prompt's maps per model, in MB, where --pooled-budget is not given: the app's and
// `capture`'s (exact maps over it are pooled).
inline constexpr size_t kDefaultPooledBudgetMb = 256;
std::string mb(size_t bytes);

// Set by SIGINT (and SIGTERM while training) once a command installs on_interrupt.
extern std::atomic<bool> g_stop;
void on_interrupt(int);
// Model::load with a progress line on a terminal for checkpoints of over 50 tensors, and Ctrl-C to stop.
Model load_model(const std::string& dir, DeviceChoice device);
// The --intervene specs against `model` and a prompt of `tokens` tokens: its answer (--answer, where the
// table has it) and query (--query, else the last token). Empty when none is given. Throws Error naming the
// spec and what is wrong.
Interventions interventions_of(const Args& a, const ModelConfig& config, int64_t tokens);
// "interventions  knockout=not-answer (as run: knockout=drop:10-14@40-); ..." for a command's report, or
// "" when none.
std::string interventions_line(const std::vector<std::pair<std::string, std::string>>& applied);
// One line about a loaded model: "diff, 4 layers x 4 heads, 1.84 M params, cpu" (+ its checkpoint's notes),
// as the app's side panel, `serve` and its GET /v1/info say it.
std::string describe_model(const Model& model);

}  // namespace difflens::cli
