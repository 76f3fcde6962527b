// InferenceWorker's steps job (the Noise view's measure against the training step): the prompt on every
// kept step of each slot's training run, a step at a time between other work.
#include <algorithm>

#include "app/worker/inference_worker.h"
#include "core/formats/error.h"
#include "core/formats/metrics.h"

namespace difflens::app {

void InferenceWorker::run_steps_job(std::unique_lock<std::mutex>& lock) {
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
    const Encoding enc = encode_prompt(m, typed_prompt(prompt, specials), kTypeIds);
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

}  // namespace difflens::app
