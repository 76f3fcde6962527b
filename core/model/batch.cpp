// A prompt set's items, one at a time (core/model/batch.h).
#include "core/model/batch.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/formats/error.h"

namespace difflens {

using nlohmann::json;

BatchItem parse_batch_item(const std::string& text, int64_t line) {
  const std::string at = "line " + std::to_string(line) + ": ";
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(at + "not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error(at + "an item is a JSON object ({\"prompt\": ..., \"answer\": ...})");
  BatchItem item;
  item.line = line;
  item.id = std::to_string(line);
  json tags = json::object();
  auto span = [&](const json& v, const char* name) {
    if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
        v[0].get<int64_t>() < 0 || v[1].get<int64_t>() <= v[0].get<int64_t>())
      throw Error(at + "'" + name + "' must be [BEGIN, END] token positions with 0 <= BEGIN < END");
    return TokenSpan{v[0].get<int64_t>(), v[1].get<int64_t>()};
  };
  auto ids = [&](const json& v, const char* name) {
    if (!v.is_array() || v.empty()) throw Error(at + "'" + name + "' must be a non-empty list of token ids");
    std::vector<int64_t> out;
    for (const json& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        throw Error(at + "'" + name + "' must hold non-negative integers");
      out.push_back(x.get<int64_t>());
    }
    return out;
  };
  for (const auto& [key, v] : j.items()) {
    if (key == "id") {
      if (v.is_string())
        item.id = v.get<std::string>();
      else if (v.is_number())
        item.id = v.dump();
      else
        throw Error(at + "'id' must be a string or a number");
    } else if (key == "prompt") {
      if (!v.is_string()) throw Error(at + "'prompt' must be a string");
      item.prompt = v.get<std::string>();
    } else if (key == "token_ids") {
      item.token_ids = ids(v, "token_ids");
    } else if (key == "answer") {
      if (!v.is_string() || v.get<std::string>().empty())
        throw Error(at + "'answer' must be the text that should follow the prompt");
      item.answer = v.get<std::string>();
    } else if (key == "corrupt") {
      if (!v.is_string() || v.get<std::string>().empty())
        throw Error(at + "'corrupt' must be a prompt (text)");
      item.corrupt = v.get<std::string>();
    } else if (key == "corrupt_ids") {
      item.corrupt_ids = ids(v, "corrupt_ids");
    } else if (key == "corrupt_answer") {
      if (!v.is_string() || v.get<std::string>().empty())
        throw Error(at + "'corrupt_answer' must be the text that follows the corrupt prompt");
      item.corrupt_answer = v.get<std::string>();
    } else if (key == "answer_span") {
      item.answer_span = span(v, "answer_span");
    } else if (key == "query") {
      item.query = span(v, "query");
    } else {
      tags[key] = v;
    }
  }
  if (item.prompt.has_value() == !item.token_ids.empty())
    throw Error(at + "give exactly one of 'prompt' (text) and 'token_ids'");
  if (item.prompt && item.prompt->empty()) throw Error(at + "'prompt' is empty");
  if (item.answer.empty()) throw Error(at + "'answer' is missing: the text that should follow the prompt");
  if (item.corrupt && !item.corrupt_ids.empty()) throw Error(at + "give one of 'corrupt' and 'corrupt_ids'");
  if (item.has_corrupt() != !item.corrupt_answer.empty())
    throw Error(at +
                "'corrupt' (or 'corrupt_ids') and 'corrupt_answer' go together: the corrupt prompt and "
                "the answer that follows it");
  item.tags = tags.dump(-1, ' ', false, json::error_handler_t::replace);
  return item;
}

BatchItem BatchItem::corrupted() const {
  BatchItem c;
  c.id = id;
  c.line = line;
  c.prompt = corrupt;
  c.token_ids = corrupt_ids;
  c.answer = corrupt_answer;
  return c;
}

BatchIds batch_ids(const Model& model, const BatchItem& item) {
  const Tokenizer& tok = model.tokenizer();
  const std::string at = "item " + item.id + " (line " + std::to_string(item.line) + "): ";
  BatchIds out;
  if (item.prompt) {
    if (!tok.can_encode())
      throw Error(at + "this model has no text tokenizer (" + model.tokenizer_note() + "): give 'token_ids'");
    // The answer's tokens are those the prompt and answer read together add beyond the prompt's own: a prompt
    // whose last token the answer's text changes (a trailing space) is measured up to where the two agree.
    const Encoding alone = tok.encode(*item.prompt, true),
                   both = tok.encode(*item.prompt + item.answer, true);
    size_t k = 0;
    while (k < alone.ids.size() && k < both.ids.size() && alone.ids[k] == both.ids[k]) ++k;
    if (k == 0) throw Error(at + "the prompt and its answer share no first token");
    if (k == both.ids.size()) throw Error(at + "the answer adds no token to the prompt");
    out.prompt.assign(both.ids.begin(), both.ids.begin() + static_cast<std::ptrdiff_t>(k));
    out.prompt_trimmed = static_cast<int64_t>(alone.ids.size() - k);
    out.answer.assign(both.ids.begin() + static_cast<std::ptrdiff_t>(k), both.ids.end());
    if (!item.answer_span) {
      // The last place the answer's text stands in the prompt: the tokens that cover its bytes.
      const size_t pos = item.prompt->rfind(item.answer);
      if (pos != std::string::npos) {
        int64_t b = -1, e = -1;
        for (size_t t = 0; t < k; ++t) {
          const auto [lo, hi] = both.offsets[t];
          if (hi <= lo || hi <= pos || lo >= pos + item.answer.size()) continue;
          if (b < 0) b = static_cast<int64_t>(t);
          e = static_cast<int64_t>(t) + 1;
        }
        if (b >= 0) out.answer_span = TokenSpan{b, e};
      }
    }
  } else {
    out.prompt = item.token_ids;
    if (!tok.can_encode())
      throw Error(at + "this model has no text tokenizer (" + model.tokenizer_note() +
                  "): its answer cannot be read from text");
    out.answer = tok.encode(item.answer, false).ids;  // the answer's text read alone, without BOS
    if (out.answer.empty()) throw Error(at + "the answer has no tokens");
  }
  if (item.answer_span) out.answer_span = item.answer_span;
  const int64_t vocab = model.config().vocab_size;
  for (int64_t id : out.prompt)
    if (id >= vocab)
      throw Error(at + "token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(vocab) + ")");
  const int64_t T = static_cast<int64_t>(out.prompt.size());
  if (out.answer_span && out.answer_span->end > T)
    throw Error(at + "'answer_span' [" + std::to_string(out.answer_span->begin) + ", " +
                std::to_string(out.answer_span->end) + ") is beyond the prompt's " + std::to_string(T) +
                " tokens");
  if (item.query && item.query->end > T)
    throw Error(at + "'query' [" + std::to_string(item.query->begin) + ", " +
                std::to_string(item.query->end) + ") is beyond the prompt's " + std::to_string(T) +
                " tokens");
  return out;
}

PatchPair patch_pair(const Model& model, const BatchItem& clean, const BatchItem& corrupt) {
  const BatchIds c = batch_ids(model, clean), k = batch_ids(model, corrupt);
  size_t i = 0;
  while (i < c.answer.size() && i < k.answer.size() && c.answer[i] == k.answer[i]) ++i;
  if (i == c.answer.size() || i == k.answer.size())
    throw Error("the clean answer '" + clean.answer + "' and the corrupt answer '" + corrupt.answer +
                "' never differ in a token (one begins the other): no logit difference to take");
  PatchPair p;
  p.shared = static_cast<int64_t>(i);
  p.clean = c.prompt;
  p.clean.insert(p.clean.end(), c.answer.begin(), c.answer.begin() + static_cast<std::ptrdiff_t>(i));
  p.corrupt = k.prompt;
  p.corrupt.insert(p.corrupt.end(), k.answer.begin(), k.answer.begin() + static_cast<std::ptrdiff_t>(i));
  p.target = c.answer[i];
  p.alternative = k.answer[i];
  if (p.clean.size() != p.corrupt.size())
    throw Error("the clean prompt reads as " + std::to_string(p.clean.size()) +
                " tokens and the corrupt one as " + std::to_string(p.corrupt.size()) +
                "; patching copies position by position, so both need as many (another name of as many "
                "pieces, a code of as many digits)");
  return p;
}

BatchResult run_batch_item(const Model& model, const BatchItem& item, const BatchIds& ids,
                           const Interventions& interventions, const std::atomic<bool>* cancel) {
  BatchResult r;
  const int64_t P = static_cast<int64_t>(ids.prompt.size()), A = static_cast<int64_t>(ids.answer.size());
  r.prompt_tokens = P;
  r.answer_tokens = A;
  r.query = item.query.value_or(TokenSpan{P - 1, P});
  std::vector<int64_t> all = ids.prompt;
  all.insert(all.end(), ids.answer.begin(), ids.answer.end());
  CaptureOptions o;
  o.keep_maps = ids.answer_span.has_value();
  o.keep_qkv = o.keep_maps;  // the values: output shares
  o.logit_stats = false;
  o.next_token_top_k = 1;
  o.position_top_k = 2;  // the answer's tokens' probability and rank; the likeliest other after the prompt
  // Predictions are kept for the last budget / (hidden x vocabulary) positions: enough for the answer's.
  const double per_position =
      static_cast<double>(model.config().hidden_size) * static_cast<double>(model.config().vocab_size);
  o.prediction_budget = std::max(o.prediction_budget, per_position * static_cast<double>(A + 1));
  o.interventions = interventions;
  const Trace t = model.capture(all, o, cancel);
  r.interventions = t.interventions;
  const Predictions& pr = t.predictions;
  r.greedy_right = true;
  r.p_answer = 1;
  for (int64_t k = 0; k < A; ++k) {
    const int64_t at = P - 1 + k;
    if (!pr.has(at))
      throw Error("item " + item.id + ": no prediction after token " + std::to_string(at) +
                  ": the model's logits there are not finite (NaN or inf)");
    r.p_answer *= pr.actual_prob(at);
    if (pr.actual_rank(at) != 1) r.greedy_right = false;
  }
  // The first answer token that writes more than spaces ("▁", " "); the last one when none does.
  r.first = A - 1;
  for (int64_t k = 0; k < A; ++k) {
    const std::string piece = model.tokenizer().decode({ids.answer[static_cast<size_t>(k)]});
    if (piece.find_first_not_of(" \t\n") != std::string::npos) {
      r.first = k;
      break;
    }
  }
  const int64_t after = P - 1 + r.first;
  r.p_first = pr.actual_prob(after);
  r.rank_first = pr.actual_rank(after);
  const int64_t target = ids.answer[static_cast<size_t>(r.first)];
  for (int64_t j = 0; j < pr.k; ++j) {
    const int64_t id = pr.id(after, j);
    if (id == target) continue;
    r.alternative = id;
    r.alternative_text = model.tokenizer().piece(id);
    const double p_alt = pr.prob(after, j);
    r.logit_diff = std::log(std::max(r.p_first, 1e-300)) - std::log(std::max(p_alt, 1e-300));
    break;
  }
  if (ids.answer_span) {
    r.answer_span = *ids.answer_span;
    const NoiseReadout n = attention_noise(t, *ids.answer_span, r.query);
    for (size_t l = 0; l < n.layers.size(); ++l)
      for (size_t h = 0; h < n.per_head[l].size(); ++h)
        r.heads.push_back({n.layers[l], n.heads[l][h], n.per_head[l][h]});
    r.mean = n.mean;
  }
  return r;
}

BatchOutcome run_batch_entry(const Model& model, const BatchItem& item, const std::vector<std::string>& specs,
                             std::vector<std::string>& refused, const std::atomic<bool>* cancel) {
  BatchOutcome out;
  out.ids = batch_ids(model, item);
  const BatchIds& ids = out.ids;
  PromptMarks marks;
  if (ids.answer_span) marks.answer = {ids.answer_span->begin, ids.answer_span->end};
  marks.query = item.query ? item.query->end - 1 : static_cast<int64_t>(ids.prompt.size()) - 1;
  const int64_t T = static_cast<int64_t>(ids.prompt.size() + ids.answer.size());
  const std::vector<std::string> taken = takeable_interventions(specs, model.config(), marks, T, refused);
  out.result =
      run_batch_item(model, item, ids, resolve_interventions(taken, model.config(), marks, T), cancel);
  if (item.has_corrupt()) {
    // Activation patching: each head's output copied from the clean run into the corrupt one. The specs as
    // resolved above (their key ranges past the shorter patched prompts are cut where the run applies them);
    // a pair that cannot be patched (the prompts read as different lengths) keeps the item's readouts and
    // says why in `patch_error`.
    try {
      const PatchPair pp = patch_pair(model, item, item.corrupted());
      PatchOptions po;
      po.target = pp.target;
      po.alternative = pp.alternative;
      po.interventions = resolve_interventions(taken, model.config(), marks, T);
      std::vector<std::vector<PatchSite>> runs;
      for (const PatchSite& site : head_sweep(model.config(), PatchComponent::Head)) runs.push_back({site});
      out.patch = model.patch(pp.clean, pp.corrupt, runs, po, cancel);
    } catch (const Cancelled&) {
      throw;
    } catch (const Error& e) {
      out.patch_error = e.what();
    }
  }
  return out;
}

std::string batch_record_json(const BatchItem& item, const BatchOutcome& o, const std::string& model,
                              bool detail) {
  const BatchResult& r = o.result;
  std::string applied;
  for (const auto& [written, as_run] : r.interventions) applied += (applied.empty() ? "" : "; ") + as_run;
  auto finite = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json j = {{"line", item.line},
            {"id", item.id},
            {"model", model},
            {"prompt_tokens", r.prompt_tokens},
            {"prompt_trimmed", o.ids.prompt_trimmed},
            {"answer_tokens", r.answer_tokens},
            {"p_answer", r.p_answer},
            {"first", r.first},
            {"p_first", r.p_first},
            {"rank_first", r.rank_first},
            {"alternative", r.alternative_text},
            {"logit_diff", r.logit_diff},
            {"greedy_right", r.greedy_right},
            {"query", {r.query.begin, r.query.end}},
            {"interventions", applied},
            {"tags", json::parse(item.tags)}};
  if (r.answer_span.begin >= 0) {
    j["answer_span"] = {r.answer_span.begin, r.answer_span.end};
    j["answer_mass"] = finite(r.mean.answer_mass);
    j["noise_mass"] = finite(r.mean.noise_mass);
    j["answer_output"] = finite(r.mean.answer_output);
    j["noise_output"] = finite(r.mean.noise_output);
  }
  if (detail) {
    j["heads"] = json::array();
    for (const BatchHead& h : r.heads)
      j["heads"].push_back({{"layer", h.layer},
                            {"head", h.head},
                            {"answer_mass", finite(h.share.answer_mass)},
                            {"noise_mass", finite(h.share.noise_mass)},
                            {"answer_output", finite(h.share.answer_output)},
                            {"noise_output", finite(h.share.noise_output)}});
  }
  if (!o.patch_error.empty()) j["patch_error"] = o.patch_error;
  if (o.patch) {
    j["patch"] = {{"target", o.patch->target_text},
                  {"alternative", o.patch->alternative_text},
                  {"clean_diff", o.patch->clean_diff},
                  {"corrupt_diff", o.patch->corrupt_diff}};
    if (detail) {
      json heads = json::array();
      for (const PatchResult& p : o.patch->results)
        heads.push_back({{"layer", p.sites[0].layer},
                         {"head", p.sites[0].head},
                         {"logit_diff", p.logit_diff},
                         {"normalized", finite(p.normalized)}});
      j["patch"]["heads"] = heads;
    }
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace difflens
