// JobQueue: the server's model thread (see job_queue.h).
#include "app/remote/job_queue.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <iterator>
#include <thread>

#include "core/formats/error.h"
#include "core/formats/remote.h"
#include "core/model/model.h"

namespace difflens::app {

using remote::RequestError;

void JobQueue::submit(const std::shared_ptr<Job>& job) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) throw RequestError(503, "the server is stopping");
  if (active_ >= max_active_)
    throw RequestError(503, "busy: " + std::to_string(active_) +
                                " requests are queued or running (this server takes " +
                                std::to_string(max_active_) + " at once); try again");
  if (job->supersedable && !job->client.empty()) {
    auto it = latest_.find(job->client);
    if (it != latest_.end())
      if (auto old = it->second.lock()) old->cancel = true;
    latest_[job->client] = job;
    // Forget clients whose last job has ended (every app run names itself anew).
    for (auto e = latest_.begin(); e != latest_.end();)
      e = e->second.expired() ? latest_.erase(e) : std::next(e);
  }
  ++active_;
  queue_.push_back(job);
  cv_.notify_all();
}

void JobQueue::wait(const std::shared_ptr<Job>& job) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return job->done; });
}

JobNews JobQueue::news(const Job& job, int64_t seen_layer, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
               [&] { return job.done || job.layer != seen_layer; });
  JobNews n;
  n.progressed = job.layer != seen_layer;
  n.layer = job.layer;
  n.layers = job.layers;
  n.done = job.done;
  n.status = job.status;
  return n;
}

void JobQueue::set_progress(Job& job, int64_t layer, int64_t layers) {
  std::lock_guard<std::mutex> lock(mutex_);
  job.layer = layer;
  job.layers = layers;
  cv_.notify_all();
}

void JobQueue::run(int threads) {
  // OpenMP/LibTorch thread counts are per thread: set on the thread that runs the models.
  set_num_threads(threads > 0 ? threads
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_ && queue_.empty()) return;
    std::shared_ptr<Job> job = queue_.front();
    queue_.pop_front();
    running_ = job;  // stop() cancels it
    lock.unlock();
    int status = 200;
    std::string body, error;
    try {
      if (job->cancel) throw Cancelled();
      body = job->work(*job);
    } catch (const Cancelled&) {
      status = 409;
      error = "superseded: a newer request from the same client (or its disconnection) cancelled this one";
    } catch (const RequestError& e) {
      status = e.status;
      error = e.what();
    } catch (const std::exception& e) {
      status = 400;
      error = user_message(e);
    }
    lock.lock();
    job->status = status;
    job->body = std::move(body);
    job->error = std::move(error);
    job->done = true;
    running_.reset();
    --active_;
    count_locked(status);
    cv_.notify_all();
  }
}

void JobQueue::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = true;
  for (auto& j : queue_) j->cancel = true;
  if (running_) running_->cancel = true;  // what runs now stops at its next layer
  cv_.notify_all();
}

void JobQueue::count(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  count_locked(status);
}

void JobQueue::count_locked(int status) {
  if (status == 200)
    ++counts_.served;
  else if (status == 409)
    ++counts_.cancelled;
  else
    ++counts_.refused;
}

JobCounts JobQueue::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

}  // namespace difflens::app
