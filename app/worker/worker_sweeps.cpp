// InferenceWorker's needle sweep: both slots (local or remote), as trained and under their interventions,
// one episode at a time between other work; a prompt run interrupts an episode, which is then redone.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "app/common/files.h"
#include "app/remote/client.h"
#include "app/worker/inference_worker.h"
#include "core/formats/error.h"
#include "core/formats/remote.h"

namespace difflens::app {

namespace {

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

void InferenceWorker::run_sweep_job(std::unique_lock<std::mutex>& lock) {
  if (pending_sweep_)
    begin_sweep(lock);
  else
    sweep_step(lock);
}

}  // namespace difflens::app
