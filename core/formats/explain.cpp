// Recomputes one head's attention for one query from a trace's kept vectors (see core/formats/explain.h).
#include "core/formats/explain.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/formats/error.h"

namespace difflens {

bool explain_available(const Trace& trace, int layer) {
  for (const LayerTrace& l : trace.layers)
    if (l.index == layer)
      return !l.q1.empty() && !l.k1.empty() && !l.v.empty() &&
             (!trace.config.is_diff() ||
              (!l.q2.empty() && !l.k2.empty() &&
               (trace.config.is_diff_v2() ? !l.lambda_rows.empty() && !l.lambda_logits.empty()
                                          : !l.subln_weight.empty())));
  return false;
}

HeadExplain explain_head(const Trace& trace, int layer, int head, int64_t query) {
  const ModelConfig& c = trace.config;
  const LayerTrace* lp = nullptr;
  for (const LayerTrace& l : trace.layers)
    if (l.index == layer) lp = &l;
  if (!lp) throw Error("explain: layer " + std::to_string(layer) + " is not in the trace");
  const int64_t H = c.map_heads(), T = trace.length();
  if (head < 0 || head >= H)
    throw Error("explain: head " + std::to_string(head) + " does not exist (the model has " +
                std::to_string(H) + ")");
  if (query < 0 || query >= T)
    throw Error("explain: query " + std::to_string(query) + " is outside the " + std::to_string(T) +
                "-token prompt");
  if (!explain_available(trace, layer))
    throw Error("explain: this trace kept no queries, keys and values of layer " + std::to_string(layer) +
                " (capture with --keep-qkv, as the app does, and with that layer in --layers when you select "
                "layers)");
  const LayerTrace& l = *lp;
  HeadExplain e;
  e.layer = layer;
  e.head = head;
  e.query = query;
  e.diff = c.is_diff();
  e.v2 = c.is_diff_v2();
  e.d = c.head_dim;
  const int64_t Hkv = l.k1.shape[0];
  e.dv = l.v.shape[2];
  const int64_t kv = head / (H / Hkv);  // GQA: the head's key/value group
  auto vec = [&](const FloatArray& a, int64_t h, int64_t t, int64_t width) {
    const float* p = a.data.data() + (h * T + t) * width;
    return std::vector<float>(p, p + width);
  };
  e.q1 = vec(l.q1, head, query, e.d);
  if (e.diff) e.q2 = vec(l.q2, head, query, e.d);
  for (int64_t j = 0; j <= query; ++j)
    if (c.sliding_window <= 0 || query - j < c.sliding_window) e.keys.push_back(j);
  auto dot = [](const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
  };
  auto softmax = [](const std::vector<double>& x) {
    const double m = *std::max_element(x.begin(), x.end());
    std::vector<double> y(x.size());
    double z = 0;
    for (size_t i = 0; i < x.size(); ++i) z += (y[i] = std::exp(x[i] - m));
    for (double& v : y) v /= z;
    return y;
  };
  for (int64_t j : e.keys) {
    e.k1.push_back(vec(l.k1, kv, j, e.d));
    e.logits1.push_back(dot(e.q1, e.k1.back()));
    if (e.diff) {
      e.k2.push_back(vec(l.k2, kv, j, e.d));
      e.logits2.push_back(dot(e.q2, e.k2.back()));
    }
  }
  e.a1 = softmax(e.logits1);
  if (e.diff) {
    e.a2 = softmax(e.logits2);
    if (e.v2) {
      e.lambda_logit = l.lambda_logits.data[static_cast<size_t>(head * T + query)];
      e.lambda_own = 1.0 / (1.0 + std::exp(-e.lambda_logit));
    } else {
      e.lambda_exp1 = l.lambda_exp1;
      e.lambda_exp2 = l.lambda_exp2;
      e.lambda_init = l.lambda_init;
      e.lambda_own = l.lambda_exp1 - l.lambda_exp2 + l.lambda_init;
    }
    // The λ the run used: its own, or one an intervention set (lambda=0) for this head and token.
    // (V2's rows hold λ in float: σ(z) in double stands for it when they agree.)
    const double used = l.lambda_at(head, query);
    e.lambda_set = std::abs(used - e.lambda_own) > 1e-5;
    e.lambda = e.v2 && !e.lambda_set ? e.lambda_own : used;
  }
  e.a.resize(e.keys.size());
  e.common.assign(e.keys.size(), 0.0);
  for (size_t k = 0; k < e.keys.size(); ++k) {
    e.a[k] = e.diff ? e.a1[k] - e.lambda * e.a2[k] : e.a1[k];
    if (e.diff) e.common[k] = std::max(0.0, std::min(e.a1[k], e.lambda * e.a2[k]));
    e.a_sum += e.a[k];
    e.common_sum += e.common[k];
  }
  e.o.assign(static_cast<size_t>(e.dv), 0.0);
  for (size_t k = 0; k < e.keys.size(); ++k) {
    const float* v = l.v.data.data() + (kv * T + e.keys[k]) * e.dv;
    e.v.emplace_back(v, v + e.dv);
    for (int64_t x = 0; x < e.dv; ++x) e.o[static_cast<size_t>(x)] += e.a[k] * v[x];
  }
  auto length = [](const std::vector<double>& x) {
    double s = 0;
    for (double v : x) s += v * v;
    return std::sqrt(s);
  };
  if (e.diff && !e.v2) {  // RMSNorm over the head's 2d output (fp32 statistics in the model; double here)
    double ms = 0;
    for (double v : e.o) ms += v * v;
    ms /= static_cast<double>(e.dv);
    const double inv = 1.0 / std::sqrt(ms + c.subln_eps);
    e.normed.resize(e.o.size());
    e.out.resize(e.o.size());
    for (size_t x = 0; x < e.o.size(); ++x) {
      e.normed[x] = e.o[x] * inv * l.subln_weight.data[x];
      e.out[x] = e.normed[x] * (1.0 - e.lambda_init);
    }
  } else {
    e.normed = e.o;
    e.out = e.o;
  }
  e.o_norm = length(e.o);
  e.normed_norm = length(e.normed);
  e.out_norm = length(e.out);
  return e;
}

AttentionShare explained_share(const HeadExplain& e, const std::vector<double>& row, TokenSpan answer,
                               TokenSpan question) {
  if (row.size() != e.keys.size()) throw Error("explained_share: the row does not match the explained keys");
  const bool values = e.v.size() == e.keys.size();
  RowMeasures m(answer, question, values ? e.dv : 0);
  for (size_t k = 0; k < row.size(); ++k) m.add(e.keys[k], row[k], values ? e.v[k].data() : nullptr);
  return m.finish();
}

}  // namespace difflens
