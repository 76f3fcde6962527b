// InferenceWorker's load job: a model into its slot (a remote://HOST:PORT spec connects it to a server
// instead, worker_remote.cpp), or a trace bundle, delivered as a result of its own.
#include <memory>

#include "app/common/model_line.h"
#include "app/remote/client.h"
#include "app/worker/worker_impl.h"
#include "core/formats/error.h"
#include "core/formats/trace_io.h"
#include "viz/token_text.h"

namespace difflens::app {

void InferenceWorker::run_load_job(std::unique_lock<std::mutex>& lock) {
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

}  // namespace difflens::app
