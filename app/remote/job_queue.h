// The server's one model thread and what it runs: requests become Jobs, queued in arrival order and run one
// at a time (a GPU runs one capture at a time anyway) while the HTTP threads wait or stream progress. A
// client that names itself gets the app's latest-wins rule: its newer supersedable job cancels the older one,
// queued or running. Thread-safe: every member may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace difflens::app {

// One request for the model thread.
struct Job {
  std::string client;  // "" for a client that did not name itself
  std::string what;    // for the log: "capture 256 tokens"
  bool supersedable = false;
  std::function<std::string(Job&)> work;  // the reply body; throws on refusal or failure
  std::atomic<bool> cancel{false};
  // Guarded by the queue's mutex (read them through JobQueue::news or after wait):
  bool done = false;
  int status = 200;
  std::string body, error;
  int64_t layer = -1, layers = 0;  // progress of a capture
};

// What a job's streamed reply says next (JobQueue::news).
struct JobNews {
  bool progressed = false;  // layer changed since the caller's last look (the newest progress first)
  int64_t layer = -1, layers = 0;
  bool done = false;
  int status = 200;
};

// Replies by outcome: 200 served, 409 cancelled, anything else refused.
struct JobCounts {
  uint64_t served = 0, refused = 0, cancelled = 0;
};

class JobQueue {
 public:
  explicit JobQueue(int max_active) : max_active_(max_active) {}

  // Queues `job`; a named client's older supersedable job is cancelled. Throws RequestError 503 beyond
  // max_active jobs queued or running, or once stopping.
  void submit(const std::shared_ptr<Job>& job);
  void wait(const std::shared_ptr<Job>& job);  // until it is done (the plain, non-streaming replies)
  // Waits up to `timeout_ms` for `job` to progress past `seen_layer` or to end, and says which.
  JobNews news(const Job& job, int64_t seen_layer, int timeout_ms);
  void set_progress(Job& job, int64_t layer, int64_t layers);

  // The model thread's loop (with `threads` intra-op threads; 0: every core): runs jobs until stop().
  void run(int threads);
  // Cancels what is queued and what runs (it stops at its next layer); run() returns.
  void stop();

  void count(int status);  // a reply that was not a job's outcome (refusals before queueing)
  JobCounts counts() const;

 private:
  void count_locked(int status);

  const int max_active_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;  // jobs queued, a job done, progress
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> running_;  // the job the model thread runs now
  int active_ = 0;                // queued or running
  bool stopping_ = false;
  std::map<std::string, std::weak_ptr<Job>> latest_;  // per named client: its supersedable job
  JobCounts counts_;
};

}  // namespace difflens::app
