// InferenceWorker: job queue, latest-wins runs, cancellation, model loading on the owning thread.
#include "app/worker/inference_worker.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>

#include "app/common/command_support.h"
#include "app/remote/client.h"
#include "app/reports/prompt_set.h"
#include "core/formats/error.h"
#include "core/formats/metrics.h"
#include "core/formats/remote.h"
#include "core/formats/trace_io.h"
#include "core/model/batch.h"
#include "viz/token_text.h"

namespace difflens::app {
DeviceSwitch plan_device_switch(DeviceChoice from, DeviceChoice to, bool cuda) {
  DeviceSwitch d;
  if (to == DeviceChoice::Cuda && !cuda) {
    d.accepted = false;
    d.message =
        "CUDA is not available: this LibTorch build has no usable CUDA device (Debian's libtorch is "
        "CPU-only); the models stay where they are";
    return d;
  }
  const auto on_gpu = [cuda](DeviceChoice c) {
    return c == DeviceChoice::Cuda || (c == DeviceChoice::Auto && cuda);
  };
  d.reload = on_gpu(from) != on_gpu(to);
  if (d.reload)
    d.message = on_gpu(to) ? "loading the models again on the GPU" : "loading the models again on the CPU";
  else if (to == DeviceChoice::Auto)
    d.message = cuda ? "auto: the GPU" : "auto: the CPU (no CUDA here)";
  return d;
}

InferenceWorker::InferenceWorker(std::function<void()> wake, int threads)
    : wake_(std::move(wake)), threads_(threads) {
  status_.activity = "idle";
  thread_ = std::thread([this] { loop(); });
}

InferenceWorker::~InferenceWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    cancel_ = true;
    continue_cancel_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void InferenceWorker::load(int slot, const std::string& dir) {
  if (slot < 0 || slot >= kSlots) throw Error("no model slot " + std::to_string(slot));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    loads_.push_back({slot, dir});
  }
  cv_.notify_all();
}

Encoding encode_prompt(const Model& model, const std::string& prompt, Specials specials) {
  const Tokenizer& tok = model.tokenizer();
  if (tok.can_encode()) return tok.encode(prompt, true, specials);
  // A model without a usable tokenizer reads token ids: "1, 450, 3" (no BOS is added).
  const std::string why = "this model has no text tokenizer (" + model.tokenizer_note() +
                          "): type token ids separated by commas or spaces, e.g. 1, 450, 3";
  Encoding enc;
  try {
    enc.ids = parse_token_ids(prompt, model.config().vocab_size);
  } catch (const Error& e) {
    std::string detail = e.what();
    if (detail.rfind("--token-ids: ", 0) == 0) detail.erase(0, 13);
    throw Error(why + " (" + detail + ")");
  }
  if (enc.ids.empty()) throw Error(why);
  for (const int64_t id : enc.ids) {
    enc.pieces.push_back(tok.piece(id));
    enc.offsets.push_back({0, 0});
  }
  return enc;
}

void InferenceWorker::open_bundle(int slot, const std::string& dir) {
  if (slot < 0 || slot >= kSlots) throw Error("no model slot " + std::to_string(slot));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    loads_.push_back({slot, dir, true});
  }
  cv_.notify_all();
}

namespace {

// A slot's interventions resolved against its model: those it cannot take are skipped, each with its reason
// in `skipped` (the app applies one list to both models; a baseline has no λ).
Interventions slot_interventions(const Model& m, const RunEdits& edits, size_t slot, int64_t tokens,
                                 std::vector<std::string>& skipped) {
  PromptMarks marks;
  marks.answer = edits.answer;
  marks.query = edits.query >= 0 && edits.query < tokens ? edits.query : tokens - 1;
  return resolve_interventions(
      takeable_interventions(edits.interventions[slot], m.config(), marks, tokens, skipped), m.config(),
      marks, tokens);
}

// The Why view's lens and attribution at the query, under the run's interventions and as trained.
void explain_slot(const Model& m, const std::vector<int64_t>& ids, const RunEdits& edits,
                  const Interventions& iv, RunResult& r, size_t s, WhyCache& cache, uint64_t generation) {
  try {
    LensOptions o;
    o.lens_at_query_only = true;  // the view shows the lens at the query
    const int64_t T = static_cast<int64_t>(ids.size());
    o.query = edits.query >= 0 && edits.query < T ? edits.query : T - 1;
    // The explanation as trained of this prompt and query: the one made last, when it is of them (a lecture
    // changes the interventions, not the prompt: one explanation a change, not two).
    if (!cache.as_trained || cache.generation != generation || cache.ids != ids || cache.query != o.query) {
      cache.as_trained = std::make_shared<AnswerExplanation>(m.explain_answer(ids, o));
      cache.generation = generation;
      cache.ids = ids;
      cache.query = o.query;
    }
    if (iv.empty()) {
      r.why[s] = cache.as_trained;
      return;
    }
    // Under the interventions, the answer followed is the one as trained.
    r.why_before[s] = cache.as_trained;
    o.target = cache.as_trained->attribution.target;
    o.interventions = iv;
    r.why[s] = std::make_shared<AnswerExplanation>(m.explain_answer(ids, o));
  } catch (const std::exception& e) {
    r.why_error[s] = user_message(e);
  }
}

// The Why view's activation patching: every head's output, all positions, from the prompt's run into the
// corrupt prompt's, under the run's interventions. At a query the view picked, the answer is the one the
// explanation follows; at the last token, each run's own greedy token where the two runs part.
void patch_slot(const Model& m, const std::vector<int64_t>& ids, const RunEdits& edits,
                const Interventions& iv, RunResult& r, size_t s, const std::atomic<bool>* cancel) {
  try {
    const std::vector<int64_t> corrupt = encode_prompt(m, edits.corrupt, edits.specials).ids;
    PatchOptions o;
    const int64_t T = static_cast<int64_t>(ids.size());
    // At a query the view picked: the answer it follows against the corrupt run's. At the last token (the
    // query by default): the first token where the two runs part, past a shared "▁" before a number.
    if (edits.query >= 0 && edits.query < T - 1) {
      o.query = edits.query;
      if (r.why[s]) o.target = r.why[s]->attribution.target;
    } else {
      o.extend_shared = 8;
    }
    o.interventions = iv;
    std::vector<std::vector<PatchSite>> runs;
    for (const PatchSite& site : head_sweep(m.config(), PatchComponent::Head)) runs.push_back({site});
    r.patch[s] = std::make_shared<PatchReport>(m.patch(ids, corrupt, runs, o, cancel));
  } catch (const Cancelled&) {
    throw;
  } catch (const std::exception& e) {
    r.patch_error[s] = user_message(e);
  }
}

// RunResult::nonfinite of each slot's trace, here on the worker's thread (a long prompt's maps are many).
void note_nonfinite(RunResult& r) {
  for (size_t s = 0; s < kSlots; ++s)
    if (r.traces[s]) r.nonfinite[s] = r.traces[s]->nonfinite_summary();
}

// The sweep's interventions a slot's model can take, each checked alone as the episodes resolve them (the
// code a one-token answer, the question's first token the query) in the shortest prompt; the others are
// noted with their reason.
std::vector<std::string> sweep_specs(const std::vector<std::string>& specs, const ModelConfig& config,
                                     int64_t tokens, const std::string& side,
                                     std::vector<std::string>& notes) {
  PromptMarks marks;
  marks.answer = {0, 1};
  marks.query = 1;
  std::vector<std::string> refused;
  std::vector<std::string> kept = takeable_interventions(specs, config, marks, tokens, refused);
  for (const std::string& r : refused) notes.push_back(side + ": skipped " + r);
  return kept;
}

}  // namespace

uint64_t InferenceWorker::run(const std::string& prompt, const CaptureOptions& options,
                              const RunEdits& edits) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_request_++;
    pending_run_ = PendingRun{id, prompt, options, edits};
    cancel_ = true;  // whatever runs now is stale
  }
  cv_.notify_all();
  return id;
}

uint64_t InferenceWorker::continue_prompt(int slot, const std::string& prompt, const GenerateOptions& options,
                                          const RunEdits& edits) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_request_++;
    pending_continue_ = ContinueJob{id, std::clamp(slot, 0, kSlots - 1), prompt, options, edits};
    continue_cancel_ = true;  // a continuation in progress is stale (a run in progress goes on)
  }
  cv_.notify_all();
  return id;
}

std::optional<Continuation> InferenceWorker::take_continuation() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<Continuation> c = std::move(continuation_);
  continuation_.reset();
  return c;
}

void InferenceWorker::cancel_continuation() {
  std::lock_guard<std::mutex> lock(mutex_);
  continue_cancelled_below_ = next_request_;
  if (pending_continue_) pending_continue_.reset();
  continue_cancel_ = true;
  continuation_.reset();
}

std::optional<RunResult> InferenceWorker::take_result() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<RunResult> r = std::move(result_);
  result_.reset();
  return r;
}

WorkerStatus InferenceWorker::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

void InferenceWorker::wait_idle() const {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] {
    return stopping_ ||
           (loads_.empty() && !pending_run_ && !pending_continue_ && !status_.busy && !pending_sweep_ &&
            !sweep_active_ && !pending_steps_ && !steps_active_ && !pending_set_ && !set_active_);
  });
}

bool InferenceWorker::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return loads_.empty() && !pending_run_ && !pending_continue_ && !status_.busy && !pending_sweep_ &&
         !sweep_active_ && !result_ && !continuation_ && !pending_steps_ && !steps_active_ && !pending_set_ &&
         !set_active_;
}

uint64_t InferenceWorker::start_prompt_set(const PromptSetRequest& request) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_request_++;
    pending_set_ = request;  // replaces the one in progress: it stops where it is
    set_ = PromptSetProgress{};
    set_.id = id;
    set_.request = request;
    set_.running = true;
    set_.version = ++set_version_;
  }
  cv_.notify_all();
  return id;
}

void InferenceWorker::cancel_prompt_set() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_set_) {  // not started: it ends here, nothing written
      pending_set_.reset();
      set_.running = false;
      set_.cancelled = true;
      set_.version = ++set_version_;
    }
    set_stop_ = true;
  }
  cv_.notify_all();
}

std::optional<PromptSetProgress> InferenceWorker::prompt_set_progress(uint64_t seen_version) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (seen_version != 0 && set_.version == seen_version) return std::nullopt;
  return set_;
}

struct InferenceWorker::SetRun {
  std::unique_ptr<ItemReader> reader;
  std::unique_ptr<PromptSetWriter> writer;
  std::vector<size_t> slots;  // the slots taking part: those with a model loaded here
  std::array<std::string, kSlots> names;
  std::array<uint64_t, kSlots> generation{};  // their models' (a load in between stops the set)
};

void InferenceWorker::set_work(std::unique_lock<std::mutex>& lock) {
  auto publish = [&] { set_.version = ++set_version_; };
  if (pending_set_) {  // start: the slots' models, the items counted, the folder opened
    const PromptSetRequest q = std::move(*pending_set_);
    pending_set_.reset();
    set_stop_ = false;
    set_active_ = false;  // the set it replaces, if any, ends here (its folder keeps what it wrote)
    set_run_.reset();
    auto run = std::make_shared<SetRun>();
    for (size_t s = 0; s < kSlots; ++s) {
      if (!models_[s]) continue;
      const std::string& name = models_[s]->config().name;
      run->names[s] = name.empty() ? status_.slots[s].path : name;
      if (s > 0 && run->names[s] == run->names[0]) run->names[s] += " (" + std::to_string(s + 1) + ")";
      run->slots.push_back(s);
      run->generation[s] = model_generation_[s];
    }
    status_.activity = "starting the prompt set " + q.items;
    lock.unlock();
    std::string error;
    int64_t total = 0;
    try {
      if (run->slots.empty())
        throw Error("no model is loaded here (a remote slot runs no prompt set: run difflens batch there)");
      total = count_items(q.items);
      if (total == 0) throw Error("--items " + q.items + ": no items (one JSON object a line)");
      run->reader = std::make_unique<ItemReader>(q.items);
      run->writer = std::make_unique<PromptSetWriter>(
          q.out, q.resume, q.out, "tick Resume to go on from it, or write to another folder");
    } catch (const std::exception& e) {
      error = user_message(e);
    }
    lock.lock();
    if (pending_set_) return;  // replaced meanwhile: the newer one starts next
    set_.request = q;
    set_.models = run->names;
    set_.total = total;
    if (!error.empty()) {
      set_.error = error;
      set_.running = false;
      publish();
      return;
    }
    set_run_ = run;
    set_active_ = true;
    set_.running = true;
    set_.finished = set_.cancelled = false;
    set_.done = set_.failed = set_.skipped = 0;
    set_.seconds = 0;
    set_.summary.clear();
    publish();
    return;
  }
  if (!set_run_ || pending_set_) {  // replaced by a newer set, which starts next
    set_active_ = false;
    return;
  }
  SetRun& run = *set_run_;
  const uint64_t job = set_.id;
  for (size_t s : run.slots)
    if (model_generation_[s] != run.generation[s] && set_.error.empty()) {
      set_.error = "the " + std::string(s == 0 ? "left" : "right") +
                   " slot's model changed: stopped (Resume with the same models goes on)";
      set_stop_ = true;
    }
  auto end = [&](bool cancelled) {  // the summary over what items.jsonl holds
    std::vector<std::string> names;
    for (size_t s : run.slots) names.push_back(run.names[s]);
    status_.activity = "writing the prompt set's summary";
    lock.unlock();
    std::string summary, error;
    try {
      summary = run.writer->finish(names);
    } catch (const std::exception& e) {
      error = user_message(e);
    }
    lock.lock();
    if (set_.id != job) return;  // a newer set took its place meanwhile: this one's state is not shown
    set_.summary = summary;
    if (!error.empty() && set_.error.empty()) set_.error = "the summary: " + error;
    set_.running = false;
    set_.cancelled = cancelled;
    set_.finished = !cancelled;
    set_active_ = false;
    set_run_.reset();
    publish();
  };
  if (set_stop_) return end(true);
  status_.activity =
      "prompt set: item " + std::to_string(set_.done + 1) + " of " + std::to_string(set_.total);
  lock.unlock();
  const auto t0 = std::chrono::steady_clock::now();
  std::string text, error;
  int64_t line = 0, failed = 0, skipped = 0;
  bool more = false;
  try {
    more = run.reader->next(text, line);
  } catch (const std::exception& e) {
    error = user_message(e);
  }
  if (more)
    for (size_t s : run.slots) {
      std::vector<std::string> refused;
      const auto outcome = run.writer->run(*models_[s], run.names[s], text, line, {}, refused);
      skipped += outcome == PromptSetWriter::Outcome::Skipped;
      failed += outcome == PromptSetWriter::Outcome::Failed;
    }
  const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  lock.lock();
  if (set_.id != job) return;  // replaced while the item ran: the newer set starts next
  set_.seconds += spent;
  set_.failed += failed;
  set_.skipped += skipped;
  if (!error.empty()) {
    set_.error = error;
    return end(true);
  }
  if (!more) return end(false);
  ++set_.done;
  publish();
}

uint64_t InferenceWorker::start_steps(const StepsRequest& request) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_request_++;
    pending_steps_ = request;  // replaces the job in progress, if any
    steps_ = StepsProgress{};
    steps_.id = id;
    steps_.request = request;
    steps_.running = true;
    steps_.current = "waiting for the worker";
    steps_.version = ++steps_version_;
  }
  cv_.notify_all();
  return id;
}

void InferenceWorker::cancel_steps() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_steps_) {  // not started: it ends here
      pending_steps_.reset();
      steps_.running = false;
      steps_.cancelled = true;
      steps_.version = ++steps_version_;
    }
    steps_stop_ = true;
  }
  cv_.notify_all();
}

std::optional<StepsProgress> InferenceWorker::steps_progress(uint64_t seen_version) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (seen_version != 0 && steps_.version == seen_version) return std::nullopt;
  return steps_;
}

void InferenceWorker::steps_work(std::unique_lock<std::mutex>& lock) {
  if (pending_steps_) {  // start: the plan, step by step across the slots
    steps_.request = std::move(*pending_steps_);
    pending_steps_.reset();
    steps_.points = {};
    steps_.done = 0;
    steps_.running = true;
    steps_.finished = steps_.cancelled = false;
    steps_plan_.clear();
    steps_next_ = 0;
    steps_stop_ = false;
    size_t most = 0;
    for (int s = 0; s < kSlots; ++s)
      most = std::max(most, steps_.request.steps[static_cast<size_t>(s)].size());
    for (size_t k = 0; k < most; ++k)
      for (int s = 0; s < kSlots; ++s)
        if (k < steps_.request.steps[static_cast<size_t>(s)].size()) steps_plan_.push_back({s, k});
    steps_.total = steps_plan_.size();
    steps_active_ = true;
    steps_.version = ++steps_version_;
    return;
  }
  if (steps_stop_ || steps_next_ >= steps_plan_.size()) {
    steps_active_ = false;
    steps_.running = false;
    steps_.cancelled = steps_stop_;
    steps_.finished = !steps_stop_;
    steps_.current.clear();
    steps_.version = ++steps_version_;
    return;
  }
  const auto [slot, k] = steps_plan_[steps_next_++];
  const auto [step, folder] = steps_.request.steps[static_cast<size_t>(slot)][k];
  const StepsRequest& q = steps_.request;
  const std::string prompt = q.prompt;
  const Specials specials = q.specials;
  const CaptureOptions options = q.options;
  const TokenRange answer = q.answer;
  const int64_t query = q.query;
  const DeviceChoice device = device_;
  const uint64_t job = steps_.id;
  steps_.current = "slot " + std::to_string(slot + 1) + ": step " + std::to_string(step);
  status_.activity = "measuring " + steps_.current + " (" + std::to_string(steps_next_) + "/" +
                     std::to_string(steps_plan_.size()) + ")";
  steps_.version = ++steps_version_;
  cancel_ = false;  // no run waits (else this would not run): a run asked from now on interrupts the capture
  lock.unlock();
  StepPoint p;
  p.step = step;
  try {
    const Model m = Model::load(folder, device);
    const Encoding enc = encode_prompt(m, prompt, specials);
    const Trace t = m.capture(enc.ids, options, &cancel_);
    const int64_t T = t.length();
    const TokenSpan ans{std::min<int64_t>(answer.first, T), std::min<int64_t>(answer.second, T)};
    const NoiseReadout nr = attention_noise(t, ans, TokenSpan{std::clamp<int64_t>(query, 0, T - 1), T});
    p.answer_mass = nr.mean.answer_mass;
    p.noise_mass = nr.mean.noise_mass;
  } catch (const Cancelled&) {
    p.error = "interrupted by a run: measured again";
  } catch (const std::exception& e) {
    p.error = user_message(e);
  }
  lock.lock();
  if (steps_.id != job) return;  // replaced while it ran: the newer job starts next
  if (p.error == "interrupted by a run: measured again") {
    --steps_next_;  // a prompt run cancelled the capture: this step runs again after it
    return;
  }
  steps_.points[static_cast<size_t>(slot)].push_back(p);
  ++steps_.done;
  steps_.version = ++steps_version_;
}

uint64_t InferenceWorker::start_sweep(const SweepRequest& request) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_request_++;
    pending_sweep_ = request;  // replaces the sweep in progress, if any
    if (sweep_in_episode_) cancel_ = true;
    sweep_ = SweepProgress{};
    sweep_.id = id;
    sweep_.request = request;
    sweep_.running = true;
    sweep_.current = "waiting for the worker";
    sweep_.version = ++sweep_version_;
  }
  cv_.notify_all();
  return id;
}

void InferenceWorker::cancel_load() {
  load_cancel_ = true;
}

void InferenceWorker::set_device(DeviceChoice device) {
  std::lock_guard<std::mutex> lock(mutex_);
  device_ = device;
}

void InferenceWorker::cancel_sweep() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_sweep_) {  // not started yet: nothing ran (a replaced sweep's plan goes too)
      pending_sweep_.reset();
      end_sweep("", true);
    } else if (sweep_active_) {
      sweep_stop_ = true;
      if (sweep_in_episode_) cancel_ = true;  // only the sweep's episode runs now: interrupt it
    }
  }
  cv_.notify_all();
}

std::optional<SweepProgress> InferenceWorker::sweep_progress(uint64_t seen_version) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (seen_version != 0 && sweep_.version == seen_version) return std::nullopt;
  return sweep_;
}

bool InferenceWorker::sweep_uses(int slot) const {
  return std::any_of(sweep_slots_.begin(), sweep_slots_.end(),
                     [&](const auto& lane) { return lane.first == slot; });
}

void InferenceWorker::drop_sweep_plan() {
  sweep_active_ = false;
  sweep_stop_ = false;
  sweep_jobs_.clear();
  sweep_slots_.clear();
  sweep_next_ = 0;
  for (auto& b : sweep_builders_) b.reset();
}

void InferenceWorker::end_sweep(const std::string& error, bool cancelled) {
  drop_sweep_plan();
  sweep_.running = false;
  sweep_.cancelled = cancelled;
  sweep_.finished = !cancelled && error.empty();
  if (!error.empty()) sweep_.error = sweep_.error.empty() ? error : sweep_.error + "; " + error;
  sweep_.current.clear();
  sweep_.version = ++sweep_version_;
}

// Reads the haystack and prepares one episode builder per runnable slot (tokenizing the haystack is
// model work: done unlocked). A sweep already running is replaced.
void InferenceWorker::begin_sweep(std::unique_lock<std::mutex>& lock) {
  drop_sweep_plan();
  const SweepRequest req = *pending_sweep_;
  pending_sweep_.reset();
  const uint64_t id = sweep_.id;
  sweep_active_ = true;  // preparing counts: cancel_sweep() stops it
  status_.activity = "needle sweep: preparing";
  lock.unlock();
  std::string error;
  std::vector<std::string> slot_notes;
  std::vector<std::pair<int, bool>> slots;
  std::array<std::string, kSlots> names;
  std::array<std::vector<std::string>, kSlots> applied;
  std::array<CountedHaystack, kSlots> haystacks = sweep_haystacks_;
  std::array<std::unique_ptr<EpisodeBuilder>, kSlots> builders;
  std::vector<NeedleJob> jobs;
  try {
    jobs = expand(req.sweep);
    const int64_t shortest = *std::min_element(req.sweep.lengths.begin(), req.sweep.lengths.end());
    if (req.logit_bits != 0 && (req.logit_bits < 2 || req.logit_bits > 32))
      throw Error("logit quantization takes 2 to 32 bits (0: exact)");
    const std::string text = cli::read_file(req.haystack_path, "haystack text");
    std::error_code ec;
    const std::string file_key =
        req.haystack_path + "|" + std::to_string(std::filesystem::file_size(req.haystack_path, ec)) + "|" +
        std::to_string(std::filesystem::last_write_time(req.haystack_path, ec).time_since_epoch().count());
    for (size_t s = 0; s < kSlots; ++s) {
      const Model* m = models_[s].get();
      const std::string side = s == 0 ? "left slot" : "right slot";
      if (remotes_[s]) {  // the server builds and runs the episodes from the haystack text sent along
        const RemoteModelInfo& info = *remote_info_[s];
        if (!info.can_encode) {
          slot_notes.push_back(side + ": its remote model has no text tokenizer");
          continue;
        }
        try {
          validate(req.sweep, info.config.max_position_embeddings);
        } catch (const std::exception& e) {
          slot_notes.push_back(side + ": " + user_message(e));
          continue;
        }
        sweep_texts_[s] = text;
        names[s] = info.config.name.empty() ? to_string(info.config.attention) : info.config.name;
        names[s] += " (remote)";
        applied[s] = sweep_specs(req.interventions[s], info.config, shortest, side, slot_notes);
        slots.push_back({static_cast<int>(s), false});
        if (!applied[s].empty()) slots.push_back({static_cast<int>(s), true});
        continue;
      }
      if (!m) {
        slot_notes.push_back(side + ": no model loaded");
        continue;
      }
      if (!m->tokenizer().can_encode()) {
        slot_notes.push_back(side + ": its model has no text tokenizer");
        continue;
      }
      try {
        validate(req.sweep, m->config().max_position_embeddings);
        CountedHaystack& h = haystacks[s];
        if (!h.haystack || h.path != file_key || h.model_generation != model_generation_[s]) {
          h.haystack.reset();  // a broken file must not leave the old text in place
          h.haystack = std::make_shared<const Haystack>(text, m->tokenizer());
          h.path = file_key;
          h.model_generation = model_generation_[s];
        }
        builders[s] = std::make_unique<EpisodeBuilder>(*h.haystack, m->tokenizer(), NeedleSplit::Eval,
                                                       req.names, req.wording);
        // One episode per length and (N, R) now, so a grid the haystack or the context cannot hold
        // fails here, not halfway.
        for (int64_t L : req.sweep.lengths)
          for (const auto& [n, r] : req.sweep.needles_queried)
            (void)needle_episode(*builders[s], {L, req.sweep.depths.front(), n, r}, 1);
      } catch (const std::exception& e) {
        slot_notes.push_back(side + ": " + user_message(e));
        builders[s].reset();
        continue;
      }
      names[s] = m->config().name.empty() ? to_string(m->config().attention) : m->config().name;
      applied[s] = sweep_specs(req.interventions[s], m->config(), shortest, side, slot_notes);
      slots.push_back({static_cast<int>(s), false});
      if (!applied[s].empty()) slots.push_back({static_cast<int>(s), true});
    }
    if (slots.empty()) throw Error("no slot can run the sweep");
  } catch (const std::exception& e) {
    error = user_message(e);
  }
  lock.lock();
  sweep_haystacks_ = haystacks;  // counted once, kept for the next sweep
  if (sweep_.id != id) return;   // replaced meanwhile: the new request waits in pending_sweep_
  for (const auto& n : slot_notes) sweep_.error += (sweep_.error.empty() ? "" : "; ") + n;
  // The logit bits last, after the interventions, as the needle command names its rows.
  const std::string bits =
      req.logit_bits > 0 ? " (logits " + std::to_string(req.logit_bits) + "-bit)" : std::string();
  for (size_t s = 0; s < kSlots; ++s) {
    if (names[s].empty()) continue;
    if (!applied[s].empty()) sweep_.edited_models[s] = names[s] + under_interventions(applied[s]) + bits;
    names[s] += bits;
  }
  sweep_.applied = applied;
  sweep_.models = names;
  if (!error.empty() || sweep_stop_) {
    end_sweep(error, sweep_stop_);
    return;
  }
  sweep_jobs_ = std::move(jobs);
  sweep_slots_ = std::move(slots);
  sweep_builders_ = std::move(builders);
  sweep_.total = sweep_jobs_.size() * sweep_slots_.size();
  sweep_.current.clear();
  sweep_.version = ++sweep_version_;
}

// Runs the next episode; a prompt run or a cancel that interrupts it leaves the step to be redone.
void InferenceWorker::sweep_step(std::unique_lock<std::mutex>& lock) {
  if (sweep_stop_) {
    end_sweep("", true);
    return;
  }
  const size_t steps = sweep_jobs_.size() * sweep_slots_.size();
  if (sweep_next_ >= steps) {
    end_sweep("", false);
    return;
  }
  const uint64_t id = sweep_.id;
  const NeedleJob job = sweep_jobs_[sweep_next_ / sweep_slots_.size()];
  const auto [lane_slot, edited] = sweep_slots_[sweep_next_ % sweep_slots_.size()];
  const size_t slot = static_cast<size_t>(lane_slot);
  const std::string lane_name = edited ? sweep_.edited_models[slot] : sweep_.models[slot];
  const std::vector<std::string> specs = edited ? sweep_.applied[slot] : std::vector<std::string>{};
  char what[400];
  std::snprintf(what, sizeof what, "%s: %lld tokens, depth %.0f%%, N=%d R=%d, seed %llu", lane_name.c_str(),
                static_cast<long long>(job.cell.length), job.cell.depth * 100, job.cell.needles,
                job.cell.queried, static_cast<unsigned long long>(job.seed));
  sweep_.current = what;
  sweep_.version = ++sweep_version_;
  status_.activity =
      "needle sweep " + std::to_string(sweep_.done + 1) + "/" + std::to_string(sweep_.total) + ": " + what;
  sweep_in_episode_ = true;
  cancel_ = false;
  const int bits = sweep_.request.logit_bits;
  lock.unlock();
  std::optional<NeedleRun> run;
  std::string error;
  try {
    if (remotes_[slot]) {
      remote::NeedleRequest r;
      r.cell = job.cell;
      r.seed = job.seed;
      r.haystack = sweep_texts_[slot];
      r.names = sweep_.request.names;
      r.wording = sweep_.request.wording;
      r.logit_bits = bits;
      r.interventions = specs;
      run = remotes_[slot]->needle(r);
    } else {
      models_[slot]->set_logit_bits(
          bits);  // only for this episode: prompt runs between episodes see exact logits
      run = run_needle(*models_[slot], *sweep_builders_[slot], job.cell, job.seed, &cancel_, specs);
    }
  } catch (const Cancelled&) {
  } catch (const std::exception& e) {
    error = user_message(e);
  }
  if (models_[slot]) models_[slot]->set_logit_bits(0);
  lock.lock();
  sweep_in_episode_ = false;
  if (sweep_.id != id) return;  // a new sweep was requested meanwhile
  if (!error.empty()) {
    end_sweep(lane_name + ": " + error, false);
    return;
  }
  if (!run) return;  // interrupted: the prompt run or the cancel is handled next, the step stays
  sweep_.seconds += run->seconds;
  (edited ? sweep_.edited_runs : sweep_.runs)[slot].push_back(std::move(*run));
  ++sweep_.done;
  ++sweep_next_;
  sweep_.version = ++sweep_version_;
  if (sweep_next_ == steps) end_sweep("", false);
}

void InferenceWorker::connect_remote(const Load& job, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  std::shared_ptr<RemoteClient> client;
  std::shared_ptr<RemoteModelInfo> info;
  std::string error, tokenizer_dir;
  try {
    RemoteAddress a = parse_remote(job.dir);
    if (a.model < 0) a.model = job.slot;
    client = std::make_shared<RemoteClient>(a);
    info = std::make_shared<RemoteModelInfo>(client->model_info());
    const char* cache = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    const std::string root = cache && *cache ? std::string(cache) + "/difflens/remote"
                             : home && *home
                                 ? std::string(home) + "/.cache/difflens/remote"
                                 : (std::filesystem::temp_directory_path() / "difflens-remote").string();
    try {
      tokenizer_dir = client->fetch_tokenizer(root);
    } catch (const std::exception&) {
      tokenizer_dir.clear();  // the needle builder then says the slot has no tokenizer file
    }
  } catch (const std::exception& e) {
    error = user_message(e);
  }
  lock.lock();
  SlotInfo& slot = status_.slots[static_cast<size_t>(job.slot)];
  slot.error = error;
  if (!client || !info) return;
  if (sweep_active_ && sweep_uses(job.slot))
    end_sweep("stopped: the model in the " + std::string(job.slot == 0 ? "left" : "right") + " slot changed",
              true);
  const size_t s = static_cast<size_t>(job.slot);
  ++model_generation_[s];
  slot.path = client->address().text();
  slot.description = std::filesystem::path(info->path).filename().string() + " on " + client->address().host +
                     ":" + std::to_string(client->address().port) + ": " + info->description;
  slot.tokenizer_dir = tokenizer_dir;
  slot.loaded = true;
  models_[s].reset();
  remotes_[s] = std::move(client);
  remote_info_[s] = std::move(info);
  remote_last_[s] = {};
}

void InferenceWorker::load_model(const Load& job, std::unique_lock<std::mutex>& lock) {
  if (is_remote(job.dir)) return connect_remote(job, lock);
  load_cancel_ = false;
  const DeviceChoice device = device_;
  lock.unlock();
  std::unique_ptr<Model> model;
  std::string error;
  try {
    model = std::make_unique<Model>(Model::load(
        job.dir, device,
        [&](int64_t done, int64_t total) {
          std::lock_guard<std::mutex> guard(mutex_);
          status_.activity =
              "loading " + job.dir + ": " + std::to_string(done) + "/" + std::to_string(total) + " tensors";
          status_.load_fraction = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 0;
        },
        &load_cancel_));
  } catch (const Cancelled&) {
    error = "loading " + job.dir + " was cancelled; the slot keeps its model";
  } catch (const std::exception& e) {
    error = user_message(e);
  }
  lock.lock();
  status_.load_fraction = -1;
  SlotInfo& info = status_.slots[static_cast<size_t>(job.slot)];
  info.error = error;
  if (model && sweep_active_ && sweep_uses(job.slot))
    end_sweep("stopped: the model in the " + std::string(job.slot == 0 ? "left" : "right") + " slot changed",
              true);
  if (model) {
    ++model_generation_[static_cast<size_t>(job.slot)];
    info.path = job.dir;
    info.tokenizer_dir = job.dir;
    info.description = cli::describe_model(*model);
    info.loaded = true;
    models_[static_cast<size_t>(job.slot)] = std::move(model);
    remotes_[static_cast<size_t>(job.slot)].reset();
    remote_info_[static_cast<size_t>(job.slot)].reset();
  }
}

// One slot's run on its server: the prompt's text (or its ids, for a model without a text tokenizer) and
// the capture options go, the trace comes back. A server that cannot be reached leaves the slot's last
// trace on screen, with a note saying so.
void InferenceWorker::run_remote(size_t s, const std::string& prompt, const CaptureOptions& options,
                                 RunResult& r, bool& cancelled) {
  const RemoteModelInfo& info = *remote_info_[s];
  remote::CaptureRequest q;
  q.keep_maps = options.keep_maps;
  q.layers = options.layers;
  q.heads = options.heads;
  q.keep_logits = options.keep_logits;
  q.keep_hidden = options.keep_hidden;
  q.keep_qkv = options.keep_qkv;
  q.top_k = options.next_token_top_k;
  q.position_top_k = options.position_top_k;
  q.logit_bits = options.logit_bits;
  q.pooled_budget_bytes = options.pooled_budget_bytes;
  try {
    if (info.can_encode) {
      q.prompt = prompt;
      q.specials = r.edits.specials;
    } else {
      q.token_ids = parse_token_ids(prompt, info.config.vocab_size);
      if (q.token_ids.empty())
        throw Error("this model has no text tokenizer (" + info.tokenizer_note +
                    "): type token ids separated by commas or spaces, e.g. 1, 450, 3");
    }
    RemoteCapture c = remotes_[s]->capture(q, &cancel_);
    r.offsets[s] = std::move(c.offsets);
    r.labels[s] = viz::display_tokens(c.trace->tokens, viz::Spaces::Visible);
    r.round_trip_ms[s] = c.round_trip_ms;
    r.server_ms[s] = c.server_ms;
    r.traces[s] = std::move(c.trace);
    remote_last_[s] = {r.traces[s], r.offsets[s], r.labels[s]};
  } catch (const Cancelled&) {
    cancelled = true;
  } catch (const RemoteUnreachable& e) {
    r.notes[s] = user_message(e);
    if (remote_last_[s].trace) {  // keep the last trace on screen
      r.traces[s] = remote_last_[s].trace;
      r.offsets[s] = remote_last_[s].offsets;
      r.labels[s] = remote_last_[s].labels;
      r.notes[s] += " (showing the last trace)";
    } else {
      r.errors[s] = r.notes[s];
    }
  } catch (const std::exception& e) {
    r.errors[s] = user_message(e);
  }
}

void InferenceWorker::run_continuation(const ContinueJob& job) {
  const auto t0 = std::chrono::steady_clock::now();
  Continuation c;
  c.request = job.id;
  c.slot = job.slot;
  c.prompt = job.prompt;
  const size_t s = static_cast<size_t>(job.slot);
  const std::string side = job.slot == 0 ? "left" : "right";
  bool cancelled = false;
  try {
    if (remotes_[s])
      throw Error("the " + side +
                  " model runs on a server (remote://), and the remote protocol has no generation: Continue "
                  "needs a model on this machine");
    if (!models_[s]) throw Error("the " + side + " slot has no model to continue the prompt with");
    const Model& m = *models_[s];
    if (job.prompt.empty()) throw Error("the prompt is empty: nothing to continue");
    const Encoding enc = encode_prompt(m, job.prompt, job.edits.specials);
    const int64_t room = m.config().max_position_embeddings - static_cast<int64_t>(enc.ids.size());
    if (room <= 0)
      throw Error("the prompt already fills the model's " +
                  std::to_string(m.config().max_position_embeddings) + " positions: nothing can be added");
    GenerateOptions o = job.options;
    o.max_new = static_cast<int>(std::min<int64_t>(o.max_new, room));
    std::vector<std::string> skipped;  // the run of the written text reports them; the writing skips them too
    o.interventions = slot_interventions(m, job.edits, s, static_cast<int64_t>(enc.ids.size()), skipped);
    int written = 0;
    o.on_token = [&](int64_t) {
      std::lock_guard<std::mutex> lock(mutex_);
      status_.activity = "writing " + std::to_string(++written) + " / " + std::to_string(o.max_new) +
                         " tokens (" + side + " model)";
    };
    const Generation g = m.generate(enc.ids, o, &continue_cancel_);
    c.ids = g.ids;
    const Tokenizer& tok = m.tokenizer();
    if (!tok.can_encode()) {  // an ids prompt continues as ids
      for (const int64_t id : g.ids) c.steps.push_back(", " + std::to_string(id));
    } else {
      // Trailing whitespace the tokenizer read as nothing (SentencePiece drops it: "is " reads as "is") is
      // not written twice when the new text begins with whitespace ("is " + " 7182" -> "is 7182").
      size_t trail = 0;
      while (trail < job.prompt.size() &&
             std::isspace(static_cast<unsigned char>(job.prompt[job.prompt.size() - 1 - trail])))
        ++trail;
      const bool dropped =
          trail > 0 && tok.encode(job.prompt.substr(0, job.prompt.size() - trail), true).ids == enc.ids;
      // The text after k tokens is what decoding the prompt's tokens and those k adds to decoding the
      // prompt's tokens (decoding the new tokens alone would lose a word's leading space); each token's step
      // is what its text adds to the text before it.
      const std::string before = tok.decode(enc.ids);
      std::vector<int64_t> all = enc.ids;
      std::string so_far;
      bool rewrote = false;
      for (const int64_t id : g.ids) {
        all.push_back(id);
        const std::string after = tok.decode(all);
        std::string text = after.compare(0, before.size(), before) == 0
                               ? after.substr(before.size())
                               : tok.decode(std::vector<int64_t>(
                                     all.begin() + static_cast<long>(enc.ids.size()), all.end()));
        if (dropped) {  // only the prompt's own trailing characters, in their order (" " does not eat "\n")
          size_t lead = 0;
          while (lead < trail && lead < text.size() &&
                 text[lead] == job.prompt[job.prompt.size() - trail + lead])
            ++lead;
          if (all.size() == enc.ids.size() + 1 && lead > 0 && lead == text.size())
            c.first_wrote_back_space = true;
          text.erase(0, lead);
        }
        // A step is the text's growth. Should decoding rewrite earlier text, the steps could not add up:
        // then the whole text comes with the last token.
        rewrote |= text.compare(0, so_far.size(), so_far) != 0;
        c.steps.push_back(rewrote ? "" : text.substr(so_far.size()));
        so_far = text;
      }
      if (rewrote) {
        c.steps.assign(c.steps.size(), "");
        c.steps.back() = so_far;
      }
    }
    for (const std::string& st : c.steps) c.text += st;
    if (c.text.empty())
      c.error = "the " + side + " model wrote no text (" +
                (g.ids.empty() ? std::string("no token")
                               : "it ended the text, token " + std::to_string(g.ids.back())) +
                ")";
  } catch (const Cancelled&) {
    cancelled = true;
  } catch (const std::exception& e) {
    c.error = user_message(e);
  }
  c.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!cancelled && job.id >= continue_cancelled_below_ && !pending_continue_) continuation_ = std::move(c);
}

void InferenceWorker::loop() {
  // OpenMP/LibTorch thread counts are per thread: set them here, on the thread that runs the models
  // (default: every core).
  set_num_threads(threads_ > 0 ? threads_
                               : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] {
      return stopping_ || !loads_.empty() || pending_run_ || pending_continue_ || pending_sweep_ ||
             sweep_active_ || pending_steps_ || steps_active_ || pending_set_ || set_active_;
    });
    if (stopping_) return;
    status_.busy = true;
    if (loads_.empty() && pending_continue_) {  // a continuation, then the run of its text
      const ContinueJob job = std::move(*pending_continue_);
      pending_continue_.reset();
      continue_cancel_ = false;
      status_.activity = "writing 0 / " + std::to_string(job.options.max_new) + " tokens";
      lock.unlock();
      run_continuation(job);
      lock.lock();
    } else if (loads_.empty() && !pending_run_) {  // sweeps and steps only when nothing else waits
      if (pending_set_ || set_active_)
        set_work(lock);
      else if (pending_steps_ || steps_active_)
        steps_work(lock);
      else if (pending_sweep_)
        begin_sweep(lock);
      else
        sweep_step(lock);
    } else if (!loads_.empty()) {  // loads first: a run queued after a load must see the new model
      const Load job = loads_.front();
      loads_.pop_front();
      status_.activity = "loading " + job.dir;
      if (job.bundle) {
        const uint64_t id = next_request_++;
        lock.unlock();
        RunResult r;
        r.request = id;
        r.prompt = "(trace bundle " + job.dir + ")";
        try {
          r.traces[static_cast<size_t>(job.slot)] = std::make_shared<Trace>(read_trace_bundle(job.dir));
          r.labels[static_cast<size_t>(job.slot)] =
              viz::display_tokens(r.traces[static_cast<size_t>(job.slot)]->tokens, viz::Spaces::Visible);
        } catch (const std::exception& e) {
          r.errors[static_cast<size_t>(job.slot)] = user_message(e);
        }
        r.errors[static_cast<size_t>(1 - job.slot)] = "(showing a trace bundle in the other slot)";
        note_nonfinite(r);
        lock.lock();
        result_ = std::move(r);
      } else {
        load_model(job, lock);
      }
    } else {
      const uint64_t id = pending_run_->id;
      const std::string prompt = pending_run_->prompt;
      const CaptureOptions options = pending_run_->options;
      const RunEdits edits = pending_run_->edits;
      pending_run_.reset();
      cancel_ = false;
      status_.activity = "running";
      lock.unlock();
      const auto t0 = std::chrono::steady_clock::now();
      RunResult r;
      r.request = id;
      r.prompt = prompt;
      r.edits = edits;
      bool cancelled = false;
      for (size_t s = 0; s < kSlots && !cancelled; ++s) {
        if (remotes_[s]) {
          run_remote(s, prompt, options, r, cancelled);
          if (edits.explain && !edits.corrupt.empty())
            r.patch_error[s] = "activation patching runs on models loaded here, not over serve";
          continue;
        }
        if (!models_[s]) {
          r.errors[s] = "no model loaded";
          continue;
        }
        try {
          const Encoding enc = encode_prompt(*models_[s], prompt, edits.specials);
          r.notes[s] = positions_note(models_[s]->config(), static_cast<int64_t>(enc.ids.size()));
          CaptureOptions edited = options;
          edited.interventions =
              slot_interventions(*models_[s], edits, s, static_cast<int64_t>(enc.ids.size()), r.skipped[s]);
          auto trace = std::make_shared<Trace>(models_[s]->capture(enc.ids, edited, &cancel_));
          if (edits.explain)
            explain_slot(*models_[s], enc.ids, edits, edited.interventions, r, s, why_cache_[s],
                         model_generation_[s]);
          if (edits.explain && !edits.corrupt.empty())
            patch_slot(*models_[s], enc.ids, edits, edited.interventions, r, s, &cancel_);
          trace->tokens = enc.pieces;  // display pieces as the tokenizer produced them
          r.offsets[s] = enc.offsets;
          r.labels[s] = viz::display_tokens(trace->tokens, viz::Spaces::Visible);
          r.traces[s] = std::move(trace);
        } catch (const Cancelled&) {
          cancelled = true;
        } catch (const std::exception& e) {
          r.errors[s] = user_message(e);
        }
      }
      r.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      note_nonfinite(r);
      lock.lock();
      // A newer request may have arrived meanwhile: then this result is stale and is dropped.
      if (!cancelled && !(pending_run_ && pending_run_->id > id)) {
        status_.last_run_ms = r.elapsed_ms;
        result_ = std::move(r);
      }
    }
    status_.busy = false;
    status_.activity = "idle";
    cv_.notify_all();
    if (wake_) {
      lock.unlock();
      wake_();
      lock.lock();
    }
  }
}

}  // namespace difflens::app
