// Trace bundle writer/reader (trace.json + maps.safetensors).
#include "core/formats/trace_io.h"
#include "core/formats/bounded_read.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/formats/atomic_file.h"
#include "core/formats/checkpoint.h"
#include "core/formats/error.h"
#include "core/formats/intervention.h"
#include "core/formats/safetensors.h"

namespace difflens {
namespace {

using nlohmann::json;

// JSON numbers read with their type and range checked first: nlohmann's get<int>() of a float outside the
// integer's range, or get<float>() of a double beyond float's, is undefined behaviour (found by tests/fuzz).
int64_t int_field(const json& v, const std::string& what, int64_t lo = std::numeric_limits<int64_t>::min(),
                  int64_t hi = std::numeric_limits<int64_t>::max()) {
  if (!v.is_number_integer()) throw FormatError(what + " must be an integer");
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw FormatError(what + " is " + std::to_string(v.get<uint64_t>()) + ", out of range");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw FormatError(what + " is " + std::to_string(x) + ", outside " + std::to_string(lo) + ".." +
                      std::to_string(hi));
  return x;
}

uint64_t count_field(const json& v, const std::string& what) {
  if (!v.is_number_unsigned()) throw FormatError(what + " must be a count (a non-negative integer)");
  return v.get<uint64_t>();
}

float float_field(const json& v, const std::string& what) {
  if (!v.is_number()) throw FormatError(what + " must be a number");
  const double d = v.get<double>();
  if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max())
    throw FormatError(what + " is " + std::to_string(d) + ", beyond the range of a float");
  return static_cast<float>(d);
}

json stats_to_json(const ValueStats& s) {
  json hist = json::array();
  for (int b = 0; b < LogHistogram::kBins; ++b)
    if (s.histogram.counts[b]) hist.push_back({b, s.histogram.counts[b]});
  return {{"count", s.count},
          {"top", s.top},
          {"median", s.median},
          {"mean", s.mean},
          {"histogram",
           {{"log10_min", LogHistogram::kLogMin},
            {"log10_max", LogHistogram::kLogMax},
            {"bins_per_decade", LogHistogram::kBinsPerDecade},
            {"below", s.histogram.below},
            {"above", s.histogram.above},
            {"bins", hist}}}};
}

ValueStats stats_from_json(const json& j, const std::string& where) {
  ValueStats s;
  s.count = count_field(j.at("count"), where + ": statistics count");
  for (const json& v : j.at("top")) s.top.push_back(float_field(v, where + ": a top value"));
  s.median = float_field(j.at("median"), where + ": median");
  s.mean = float_field(j.at("mean"), where + ": mean");
  const json& h = j.at("histogram");
  if (int_field(h.at("log10_min"), where + ": log10_min") != LogHistogram::kLogMin ||
      int_field(h.at("log10_max"), where + ": log10_max") != LogHistogram::kLogMax ||
      int_field(h.at("bins_per_decade"), where + ": bins_per_decade") != LogHistogram::kBinsPerDecade)
    throw FormatError(where + ": histogram grid differs from this version's");
  s.histogram.below = count_field(h.at("below"), where + ": histogram 'below'");
  s.histogram.above = count_field(h.at("above"), where + ": histogram 'above'");
  for (const json& bc : h.at("bins")) {
    const int64_t b = int_field(bc.at(0), where + ": histogram bin", 0, LogHistogram::kBins - 1);
    s.histogram.counts[static_cast<size_t>(b)] = count_field(bc.at(1), where + ": histogram count");
  }
  return s;
}

void add_array(std::vector<TensorToWrite>& out, const std::string& name, const FloatArray& a) {
  if (!a.empty()) out.push_back({name, a.shape, a.data.data()});
}

FloatArray read_array(const SafetensorsFile& file, const std::string& name,
                      const std::vector<int64_t>& expected) {
  FloatArray a;
  const TensorInfo* t = file.find(name);
  if (!t) return a;
  if (t->shape != expected)
    throw FormatError(file.path().string() + ": tensor '" + name + "' is " + shape_string(t->shape) +
                      ", trace.json implies " + shape_string(expected));
  a.shape = t->shape;
  a.data.resize(static_cast<size_t>(t->numel()));
  file.read_f32(*t, a.data.data());
  return a;
}

// trace.json of a bundle.
json trace_json(const Trace& trace) {
  json j;
  j["format"] = "difflens-trace";
  j["version"] = kTraceBundleVersion;
  j["model_path"] = trace.model_path;
  j["config"] = json::parse(config_to_json_text(trace.config));
  j["token_ids"] = trace.token_ids;
  j["tokens"] = trace.tokens;
  j["elapsed_ms"] = trace.elapsed_ms;
  if (trace.logit_bits) j["logit_bits"] = trace.logit_bits;
  if (trace.pooled_budget) j["pooled_budget"] = trace.pooled_budget;
  if (!trace.interventions.empty()) {
    json iv = json::array();
    for (const auto& [spec, as_run] : trace.interventions) iv.push_back({{"spec", spec}, {"as_run", as_run}});
    j["interventions"] = iv;
  }
  json layers = json::array();
  for (const auto& l : trace.layers) {
    json jl;
    jl["index"] = l.index;
    jl["heads"] = l.heads;
    if (trace.config.is_diff())
      jl["lambda"] = {{"lambda", l.lambda},
                      {"exp1", l.lambda_exp1},
                      {"exp2", l.lambda_exp2},
                      {"lambda_init", l.lambda_init}};
    jl["logit_stats"] = stats_to_json(l.logit_stats);
    jl["hidden_stats"] = stats_to_json(l.hidden_stats);
    jl["has_logits"] = !l.logits1.empty();
    jl["has_hidden"] = !l.hidden.empty();
    if (l.pooled > 0) jl["pooled"] = l.pooled;
    layers.push_back(jl);
  }
  j["layers"] = layers;
  json next = json::array();
  for (const auto& t : trace.next_token)
    next.push_back({{"id", t.id}, {"text", t.text}, {"probability", t.probability}});
  j["next_token"] = next;
  if (trace.predictions.k > 0) {
    json pieces = json::array();
    for (const auto& [id, text] : trace.predictions.pieces) pieces.push_back({id, text});
    j["predictions"] = {{"k", trace.predictions.k}, {"from", trace.predictions.from}, {"pieces", pieces}};
  }
  return j;
}

// maps.safetensors of a bundle: the arrays, borrowed from the trace.
std::vector<TensorToWrite> trace_tensors(const Trace& trace) {
  std::vector<TensorToWrite> tensors;
  add_array(tensors, "predictions.ids", trace.predictions.ids);
  add_array(tensors, "predictions.probs", trace.predictions.probs);
  add_array(tensors, "predictions.actual", trace.predictions.actual);
  for (const auto& l : trace.layers) {
    const std::string p = "layers." + std::to_string(l.index) + ".";
    add_array(tensors, p + "A1", l.a1);
    add_array(tensors, p + "A2", l.a2);
    add_array(tensors, p + "A", l.a);
    add_array(tensors, p + "logits1", l.logits1);
    add_array(tensors, p + "logits2", l.logits2);
    add_array(tensors, p + "hidden", l.hidden);
    // Long-prompt traces: pooled maps and what recomputes exact tiles.
    add_array(tensors, p + "A1.mean", l.a1_mean);
    add_array(tensors, p + "A1.max", l.a1_max);
    add_array(tensors, p + "A2.mean", l.a2_mean);
    add_array(tensors, p + "A2.max", l.a2_max);
    add_array(tensors, p + "A.mean", l.a_mean);
    add_array(tensors, p + "A.max", l.a_max);
    add_array(tensors, p + "q1", l.q1);
    add_array(tensors, p + "k1", l.k1);
    add_array(tensors, p + "q2", l.q2);
    add_array(tensors, p + "k2", l.k2);
    add_array(tensors, p + "lse1", l.lse1);
    add_array(tensors, p + "lse2", l.lse2);
    add_array(tensors, p + "v", l.v);  // CaptureOptions::keep_qkv
    add_array(tensors, p + "subln_weight", l.subln_weight);
    add_array(tensors, p + "lambda", l.lambda_rows);  // DIFF V2: λ per head and token, and its logit
    add_array(tensors, p + "lambda_logits", l.lambda_logits);
  }
  return tensors;
}

json parse_trace_json(const std::string& text, const std::string& where) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw FormatError(where + ": not valid JSON (" + e.what() + ")");
  }
}

// Every position's prediction: k and from in trace.json, the arrays in the maps, each value checked (NaN
// only where nothing was kept).
Predictions predictions_from(const json& jp, const SafetensorsFile& maps, const Trace& t,
                             const std::string& w) {
  Predictions p;
  const int64_t T = t.length(), V = t.config.vocab_size;
  p.k = int_field(jp.at("k"), w + ": predictions.k", 1, V);
  p.from = int_field(jp.at("from"), w + ": predictions.from", 0, std::max<int64_t>(0, T - 1));
  p.ids = read_array(maps, "predictions.ids", {T, p.k});
  p.probs = read_array(maps, "predictions.probs", {T, p.k});
  p.actual = read_array(maps, "predictions.actual", {T, 2});
  for (const json& e : jp.at("pieces"))
    p.pieces[int_field(e.at(0), w + ": a predicted token's id", 0, V - 1)] = e.at(1).get<std::string>();
  const std::string where = maps.path().string() + ": predictions";
  if (p.ids.empty() || p.probs.empty() || p.actual.empty()) throw FormatError(where + " are missing");
  for (int64_t r = 0; r < T; ++r) {
    bool empty = true;  // a row with no prediction (before `from`, or logits that were not finite)
    for (int64_t j = 0; j < p.k; ++j)
      empty &= std::isnan(p.ids.data[static_cast<size_t>(r * p.k + j)]) &&
               std::isnan(p.probs.data[static_cast<size_t>(r * p.k + j)]);
    empty &= std::isnan(p.actual.data[static_cast<size_t>(2 * r)]) &&
             std::isnan(p.actual.data[static_cast<size_t>(2 * r + 1)]);
    if (empty && r >= p.from) continue;
    const bool kept = r >= p.from;
    for (int64_t j = 0; j < p.k; ++j) {
      const float id = p.ids.data[static_cast<size_t>(r * p.k + j)],
                  pr = p.probs.data[static_cast<size_t>(r * p.k + j)];
      if (!kept) {
        if (!std::isnan(id) || !std::isnan(pr))
          throw FormatError(where + ": row " + std::to_string(r) + " is before 'from' but not empty");
        continue;
      }
      if (!(id >= 0 && id < static_cast<float>(V) && id == std::floor(id)))
        throw FormatError(where + ": row " + std::to_string(r) +
                          " has a token id that is not one of the model's");
      if (!p.pieces.count(static_cast<int64_t>(id)))
        throw FormatError(w + ": predictions.pieces has no text for token " +
                          std::to_string(static_cast<int64_t>(id)));
      if (!(pr >= 0 && pr <= 1) || (j > 0 && pr > p.probs.data[static_cast<size_t>(r * p.k + j - 1)]))
        throw FormatError(where + ": row " + std::to_string(r) +
                          " has a probability outside [0, 1] or out of order");
    }
    const float a = p.actual.data[static_cast<size_t>(2 * r)],
                rank = p.actual.data[static_cast<size_t>(2 * r + 1)];
    if (!kept || r == T - 1) {
      if (!std::isnan(a) || !std::isnan(rank))
        throw FormatError(where + ": row " + std::to_string(r) +
                          " has an actual token's probability where none was kept");
    } else if (!(a >= 0 && a <= 1 && rank >= 1 && rank <= static_cast<float>(V) &&
                 rank == std::floor(rank))) {
      throw FormatError(where + ": row " + std::to_string(r) +
                        " has an actual token's probability or rank out of range");
    }
  }
  return p;
}

// A trace from its trace.json (`jpath` names it in messages) and its arrays.
// `open_maps` is called once trace.json's own fields have been read (their errors come first).
Trace trace_from(const json& j, const std::filesystem::path& jpath,
                 const std::function<const SafetensorsFile&()>& open_maps) {
  Trace t;
  try {
    if (j.value("format", "") != "difflens-trace")
      throw FormatError(jpath.string() + ": not a DiffLens trace");
    const std::string w = jpath.string();
    const int64_t version = int_field(j.at("version"), w + ": version");
    if (version > kTraceBundleVersion)
      throw FormatError(w + ": written by a newer DiffLens (version " + std::to_string(version) + ")");
    t.config = config_from_json_text(j.at("config").dump(), w + " (config)");
    t.model_path = j.value("model_path", "");
    for (const json& id : j.at("token_ids"))
      t.token_ids.push_back(int_field(id, w + ": a token id", 0, t.config.vocab_size - 1));
    t.tokens = j.at("tokens").get<std::vector<std::string>>();
    if (j.contains("elapsed_ms")) t.elapsed_ms = float_field(j.at("elapsed_ms"), w + ": elapsed_ms");
    if (j.contains("logit_bits"))
      t.logit_bits = static_cast<int>(int_field(j.at("logit_bits"), w + ": logit_bits", 0, 32));
    if (j.contains("pooled_budget"))
      t.pooled_budget = count_field(j.at("pooled_budget"), w + ": pooled_budget");
    if (j.contains("interventions")) {
      const json& iv = j.at("interventions");
      if (!iv.is_array() || iv.size() > 1024) throw FormatError(w + ": interventions is not a list");
      for (const json& e : iv) {
        if (!e.is_object() || !e.contains("spec") || !e.contains("as_run") || !e.at("spec").is_string() ||
            !e.at("as_run").is_string())
          throw FormatError(w + ": an intervention is not {\"spec\": ..., \"as_run\": ...}");
        for (const char* key : {"spec", "as_run"}) {
          try {
            const InterventionSpec parsed = parse_intervention(e.at(key).get<std::string>());
            if (parsed.layer >= t.config.num_hidden_layers || parsed.head >= t.config.map_heads())
              throw Error("its layer or head is outside the model");
            if (std::string(key) == "as_run" && parsed.kind == InterventionKind::Knockout &&
                (parsed.rows_from_query ||
                 (parsed.keys != KnockoutKeys::Drop && parsed.keys != KnockoutKeys::Keep)))
              throw Error("a knockout as run names its rows and keys as numbers");
          } catch (const Error& x) {
            throw FormatError(w + ": intervention " + key + " '" + e.at(key).get<std::string>() +
                              "': " + x.what());
          }
        }
        t.interventions.emplace_back(e.at("spec").get<std::string>(), e.at("as_run").get<std::string>());
      }
    }
    if (t.tokens.size() != t.token_ids.size())
      throw FormatError(jpath.string() + ": " + std::to_string(t.tokens.size()) + " token strings for " +
                        std::to_string(t.token_ids.size()) + " token ids");
    for (const json& n : j.at("next_token"))
      t.next_token.push_back({int_field(n.at("id"), w + ": a next-token id", 0, t.config.vocab_size - 1),
                              n.at("text").get<std::string>(),
                              float_field(n.at("probability"), w + ": a probability")});
    const int64_t T = t.length(), H = t.config.map_heads(), E = t.config.hidden_size;
    const SafetensorsFile& maps = open_maps();
    // Every array is copied out as F32: refuse, before copying, what the machine cannot hold.
    uint64_t need = 0;
    for (const TensorInfo& info : maps.tensors()) need += static_cast<uint64_t>(info.numel()) * 4;
    const uint64_t have = available_memory_bytes();
    if (have > 0 && need > have)
      throw FormatError(maps.path().string() + ": the bundle's maps need " + human_bytes(need) +
                        " of memory as F32 and only " + human_bytes(have) + " is available");
    if (j.contains("predictions")) t.predictions = predictions_from(j.at("predictions"), maps, t, w);
    for (const json& jl : j.at("layers")) {
      LayerTrace l;
      const int64_t index = int_field(jl.at("index"), w + ": a layer index");
      const std::string where = w + ": layer " + std::to_string(index);
      if (index < 0 || index >= t.config.num_hidden_layers)
        throw FormatError(where + " is outside the model");
      l.index = static_cast<int>(index);
      for (const json& h : jl.at("heads")) {
        const int64_t head = int_field(h, where + ": a head");
        if (head < 0 || head >= H)
          throw FormatError(where + ": head " + std::to_string(head) + " is outside the model");
        l.heads.push_back(static_cast<int>(head));
      }
      if (jl.contains("lambda")) {
        const json& lam = jl.at("lambda");
        l.lambda = lam.at("lambda").get<double>();
        l.lambda_exp1 = lam.at("exp1").get<double>();
        l.lambda_exp2 = lam.at("exp2").get<double>();
        l.lambda_init = lam.at("lambda_init").get<double>();
      }
      l.logit_stats = stats_from_json(jl.at("logit_stats"), where);
      l.hidden_stats = stats_from_json(jl.at("hidden_stats"), where);
      const std::string p = "layers." + std::to_string(l.index) + ".";
      l.pooled = jl.contains("pooled") ? int_field(jl.at("pooled"), where + ": pooled size") : 0;
      if (l.pooled < 0 || l.pooled >= T)
        throw FormatError(where + ": pooled size " + std::to_string(l.pooled) + " is invalid");
      if (l.pooled > 0) {
        const int64_t P = l.pooled, d = t.config.head_dim;
        const int64_t Hkv = t.config.kv_groups();
        const std::vector<int64_t> pooled_shape{static_cast<int64_t>(l.heads.size()), P, P};
        l.a_mean = read_array(maps, p + "A.mean", pooled_shape);
        l.a_max = read_array(maps, p + "A.max", pooled_shape);
        l.q1 = read_array(maps, p + "q1", {H, T, d});
        l.k1 = read_array(maps, p + "k1", {Hkv, T, d});
        l.lse1 = read_array(maps, p + "lse1", {H, T});
        if (t.config.is_diff()) {
          l.a1_mean = read_array(maps, p + "A1.mean", pooled_shape);
          l.a1_max = read_array(maps, p + "A1.max", pooled_shape);
          l.a2_mean = read_array(maps, p + "A2.mean", pooled_shape);
          l.a2_max = read_array(maps, p + "A2.max", pooled_shape);
          l.q2 = read_array(maps, p + "q2", {H, T, d});
          l.k2 = read_array(maps, p + "k2", {Hkv, T, d});
          l.lse2 = read_array(maps, p + "lse2", {H, T});
        }
        if (l.q1.empty() || l.k1.empty() || l.lse1.empty() ||
            (t.config.is_diff() && (l.q2.empty() || l.k2.empty() || l.lse2.empty())) ||
            (!l.heads.empty() && (l.a_mean.empty() || l.a_max.empty())) ||
            (!l.heads.empty() && t.config.is_diff() &&
             (l.a1_mean.empty() || l.a1_max.empty() || l.a2_mean.empty() || l.a2_max.empty())))
          throw FormatError(maps.path().string() + ": pooled maps or queries/keys of layer " +
                            std::to_string(l.index) + " are missing");
      } else {
        const std::vector<int64_t> map_shape{static_cast<int64_t>(l.heads.size()), T, T};
        l.a = read_array(maps, p + "A", map_shape);
        if (t.config.is_diff()) {
          l.a1 = read_array(maps, p + "A1", map_shape);
          l.a2 = read_array(maps, p + "A2", map_shape);
        }
        if (!l.heads.empty() && (l.a.empty() || (t.config.is_diff() && (l.a1.empty() || l.a2.empty()))))
          throw FormatError(maps.path().string() + ": maps of layer " + std::to_string(l.index) +
                            " are missing");
      }
      {  // queries and keys of exact traces, values and the output norm's weight (CaptureOptions::keep_qkv)
        const int64_t d = t.config.head_dim;
        const int64_t Hkv = t.config.kv_groups();
        const int64_t dv = t.config.attention == AttentionKind::Diff ? 2 * d : d;
        if (l.pooled == 0) {
          l.q1 = read_array(maps, p + "q1", {H, T, d});
          l.k1 = read_array(maps, p + "k1", {Hkv, T, d});
          if (t.config.is_diff()) {
            l.q2 = read_array(maps, p + "q2", {H, T, d});
            l.k2 = read_array(maps, p + "k2", {Hkv, T, d});
          }
        }
        l.v = read_array(maps, p + "v", {Hkv, T, dv});
        if (t.config.attention == AttentionKind::Diff)
          l.subln_weight = read_array(maps, p + "subln_weight", {dv});
      }
      if (t.config.is_diff_v2()) {
        l.lambda_rows = read_array(maps, p + "lambda", {H, T});
        l.lambda_logits = read_array(maps, p + "lambda_logits", {H, T});
        if (l.lambda_rows.empty() || l.lambda_logits.empty())
          throw FormatError(maps.path().string() + ": the DIFF V2 λ of layer " + std::to_string(l.index) +
                            " is missing");
        // σ(z) lies in [0, 1]; an intervention may set any finite λ.
        for (float x : l.lambda_rows.data)
          if (!(t.interventions.empty() ? x >= 0.0f && x <= 1.0f : std::isfinite(x)))
            throw FormatError(maps.path().string() + ": layer " + std::to_string(l.index) +
                              " has a DIFF V2 λ outside [0, 1] (" + std::to_string(x) + ")");
      } else if (t.config.is_diff()) {  // DIFF: λ per head and token only where an intervention set it
        l.lambda_rows = read_array(maps, p + "lambda", {H, T});
        if (!l.lambda_rows.empty() && t.interventions.empty())
          throw FormatError(maps.path().string() + ": layer " + std::to_string(l.index) +
                            " has λ per head without an intervention that set it");
        for (float x : l.lambda_rows.data)
          if (!std::isfinite(x))
            throw FormatError(maps.path().string() + ": layer " + std::to_string(l.index) +
                              " has a λ that is not finite");
      }
      l.logits1 = read_array(maps, p + "logits1", {H, T, T});
      l.logits2 = read_array(maps, p + "logits2", {H, T, T});
      l.hidden = read_array(maps, p + "hidden", {T, E});
      t.layers.push_back(std::move(l));
    }
  } catch (const json::exception& e) {
    throw FormatError(jpath.string() + ": missing or mistyped field (" + e.what() + ")");
  }
  return t;
}

}  // namespace

void write_trace_bundle(const Trace& trace, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create directory (" + ec.message() + ")");
  write_safetensors(dir / "maps.safetensors", trace_tensors(trace), {{"format", "difflens-trace"}});
  // Token text may hold partial UTF-8 sequences: replace them rather than fail.
  write_file_atomically(dir / "trace.json",
                        trace_json(trace).dump(1, ' ', false, json::error_handler_t::replace) + "\n");
}

Trace read_trace_bundle(const std::filesystem::path& dir) {
  const std::filesystem::path jpath = dir / "trace.json";
  std::error_code ec;
  if (!std::filesystem::exists(jpath, ec) && !ec)
    throw FormatError(jpath.string() + ": cannot open (is this a trace bundle directory?)");
  std::string text;
  try {
    text = read_bounded(jpath, "trace bundle's trace.json", kTextLimit);
  } catch (const Error& e) {
    throw FormatError(e.what());
  }
  const json j = parse_trace_json(text, jpath.string());
  std::optional<SafetensorsFile> maps;
  return trace_from(j, jpath, [&]() -> const SafetensorsFile& {
    if (!maps) maps.emplace(dir / "maps.safetensors");
    return *maps;
  });
}

std::string trace_to_bytes(const Trace& trace, const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> metadata = extra;
  metadata["format"] = "difflens-trace";
  metadata["trace.json"] = trace_json(trace).dump(-1, ' ', false, json::error_handler_t::replace);
  return safetensors_bytes(trace_tensors(trace), metadata);
}

Trace trace_from_bytes(const std::string& bytes, const std::string& where,
                       std::map<std::string, std::string>* metadata) {
  const SafetensorsFile maps = SafetensorsFile::view(bytes.data(), bytes.size(), where);
  const auto it = maps.metadata().find("trace.json");
  if (it == maps.metadata().end())
    throw FormatError(where + ": no trace.json in its metadata (not a DiffLens trace)");
  const json j = parse_trace_json(it->second, where + " (trace.json)");
  Trace t = trace_from(j, where + " (trace.json)", [&]() -> const SafetensorsFile& { return maps; });
  if (metadata) *metadata = maps.metadata();
  return t;
}

}  // namespace difflens
