// The desktop app's options (difflens with no command), read into GuiOptions for run_gui.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <tuple>

#include "app/cli/commands.h"
#include "app/cli/common_options.h"
#include "app/cli/options.h"
#include "app/cli/paths.h"
#include "app/common/files.h"
#include "app/desktop/gui.h"
#include "app/desktop/layout.h"
#include "app/desktop/play_script.h"
#include "app/reports/explain_slides.h"
#include "core/formats/error.h"
#include "core/model/needle.h"

namespace difflens::cli {
namespace {

// A fraction typed for a float option, checked by its table (Number) and narrowed.
float as_float(const Args& a, const char* name) {
  return static_cast<float>(a.get_double(name));
}

// A bundled asset's path; without the bundled files (a moved install, say) the app still opens: it says
// there which places it looked in, and File > Open takes a model.
std::string bundled_or_said(const std::string& relative) {
  try {
    return bundled_asset(relative);
  } catch (const Error& e) {
    std::fprintf(stderr, "difflens: %s\n", e.what());
    const std::vector<std::filesystem::path> dirs = data_dirs();
    return dirs.empty() ? relative : (dirs.front() / relative).string();
  }
}

// The models, the prompt (or a bundle shown as it is) and the layer and head selected at start.
void read_content(const Args& a, app::GuiOptions& o) {
  if (a.has("prompt") && a.has("prompt-file")) throw Error("give --prompt or --prompt-file, not both");
  if (a.has("models")) {
    const std::vector<std::string> dirs = model_dirs(a, 2, "LEFT_DIR,RIGHT_DIR");
    o.models[0] = dirs[0];
    o.models[1] = dirs[1];
  } else {
    o.models[0] = bundled_or_said("models/diff-small");
    o.models[1] = bundled_or_said("models/baseline-small");
  }
  // A needle the bundled pair never saw in training (held-out name, code a multiple of 7); used as it is
  // when the left model has no SentencePiece tokenizer to build a whole needle episode with.
  o.prompt = a.has("prompt-file") ? read_file(a.get("prompt-file")) : a.get("prompt");
  o.specials_as_text = prompt_specials(a) == Specials::text;
  o.bundle = a.get("bundle");  // a trace bundle shown at start instead of running the prompt
  const std::vector<int> sel = a.get_int_list("select");
  if (!sel.empty()) {
    o.layer = sel[0];
    o.head = sel[1];
  }
}

// The headless run's screenshot and the window: size, text scale, the needle builder's haystack.
void read_window(const Args& a, app::GuiOptions& o) {
  o.screenshot = a.get("screenshot");
  if (a.has("screenshot")) check_output_file(o.screenshot, "--screenshot", {".png"});
  if (a.has("export-dir")) check_output_dir(a.get("export-dir"), "--export-dir");
  o.exit_after_frames = a.get_int("exit-after-frames");
  if (a.has("size")) {
    std::tie(o.width, o.height) = a.get_size("size");
    if (o.width < 320) throw Error("--size: the window must be at least 320x240");
    o.size_given = true;
  }
  o.font_scale = as_float(a, "font-scale");
  o.haystack = a.has("haystack") ? a.get("haystack") : bundled_or_said("haystack.txt");
}

// The bundled models' menu, the needle lab's grid (checked before a window opens) and the repeated-token
// prompt.
void read_bundled_and_lab(const Args& a, app::GuiOptions& o) {
  // The bundled models, one menu choice away (File > Bundled model into the left / right slot).
  for (const auto& [label, name] : {std::pair<const char*, const char*>{"DIFF (diff-small)", "diff-small"},
                                    {"DIFF V2 (diff-v2-small)", "diff-v2-small"},
                                    {"baseline (baseline-small)", "baseline-small"}})
    try {
      o.bundled_models.emplace_back(label, bundled_model(name));
    } catch (const Error&) {  // not installed: the menu lists the others (the slots say what is missing)
    }
  if (std::filesystem::is_directory(o.haystack))
    throw Error("--haystack " + o.haystack + ": is a folder; the haystack text must be a file");
  o.lab_lengths = a.get("lab-lengths");
  o.lab_depths = a.get("lab-depths");
  o.lab_needles = a.get("lab-needles");
  o.lab_queried = a.get("lab-queried");
  o.lab_seeds = a.get_int("lab-seeds");
  o.lab_run = a.has("lab-run");
  if (o.lab_run)  // refuse a bad grid before a window opens
    (void)parse_needle_sweep(o.lab_lengths, o.lab_depths, o.lab_needles, o.lab_queried, o.lab_seeds);
  o.repeated = a.get_int_list("repeated");
  if (!o.repeated.empty()) {
    if (a.has("prompt") + a.has("prompt-file") + a.has("needle") + a.has("bundle") > 0)
      throw Error(
          "--repeated makes the prompt: give it without --prompt, --prompt-file, --needle or --bundle");
    if (o.repeated[0] < 1 || o.repeated[0] > app::kMaxRepeated)
      throw Error("--repeated expects N,SEED with 1 <= N <= " + std::to_string(app::kMaxRepeated));
  }
}

// The needle prompt at start (asked for, or the first screen's held-out episode when nothing else is).
void read_needle(const Args& a, app::GuiOptions& o) {
  o.needle = a.get_int_list("needle");
  if (!o.needle.empty()) {
    const auto& n = o.needle;
    if (n[0] < 64 || n[1] > 100 || n[2] < 1 || n[2] > 6 || n[3] < 1 || n[3] > n[2] ||
        (n.size() == 6 && n[5] > 1))
      throw Error(
          "--needle expects TOKENS,DEPTH%,NEEDLES,ASKED,SEED[,ANSWER] with TOKENS >= 64, DEPTH in "
          "0..100, 1 <= ASKED <= NEEDLES <= 6 and ANSWER 1 (the prompt ends with the code, the default) "
          "or 0 (it stops before the code)");
  } else if (!a.has("prompt") && !a.has("prompt-file") && !a.has("bundle") && !a.has("repeated") &&
             (std::filesystem::exists(std::filesystem::path(o.models[0]) / "tokenizer.model") ||
              o.models[0].rfind("remote://", 0) == 0)) {  // a remote model's tokenizer comes from its server
    o.needle = {app::kDefaultNeedle.begin(),
                app::kDefaultNeedle.end()};  // the first screen: a held-out needle episode
  }
}

// Logits, threads, device, views, metrics, hover and the layout settings file.
void read_views(const Args& a, app::GuiOptions& o) {
  o.logit_bits = std::stoi(a.get("logit-bits"));
  if (a.has("maps-height")) o.split_fraction = as_float(a, "maps-height");
  o.threads = a.get_int("threads", 0);
  o.device = a.get("device");
  if (a.has("pooled-budget")) o.pooled_budget_mb = a.get_double("pooled-budget");
  if (a.has("tab") && a.has("view")) throw Error("give --view or --tab (the same), not both");
  if (a.has("tab") || a.has("view")) {
    const std::string name = a.get(a.has("view") ? "view" : "tab");
    o.view = app::parse_view(name);
    if (!o.view) throw Error("--view must be " + app::view_names() + " (got '" + name + "')");
  }
  if (a.has("split")) o.split = a.choice_index("split");
  o.head_metric = a.choice_index("head-metric");
  o.metric_rows = a.choice_index("metric-rows");
  o.hover_token = a.get_int("hover-token", -1);
  const std::vector<int> hover = a.get_int_list("hover");
  if (!hover.empty()) {
    if (hover[1] > hover[0])
      throw Error("--hover expects ROW,COL with 0 <= COL <= ROW (a query row and a key it sees)");
    o.hover[0] = hover[0];
    o.hover[1] = hover[1];
  }
  if (a.has("settings")) {
    o.settings_path = a.get("settings");
  } else if (!a.has("screenshot") && !a.has("play")) {  // a person's window: its layout kept between runs
    const char* xdg = std::getenv("XDG_CONFIG_HOME");
    const char* home = std::getenv("HOME");
    if (xdg && *xdg)
      o.settings_path = (std::filesystem::path(xdg) / "difflens" / "layout.ini").string();
    else if (home && *home)
      o.settings_path = (std::filesystem::path(home) / ".config" / "difflens" / "layout.ini").string();
  }
}

// The play script (checked before a window opens), the query, Explain, the exports, the Text view, lecture
// mode, the zoom and the answer.
void read_play_and_exports(const Args& a, app::GuiOptions& o) {
  if (a.has("play")) {  // a bad script is refused before a window opens, with its line
    if (a.has("screenshot"))
      throw Error("give --play or --screenshot, not both (a script writes its own: screenshot F.png)");
    o.play = app::read_play_script(a.get("play"));
  } else if (a.has("play-delay") || a.has("play-seconds") || a.has("play-exit")) {
    throw Error("--play-delay, --play-seconds and --play-exit go with --play FILE");
  }
  o.play_exit = a.has("play-exit");
  o.play_delay_ms = a.get_double("play-delay");
  o.play_seconds = a.get_double("play-seconds");
  o.query = a.get_int("query", -1);
  o.explain_step = a.get_int("explain-step");
  o.present = a.has("present");
  o.export_all = a.has("export-all");
  o.export_page = a.get("export-page");
  if (!o.export_page.empty()) {
    if (!a.has("screenshot"))
      throw Error("--export-page is for headless runs: give --screenshot F.png with it");
    check_output_file(o.export_page, "--export-page", {".html", ".htm"});
  }
  o.text_direction = a.choice_index("text-direction");
  o.text_heads = a.choice_index("text-heads");
  o.lecture = a.has("lecture");
  if (a.has("one-y-scale")) o.one_y_scale = a.get("one-y-scale") == "on" ? 1 : 0;
  const std::vector<int> zoom = a.get_int_list("zoom");
  if (!zoom.empty()) {
    if (zoom[2] < 1) throw Error("--zoom expects ROW0,COL0,SPAN with SPAN at least 1");
    std::copy(zoom.begin(), zoom.end(), o.zoom);
  }
  o.export_dir = a.get("export-dir");
  if (o.export_dir.empty()) o.export_dir = default_export_dir(::access(".", W_OK) == 0, std::getenv("HOME"));
  o.interventions = a.get_all("intervene");
  for (const std::string& spec : o.interventions) (void)parse_intervention(spec);  // refused now, by name
  const std::vector<int> answer = a.get_int_list("answer");
  if (!answer.empty()) {
    if (answer[1] <= answer[0]) throw Error("--answer expects BEGIN,END tokens with BEGIN < END");
    o.answer_begin = answer[0];
    o.answer_end = answer[1];
  }
}

int cmd_gui(const Args& a) {
  app::GuiOptions o;
  read_content(a, o);
  read_window(a, o);
  read_bundled_and_lab(a, o);
  read_needle(a, o);
  read_views(a, o);
  read_play_and_exports(a, o);
#ifdef DIFFLENS_GUI
  return app::run_gui(o);
#else
  throw Error(
      "this difflens was built without the desktop app (DIFFLENS_GUI=OFF); the commands work: difflens "
      "--help");
#endif
}

}  // namespace

Command gui_command() {
  const app::GuiOptions d;
  const std::string needle_default = [] {
    std::string s;
    for (int v : app::kDefaultNeedle) s += (s.empty() ? "" : ",") + std::to_string(v);
    return s;
  }();
  return {
      "",
      "the desktop app: both models' attention on a prompt, as maps and analysis views",
      {models_option("the left (DIFF) and right (baseline) models"),
       text(
           "prompt", "TEXT",
           "the first prompt; without one (nor --prompt-file, --bundle, --repeated) the app opens on a "
           "held-out needle episode (--needle), or on this prompt when the left model has no SentencePiece "
           "tokenizer to build one with",
           "The secret code of Rachel is 4823. The river was high that spring. Q: What is the secret code of "
           "Rachel?\nA: The secret code of Rachel is"),
       prompt_file_option(),
       specials_option(),
       text("bundle", "DIR", "open a trace bundle (capture --out) into the left slot at start"),
       int_list(
           "needle", "T,D,N,R,S[,A]", 0, 1e9, 5, 6,
           "start with a held-out needle prompt: T tokens, depth D %, N needles, R asked, seed S; A=1 the "
           "prompt ends with the asked code, 0 before it (without --prompt, --prompt-file or --bundle the "
           "app starts with " +
               needle_default + ")"),
       int_list("repeated", "N,SEED", 0, 1e9, 2, 2,
                "start with N random tokens, then the same N again (the induction score's prompt; the Model "
                "view's Repeat them)"),
       int_list("select", "LAYER,HEAD", 0, 1e6, 2, 2, "the layer and head selected at start"),
       integer("query", "I", 0, 1e9, "", "the selected query token (default: the last)"),
       answer_option(),
       intervene_option(),
       text(
           "view", "NAME",
           "the view shown: " + app::view_names() + " (keys 1-9, 0; default: the last one, first query-row)"),
       text("tab", "NAME", "the same as --view (the old name)"),
       choice("split", "off|below|beside", "",
              "the view alone, below the maps or beside them (default: as last left)"),
       number("maps-height", "F", 0.2, 0.85, "", "the maps' share of a split view"),
       choice("head-metric", "maps|answer|noise|entropy|sink|previous-token|duplicate-token|induction",
              "maps",
              "the Model view's grid: maps, or each head coloured by its attention to the answer, noise, "
              "entropy, first-token share, or previous-token, duplicate-token or induction score"),
       choice(
           "metric-rows", "query|question", "query",
           "the Model view's metrics over the selected query's row, or (question) every row from it to the end"),
       int_list("zoom", "R,C,N", 0, 1e9, 3, 3, "head view zoomed to N tokens from query R, key C"),
       integer("explain-step", "N", 1, app::kExplainSteps, "1", "the Explain view's step"),
       flag("present", "start presenting the Explain slides (Esc leaves)"),
       choice("logit-bits", "0|8|6|4", "0",
              "show both models with absmax-quantized attention logits (0: exact)"),
       text("lab-lengths", "128,256", "the Needle lab's prompt lengths", d.lab_lengths),
       text("lab-depths", "0,50,100", "the Needle lab's depths (%)", d.lab_depths),
       text("lab-needles", "1,2", "the Needle lab's needles per prompt", d.lab_needles),
       text("lab-queried", "1", "the Needle lab's needles asked", d.lab_queried),
       integer("lab-seeds", "N", 1, 10000, std::to_string(d.lab_seeds), "the Needle lab's episodes per cell"),
       flag("lab-run", "start the Needle lab's sweep (a screenshot waits for it)"),
       haystack_option(),
       pooled_budget_option(std::to_string(kDefaultPooledBudgetMb)),
       device_option("auto"),
       threads_option(),
       size("size", 240, 16384, "",
            "window size, at least 320x240 (default: the last one, or 90 % of the screen)"),
       number("font-scale", "X", 0.5, 4, "1", "text size (HiDPI)"),
       flag("lecture", "start with the large lecture font"),
       choice("one-y-scale", "on|off", "",
              "Figure 1: both models' bars on one y scale (default: on in lecture mode, else as last left)"),
       text("settings", "FILE",
            "layout settings read at start, written at exit (default "
            "~/.config/difflens/layout.ini; headless screenshots use none unless given)"),
       text("screenshot", "F.png", "write the window to F.png once both maps are shown, then exit"),
       text("play", "FILE",
            "play a script of app actions, one a line (the language: share/doc/difflens/play.md; a lecture: "
            "share/difflens/needle-story.play)"),
       number("play-delay", "MS", 0, 600000, "0",
              "--play: the pause before each action, typing a character every 60 ms (0: at once)"),
       flag("play-exit", "--play: quit when the script ends (else the window stays)"),
       number("play-seconds", "S", 0, 86400, "0",
              "--play: stop after S seconds, wait for the results and quit (0: the whole script)"),
       integer("exit-after-frames", "N", 0, 100000, "3",
               "frames rendered after the result before the screenshot"),
       integer("hover-token", "I", 0, 1e9, "",
               "headless: the mouse over token I in the Text view (it is the query while hovered)"),
       int_list("hover", "ROW,COL", 0, 1e9, 2, 2,
                "headless: the mouse over this query row and key of the first map"),
       flag("export-all", "export every shown map (PNG/NPY/CSV) and head view once, like Ctrl+E"),
       text("export-dir", "DIR", "the export folder (default ./difflens-exports)"),
       text("export-page", "F.html",
            "headless: write the Text view as a page (File > Export page) once results arrive"),
       choice("text-direction", "from|to", "from",
              "the Text view: the query's attention (its row) or who reads its token (its column)"),
       choice("text-heads", "head|layer|all", "head",
              "the Text view: the selected head, the mean of the layer's heads or of all layers")},
      "",
      cmd_gui};
}

}  // namespace difflens::cli
