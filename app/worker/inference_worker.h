// The one thread that owns the models. The UI thread submits work (load a model into a slot, run both
// slots on a prompt) and, once per frame, takes whatever finished. Run requests are "latest wins": a new
// prompt cancels the capture in progress between layers, and results of superseded requests are dropped.
// Thread-safety: every public method may be called from any thread; the models are touched only by the
// worker thread.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/formats/data.h"
#include "core/formats/trace.h"
#include "core/model/model.h"
#include "core/model/needle.h"

namespace difflens::app {

class RemoteClient;
struct RemoteModelInfo;

constexpr int kSlots = 2;  // 0 = left (DIFF by default), 1 = right (baseline by default)

// The app's device menu: what picking `to` does while the models were loaded for `from`, given whether
// LibTorch has a usable CUDA device (`cuda`).
struct DeviceSwitch {
  bool accepted = true;  // false: the menu keeps `from` and shows `message`
  bool reload = false;   // the loaded models go on another device: load them again
  std::string message;   // shown beside the menu ("" when there is nothing to say)
};
DeviceSwitch plan_device_switch(DeviceChoice from, DeviceChoice to, bool cuda);

// The prompt box's text as encode_prompt (core/formats/tokenizer.h) takes it: text with BOS, special tokens
// matched or read as text, and, for a model without a usable tokenizer, token ids typed as "1, 450, 3"
// (kTypeIds says so when none are typed).
PromptInput typed_prompt(const std::string& prompt, Specials specials = Specials::match);
inline const char* const kTypeIds = "type token ids separated by commas or spaces, e.g. 1, 450, 3";

struct SlotInfo {
  std::string path;         // directory it was loaded from
  std::string description;  // "diff, 4 layers x 4 heads, 1.84 M params, cpu"
  std::string error;        // why the last load failed (the previous model stays loaded)
  bool loaded = false;
  // Where the model's tokenizer.model is (the needle builder reads it): the model's folder, or for a remote
  // model a local copy fetched from its server; "" when there is none.
  std::string tokenizer_dir;
};

// What a run changes inside each slot's model and what it explains (the Why view): each slot's
// interventions as written (core/formats/intervention.h), resolved against that slot's model with the answer
// and the query (-1: the last token); `explain`: also the logit lens and direct attribution at the query,
// under the interventions and, when there are any, without them.
struct RunEdits {
  std::array<std::vector<std::string>, 2> interventions;
  TokenRange answer{-1, -1};
  int64_t query = -1;
  bool explain = false;
  Specials specials = Specials::match;  // special tokens written in the prompt: matched, or read as text
  // With `explain`: a corrupt prompt (as many tokens as the prompt) for activation patching: each head's
  // output at every position copied from the prompt's run into the corrupt one's (core/formats/patch_site.h).
  // "": none.
  std::string corrupt;
};

struct RunResult {
  uint64_t request = 0;
  std::string prompt;
  std::array<std::shared_ptr<const Trace>, kSlots> traces;  // null where the slot failed or is empty
  std::array<std::string, kSlots> errors;                   // per-slot message ("" when fine)
  std::vector<std::pair<size_t, size_t>> offsets[kSlots];   // byte span of each token in the prompt
  // Each trace's tokens as the UI shows them (viz/token_text.h), made once here rather than every frame.
  std::array<std::vector<std::string>, kSlots> labels;
  double elapsed_ms = 0;  // both slots, tokenization included
  // A remote slot (remote://): the request's round trip and the server's own capture time, else 0; and what
  // to say about it ("connection lost ...: showing the last trace", "" when fine).
  std::array<double, kSlots> round_trip_ms{}, server_ms{};
  std::array<std::string, kSlots> notes;
  RunEdits edits;  // what the run was asked to change and explain
  // Interventions a slot's model could not take (a baseline asked for λ): skipped, with the reason.
  std::array<std::vector<std::string>, kSlots> skipped;
  // RunEdits::explain: under the interventions (`why`), and as trained (`why_before`, only when the slot
  // ran under some); `why_error` when the slot could not be explained.
  std::array<std::shared_ptr<const AnswerExplanation>, kSlots> why, why_before;
  std::array<std::string, kSlots> why_error;
  // RunEdits::corrupt: each head's patching effect (the target: the answer the view follows, the
  // alternative: the corrupt run's greedy token), or why a slot could not be patched.
  std::array<std::shared_ptr<const PatchReport>, kSlots> patch;
  std::array<std::string, kSlots> patch_error;
  // Where a slot's trace holds NaN or inf (Trace::nonfinite_summary), "" when nowhere.
  std::array<std::string, kSlots> nonfinite;
};

// The first slot that holds a trace (the one the token strip shows), -1 when none does.
inline int first_trace_slot(const RunResult& r) {
  for (int s = 0; s < kSlots; ++s)
    if (r.traces[static_cast<size_t>(s)]) return s;
  return -1;
}

struct WorkerStatus {
  bool busy = false;
  std::string activity;  // "running 256 tokens", "loading assets/models/diff-small", "idle"
  double last_run_ms = 0;
  double load_fraction = -1;  // a model load's progress 0..1 while one runs, else -1
  std::array<SlotInfo, kSlots> slots;
};

// A continuation of the prompt by one slot's model (the app's Continue; `continue` in --play scripts).
struct Continuation {
  uint64_t request = 0;
  int slot = 0;
  std::string prompt;              // the text it continued
  std::string text;                // what the model wrote, as text that continues `prompt` ("" when nothing)
  std::vector<std::string> steps;  // the text each token adds, in turn (their concatenation is `text`)
  std::vector<int64_t> ids;        // the tokens it wrote
  std::string error;               // why it could not ("" when fine)
  double ms = 0;
  // The first token only wrote back the whitespace the prompt ended with (SentencePiece reads a prompt
  // without it, so a model often writes it first): that token adds nothing to the text.
  bool first_wrote_back_space = false;
};

// A needle-in-a-haystack sweep run by the worker on both slots, one episode at a time: prompt runs go
// first (the sweep pauses for them and redoes the episode they interrupted), so the app stays live.
struct SweepRequest {
  NeedleSweep sweep;
  std::string haystack_path;  // plain text, read on the worker thread
  NameSet names = NameSet::SingleToken;
  NeedleTemplate wording;  // needle and question sentences
  int logit_bits = 0;      // absmax-quantize attention logits to 8/6/4 bits during the sweep (0: exact)
  // Each slot's interventions as written (core/formats/intervention.h): a slot with some runs every episode
  // twice, as trained and under them (the needle command's --intervene); the asked needle's code is the
  // answer, the question's first token the query. Those a slot's model cannot take are skipped with the
  // reason.
  std::array<std::vector<std::string>, kSlots> interventions;
};

struct SweepProgress {
  uint64_t id = 0;  // 0: no sweep yet
  SweepRequest request;
  bool running = false;                    // queued or running
  bool finished = false;                   // every episode of every runnable slot done
  bool cancelled = false;                  // stopped by cancel_sweep() or by a model change
  size_t done = 0, total = 0;              // episodes over both slots
  double seconds = 0;                      // time spent on episodes so far
  std::string current;                     // the episode now running
  std::string error;                       // why the sweep (or a slot) could not run
  std::array<std::string, kSlots> models;  // model names ("" for a slot that does not take part)
  std::array<std::vector<NeedleRun>, kSlots> runs;
  // Under the request's interventions: each slot's specs kept ("" name and no runs when none), its name
  // ("diff-small under lambda=0", as the needle command writes it) and its episodes, in the same order.
  std::array<std::vector<std::string>, kSlots> applied;
  std::array<std::string, kSlots> edited_models;
  std::array<std::vector<NeedleRun>, kSlots> edited_runs;
  uint64_t version = 0;  // grows with every change
};

// The Noise view's measure against the training step: the prompt run on every kept step of each slot's
// training run (train --keep-every), a step at a time between other work (runs and loads go first), and the
// attention mass on the answer and on the noise of rows query..end (core/formats/metrics.h), mean over layers
// and heads, as the Noise view's "mean" bars.
struct StepsRequest {
  std::string prompt;
  Specials specials = Specials::match;
  CaptureOptions options;     // as the slots' runs (the long-prompt budget)
  TokenRange answer{-1, -1};  // the answer's tokens
  int64_t query = 0;          // the first measured row
  std::array<std::vector<std::pair<int64_t, std::string>>, kSlots> steps;  // per slot: (step, model folder)
};

struct StepPoint {
  int64_t step = 0;
  double answer_mass = 0, noise_mass = 0;
  std::string error;  // why the step could not be measured ("" when it was)
};

struct StepsProgress {
  uint64_t id = 0;  // 0: none yet
  StepsRequest request;
  bool running = false, finished = false, cancelled = false;
  size_t done = 0, total = 0;
  std::string current;  // "slot 1: step 400"
  std::array<std::vector<StepPoint>, kSlots> points;
  uint64_t version = 0;  // grows with every change
};

// A prompt set (JSON lines, core/model/batch.h) run on the slots' local models into a folder, as `difflens
// batch` writes it (app/reports/prompt_set.h): an item at a time between other work (runs and loads go
// first), the app's File > Run a prompt set. A slot whose model changes while it runs stops it (Resume goes
// on).
struct PromptSetRequest {
  std::string items;  // the JSON lines file
  std::string out;    // the folder written
  bool resume = false;
};

struct PromptSetProgress {
  uint64_t id = 0;  // 0: none yet
  PromptSetRequest request;
  bool running = false, finished = false, cancelled = false;
  int64_t done = 0, total = 0, failed = 0, skipped = 0;  // items read; item-model pairs failed / done before
  double seconds = 0;                                    // spent on items so far
  std::string error;                                     // why it could not start, or stopped
  std::string summary;                                   // summary.md's tables once it ends
  std::array<std::string, kSlots> models;                // the slots' names in the files ("": left out)
  uint64_t version = 0;
};

// The Why view's explanation as trained of the prompt and query it was made for (the worker's, per slot):
// while only the interventions change, it is reused.
struct WhyCache {
  uint64_t generation = 0;  // the slot's model it was made with (InferenceWorker's load count)
  std::vector<int64_t> ids;
  int64_t query = -1;
  std::shared_ptr<const AnswerExplanation> as_trained;
};

class InferenceWorker {
 public:
  // `wake` is called from the worker thread whenever something finished (e.g. glfwPostEmptyEvent).
  explicit InferenceWorker(std::function<void()> wake = {}, int threads = 0);
  ~InferenceWorker();  // cancels, stops and joins
  InferenceWorker(const InferenceWorker&) = delete;
  InferenceWorker& operator=(const InferenceWorker&) = delete;

  // Queues a model load; on failure the slot keeps its previous model and reports the error. A
  // remote://HOST:PORT[/N][?token=T] spec connects the slot to `difflens serve` instead (model N, by
  // default the slot's index): runs and needle episodes of the slot then go to the server.
  void load(int slot, const std::string& dir);
  // Stops a model load in progress between tensors (the slot keeps its previous model).
  void cancel_load();
  // Where later loads put their model (auto: CUDA when LibTorch has it, else the CPU).
  void set_device(DeviceChoice device);
  // Queues reading a trace bundle (difflens capture --out DIR) into `slot`: it is delivered as a result of
  // its own (the other slot empty) and shown until the next run; errors are reported in that result.
  void open_bundle(int slot, const std::string& dir);
  // Queues a run of both slots on `prompt`, cancelling any run in progress. Returns the request id.
  uint64_t run(const std::string& prompt, const CaptureOptions& options = {}, const RunEdits& edits = {});
  // The newest finished run not yet taken (older ones are dropped), or nothing.
  std::optional<RunResult> take_result();
  // Queues a continuation of `prompt` by the model in `slot` (options.max_new tokens, greedy or sampled),
  // cancelling a run or continuation in progress; WorkerStatus::activity counts its tokens. Returns its id.
  // `edits`: the slot's interventions (RunEdits, resolved here against its model) hold for every token.
  uint64_t continue_prompt(int slot, const std::string& prompt, const GenerateOptions& options,
                           const RunEdits& edits = {});
  // The finished continuation not yet taken, or nothing.
  std::optional<Continuation> take_continuation();
  // Stops the continuation queued or in progress (typing cancels it, as it cancels a run); nothing is
  // delivered for it.
  void cancel_continuation();
  WorkerStatus status() const;
  // Starts a needle sweep over the models loaded now (replacing any sweep in progress); returns its id.
  // The request is checked on the worker thread: problems end the sweep with SweepProgress::error.
  uint64_t start_sweep(const SweepRequest& request);
  // Stops the sweep in progress between (or inside) episodes; its finished episodes stay available.
  void cancel_sweep();
  // The sweep's state if it changed since `seen_version` (0 = always), else nothing.
  std::optional<SweepProgress> sweep_progress(uint64_t seen_version = 0) const;
  // Starts a prompt set on the slots' models (replacing one in progress, which stops where it is); its id.
  uint64_t start_prompt_set(const PromptSetRequest& request);
  // Stops it after the item in progress; the items done stay written, with a summary over them.
  void cancel_prompt_set();
  std::optional<PromptSetProgress> prompt_set_progress(uint64_t seen_version = 0) const;
  // Starts measuring the prompt over the slots' kept steps (replacing any such job); returns its id.
  uint64_t start_steps(const StepsRequest& request);
  // Stops it between steps; the steps measured stay.
  void cancel_steps();
  // Its state if it changed since `seen_version` (0 = always), else nothing.
  std::optional<StepsProgress> steps_progress(uint64_t seen_version = 0) const;
  // Blocks until the queue is empty and nothing runs, sweeps included (tests and headless mode).
  void wait_idle() const;
  // The same without blocking, and no finished run left untaken (--play's `wait`).
  bool idle() const;

 private:
  void loop();
  // loop() runs one job at a time through these, one per kind, each in the file named for it
  // (worker_*.cpp). Called with `lock` held, they unlock around model work and return with it held.
  void run_load_job(std::unique_lock<std::mutex>& lock);        // the next load: a model or a trace bundle
  void run_prompt_job(std::unique_lock<std::mutex>& lock);      // the latest run of both slots
  void run_continue_job(std::unique_lock<std::mutex>& lock);    // the latest continuation
  void run_sweep_job(std::unique_lock<std::mutex>& lock);       // the needle sweep's start or next episode
  void run_steps_job(std::unique_lock<std::mutex>& lock);       // a step of the steps job (or its start/end)
  void run_prompt_set_job(std::unique_lock<std::mutex>& lock);  // a prompt set's item (or its start/end)
  struct Load;
  // Loads a model into its slot; called with `lock` held, returns with it held.
  void load_model(const Load& job, std::unique_lock<std::mutex>& lock);
  // Sweep steps, called with `lock` held; they unlock around model work and return with it held.
  void begin_sweep(std::unique_lock<std::mutex>& lock);
  void sweep_step(std::unique_lock<std::mutex>& lock);
  void end_sweep(const std::string& error, bool cancelled);  // publishes the end of sweep_
  void drop_sweep_plan();                                    // forgets the private plan only
  bool sweep_uses(int slot) const;                           // the sweep runs episodes on that slot
  std::optional<PromptSetRequest> pending_set_;
  PromptSetProgress set_;
  uint64_t set_version_ = 0;
  bool set_active_ = false, set_stop_ = false;
  struct SetRun;                     // the worker's own: reader, writer, the models' generations
  std::shared_ptr<SetRun> set_run_;  // worker thread only
  std::optional<StepsRequest> pending_steps_;
  StepsProgress steps_;
  uint64_t steps_version_ = 0;
  bool steps_active_ = false, steps_stop_ = false;
  std::vector<std::pair<int, size_t>> steps_plan_;  // (slot, index into its steps), in turn
  size_t steps_next_ = 0;

  struct Load {
    int slot;
    std::string dir;
    bool bundle = false;  // a trace bundle rather than a model
  };
  std::function<void()> wake_;
  int threads_ = 0;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  std::deque<Load> loads_;
  struct PendingRun {
    uint64_t id = 0;
    std::string prompt;
    CaptureOptions options;
    RunEdits edits;
  };
  std::optional<PendingRun> pending_run_;
  std::optional<RunResult> result_;
  struct ContinueJob {
    uint64_t id = 0;
    int slot = 0;
    std::string prompt;
    GenerateOptions options;
    RunEdits edits;
  };
  std::optional<ContinueJob> pending_continue_;
  std::optional<Continuation> continuation_;
  uint64_t continue_cancelled_below_ = 0;         // continuations with a smaller id are dropped
  void run_continuation(const ContinueJob& job);  // worker thread, lock not held
  WorkerStatus status_;
  uint64_t next_request_ = 1;
  bool stopping_ = false;
  std::atomic<bool> cancel_{false};
  // A continuation's own: runs do not stop it (it is short, and a run waits for it), edits and newer
  // continuations do.
  std::atomic<bool> continue_cancel_{false};
  std::atomic<bool> load_cancel_{false};
  DeviceChoice device_ = DeviceChoice::Auto;           // guarded by mutex_
  std::array<std::unique_ptr<Model>, kSlots> models_;  // worker thread only
  // Remote slots (worker thread only): the client, what the server said about its model, and the slot's
  // last trace, kept on screen when the connection is lost.
  std::array<std::shared_ptr<RemoteClient>, kSlots> remotes_;
  std::array<std::shared_ptr<RemoteModelInfo>, kSlots> remote_info_;
  struct Kept {
    std::shared_ptr<const Trace> trace;
    std::vector<std::pair<size_t, size_t>> offsets;
    std::vector<std::string> labels;
  };
  std::array<Kept, kSlots> remote_last_;
  std::array<std::string, kSlots> sweep_texts_;  // a remote slot's haystack text, sent with each episode
  void connect_remote(const Load& job, std::unique_lock<std::mutex>& lock);
  void run_remote(size_t slot, const std::string& prompt, const CaptureOptions& options, RunResult& r,
                  bool& cancelled);
  bool has_model(size_t slot) const { return models_[slot] || remotes_[slot]; }
  // Sweep: the request waiting to start, the public progress, and the worker's private plan.
  std::optional<SweepRequest> pending_sweep_;
  SweepProgress sweep_;
  uint64_t sweep_version_ = 0;
  bool sweep_active_ = false;      // started on the worker, episodes left
  bool sweep_in_episode_ = false;  // an episode runs now (cancel_sweep interrupts it)
  bool sweep_stop_ = false;        // cancel_sweep() asked
  std::vector<NeedleJob> sweep_jobs_;
  // The lanes taking part, in turn per episode: a slot as trained (false) and under its interventions (true).
  std::vector<std::pair<int, bool>> sweep_slots_;
  size_t sweep_next_ = 0;  // next step: job = next / slots, slot = next % slots
  // Haystacks counted with each slot's tokenizer, kept across sweeps (counting 300 KB takes ~0.5 s) until
  // the slot's model or the haystack file changes. Worker thread only, like the builders.
  struct CountedHaystack {
    std::string path;
    uint64_t model_generation = 0;
    std::shared_ptr<const Haystack> haystack;
  };
  std::array<CountedHaystack, kSlots> sweep_haystacks_;
  std::array<uint64_t, kSlots> model_generation_{};  // grows with every model loaded into the slot
  WhyCache why_cache_[kSlots];                       // worker thread only
  std::array<std::unique_ptr<EpisodeBuilder>, kSlots> sweep_builders_;
  std::thread thread_;
};

}  // namespace difflens::app
