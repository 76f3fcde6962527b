// InferenceWorker: the job queue (submits, latest-wins runs, cancellation, results picked up) and the loop
// that takes the next job. Each kind of job runs in the file named for it: worker_load.cpp,
// worker_prompt.cpp, worker_continue.cpp, worker_remote.cpp, worker_sweeps.cpp, worker_steps.cpp,
// worker_prompt_set.cpp.
#include "app/worker/inference_worker.h"

#include <algorithm>

#include "core/formats/error.h"

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

PromptInput typed_prompt(const std::string& prompt, Specials specials) {
  PromptInput in;
  in.text = prompt;
  in.specials = specials;
  in.ids_from_text = true;
  return in;
}

void InferenceWorker::open_bundle(int slot, const std::string& dir) {
  if (slot < 0 || slot >= kSlots) throw Error("no model slot " + std::to_string(slot));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    loads_.push_back({slot, dir, true});
  }
  cv_.notify_all();
}

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
      run_continue_job(lock);
    } else if (loads_.empty() && !pending_run_) {  // sweeps and steps only when nothing else waits
      if (pending_set_ || set_active_)
        run_prompt_set_job(lock);
      else if (pending_steps_ || steps_active_)
        run_steps_job(lock);
      else
        run_sweep_job(lock);
    } else if (!loads_.empty()) {  // loads first: a run queued after a load must see the new model
      run_load_job(lock);
    } else {
      run_prompt_job(lock);
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
