// InferenceWorker: job queue, latest-wins runs, cancellation, model loading on the owning thread.
#include "app/inference_worker.h"

#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "core/trace_io.h"

namespace difflens::app {
namespace {

std::string describe(const Model& m) {
  const ModelConfig& c = m.config();
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s, %lld layers x %lld heads, %.2f M params, %s", to_string(c.attention),
                static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.map_heads()),
                static_cast<double>(m.parameter_count()) / 1e6, m.device_name().c_str());
  return buf;
}

}  // namespace

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

void InferenceWorker::open_bundle(int slot, const std::string& dir) {
  if (slot < 0 || slot >= kSlots) throw Error("no model slot " + std::to_string(slot));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    loads_.push_back({slot, dir, true});
  }
  cv_.notify_all();
}

uint64_t InferenceWorker::run(const std::string& prompt, const CaptureOptions& options) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_request_++;
    pending_run_ = {id, {prompt, options}};
    cancel_ = true;  // whatever runs now is stale
  }
  cv_.notify_all();
  return id;
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
  cv_.wait(lock, [this] { return stopping_ || (loads_.empty() && !pending_run_ && !status_.busy); });
}

void InferenceWorker::load_model(const Load& job, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  std::unique_ptr<Model> model;
  std::string error;
  try {
    model = std::make_unique<Model>(Model::load(job.dir));
  } catch (const std::exception& e) {
    error = e.what();
  }
  lock.lock();
  SlotInfo& info = status_.slots[static_cast<size_t>(job.slot)];
  info.error = error;
  if (model) {
    info.path = job.dir;
    info.description = describe(*model);
    info.loaded = true;
    models_[static_cast<size_t>(job.slot)] = std::move(model);
  }
}

void InferenceWorker::loop() {
  // OpenMP/LibTorch thread counts are per thread: set them here, on the thread that runs the models
  // (default: every core).
  set_num_threads(threads_ > 0 ? threads_
                               : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !loads_.empty() || pending_run_; });
    if (stopping_) return;
    status_.busy = true;
    if (!loads_.empty()) {  // loads first: a run queued after a load must see the new model
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
        } catch (const std::exception& e) {
          r.errors[static_cast<size_t>(job.slot)] = e.what();
        }
        r.errors[static_cast<size_t>(1 - job.slot)] = "(showing a trace bundle in the other slot)";
        lock.lock();
        result_ = std::move(r);
      } else {
        load_model(job, lock);
      }
    } else {
      const uint64_t id = pending_run_->first;
      const std::string prompt = pending_run_->second.first;
      const CaptureOptions options = pending_run_->second.second;
      pending_run_.reset();
      cancel_ = false;
      status_.activity = "running";
      lock.unlock();
      const auto t0 = std::chrono::steady_clock::now();
      RunResult r;
      r.request = id;
      r.prompt = prompt;
      bool cancelled = false;
      for (size_t s = 0; s < kSlots && !cancelled; ++s) {
        if (!models_[s]) {
          r.errors[s] = "no model loaded";
          continue;
        }
        try {
          const Encoding enc = models_[s]->tokenizer().encode(prompt, true);
          auto trace = std::make_shared<Trace>(models_[s]->capture(enc.ids, options, &cancel_));
          trace->tokens = enc.pieces;  // display pieces as the tokenizer produced them
          r.offsets[s] = enc.offsets;
          r.traces[s] = std::move(trace);
        } catch (const Cancelled&) {
          cancelled = true;
        } catch (const std::exception& e) {
          r.errors[s] = e.what();
        }
      }
      r.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      lock.lock();
      // A newer request may have arrived meanwhile: then this result is stale and is dropped.
      if (!cancelled && !(pending_run_ && pending_run_->first > id)) {
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
