// InferenceWorker's prompt job: both slots on the latest prompt (a remote slot on its server,
// worker_remote.cpp), with the Why view's explanation and activation patching when asked; and the helpers
// Continue and the bundle load share with it (worker_impl.h).
#include <chrono>
#include <memory>

#include "app/worker/worker_impl.h"
#include "core/formats/error.h"
#include "viz/token_text.h"

namespace difflens::app {

Interventions slot_interventions(const Model& m, const RunEdits& edits, size_t slot, int64_t tokens,
                                 std::vector<std::string>& skipped) {
  PromptMarks marks;
  marks.answer = edits.answer;
  marks.query = edits.query >= 0 && edits.query < tokens ? edits.query : tokens - 1;
  return resolve_interventions(
      takeable_interventions(edits.interventions[slot], m.config(), marks, tokens, skipped), m.config(),
      marks, tokens);
}

void note_nonfinite(RunResult& r) {
  for (size_t s = 0; s < kSlots; ++s)
    if (r.traces[s]) r.nonfinite[s] = r.traces[s]->nonfinite_summary();
}

namespace {

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
    const std::vector<int64_t> corrupt =
        encode_prompt(m, typed_prompt(edits.corrupt, edits.specials), kTypeIds).ids;
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

}  // namespace

void InferenceWorker::run_prompt_job(std::unique_lock<std::mutex>& lock) {
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
      const Encoding enc = encode_prompt(*models_[s], typed_prompt(prompt, edits.specials), kTypeIds);
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

}  // namespace difflens::app
