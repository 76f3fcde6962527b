// InferenceWorker's Continue: one slot's model continues the prompt, token by token, and the text each
// token adds is worked out for the app.
#include <algorithm>
#include <cctype>
#include <chrono>

#include "app/worker/worker_impl.h"
#include "core/formats/error.h"

namespace difflens::app {

void InferenceWorker::run_continue_job(std::unique_lock<std::mutex>& lock) {
  const ContinueJob job = std::move(*pending_continue_);
  pending_continue_.reset();
  continue_cancel_ = false;
  status_.activity = "writing 0 / " + std::to_string(job.options.max_new) + " tokens";
  lock.unlock();
  run_continuation(job);
  lock.lock();
}

void InferenceWorker::run_continuation(const ContinueJob& job) {
  const auto t0 = std::chrono::steady_clock::now();
  Continuation c;
  c.request = job.id;
  c.slot = job.slot;
  c.prompt = job.prompt;
  const size_t s = static_cast<size_t>(job.slot);
  const std::string side = job.slot == 0 ? "left" : "right";
  bool cancelled = false;
  try {
    if (remotes_[s])
      throw Error("the " + side +
                  " model runs on a server (remote://), and the remote protocol has no generation: Continue "
                  "needs a model on this machine");
    if (!models_[s]) throw Error("the " + side + " slot has no model to continue the prompt with");
    const Model& m = *models_[s];
    if (job.prompt.empty()) throw Error("the prompt is empty: nothing to continue");
    const Encoding enc = encode_prompt(m, typed_prompt(job.prompt, job.edits.specials), kTypeIds);
    const int64_t room = m.config().max_position_embeddings - static_cast<int64_t>(enc.ids.size());
    if (room <= 0)
      throw Error("the prompt already fills the model's " +
                  std::to_string(m.config().max_position_embeddings) + " positions: nothing can be added");
    GenerateOptions o = job.options;
    o.max_new = static_cast<int>(std::min<int64_t>(o.max_new, room));
    std::vector<std::string> skipped;  // the run of the written text reports them; the writing skips them too
    o.interventions = slot_interventions(m, job.edits, s, static_cast<int64_t>(enc.ids.size()), skipped);
    int written = 0;
    o.on_token = [&](int64_t) {
      std::lock_guard<std::mutex> lock(mutex_);
      status_.activity = "writing " + std::to_string(++written) + " / " + std::to_string(o.max_new) +
                         " tokens (" + side + " model)";
    };
    const Generation g = m.generate(enc.ids, o, &continue_cancel_);
    c.ids = g.ids;
    const Tokenizer& tok = m.tokenizer();
    if (!tok.can_encode()) {  // an ids prompt continues as ids
      for (const int64_t id : g.ids) c.steps.push_back(", " + std::to_string(id));
    } else {
      // Trailing whitespace the tokenizer read as nothing (SentencePiece drops it: "is " reads as "is") is
      // not written twice when the new text begins with whitespace ("is " + " 7182" -> "is 7182").
      size_t trail = 0;
      while (trail < job.prompt.size() &&
             std::isspace(static_cast<unsigned char>(job.prompt[job.prompt.size() - 1 - trail])))
        ++trail;
      const bool dropped =
          trail > 0 && tok.encode(job.prompt.substr(0, job.prompt.size() - trail), true).ids == enc.ids;
      // The text after k tokens is what decoding the prompt's tokens and those k adds to decoding the
      // prompt's tokens (decoding the new tokens alone would lose a word's leading space); each token's step
      // is what its text adds to the text before it.
      const std::string before = tok.decode(enc.ids);
      std::vector<int64_t> all = enc.ids;
      std::string so_far;
      bool rewrote = false;
      for (const int64_t id : g.ids) {
        all.push_back(id);
        const std::string after = tok.decode(all);
        std::string text = after.compare(0, before.size(), before) == 0
                               ? after.substr(before.size())
                               : tok.decode(std::vector<int64_t>(
                                     all.begin() + static_cast<long>(enc.ids.size()), all.end()));
        if (dropped) {  // only the prompt's own trailing characters, in their order (" " does not eat "\n")
          size_t lead = 0;
          while (lead < trail && lead < text.size() &&
                 text[lead] == job.prompt[job.prompt.size() - trail + lead])
            ++lead;
          if (all.size() == enc.ids.size() + 1 && lead > 0 && lead == text.size())
            c.first_wrote_back_space = true;
          text.erase(0, lead);
        }
        // A step is the text's growth. Should decoding rewrite earlier text, the steps could not add up:
        // then the whole text comes with the last token.
        rewrote |= text.compare(0, so_far.size(), so_far) != 0;
        c.steps.push_back(rewrote ? "" : text.substr(so_far.size()));
        so_far = text;
      }
      if (rewrote) {
        c.steps.assign(c.steps.size(), "");
        c.steps.back() = so_far;
      }
    }
    for (const std::string& st : c.steps) c.text += st;
    if (c.text.empty())
      c.error = "the " + side + " model wrote no text (" +
                (g.ids.empty() ? std::string("no token")
                               : "it ended the text, token " + std::to_string(g.ids.back())) +
                ")";
  } catch (const Cancelled&) {
    cancelled = true;
  } catch (const std::exception& e) {
    c.error = user_message(e);
  }
  c.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!cancelled && job.id >= continue_cancelled_below_ && !pending_continue_) continuation_ = std::move(c);
}

}  // namespace difflens::app
