// Playing a --play script in the window (app/desktop/script_player.h).
#include "app/desktop/script_player.h"

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/desktop/panels.h"
#include "app/desktop/shell.h"
#include "app/reports/prediction_text.h"
#include "core/formats/bounded_read.h"
#include "core/formats/checkpoint.h"

namespace difflens::app {
namespace {

constexpr double kTypingSeconds = 0.06;     // a character typed with a play delay
constexpr double kWaitWarnSeconds = 120.0;  // a `wait` for results longer than this is reported and ended

// The length of the UTF-8 sequence starting with byte `c` (1 for a byte that starts none).
size_t sequence_length(unsigned char c) {
  return c >= 0xf0 && c < 0xf8 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
}

}  // namespace

double resident_mb() {
  return static_cast<double>(process_memory_kb("VmRSS:")) / 1024.0;
}

double peak_resident_mb() {
  return static_cast<double>(process_memory_kb("VmHWM:")) / 1024.0;
}

ScriptPlayer::ScriptPlayer(PlayScript script, double delay_ms, double seconds, bool exit)
    : script_(std::move(script)), delay_ms_(delay_ms), seconds_(seconds), exit_(exit) {
  const size_t n = script_.actions.size();
  mark_ = n >= 4000 ? 1000 : std::max<size_t>(1, n / 4);
}

bool ScriptPlayer::results_in(const GuiState& state, const InferenceWorker& worker) const {
  return !state.prompt.pending && !state.needle.build_on_load && !state.repeated.build_on_load &&
         !state.cont.start && state.cont.request == 0 && state.cont.revealed >= state.cont.steps.size() &&
         !state.lab.over_steps.running && worker.idle();
}

void ScriptPlayer::note_memory() {
  const double now = resident_mb();
  rss_peak_ = std::max(rss_peak_, now);
  if (played_ == mark_) rss_at_mark_ = now;
  if (played_ % 1000 == 0) std::printf("play: resident memory %.0f MB after action %zu\n", now, played_);
}

void ScriptPlayer::finish(const char* how) {
  done_ = true;
  const double now = now_seconds(), end_mb = resident_mb();
  rss_peak_ = std::max(rss_peak_, end_mb);
  std::printf("play: %s: %zu of %zu actions of %s in %.1f s", how, played_, script_.actions.size(),
              script_.path.c_str(), now - start_);
  if (rss_at_mark_ >= 0)
    std::printf("; resident memory %.0f MB after action %zu, %.0f MB at the end (grew %.0f MB), peak %.0f MB",
                rss_at_mark_, mark_, end_mb, end_mb - rss_at_mark_, std::max(peak_resident_mb(), rss_peak_));
  std::printf(
      "; %d screenshot%s not written, %d with layout faults, %d wait%s for results ended after %.0f s\n",
      failed_shots_, failed_shots_ == 1 ? "" : "s", faulty_shots_, stuck_waits_, stuck_waits_ == 1 ? "" : "s",
      kWaitWarnSeconds);
  std::fflush(stdout);
}

void ScriptPlayer::park_mouse(ImGuiIO& io, double cursor_x, double cursor_y) {
  if (!playing() || cursor_moved_) return;
  if (!cursor_seen_) {
    cursor_seen_ = true;
    cursor_x_ = cursor_x;
    cursor_y_ = cursor_y;
  }
  cursor_moved_ = cursor_x != cursor_x_ || cursor_y != cursor_y_;
  if (!cursor_moved_) io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
}

void ScriptPlayer::screenshot_written(const std::string& path, bool ok) {
  if (ok) {
    std::printf("play: wrote %s\n", path.c_str());
  } else {
    ++failed_shots_;
    std::fprintf(stderr, "play: could not write the screenshot %s\n", path.c_str());
  }
}

void ScriptPlayer::step(GuiState& state, InferenceWorker& worker, PlayRequests& out) {
  if (done_ || script_.actions.empty()) return;
  if (state.message != message_) {  // what the status line said since (an export, a refusal, an error)
    message_ = state.message;
    if (!message_.empty()) std::printf("play: status: %s\n", message_.c_str());
  }
  if (state.cont.message != cont_message_) {  // what Continue did (or why not), and what the model wrote
    cont_message_ = state.cont.message;
    if (!cont_message_.empty()) {
      std::string wrote;
      for (const std::string& st : state.cont.steps) wrote += st;
      for (char& ch : wrote)
        if (ch == '\n') ch = ' ';
      std::printf("play: continue: %s%s\n", cont_message_.c_str(),
                  state.cont.steps.empty() ? "" : (": '" + wrote + "'").c_str());
    }
  }
  const double now = now_seconds();
  if (!started_) {
    started_ = true;
    start_ = last_action_ = now;
  }
  // The action in progress first.
  if (!typing_.empty()) {
    if (now - last_action_ < kTypingSeconds) return;
    const size_t n = std::min(typing_.size(), sequence_length(static_cast<unsigned char>(typing_[0])));
    state.prompt.text += typing_.substr(0, n);
    typing_.erase(0, n);
    prompt_edited(state);
    last_action_ = now;
    return;
  }
  if (shot_frames_ >= 0) {  // a screenshot waits two frames for the layout to settle
    // ... and for a run the screen is waiting for (a prompt edited, the Why view's "working..."), at most
    // as long as `wait` does.
    const bool running = state.prompt.pending || (state.layout.view == View::Why && !worker.idle());
    if (running && now - shot_since_ < kWaitWarnSeconds) return;
    if (shot_frames_-- > 0) return;
    out.screenshot = shot_path_;
    shot_frames_ = -1;
    return;
  }
  // --play-seconds bounds every wait too (a `wait 3600000` included): past it, the results in, then quit.
  if (seconds_ > 0 && now - start_ > seconds_ && !ending_) {
    ending_ = true;
    wait_until_ = 0;
    wait_results_ = true;
    waiting_since_ = now;
  }
  if (wait_results_) {
    if (!results_in(state, worker)) {
      if (now - waiting_since_ < kWaitWarnSeconds) return;
      ++stuck_waits_;
      std::fprintf(stderr, "play: %s:%d: the results were not in after %.0f s (%s); going on\n",
                   script_.path.c_str(), script_.actions[next_ - 1].line, kWaitWarnSeconds,
                   state.status.activity.c_str());
    }
    wait_results_ = false;
    last_action_ = now;
  }
  if (now < wait_until_) return;
  if (ending_) {  // the time limit: the results in, then quit
    finish("stopped at the time limit");
    out.quit = true;
    return;
  }
  if (next_ >= script_.actions.size()) {
    finish("done");
    out.quit = exit_;
    return;
  }
  if (delay_ms_ > 0 && now - last_action_ < delay_ms_ / 1000.0) return;
  const PlayAction& a = script_.actions[next_++];
  std::printf("play: %d: %s\n", a.line, a.source.c_str());
  std::fflush(stdout);
  ++played_;
  play(a, state, worker, out);
  note_memory();
  last_action_ = now;
  if (next_ >= script_.actions.size() && !done_ && shot_frames_ < 0 && !wait_results_ && typing_.empty() &&
      now >= wait_until_) {
    finish("done");
    out.quit = exit_;
  }
}

void ScriptPlayer::play(const PlayAction& a, GuiState& state, InferenceWorker& worker, PlayRequests& out) {
  const auto on = [&] { return !a.ints.empty() && a.ints[0] != 0; };
  const int i0 = a.ints.empty() ? 0 : a.ints[0];
  switch (a.verb) {
    case PlayVerb::Type:
      if (delay_ms_ > 0) {
        typing_ = a.text;  // a character a frame from the next frame on
      } else {
        state.prompt.text += a.text;
        prompt_edited(state);
      }
      break;
    case PlayVerb::Paste:
      state.prompt.text += a.text;
      prompt_edited(state);
      break;
    case PlayVerb::PasteFile: {
      try {  // as a prompt file is read: at most the text limit, a device or a pipe stopped there
        state.prompt.text += read_bounded(a.text, "pasted file", kTextLimit);
        prompt_edited(state);
      } catch (const std::exception& e) {
        state.message = std::string("could not paste: ") + e.what();
      }
      break;
    }
    case PlayVerb::Prompt:
    case PlayVerb::Clear:
      state.prompt.text = a.verb == PlayVerb::Prompt ? a.text : "";
      prompt_edited(state);
      break;
    case PlayVerb::Needle: {
      GuiState::Needle& n = state.needle;
      n.length = a.ints[0];
      n.depth_pct = a.ints[1];
      n.needles = a.ints[2];
      n.asked = a.ints[3];
      n.seed = a.ints[4];
      if (a.ints.size() == 6) n.with_answer = a.ints[5] != 0;
      // As the builder's button: the left model's tokenizer, else the right one's.
      build_needle_prompt(state, state.status.slots[0].tokenizer_dir.empty()
                                     ? state.status.slots[1].tokenizer_dir
                                     : state.status.slots[0].tokenizer_dir);
      break;
    }
    case PlayVerb::Query:
      state.selection.query = i0;  // beyond the prompt: the frame makes it the last token, as a click would
      break;
    case PlayVerb::Answer:
      state.selection.answer_begin = a.ints.empty() ? -1 : a.ints[0];
      state.selection.answer_end = a.ints.empty() ? -1 : a.ints[1];
      break;
    case PlayVerb::Checkpoint:
      load_training_step(state, worker, i0);
      break;
    case PlayVerb::Steps:
      if (i0 == 0) {
        worker.cancel_steps();
      } else if (state.shown) {
        start_step_measure(state, *state.shown, worker);
      } else {
        state.message = "steps measure: no run on screen yet (wait for the models first)";
      }
      break;
    case PlayVerb::PromptSet:
      if (a.words.empty()) {
        worker.cancel_prompt_set();
      } else {
        state.prompt_set.items = a.words[0];
        state.prompt_set.out = a.words[1];
        state.prompt_set.resume = a.words.size() == 3;
        start_prompt_set(state, worker);
      }
      break;
    case PlayVerb::Corrupt:
      state.why.corrupt = state.why.corrupt_typed = a.text;
      state.why.picked = {{{-1, -1}, {-1, -1}}};
      state.prompt.rerun();
      break;
    case PlayVerb::Intervene:
      if (a.text.empty())
        state.why.clear();
      else
        state.why.extra.push_back(a.text);
      state.prompt.rerun();
      break;
    case PlayVerb::Layer:
      state.view.layer = i0;  // beyond the model: the frame shows its last layer and says so
      break;
    case PlayVerb::Head:
      for (int s = 0; s < kSlots; ++s)
        if (a.ints[0] < 0 || a.ints[0] == s) state.view.head[s] = a.ints[1];
      break;
    case PlayVerb::View:
      state.layout.view = static_cast<View>(std::clamp(i0, 0, kViews - 1));
      break;
    case PlayVerb::Split:
      if (state.layout.view == View::Maps) break;  // the maps alone have no split (the UI offers none)
      state.layout.view_split() = i0 > 0;
      if (i0 > 0) state.layout.side_by_side = i0 == 2;
      break;
    case PlayVerb::Side:
      if ((state.layout.side_panel && !state.side_folded) != on()) toggle_side_panel(state);
      break;
    case PlayVerb::Lecture:
      state.lecture = on();
      break;
    case PlayVerb::OneYScale:
      state.layout.shared_rows_scale = on();
      state.layout.rows_scale_chosen = true;
      break;
    case PlayVerb::Specials:
      if (state.prompt.specials_as_text != (i0 == 1)) {
        state.prompt.specials_as_text = i0 == 1;
        state.prompt.rerun();
      }
      break;
    case PlayVerb::TextSize:
      state.font_scale = static_cast<float>(a.number);
      break;
    case PlayVerb::TextFrom:
      state.text.direction = i0;
      break;
    case PlayVerb::TextHeads:
      state.text.heads = i0;
      break;
    case PlayVerb::Open: {
      // A model named as the bundled ones are (diff-v2-small) and not a folder here: the bundled one, as
      // File > Bundled model opens it, so that a lecture script runs from any folder.
      std::string path = a.text;
      std::error_code ec;
      if (a.ints[1] == 0 && !std::filesystem::is_directory(path, ec)) {
        std::string name = path;
        while (name.size() > 1 && name.back() == '/') name.pop_back();  // "diff-v2-small/" too
        for (const auto& [label, folder] : state.bundled_models)
          if (std::filesystem::path(folder).filename() == name) path = folder;
      }
      open_into_slot(state, worker, a.ints[0], a.ints[1], path, a.token);
      break;
    }
    case PlayVerb::Device:
      pick_device(state, worker, static_cast<DeviceChoice>(i0));
      break;
    case PlayVerb::Logits:
      set_logit_width(state, i0);
      break;
    case PlayVerb::Pooling:
      state.view.pooling = i0;
      break;
    case PlayVerb::Budget:
      set_pooled_budget(state, i0);
      break;
    case PlayVerb::Size:
      out.width = a.ints[0];
      out.height = a.ints[1];
      break;
    case PlayVerb::LabGrid:
      state.lab.lengths = a.words[0];
      state.lab.depths = a.words[1];
      state.lab.needles = a.words[2];
      state.lab.queried = a.words[3];
      state.lab.seeds = std::stoi(a.words[4]);
      break;
    case PlayVerb::LabStart:
      start_lab_sweep(state, worker);  // a bad grid shows in the lab's form, as with its button
      break;
    case PlayVerb::LabSteps:
      start_steps_sweep(state, worker);  // the lab view draws it on (it starts each step's sweep)
      break;
    case PlayVerb::LabCancel:
      worker.cancel_sweep();
      break;
    case PlayVerb::LabInterventions:
      state.lab.with_interventions = a.ints[0] != 0;
      break;
    case PlayVerb::Explain:
      state.explain.step =
          std::clamp(a.ints[1] != 0 ? state.explain.step + a.ints[1] : a.ints[0], 1, kExplainSteps);
      break;
    case PlayVerb::Present:
      state.explain.present = on();
      break;
    case PlayVerb::ExportMaps:
      state.export_all = true;
      break;
    case PlayVerb::ExportHeads:
      state.export_head_views = true;
      break;
    case PlayVerb::ExportPage:
      state.export_page = true;
      state.export_page_path = a.text;
      break;
    case PlayVerb::ExportWindow:
      state.window_shot = true;
      break;
    case PlayVerb::ExportBundle:
      state.save_bundles = true;
      break;
    case PlayVerb::ExportFigure:
      if (a.ints[0] > 0) state.view.figure_width = a.ints[0], state.view.figure_height = a.ints[1];
      if (a.number >= 0) state.view.figure_text_px = static_cast<float>(a.number);
      state.export_figure = true;
      break;
    case PlayVerb::ExportDir:
      state.view.export_dir = a.text;
      break;
    case PlayVerb::Continue:
      state.cont.slot = a.ints[0];
      state.cont.tokens = a.ints[1];
      state.cont.seed = a.ints[2];
      state.cont.temperature = static_cast<float>(a.number);
      state.cont.start = true;
      break;
    case PlayVerb::Step: {
      const std::vector<int> w = written_tokens(state);
      if (w.empty()) {
        state.message = "step: no written tokens in the prompt on screen (continue first)";
      } else if (i0 == 0 || i0 == 2) {
        state.selection.query = i0 == 0 ? w.front() : w.back();
      } else {
        step_written(state, i0);
      }
      if (!w.empty()) {  // where the query is, and what each model expects after it
        std::string next;
        if (state.shown)
          for (const auto& t : state.shown->traces)
            if (t)
              for (const Candidate& c : candidates_after(*t, state.selection.query, 1)) {
                char part[256];
                std::snprintf(part, sizeof part, "; %s expects '%s' %.1f %%", t->config.name.c_str(),
                              c.text.c_str(), 100.0 * c.probability);
                next += part;
              }
        std::printf("play: step: the query on token %d, new token %d of %zu%s\n", state.selection.query,
                    static_cast<int>(std::find(w.begin(), w.end(), state.selection.query) - w.begin()) + 1,
                    w.size(), next.c_str());
      }
      break;
    }
    case PlayVerb::Wait:
      if (i0 < 0) {
        wait_results_ = true;
        waiting_since_ = now_seconds();
      } else {
        wait_until_ = now_seconds() + i0 / 1000.0;
      }
      break;
    case PlayVerb::Screenshot:
      shot_path_ = a.text;
      shot_frames_ = 2;
      shot_since_ = now_seconds();
      break;
    case PlayVerb::Quit:
      finish("done");
      out.quit = true;
      break;
  }
}

}  // namespace difflens::app
