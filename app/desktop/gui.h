// The DiffLens desktop window (GLFW + OpenGL 3.3 core + Dear ImGui).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "app/desktop/layout.h"
#include "app/desktop/play_script.h"

namespace difflens::app {

// The longest repeated random sequence the app builds (--repeated, the Model view): 2 x 1024 + 1 tokens.
constexpr int kMaxRepeated = 1024;

// The app's first screen when no prompt is given: a held-out needle episode of 256 tokens, the needle at
// 50 % depth, one needle asked, seed 1, the prompt ending with the code (see --needle).
inline constexpr std::array<int, 6> kDefaultNeedle = {256, 50, 1, 1, 1, 1};

struct GuiOptions {
  std::string models[2];            // left (DIFF) and right (baseline) model directories
  std::string bundle;               // a trace bundle opened into the left slot at start (no prompt is run)
  std::string prompt;               // initial prompt
  int layer = -1, head = -1;        // initial selection (-1: the last layer, head 0)
  std::string screenshot;           // headless: write the window to this PNG after the first result...
  int exit_after_frames = 0;        // ...and this many further frames, then exit (0: run until closed)
  int width = 1600, height = 1000;  // with size_given; otherwise the remembered size or 90 % of the monitor
  float font_scale = 1.0f;
  std::string haystack;  // held-out text for the needle builder (assets/haystack.txt)
  // The bundled models found at start (File > Bundled model into a slot): what the menu calls each, its
  // folder.
  std::vector<std::pair<std::string, std::string>> bundled_models;
  std::vector<int> repeated;  // N,SEED: N random tokens twice as the prompt at start (--repeated)
  std::vector<int> needle;    // build a needle prompt at start: LENGTH,DEPTH%,N,R,SEED[,WITH_ANSWER]
  std::vector<std::string>
      interventions;              // --intervene: both models run under them (the Why view lists them)
  int logit_bits = 0;             // attention-logit quantization shown at start (0, 8, 6 or 4)
  bool lecture = false;           // start with the large lecture font
  bool specials_as_text = false;  // --specials text: special tokens in the prompt read as text
  int one_y_scale = -1;  // Figure 1's bars on one y scale: 1 on, 0 off, -1 as left (on in lecture mode)
  int threads = 0;       // inference threads (0: LibTorch default)
  std::string device = "auto";    // auto | cpu | cuda: where the models run
  double pooled_budget_mb = 256;  // long prompts: pooled maps within this budget per model (0: always exact)
  std::optional<View> view;       // the view the central area opens on (default: the last one, else Figure 1)
  int split = -1;  // the view at start: -1 as remembered; 0 alone; 1 below the maps; 2 beside them
  std::optional<float> split_fraction;  // the maps' share of a split (--maps-height)
  int hover[2] = {-1, -1};              // headless: the mouse over this query row and key of the first map
  int hover_token = -1;                 // headless: the mouse over this token of the Text view's first panel
  std::string settings_path;            // layout settings read at start and written at exit ("" : none)
  int head_metric = 0;      // the Model view's colouring: 0 maps, 1 answer, 2 noise, 3 entropy, 4 sink
  int metric_rows = 0;      // ...over 0 the query's row, 1 the question's rows
  bool size_given = false;  // --size: the window is exactly this size (else it fits the monitor)
  int explain_step = 1;     // the Explain view's step (1..6)
  bool present = false;     // start presenting the Explain slides (full window)
  // Needle lab sweep grid (as typed in the tab); lab_run starts it at launch (the screenshot waits for it).
  std::string lab_lengths = "128,256,512", lab_depths = "0,25,50,75,100", lab_needles = "1",
              lab_queried = "1";
  int lab_seeds = 3;
  bool lab_run = false;
  std::string export_dir;   // export folder (default ./difflens-exports)
  bool export_all = false;  // headless Ctrl+E: export every shown map once results arrive
  std::string
      export_page;         // headless File > Export page: write the Text view's page here once results arrive
  int text_direction = 0;  // the Text view: 0 from the query, 1 to its token
  int text_heads = 0;      // the Text view: 0 the selected head, 1 the layer's mean, 2 all layers
  int zoom[3] = {0, 0, 0};  // initial head-view zoom: first row, first column, span (0: whole map)
  int query = -1;           // initial query token (question start); -1: the last token
  int answer_begin = -1, answer_end = -1;  // initial answer span [begin, end) in tokens
  PlayScript play;                         // --play: the script played in the window (no actions: none)
  double play_delay_ms = 0;                // --play-delay: the pause before each action
  bool play_exit = false;                  // --play-exit: quit when the script ends
  double play_seconds = 0;  // --play-seconds: stop playing after this long (0: the whole script)
};

// Runs the window until it is closed (or the headless screenshot is written). Returns the exit status;
// a failure to open a window or GL context is reported on stderr with status 1.
int run_gui(const GuiOptions& options);

}  // namespace difflens::app
