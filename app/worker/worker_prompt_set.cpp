// InferenceWorker's prompt set (File > Run a prompt set): the items on the slots' local models into a folder,
// as `difflens batch` writes it, an item at a time between other work.
#include <chrono>

#include "app/reports/prompt_set.h"
#include "app/worker/inference_worker.h"
#include "core/formats/error.h"
#include "core/model/batch.h"

namespace difflens::app {

struct InferenceWorker::SetRun {
  std::unique_ptr<ItemReader> reader;
  std::unique_ptr<PromptSetWriter> writer;
  std::vector<size_t> slots;  // the slots taking part: those with a model loaded here
  std::array<std::string, kSlots> names;
  std::array<uint64_t, kSlots> generation{};  // their models' (a load in between stops the set)
};

void InferenceWorker::run_prompt_set_job(std::unique_lock<std::mutex>& lock) {
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

}  // namespace difflens::app
