// Statistics of |values| held in tensors on any device (value_stats.h): what a capture keeps of the logits
// and hidden states where its layers run as tensor operations.
#include "core/model/value_stats.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/kthvalue.h>
#include <ATen/ops/log10.h>
#include <ATen/ops/nan_to_num.h>
#include <ATen/ops/topk.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/cpu/attention_cpu.h"
#include "core/model/to_host.h"

namespace difflens {

using at::Tensor;

// Without gathering the pool: every value gets its log10 bin in one vectorised pass (skipped cells go to a
// discard bucket), bincount gives the histogram, and the exact top-k and lower median are then read from
// the few values inside the bins where they must lie.
ValueStats value_stats(const std::vector<Tensor>& parts, const Tensor& skip, bool exact_median) {
  constexpr int64_t kBelow = 0, kAbove = LogHistogram::kBins + 1, kDiscard = LogHistogram::kBins + 2;
  std::vector<Tensor> values, buckets;  // per part: |v| and its bucket (0 below, 1..kBins, kBins+1 above)
  std::vector<int64_t> counts(kDiscard + 1, 0);
  double sum = 0;
  for (const Tensor& p : parts) {
    // NaN counts as "below" rather than poisoning; infinities stay infinite.
    Tensor v = at::nan_to_num(p.to(at::kFloat).abs(), 0.0, std::numeric_limits<double>::infinity(),
                              std::numeric_limits<double>::infinity());
    // bucket = floor((log10|v| - kLogMin) · kBinsPerDecade) + 1, clamped to [0, kBins + 1]: in place, one
    // temporary (1027 buckets fit int16: a quarter of int64's memory).
    Tensor b = at::log10(v);
    b.sub_(LogHistogram::kLogMin).mul_(LogHistogram::kBinsPerDecade).floor_().clamp_(-1, LogHistogram::kBins);
    b = b.to(at::kShort).add_(1);
    if (skip.defined()) {
      b.masked_fill_(skip, kDiscard);
      sum += v.masked_fill(skip, 0.0f).sum(at::kDouble).item<double>();
    } else {
      sum += v.sum(at::kDouble).item<double>();
    }
    Tensor c = at::bincount(b.flatten().to(at::kCPU), {}, kDiscard + 1).contiguous();
    const int64_t* cp = c.data_ptr<int64_t>();
    for (int64_t i = 0; i <= kDiscard; ++i) counts[i] += cp[i];
    values.push_back(std::move(v));
    buckets.push_back(std::move(b));
  }
  ValueStats s;
  const int64_t n = std::accumulate(counts.begin(), counts.begin() + kDiscard, int64_t{0});
  s.count = static_cast<uint64_t>(n);
  if (n == 0) return s;
  s.histogram.below = static_cast<uint64_t>(counts[kBelow]);
  s.histogram.above = static_cast<uint64_t>(counts[kAbove]);
  for (int i = 0; i < LogHistogram::kBins; ++i) s.histogram.counts[i] = static_cast<uint64_t>(counts[i + 1]);
  s.mean = static_cast<float>(sum / static_cast<double>(n));

  // The values whose bucket lies in [lo, hi], gathered from every part (a small set by construction).
  auto gather = [&](int64_t lo, int64_t hi) {
    std::vector<Tensor> sel;
    for (size_t i = 0; i < values.size(); ++i)
      sel.push_back(
          values[i].masked_select(lo == hi ? buckets[i] == lo : (buckets[i] >= lo) & (buckets[i] <= hi)));
    return sel.size() == 1 ? sel[0] : at::cat(sel);
  };
  // Top-k: the lowest bucket from which the buckets above hold at least k values.
  const int64_t k = std::min<int64_t>(ValueStats::kTopK, n);
  int64_t top_bucket = kAbove, above_count = 0;
  for (; top_bucket > kBelow; --top_bucket)
    if ((above_count += counts[top_bucket]) >= k) break;
  s.top =
      to_vector(std::get<0>(at::topk(gather(top_bucket, kAbove), k, 0, /*largest=*/true, /*sorted=*/true)));
  if (!exact_median) {
    s.median = static_cast<float>(s.histogram.quantile(0.5));
    return s;
  }
  // Lower median: rank (n+1)/2 from the bottom, found inside its bucket.
  const int64_t rank = (n + 1) / 2;
  int64_t below_count = 0, median_bucket = kBelow;
  for (; median_bucket < kAbove; ++median_bucket) {
    if (below_count + counts[median_bucket] >= rank) break;
    below_count += counts[median_bucket];
  }
  s.median =
      std::get<0>(at::kthvalue(gather(median_bucket, median_bucket), rank - below_count)).item<float>();
  return s;
}

ValueStats hidden_stats(const Tensor& h, int64_t from) {
  const Tensor rows = h[0].slice(0, from);
  if (h.is_cuda()) return value_stats({rows});
  const Tensor x = rows.to(at::kFloat).contiguous();
  return value_stats_cpu(x.data_ptr<float>(), x.numel());
}

}  // namespace difflens
