// Scripted sessions (difflens --play FILE): a plain-text script of app actions, one a line, read and
// checked here before a window opens (a bad line is refused with its file and line number), and played by
// app/desktop/script_player.h through the same state changes the app's controls make. No GL, no ImGui: the
// parser and the soak's script generator are tested without a display. The language: docs/play.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace difflens::app {

enum class PlayVerb {
  Type,        // text: typed into the prompt (a character a frame when a play delay is set)
  Paste,       // text: appended at once
  PasteFile,   // text: a file whose bytes are appended at once (read when played)
  Prompt,      // text: the prompt replaced
  Clear,       // the prompt emptied
  Needle,      // ints: TOKENS,DEPTH%,NEEDLES,ASKED,SEED[,ANSWER] built by the needle builder
  Query,       // ints[0]: the query token (-1: the last)
  Answer,      // ints: BEGIN,END (none: cleared)
  Intervene,   // text: an intervention both models run under (core/formats/intervention.h; "": all cleared)
  Corrupt,     // text: the Why view's corrupt prompt for activation patching ("": none)
  Checkpoint,  // ints[0]: a training run's kept step loaded into both slots (-1: the run's own weights)
  Steps,       // the Noise view's measure over every kept step of the slots' runs (ints[0] 0: cancel)
  PromptSet,   // words: ITEMS OUT [resume] (File > Run a prompt set), or none: cancel it
  Layer,       // ints[0]
  Head,        // ints: SLOT (-1: both), HEAD
  View,        // ints[0]: the View
  Split,       // ints[0]: 0 off, 1 below the maps, 2 beside them
  Side,        // ints[0]: 0 hidden, 1 shown
  Lecture,     // ints[0]: 0 off, 1 on
  OneYScale,   // ints[0]: 0 off, 1 on (Figure 1: both models' bars on one y scale)
  Specials,    // ints[0]: 0 special tokens in the prompt matched, 1 read as text
  TextSize,    // number
  TextFrom,    // ints[0]: 0 from the query, 1 to its token
  TextHeads,   // ints[0]: 0 the head, 1 the layer's mean, 2 all layers
  Open,        // ints: SLOT, KIND (0 model, 1 bundle, 2 remote); text: path; token: remote token
  Device,      // ints[0]: DeviceChoice (0 auto, 1 cpu, 2 cuda)
  Logits,      // ints[0]: 0 exact, 1 8-bit, 2 6-bit, 3 4-bit
  Pooling,     // ints[0]: 0 max, 1 mean
  Budget,      // ints[0]: long-prompt MB
  Size,        // ints: WIDTH, HEIGHT
  LabGrid,     // words: LENGTHS DEPTHS NEEDLES QUERIED SEEDS
  LabStart,    //
  LabSteps,    // the lab's sweep on every kept step of the slots' runs
  LabCancel,   //
  LabInterventions,  // ints[0]: 1 sweep also under the Why view's interventions, 0 as trained only
  Explain,           // ints[0]: the step (1..6), or ints[1]: +1 next / -1 back
  Present,           // ints[0]: 0 off, 1 on
  ExportMaps,        // Ctrl+E
  ExportHeads,
  ExportPage,    // text: the file ("" : a new file in the export folder)
  ExportWindow,  // F12
  ExportDir,     // text: the export folder
  ExportFigure,  // the view as a figure; ints: WIDTH, HEIGHT (0: as set); number: text px (-1: as set)
  ExportBundle,  // each slot's trace as a bundle in a new run folder
  Continue,      // ints: SLOT, TOKENS, SEED; number: temperature (0: greedy)
  Step,          // ints[0]: -1 back, +1 forward through the written tokens, 0 the first, 2 the last
  Wait,          // ints[0]: milliseconds (-1: until the results are in and the models idle)
  Screenshot,    // text: the PNG
  Quit,
};

struct PlayAction {
  PlayVerb verb = PlayVerb::Quit;
  int line = 0;        // 1-based line of the script
  std::string source;  // the line as written (for the log)
  std::string text;    // text, path or file
  std::string token;   // Open remote: the token
  std::vector<int> ints;
  double number = 0;
  std::vector<std::string> words;
};

struct PlayScript {
  std::string path;  // for messages
  std::vector<PlayAction> actions;
};

// Reads a script's text; throws difflens::Error "FILE:LINE: what is wrong (what is expected)" at the first
// bad line. Blank lines and lines starting with '#' are skipped.
PlayScript parse_play_script(const std::string& text, const std::string& path);
// The same from a file (a missing or unreadable file: Error naming it).
PlayScript read_play_script(const std::string& path);
// The TEXT of type/paste/prompt with its escapes undone: \n \t \r \\ and \xHH (any byte, so a script can
// hold control characters and invalid UTF-8). Throws Error (without the line) for a bad escape.
std::string unescape_play_text(const std::string& text);
// The reverse, for generated scripts: every byte outside printable ASCII (and '\') escaped.
std::string escape_play_text(const std::string& text);
// Every verb as a script writes it ("type", "paste", ...), for messages and the docs test.
std::vector<std::string> play_verbs();

// What a soak script draws from: the models and bundles to open (good and bad), prompts' sources and a
// remote address (empty: none).
struct SoakInputs {
  std::vector<std::string> models;   // folders that load
  std::vector<std::string> bad;      // folders and files that do not (corrupt checkpoints, fuzz corpora)
  std::vector<std::string> bundles;  // trace bundles (good and corrupt)
  std::vector<std::string> remotes;  // remote://HOST:PORT/N specs (a server that comes and goes)
  std::string paste_file;            // a large file to paste (100K characters)
  std::string export_dir;            // where exports and screenshots go
};
// A seeded script of `actions` random actions over those inputs: typing and pastes (invalid UTF-8, control
// characters, empty text, the 100K-character file), selections in and beyond range, every view and split,
// opens of good and bad models and bundles, the remote slot, devices, logit widths, pooling, text sizes,
// window sizes down to 320x240, lab sweeps started and cancelled, Explain steps, exports, short waits. It
// ends by waiting for the results, a screenshot and quit. Equal seeds give equal scripts.
std::string soak_script(uint64_t seed, int actions, const SoakInputs& inputs);

// True when an app's log shows LeakSanitizer failing to do its check ("LeakSanitizer has encountered a fatal
// error": its stop-the-world tracer crashed, a rare fault of the tool under load, google/sanitizers#1353)
// without reporting a leak or any other sanitizer error: the soak plays its script once more then.
bool leak_check_could_not_run(const std::string& app_log);

}  // namespace difflens::app
