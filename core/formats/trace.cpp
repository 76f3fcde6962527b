// Trace bookkeeping: histogram/statistics merging and byte accounting (no LibTorch).
#include "core/formats/trace.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace difflens {

void LogHistogram::add(float v) {
  v = std::fabs(v);
  if (!(v >= std::pow(10.0f, static_cast<float>(kLogMin)))) {  // also catches NaN
    ++below;
    return;
  }
  const double bin = (std::log10(static_cast<double>(v)) - kLogMin) * kBinsPerDecade;
  if (bin >= kBins) {
    ++above;
    return;
  }
  ++counts[static_cast<size_t>(bin)];
}

void LogHistogram::merge(const LogHistogram& o) {
  for (int i = 0; i < kBins; ++i) counts[i] += o.counts[i];
  below += o.below;
  above += o.above;
}

uint64_t LogHistogram::total() const {
  uint64_t t = below + above;
  for (uint64_t c : counts) t += c;
  return t;
}

double LogHistogram::bin_lower(int bin) {
  return std::pow(10.0, kLogMin + static_cast<double>(bin) / kBinsPerDecade);
}

double LogHistogram::quantile(double fraction) const {
  const uint64_t n = total();
  if (n == 0) return 0;
  const double target = std::clamp(fraction, 0.0, 1.0) * static_cast<double>(n);
  double cum = static_cast<double>(below);
  if (target <= cum) return 0;  // inside the "below 1e-8" bucket: report 0
  for (int b = 0; b < kBins; ++b) {
    const double c = static_cast<double>(counts[b]);
    if (c > 0 && cum + c >= target) {
      const double t = (target - cum) / c;  // position inside the bin, interpolated in log space
      return std::pow(10.0, kLogMin + (b + t) / kBinsPerDecade);
    }
    cum += c;
  }
  return std::pow(10.0, static_cast<double>(kLogMax));
}

void ValueStats::merge(const ValueStats& o) {
  if (o.count == 0) return;
  if (count == 0) {  // a single pool keeps its exact median
    *this = o;
    return;
  }
  const uint64_t n = count + o.count;
  mean = static_cast<float>((static_cast<double>(mean) * count + static_cast<double>(o.mean) * o.count) / n);
  std::vector<float> all = top;
  all.insert(all.end(), o.top.begin(), o.top.end());
  std::sort(all.begin(), all.end(), std::greater<float>());
  if (all.size() > static_cast<size_t>(kTopK)) all.resize(kTopK);
  top = std::move(all);
  histogram.merge(o.histogram);
  count = n;
  median = static_cast<float>(histogram.quantile(0.5));
}

size_t Trace::byte_size() const {
  size_t b = sizeof(*this) + token_ids.size() * sizeof(int64_t);
  for (const auto& t : tokens) b += sizeof(t) + t.capacity();
  for (const auto& l : layers) {
    b += sizeof(l) + l.heads.size() * sizeof(int);
    for (const FloatArray* a : l.arrays()) b += a->bytes();
    for (const ValueStats* s : {&l.logit_stats, &l.hidden_stats})
      b += s->top.size() * sizeof(float) + s->histogram.counts.size() * sizeof(uint64_t);
  }
  for (const auto& t : next_token) b += sizeof(t) + t.text.capacity();
  b += predictions.ids.bytes() + predictions.probs.bytes() + predictions.actual.bytes();
  return b;
}

std::string Trace::written_interventions() const {
  std::string out;
  for (const auto& iv : interventions) out += (out.empty() ? "" : ", ") + iv.first;
  return out;
}

std::string Trace::nonfinite_summary() const {
  std::string out;
  auto add = [&](const std::string& what, size_t n) {
    if (n) out += (out.empty() ? "" : "; ") + what + ": " + std::to_string(n) + " NaN or inf values";
  };
  for (const auto& l : layers) {
    size_t n = 0;
    // A pooled map's cells with no causal entry are NaN by design (the future, beyond a sliding window): only
    // infinities count there; the kept logits' masked entries are -inf by design. The kept queries and keys,
    // the statistics and the predictions are checked whole.
    const std::vector<const FloatArray*> grids = {&l.a1_mean, &l.a1_max, &l.a2_mean,
                                                  &l.a2_max,  &l.a_mean, &l.a_max};
    for (const FloatArray* a : l.arrays()) {
      const bool grid = std::find(grids.begin(), grids.end(), a) != grids.end();
      if ((a == &l.logits1 || a == &l.logits2) && a->shape.size() == 3) {
        // The kept attention logits are -inf where the mask is (the future, beyond a sliding window): there
        // only NaN and +inf count; a causal entry must be finite.
        const int64_t rows = a->shape[1], keys = a->shape[2], window = config.sliding_window;
        for (size_t k = 0; k < a->data.size(); ++k) {
          const int64_t i = static_cast<int64_t>(k) / keys % rows, j = static_cast<int64_t>(k) % keys;
          const bool masked = j > i || (window > 0 && j <= i - window);
          const float v = a->data[k];
          n += masked ? std::isnan(v) || v == std::numeric_limits<float>::infinity() : !std::isfinite(v);
        }
        continue;
      }
      for (float v : a->data) n += grid ? std::isinf(v) : !std::isfinite(v);
    }
    for (const ValueStats* st : {&l.logit_stats, &l.hidden_stats})
      for (float v : st->top) n += !std::isfinite(v);
    add("layer " + std::to_string(l.index), n);
  }
  size_t n = 0;
  for (const auto& t : next_token) n += !std::isfinite(t.probability);
  for (float v : predictions.probs.data) n += !std::isfinite(v);
  add("the predictions", n);
  return out;
}

Trace::KeptBytes Trace::kept_bytes() const {
  KeptBytes k;
  for (const auto& l : layers) {
    for (const FloatArray* a : {&l.a1_mean, &l.a1_max, &l.a2_mean, &l.a2_max, &l.a_mean, &l.a_max})
      k.pooled_maps += a->bytes();
    for (const FloatArray* a :
         {&l.q1, &l.k1, &l.q2, &l.k2, &l.lse1, &l.lse2, &l.lambda_rows, &l.lambda_logits})
      k.tile_inputs += a->bytes();  // (DIFF V2's λ per token: A = A1 − λ(t)·A2 of a recomputed tile)
    k.values += l.v.bytes() + l.subln_weight.bytes();
  }
  return k;
}

namespace {
ValueStats pool(const Trace& trace, ValueStats LayerTrace::*member) {
  ValueStats out;
  for (const auto& l : trace.layers) out.merge(l.*member);
  return out;
}
}  // namespace

ValueStats pooled_logit_stats(const Trace& trace) {
  return pool(trace, &LayerTrace::logit_stats);
}
ValueStats pooled_hidden_stats(const Trace& trace) {
  return pool(trace, &LayerTrace::hidden_stats);
}

}  // namespace difflens
