// InferenceWorker's remote slots: connecting a slot to `difflens serve` (remote://HOST:PORT) and running
// the prompt there. The needle sweep's remote episodes are in worker_sweeps.cpp.
#include <cstdlib>
#include <filesystem>

#include "app/remote/client.h"
#include "app/worker/inference_worker.h"
#include "core/formats/error.h"
#include "core/formats/remote.h"
#include "viz/token_text.h"

namespace difflens::app {

void InferenceWorker::connect_remote(const Load& job, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  std::shared_ptr<RemoteClient> client;
  std::shared_ptr<RemoteModelInfo> info;
  std::string error, tokenizer_dir;
  try {
    RemoteAddress a = parse_remote(job.dir);
    if (a.model < 0) a.model = job.slot;
    client = std::make_shared<RemoteClient>(a);
    info = std::make_shared<RemoteModelInfo>(client->model_info());
    const char* cache = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    const std::string root = cache && *cache ? std::string(cache) + "/difflens/remote"
                             : home && *home
                                 ? std::string(home) + "/.cache/difflens/remote"
                                 : (std::filesystem::temp_directory_path() / "difflens-remote").string();
    try {
      tokenizer_dir = client->fetch_tokenizer(root);
    } catch (const std::exception&) {
      tokenizer_dir.clear();  // the needle builder then says the slot has no tokenizer file
    }
  } catch (const std::exception& e) {
    error = user_message(e);
  }
  lock.lock();
  SlotInfo& slot = status_.slots[static_cast<size_t>(job.slot)];
  slot.error = error;
  if (!client || !info) return;
  if (sweep_active_ && sweep_uses(job.slot))
    end_sweep("stopped: the model in the " + std::string(job.slot == 0 ? "left" : "right") + " slot changed",
              true);
  const size_t s = static_cast<size_t>(job.slot);
  ++model_generation_[s];
  slot.path = client->address().text();
  slot.description = std::filesystem::path(info->path).filename().string() + " on " + client->address().host +
                     ":" + std::to_string(client->address().port) + ": " + info->description;
  slot.tokenizer_dir = tokenizer_dir;
  slot.loaded = true;
  models_[s].reset();
  remotes_[s] = std::move(client);
  remote_info_[s] = std::move(info);
  remote_last_[s] = {};
}

// One slot's run on its server: the prompt's text (or its ids, for a model without a text tokenizer) and
// the capture options go, the trace comes back. A server that cannot be reached leaves the slot's last
// trace on screen, with a note saying so.
void InferenceWorker::run_remote(size_t s, const std::string& prompt, const CaptureOptions& options,
                                 RunResult& r, bool& cancelled) {
  const RemoteModelInfo& info = *remote_info_[s];
  remote::CaptureRequest q;
  q.keep_maps = options.keep_maps;
  q.layers = options.layers;
  q.heads = options.heads;
  q.keep_logits = options.keep_logits;
  q.keep_hidden = options.keep_hidden;
  q.keep_qkv = options.keep_qkv;
  q.top_k = options.next_token_top_k;
  q.position_top_k = options.position_top_k;
  q.logit_bits = options.logit_bits;
  q.pooled_budget_bytes = options.pooled_budget_bytes;
  try {
    if (info.can_encode) {
      q.prompt = prompt;
      q.specials = r.edits.specials;
    } else {
      q.token_ids = encode_prompt(nullptr, info.config.vocab_size, typed_prompt(prompt, r.edits.specials),
                                  {"this model", info.tokenizer_note, kTypeIds})
                        .ids;
    }
    RemoteCapture c = remotes_[s]->capture(q, &cancel_);
    r.offsets[s] = std::move(c.offsets);
    r.labels[s] = viz::display_tokens(c.trace->tokens, viz::Spaces::Visible);
    r.round_trip_ms[s] = c.round_trip_ms;
    r.server_ms[s] = c.server_ms;
    r.traces[s] = std::move(c.trace);
    remote_last_[s] = {r.traces[s], r.offsets[s], r.labels[s]};
  } catch (const Cancelled&) {
    cancelled = true;
  } catch (const RemoteUnreachable& e) {
    r.notes[s] = user_message(e);
    if (remote_last_[s].trace) {  // keep the last trace on screen
      r.traces[s] = remote_last_[s].trace;
      r.offsets[s] = remote_last_[s].offsets;
      r.labels[s] = remote_last_[s].labels;
      r.notes[s] += " (showing the last trace)";
    } else {
      r.errors[s] = r.notes[s];
    }
  } catch (const std::exception& e) {
    r.errors[s] = user_message(e);
  }
}

}  // namespace difflens::app
