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

#include "core/model.h"
#include "core/trace.h"

namespace difflens::app {

constexpr int kSlots = 2;  // 0 = left (DIFF by default), 1 = right (baseline by default)

struct SlotInfo {
  std::string path;         // directory it was loaded from
  std::string description;  // "diff, 4 layers x 4 heads, 1.84 M params, cpu"
  std::string error;        // why the last load failed (the previous model stays loaded)
  bool loaded = false;
};

struct RunResult {
  uint64_t request = 0;
  std::string prompt;
  std::array<std::shared_ptr<const Trace>, kSlots> traces;  // null where the slot failed or is empty
  std::array<std::string, kSlots> errors;                   // per-slot message ("" when fine)
  std::vector<std::pair<size_t, size_t>> offsets[kSlots];   // byte span of each token in the prompt
  double elapsed_ms = 0;                                    // both slots, tokenization included
};

struct WorkerStatus {
  bool busy = false;
  std::string activity;  // "running 256 tokens", "loading assets/models/diff-small", "idle"
  double last_run_ms = 0;
  std::array<SlotInfo, kSlots> slots;
};

class InferenceWorker {
 public:
  // `wake` is called from the worker thread whenever something finished (e.g. glfwPostEmptyEvent).
  explicit InferenceWorker(std::function<void()> wake = {}, int threads = 0);
  ~InferenceWorker();  // cancels, stops and joins
  InferenceWorker(const InferenceWorker&) = delete;
  InferenceWorker& operator=(const InferenceWorker&) = delete;

  // Queues a model load; on failure the slot keeps its previous model and reports the error.
  void load(int slot, const std::string& dir);
  // Queues reading a trace bundle (difflens capture --out DIR) into `slot`: it is delivered as a result of
  // its own (the other slot empty) and shown until the next run; errors are reported in that result.
  void open_bundle(int slot, const std::string& dir);
  // Queues a run of both slots on `prompt`, cancelling any run in progress. Returns the request id.
  uint64_t run(const std::string& prompt, const CaptureOptions& options = {});
  // The newest finished run not yet taken (older ones are dropped), or nothing.
  std::optional<RunResult> take_result();
  WorkerStatus status() const;
  // Blocks until the queue is empty and nothing runs (tests and headless mode).
  void wait_idle() const;

 private:
  void loop();
  struct Load;
  // Loads a model into its slot; called with `lock` held, returns with it held.
  void load_model(const Load& job, std::unique_lock<std::mutex>& lock);

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
  std::optional<std::pair<uint64_t, std::pair<std::string, CaptureOptions>>> pending_run_;
  std::optional<RunResult> result_;
  WorkerStatus status_;
  uint64_t next_request_ = 1;
  bool stopping_ = false;
  std::atomic<bool> cancel_{false};
  std::array<std::unique_ptr<Model>, kSlots> models_;  // worker thread only
  std::thread thread_;
};

}  // namespace difflens::app
