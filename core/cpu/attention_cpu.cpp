// One layer's attention on the CPU in one fused pass (see attention_cpu.h).
//
// Work is split into jobs of (head, block of query rows); a row's cost grows with its position (causal),
// so blocks are handed out from both ends alternately and each worker's contiguous range of jobs carries
// about the same work. Each job keeps its rows' logits in scratch rows per worker. The hot loops are
// compiled three times (AVX-512, AVX2 + FMA, plain x86-64); the widest the CPU has runs unless
// set_cpu_isa() picks another.
#include "core/cpu/attention_cpu.h"

#include "core/cpu/cpu_simd.h"
#include "core/formats/error.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

namespace difflens {
namespace {
using namespace simd;  // NOLINT: the vector helpers of core/cpu/cpu_simd.h

constexpr int kBelow = 0, kAbove = LogHistogram::kBins + 1, kBuckets = LogHistogram::kBins + 2;

// The instruction set in use: the widest this CPU has unless set_cpu_isa() chose another.
CpuIsa widest_isa() {
  return __builtin_cpu_supports("avx512f")                                 ? CpuIsa::Avx512
         : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? CpuIsa::Avx2
                                                                           : CpuIsa::Plain;
}
std::atomic<int> g_isa{static_cast<int>(widest_isa())};
CpuIsa current_isa() {
  return static_cast<CpuIsa>(g_isa.load(std::memory_order_relaxed));
}

// ---------------------------------------------------------------------------------------------------
// Buckets of |v| without a logarithm per value: the float's exponent and top 8 mantissa bits (a range of
// 0.4 % of a value) index a table of the bucket at the range's start and the first value, if any, where
// the next bucket begins inside the range (buckets are 3.7 % wide, so at most one starts in a range).

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The bucket by LogHistogram::add's own arithmetic (the definition the table reproduces).
int bucket_by_log(float v) {
  if (!(v >= std::pow(10.0f, static_cast<float>(LogHistogram::kLogMin)))) return kBelow;
  const double bin =
      (std::log10(static_cast<double>(v)) - LogHistogram::kLogMin) * LogHistogram::kBinsPerDecade;
  return bin >= LogHistogram::kBins ? kAbove : static_cast<int>(bin) + 1;
}

struct BucketTable {
  static constexpr int kShift = 15;
  static constexpr int32_t kLow = (1 << kShift) - 1;  // a value's bits within its range
  std::vector<int32_t> first;  // bucket at the start of each range (index: bits >> kShift)
  std::vector<float> next;     // where the next bucket starts inside the range (+inf: it does not)
  // Both in one word for the vector code's one gather: first << 16 | the low kShift bits of `next` (a value
  // of the range is in the next bucket when its own low bits are at least these), or 1 << kShift when no
  // bucket starts inside the range (no value's low bits reach it).
  std::vector<uint32_t> packed;
  // lower[b]: the smallest |v| in bucket b (lower[0] = 0; lower[kBuckets] = +inf, past the last).
  std::vector<float> lower = std::vector<float>(kBuckets + 1, std::numeric_limits<float>::infinity());
  BucketTable() : first(size_t{1} << (32 - 1 - kShift)), next(first.size()) {
    const uint32_t ranges = static_cast<uint32_t>(first.size());
    const uint32_t finite = float_bits(std::numeric_limits<float>::infinity()) >> kShift;
    for (uint32_t r = 0; r < ranges; ++r) {
      const uint32_t lo = r << kShift, hi = lo + (1u << kShift) - 1;
      if (r >= finite) {    // infinity: above (NaN is masked to below by the readers); `next` NaN, so that
        first[r] = kAbove;  // a >= next never adds one past the last bucket
        next[r] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      const int b = bucket_by_log(bits_float(lo));
      first[r] = b;
      next[r] = std::numeric_limits<float>::infinity();
      if (bucket_by_log(bits_float(hi)) == b) continue;
      uint32_t a = lo, z = hi;  // bucket(a) == b, bucket(z) > b
      while (z - a > 1) {
        const uint32_t m = a + (z - a) / 2;
        (bucket_by_log(bits_float(m)) == b ? a : z) = m;
      }
      next[r] = bits_float(z);
    }
    packed.resize(ranges);
    for (uint32_t r = 0; r < ranges; ++r)
      packed[r] = static_cast<uint32_t>(first[r]) << 16 |
                  (next[r] < std::numeric_limits<float>::infinity() ? float_bits(next[r]) & kLow : kLow + 1u);
    lower[kBelow] = 0;
    for (uint32_t r = ranges; r-- > 0;) {  // each bucket's first value, from the top down
      if (next[r] < std::numeric_limits<float>::infinity()) lower[first[r] + 1u] = next[r];
      lower[first[r]] = std::min(lower[first[r]], bits_float(r << kShift));
    }
  }
};

const BucketTable& bucket_table() {
  static const BucketTable table;
  return table;
}

inline int bucket_of(const BucketTable& t, float a) {                                  // a = |v|
  if (!(a < std::numeric_limits<float>::infinity())) return a == a ? kAbove : kBelow;  // inf; NaN below
  const uint32_t r = float_bits(a) >> BucketTable::kShift;
  return t.first[r] + (a >= t.next[r]);
}

// ---------------------------------------------------------------------------------------------------
// Vectorisable pieces (inlined into the row function, compiled per instruction set).

// A growing array of floats without a std::vector's zero-filling resize (rows append up to T values at a
// time).
struct ValueBuffer {
  std::unique_ptr<float[]> data;
  size_t size = 0, capacity = 0;
  void reserve_more(size_t n) {
    if (size + n <= capacity) return;
    const size_t grown = std::max(size + n, 2 * capacity);
    std::unique_ptr<float[]> more(new float[grown]);
    if (size) std::memcpy(more.get(), data.get(), size * sizeof(float));
    data = std::move(more);
    capacity = grown;
  }
};

// Statistics over an array go a chunk at a time (a chunk stays in the first-level cache while it is read
// twice).
constexpr int64_t kStatsChunk = 4096;

// Per worker: its statistics so far and scratch rows.
struct Worker {
  std::vector<float> s1, s2;  // a group's rows of logits, then their softmaxes (kGroup scratch rows each)
  std::vector<float> arow;    // the group's rows of A over its keys
  std::vector<uint32_t> hist4 = std::vector<uint32_t>(4 * kBuckets, 0);  // four interleaved histograms
  double sum = 0;
  ValueBuffer top;  // candidates for the top-k, all > top_floor
  float top_floor = -1;
  bool top_in_rows = true;    // false: `kept` holds every value counted, and the top-k is picked from it
  ValueBuffer median_values;  // values inside the window around the median
  // Every value the worker counted, when it has them (collect-all: median_values; a whole array's
  // statistics: the array); merge_stats then picks the median's bucket and the top-k from them.
  const float* kept = nullptr;
  int64_t kept_n = 0;
  ValueBuffer picked_median, picked_top;  // merge_stats: what it picked from this worker's values
  std::vector<uint32_t> sample = std::vector<uint32_t>(kBuckets, 0);  // the sampling pass's bucket counts
  std::vector<float> amax;                                            // cpu_logit_steps: per head
};

void trim_top(Worker& w) {
  if (w.top.size <= static_cast<size_t>(ValueStats::kTopK)) return;
  float* t = w.top.data.get();
  std::nth_element(t, t + (ValueStats::kTopK - 1), t + w.top.size, std::greater<float>());
  w.top.size = ValueStats::kTopK;
  w.top_floor = *std::min_element(t, t + w.top.size);
}

// What one row needs beyond the inputs.
struct RowArgs {
  const CpuAttentionInputs* in;
  const CpuAttentionOutputs* out;
  const float* k1t;  // keys transposed per kv head: [kv_heads, d, T + kLanes]
  const float* k2t;
  const int* slot;  // head -> map slot, -1 when its maps are not written
  const BucketTable* buckets;
  // 0: the full pass (collecting |logits| in [median_lo, median_hi) when that is not empty); 1: only that
  // collection; 2: the largest |logit| per head; 3: bucket counts of every sample_stride-th row.
  int mode;
  float median_lo, median_hi;
  int64_t sample_stride;
};

// Logits are computed in chunks of kLanes keys (two vectors); scratch rows and transposed keys are padded so
// that the last chunk may read and write past the row's end.
constexpr int64_t kLanes = 32;

__attribute__((always_inline)) inline void quantize(float* __restrict s, int64_t n, float step) {
  for (int64_t j = 0; j < n; ++j) s[j] = std::nearbyint(s[j] / step) * step;
}

// In place over the n values of s: s -> softmax(s); returns the log-sum-exp. The row's padding (up to the
// next multiple of the vector width) is set to -inf first, which adds nothing.
template <typename V>
__attribute__((always_inline)) inline float softmax(float* __restrict s, int64_t n) {
  constexpr int64_t W = lanes<V>();
  const int64_t padded = (n + W - 1) / W * W;
  for (int64_t j = n; j < padded; ++j) s[j] = -std::numeric_limits<float>::infinity();
  V mx = splat<V>(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < padded; j += W) {
    const V x = load<V>(s + j);
    mx = x > mx ? x : mx;
  }
  const float m = lane_max(mx);
  V acc{};
  for (int64_t j = 0; j < padded; j += W) {
    const V e = exp_nonpositive(load<V>(s + j) - m);
    store(s + j, e);
    acc += e;
  }
  const float sum = lane_sum(acc);
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < padded; j += W) store(s + j, load<V>(s + j) * inv);
  return m + std::log(sum);
}

// Adds the buckets of |s[0..n)| to four interleaved histograms (neighbours often share a bin, and one counter
// would serialise on it). The buckets of 16 (AVX-512) or 8 (AVX2) values at a time come from one gather into
// the bucket table's packed words; the counting stays scalar.
__attribute__((target("avx512f"))) void histogram_avx512(const BucketTable& t, const float* s, int64_t n,
                                                         uint32_t* h) {
  int64_t j = 0;
  alignas(64) int32_t b[16];
  for (; j + 16 <= n; j += 16) {
    const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(s + j));
    const __m512i bits = _mm512_castps_si512(a);
    const __m512i e =
        _mm512_i32gather_epi32(_mm512_srli_epi32(bits, BucketTable::kShift), t.packed.data(), 4);
    const __mmask16 up = _mm512_cmpge_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(BucketTable::kLow)),
                                                 _mm512_and_si512(e, _mm512_set1_epi32(0xffff)));
    const __m512i first = _mm512_srli_epi32(e, 16);
    __m512i bucket = _mm512_mask_add_epi32(first, up, first, _mm512_set1_epi32(1));
    bucket = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(a, a, _CMP_ORD_Q), bucket);  // NaN: below
    _mm512_store_si512(b, bucket);
    for (int l = 0; l < 16; ++l) ++h[(l & 3) * kBuckets + b[l]];
  }
  for (; j < n; ++j) ++h[bucket_of(t, std::fabs(s[j]))];
}

__attribute__((target("avx2"))) void histogram_avx2(const BucketTable& t, const float* s, int64_t n,
                                                    uint32_t* h) {
  int64_t j = 0;
  alignas(32) int32_t b[8];
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (; j + 8 <= n; j += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(s + j), abs_mask);
    const __m256i bits = _mm256_castps_si256(a);
    const __m256i e = _mm256_i32gather_epi32(reinterpret_cast<const int*>(t.packed.data()),
                                             _mm256_srli_epi32(bits, BucketTable::kShift), 4);
    // The value's low bits >= the boundary's (> boundary − 1): all ones (-1), subtracted: + 1. NaN lanes:
    // masked to 0 (below).
    const __m256i up = _mm256_cmpgt_epi32(
        _mm256_and_si256(bits, _mm256_set1_epi32(BucketTable::kLow)),
        _mm256_sub_epi32(_mm256_and_si256(e, _mm256_set1_epi32(0xffff)), _mm256_set1_epi32(1)));
    __m256i bucket = _mm256_sub_epi32(_mm256_srli_epi32(e, 16), up);
    bucket = _mm256_and_si256(bucket, _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_ORD_Q)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(b), bucket);
    for (int l = 0; l < 8; ++l) ++h[(l & 3) * kBuckets + b[l]];
  }
  for (; j < n; ++j) ++h[bucket_of(t, std::fabs(s[j]))];
}

void histogram_plain(const BucketTable& t, const float* s, int64_t n, uint32_t* h) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int64_t l = 0; l < 4; ++l) ++h[l * kBuckets + bucket_of(t, std::fabs(s[j + l]))];
  for (; j < n; ++j) ++h[bucket_of(t, std::fabs(s[j]))];
}

void histogram(const BucketTable& t, const float* s, int64_t n, uint32_t* h) {
  const CpuIsa isa = current_isa();
  (isa == CpuIsa::Avx512 ? histogram_avx512
   : isa == CpuIsa::Avx2 ? histogram_avx2
                         : histogram_plain)(t, s, n, h);
}

size_t select_values(const float* s, int64_t n, float lo, float hi, float* out);

template <typename V>
__attribute__((always_inline)) inline void accumulate_stats(Worker& w, const BucketTable& t, const float* s,
                                                            int64_t n) {
  // |s| summed in vector lanes, flushed to double every 16 chunks (a float lane then holds at most 16
  // values: the mean stays within 1e-7).
  using I = IntOf<V>;
  constexpr int64_t W = lanes<V>();
  double sum = 0;
  V acc{}, mx{};
  int64_t j = 0, chunks = 0;
  const I abs_mask = I{} + 0x7fffffff;
  for (; j + W <= n; j += W) {
    const V x = load<V>(s + j);
    const V a = (V)((I)x & abs_mask);  // |x|: the sign bit cleared
    acc += a == a ? a : V{};           // NaN adds nothing (it counts as below the histogram)
    mx = a > mx ? a : mx;
    if (++chunks % 16 == 0) {
      sum += lane_sum(acc);
      acc = V{};
    }
  }
  sum += lane_sum(acc);
  float rowmax = lane_max(mx);
  for (; j < n; ++j) {
    if (s[j] == s[j]) sum += std::fabs(s[j]);
    rowmax = std::max(rowmax, std::fabs(s[j]));
  }
  w.sum += sum;
  histogram(t, s, n, w.hist4.data());
  if (w.top_in_rows && rowmax > w.top_floor) {
    w.top.reserve_more(static_cast<size_t>(n) + 16);
    float* t = w.top.data.get();
    if (rowmax < std::numeric_limits<float>::infinity()) {  // above the floor: picked a vector at a time
      w.top.size += select_values(s, n, std::nextafter(w.top_floor, rowmax),
                                  std::numeric_limits<float>::infinity(), t + w.top.size);
    } else {
      for (j = 0; j < n; ++j)
        if (std::fabs(s[j]) > w.top_floor) t[w.top.size++] = std::fabs(s[j]);
    }
    if (w.top.size >= 4096) trim_top(w);
  }
}

// Appends the |values| of s[0..n) in [lo, hi) to `into` (the values around the median). The CPU's widest
// instructions pick them without a branch per value (AVX-512's compress-store).
__attribute__((target("avx512f"))) size_t select_avx512(const float* s, int64_t n, float lo, float hi,
                                                        float* out) {
  size_t c = 0;
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(s + j));
    const __mmask16 m = _mm512_cmp_ps_mask(a, vlo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(a, vhi, _CMP_LT_OQ);
    _mm512_mask_compressstoreu_ps(out + c, m, a);
    c += static_cast<size_t>(__builtin_popcount(m));
  }
  for (; j < n; ++j) {
    const float a = std::fabs(s[j]);
    if (a >= lo && a < hi) out[c++] = a;
  }
  return c;
}

__attribute__((target("avx2"))) size_t select_avx2(const float* s, int64_t n, float lo, float hi,
                                                   float* out) {
  size_t c = 0;
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(s + j), abs_mask);
    int m = _mm256_movemask_ps(
        _mm256_and_ps(_mm256_cmp_ps(a, vlo, _CMP_GE_OQ), _mm256_cmp_ps(a, vhi, _CMP_LT_OQ)));
    while (m) {
      const int l = __builtin_ctz(m);
      out[c++] = std::fabs(s[j + l]);
      m &= m - 1;
    }
  }
  for (; j < n; ++j) {
    const float a = std::fabs(s[j]);
    if (a >= lo && a < hi) out[c++] = a;
  }
  return c;
}

size_t select_plain(const float* s, int64_t n, float lo, float hi, float* out) {
  size_t c = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float a = std::fabs(s[j]);
    if (a >= lo && a < hi) out[c++] = a;
  }
  return c;
}

size_t select_values(const float* s, int64_t n, float lo, float hi, float* out) {
  const CpuIsa isa = current_isa();
  return (isa == CpuIsa::Avx512 ? select_avx512
          : isa == CpuIsa::Avx2 ? select_avx2
                                : select_plain)(s, n, lo, hi, out);
}

inline void collect(const float* s, int64_t n, float lo, float hi, ValueBuffer& into) {
  into.reserve_more(static_cast<size_t>(n) + 16);
  into.size += select_values(s, n, lo, hi, into.data.get() + into.size);
}

// A map row of `ld` keys from the row's n visible values starting at key j0; the row's other keys (before
// j0, and the future) get `fill`. Written with streaming stores: the maps are far larger than the caches and
// not read again here, so their lines go to memory without being read first.
__attribute__((always_inline)) inline void write_row(float* __restrict dst, int64_t ld, int64_t j0,
                                                     const float* __restrict v, int64_t n, float fill) {
  auto at = [&](int64_t c) { return c >= j0 && c < j0 + n ? v[c - j0] : fill; };
  int64_t c = 0;
  for (; c < ld && (reinterpret_cast<uintptr_t>(dst + c) & 15) != 0; ++c) dst[c] = at(c);
  const __m128 f = _mm_set1_ps(fill);
  for (; c + 4 <= ld; c += 4) {
    __m128 x;
    if (c + 4 <= j0 || c >= j0 + n)
      x = f;
    else if (c >= j0 && c + 4 <= j0 + n)
      x = _mm_loadu_ps(v + (c - j0));
    else
      x = _mm_setr_ps(at(c), at(c + 1), at(c + 2), at(c + 3));
    _mm_stream_ps(dst + c, x);
  }
  for (; c < ld; ++c) dst[c] = at(c);
}

// The sum, largest and smallest of v[0..n) (n >= 1), a vector at a time: one cell of a pooled map row
// (long prompts' cells are tens of keys wide). The last, partial vector is read whole and its lanes past n
// masked: v must be readable up to the next multiple of the vector width (the pass's scratch rows are).
template <typename V>
__attribute__((always_inline)) inline void segment_stats(const float* __restrict v, int64_t n, float& sum,
                                                         float& hi, float& lo) {
  using I = IntOf<V>;
  constexpr int64_t W = lanes<V>();
  const float inf = std::numeric_limits<float>::infinity();
  if (n < 4) {  // too short for the reductions to pay
    sum = hi = lo = v[0];
    for (int64_t j = 1; j < n; ++j) {
      sum += v[j];
      hi = std::max(hi, v[j]);
      lo = std::min(lo, v[j]);
    }
    return;
  }
  V s{}, h = splat<V>(-inf), l = splat<V>(inf);
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    const V x = load<V>(v + j);
    s += x;
    h = x > h ? x : h;
    l = x < l ? x : l;
  }
  if (j < n) {  // (one comparison per select: GCC splits selects on combined masks into lanes)
    alignas(64) static constexpr int32_t kLane[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    I lane;
    std::memcpy(&lane, kLane, sizeof lane);
    const I keep = lane < (I{} + static_cast<int>(n - j));
    const V x = load<V>(v + j);
    const V xs = keep ? x : V{}, xh = keep ? x : splat<V>(-inf), xl = keep ? x : splat<V>(inf);
    s += xs;
    h = xh > h ? xh : h;
    l = xl < l ? xl : l;
  }
  sum = lane_sum(s);
  hi = lane_max(h);
  lo = lane_min(l);
}

// Rows are taken four at a time: their logits share each chunk of keys loaded (eight independent
// accumulator chains instead of two), and so does their A·V.
constexpr int64_t kGroup = 4;

// s_r[j] = q_r · k_{j0 + j} for the group's rows r (queries q + r·d) and j < n (and garbage up to the next
// multiple of two vectors), from keys transposed ([d, ldk], rows padded by kLanes); rows beyond `rows` are
// left alone.
template <typename V>
__attribute__((always_inline)) inline void group_logits(const float* __restrict q, int64_t rows,
                                                        const float* __restrict kt, int64_t ldk, int64_t d,
                                                        int64_t j0, int64_t n, float* const* s) {
  constexpr int64_t W = lanes<V>();
  for (int64_t j = 0; j < n; j += 2 * W) {
    V acc[kGroup][2] = {};
    const float* __restrict k = kt + j0 + j;
    for (int64_t t = 0; t < d; ++t, k += ldk) {
      const V k0 = load<V>(k), k1 = load<V>(k + W);
      for (int64_t r = 0; r < kGroup; ++r) {
        const float qr = q[std::min(r, rows - 1) * d + t];
        acc[r][0] += qr * k0;
        acc[r][1] += qr * k1;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      store(s[r] + j, acc[r][0]);
      store(s[r] + j + W, acc[r][1]);
    }
  }
}

inline bool knocks_out(const std::vector<KeyKnockout>& ks, int64_t h, int64_t i) {
  for (const KeyKnockout& k : ks)
    if (k.applies(h, i)) return true;
  return false;
}

inline bool removed_key(const std::vector<KeyKnockout>& ks, int64_t h, int64_t i, int64_t j) {
  for (const KeyKnockout& k : ks)
    if (k.removes(h, i, j)) return true;
  return false;
}

// Rows [r0, r1) of head h, with vectors of type V.
template <typename V>
__attribute__((always_inline)) inline void attention_rows_body(const RowArgs& a, Worker& w, int64_t h,
                                                               int64_t r0, int64_t r1) {
  const CpuAttentionInputs& in = *a.in;
  const CpuAttentionOutputs& out = *a.out;
  const int64_t T = in.T, d = in.d, dv = in.dv;
  const int64_t g = h / (in.heads / in.kv_heads);
  const bool diff = in.q2 != nullptr;
  const int64_t ldk = T + kLanes;
  const float* kt1 = a.k1t + g * d * ldk;
  const float* kt2 = diff ? a.k2t + g * d * ldk : nullptr;
  const float* vg = in.v + g * T * dv;
  const float step1 = out.step1.empty() ? 0.0f : out.step1[static_cast<size_t>(h)];
  const float step2 = out.step2.empty() ? 0.0f : out.step2[static_cast<size_t>(h)];
  const int64_t q_rows = T - in.q_row0;  // the rows q1, q2 and lambda_rows hold, from row q_row0
  const float* lambda_rows =
      in.lambda_rows ? in.lambda_rows + h * q_rows : nullptr;  // DIFF V2, from row q_row0
  const int slot = a.slot[h];
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t stride = T + 2 * kLanes;  // a scratch row
  float* S1[kGroup];
  float* S2[kGroup];
  float* A[kGroup];  // the group's rows of A over the group's keys, zero where a row does not see
  for (int64_t r = 0; r < kGroup; ++r) {
    S1[r] = w.s1.data() + r * stride;
    S2[r] = diff ? w.s2.data() + r * stride : nullptr;
    A[r] = w.arow.data() + r * stride;
  }
  for (int64_t i0 = r0; i0 < r1; i0 += kGroup) {
    const int64_t rows = std::min(kGroup, r1 - i0);
    if (a.mode == 3) {  // sampling: only groups holding a sampled row compute their logits
      const int64_t first = std::max(i0, out.stats_from) - out.row0;
      const int64_t next = (first + a.sample_stride - 1) / a.sample_stride * a.sample_stride + out.row0;
      if (!out.logit_stats || next >= i0 + rows) continue;
    }
    // The keys any row of the group sees: [jlo, jlo + N).
    const int64_t jlo = in.window > 0 ? std::max<int64_t>(0, i0 - in.window + 1) : 0, N = i0 + rows - jlo;
    group_logits<V>(in.q1 + (h * q_rows + i0 - in.q_row0) * d, rows, kt1, ldk, d, jlo, N, S1);
    if (diff) group_logits<V>(in.q2 + (h * q_rows + i0 - in.q_row0) * d, rows, kt2, ldk, d, jlo, N, S2);
    const bool output = a.mode == 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      const int64_t j0 = in.window > 0 ? std::max<int64_t>(0, i - in.window + 1) : 0, n = i - j0 + 1;
      float* s1 = S1[r] + (j0 - jlo);
      float* s2 = diff ? S2[r] + (j0 - jlo) : nullptr;
      if (step1 > 0) quantize(s1, n, step1);
      if (diff && step2 > 0) quantize(s2, n, step2);
      if (a.mode == 2) {  // largest |logit| per head (quantization steps)
        float m = w.amax[static_cast<size_t>(2 * h)], m2 = w.amax[static_cast<size_t>(2 * h + 1)];
        for (int64_t j = 0; j < n; ++j) m = std::max(m, std::fabs(s1[j]));
        if (diff)
          for (int64_t j = 0; j < n; ++j) m2 = std::max(m2, std::fabs(s2[j]));
        w.amax[static_cast<size_t>(2 * h)] = m;
        w.amax[static_cast<size_t>(2 * h + 1)] = m2;
        continue;
      }
      const bool stats = out.logit_stats && i >= out.stats_from;
      if (a.mode == 3) {  // sampling: where the median lies, roughly
        if (!stats || (i - out.row0) % a.sample_stride != 0) continue;
        for (int64_t j = 0; j < n; ++j)
          ++w.sample[static_cast<size_t>(bucket_of(*a.buckets, std::fabs(s1[j])))];
        if (diff)
          for (int64_t j = 0; j < n; ++j)
            ++w.sample[static_cast<size_t>(bucket_of(*a.buckets, std::fabs(s2[j])))];
        continue;
      }
      if (a.mode == 1) {  // the median pass
        if (!stats) continue;
        collect(s1, n, a.median_lo, a.median_hi, w.median_values);
        if (diff) collect(s2, n, a.median_lo, a.median_hi, w.median_values);
        continue;
      }
      const int64_t row = i - out.row0;
      const int64_t rows_out = out.row1 - out.row0;
      if (out.logits1) write_row(out.logits1 + (h * rows_out + row) * out.ld, out.ld, j0, s1, n, neg_inf);
      if (out.logits2 && diff)
        write_row(out.logits2 + (h * rows_out + row) * out.ld, out.ld, j0, s2, n, neg_inf);
      if (stats) {
        accumulate_stats<V>(w, *a.buckets, s1, n);
        if (diff) accumulate_stats<V>(w, *a.buckets, s2, n);
        if (a.median_lo < a.median_hi) {
          collect(s1, n, a.median_lo, a.median_hi, w.median_values);
          if (diff) collect(s2, n, a.median_lo, a.median_hi, w.median_values);
        }
      }
      // Knockouts: removed keys -inf before both softmaxes; a row left with none attends to nothing.
      bool no_keys = false;
      if (in.knockouts && knocks_out(*in.knockouts, h, i)) {
        int64_t kept = 0;
        for (int64_t j = 0; j < n; ++j) {
          if (removed_key(*in.knockouts, h, i, j0 + j)) {
            s1[j] = neg_inf;
            if (diff) s2[j] = neg_inf;
          } else {
            ++kept;
          }
        }
        no_keys = kept == 0;
      }
      auto row_softmax = [&](float* s) {
        if (!no_keys) return softmax<V>(s, n);
        for (int64_t j = 0; j < n; ++j) s[j] = 0.0f;
        return neg_inf;
      };
      const float lse1 = row_softmax(s1);
      if (out.lse1) out.lse1[h * T + i] = lse1;
      // The row of A over the group's keys: zeros where this row does not see.
      float* __restrict ar = A[r];
      for (int64_t j = 0; j < j0 - jlo; ++j) ar[j] = 0.0f;
      float* __restrict arow = ar + (j0 - jlo);
      if (diff) {
        const float lse2 = row_softmax(s2);
        if (out.lse2) out.lse2[h * T + i] = lse2;
        const float lambda = lambda_rows ? lambda_rows[i - in.q_row0] : in.lambda;
        for (int64_t j = 0; j < n; ++j) arow[j] = s1[j] - lambda * s2[j];
      } else {
        std::memcpy(arow, s1, static_cast<size_t>(n) * sizeof(float));
      }
      for (int64_t j = j0 - jlo + n; j < N; ++j) ar[j] = 0.0f;
      if (slot >= 0 && out.pool_cells > 0) {  // long prompts: the row pooled into its cell row
        const int64_t maps = diff ? 3 : 1, P = out.pool_cells, rb = out.pool_bin[i];
        const float* vals[3] = {s1, diff ? s2 : nullptr, diff ? arow : nullptr};
        for (int64_t m = 0; m < maps; ++m) {
          float* su = out.pool_sum[static_cast<size_t>(slot * maps + m)] + rb * P;
          float* be = out.pool_best[static_cast<size_t>(slot * maps + m)] + rb * P;
          const float* v = vals[m];
          for (int64_t c = 0; c <= rb; ++c) {
            const int64_t a0 = std::max(out.pool_start[c], j0), a1 = std::min(out.pool_start[c + 1], i + 1);
            if (a0 >= a1) continue;
            float sum, hi, lo;
            segment_stats<V>(v + (a0 - j0), a1 - a0, sum, hi, lo);
            su[c] += sum;
            const float top = hi >= -lo ? hi : lo;
            be[c] = std::fabs(top) > std::fabs(be[c]) ? top : be[c];  // stored either way: no branch to miss
          }
        }
      } else if (slot >= 0) {
        const int64_t at = (slot * rows_out + row) * out.ld;
        if (diff) {
          write_row(out.a1 + at, out.ld, j0, s1, n, 0.0f);
          write_row(out.a2 + at, out.ld, j0, s2, n, 0.0f);
        }
        write_row(out.a + at, out.ld, j0, arow, n, 0.0f);
      }
    }
    if (!output) continue;
    // o_i = Σ_j A_ij v_j for the group's rows, one vector of value columns at a time: each v_j chunk loaded
    // once.
    constexpr int64_t W = lanes<V>();
    for (int64_t c0 = 0; c0 < dv; c0 += W) {
      const int64_t width = std::min(W, dv - c0);
      V acc[kGroup] = {};
      const float* __restrict vj = vg + jlo * dv + c0;
      if (width == W) {
        for (int64_t j = 0; j < N; ++j, vj += dv) {
          const V v = load<V>(vj);
          for (int64_t r = 0; r < kGroup; ++r) acc[r] += A[std::min(r, rows - 1)][j] * v;
        }
      } else {  // the last, narrower columns
        for (int64_t j = 0; j < N; ++j, vj += dv) {
          V v{};
          for (int64_t c = 0; c < width; ++c) v[c] = vj[c];
          for (int64_t r = 0; r < kGroup; ++r) acc[r] += A[std::min(r, rows - 1)][j] * v;
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        float* o = out.o + (h * T + i0 + r) * dv + c0;
        for (int64_t c = 0; c < width; ++c) o[c] = acc[r][c];
      }
    }
  }
  _mm_sfence();  // the streamed map rows are visible to other threads once the job is done
}

// The row function compiled for each instruction set: the body above is inlined into each.
__attribute__((target("avx512f"))) void rows_avx512(const RowArgs& a, Worker& w, int64_t h, int64_t r0,
                                                    int64_t r1) {
  attention_rows_body<v16>(a, w, h, r0, r1);
}
__attribute__((target("avx2,fma"))) void rows_avx2(const RowArgs& a, Worker& w, int64_t h, int64_t r0,
                                                   int64_t r1) {
  attention_rows_body<v8>(a, w, h, r0, r1);
}
void rows_plain(const RowArgs& a, Worker& w, int64_t h, int64_t r0, int64_t r1) {
  attention_rows_body<v4>(a, w, h, r0, r1);
}

void attention_rows(const RowArgs& a, Worker& w, int64_t h, int64_t r0, int64_t r1) {
  const CpuIsa isa = current_isa();
  (isa == CpuIsa::Avx512 ? rows_avx512 : isa == CpuIsa::Avx2 ? rows_avx2 : rows_plain)(a, w, h, r0, r1);
}

// Keys transposed per kv head: [kv_heads, T, d] -> [kv_heads, d, T + kLanes], rows padded with zeros so
// that group_logits may read a whole chunk past the last key.
std::vector<float> transposed(const float* k, int64_t kv_heads, int64_t T, int64_t d) {
  const int64_t ldk = T + kLanes;
  std::vector<float> t(static_cast<size_t>(kv_heads * d * ldk), 0.0f);
  for (int64_t g = 0; g < kv_heads; ++g)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t c = 0; c < d; ++c) t[static_cast<size_t>((g * d + c) * ldk + i)] = k[(g * T + i) * d + c];
  return t;
}

// Runs `rows(worker, head, r0, r1)` over every head and block of rows [row0, row1), the blocks of a head
// handed out from both ends alternately so that contiguous ranges of jobs carry similar work. Blocks are 16
// rows, or, with `cells` (pooling), the rows of one cell row each.
template <typename Rows>
void for_each_block(int64_t heads, int64_t row0, int64_t row1, const CpuParallelFor& parallel, Rows&& rows,
                    const CpuAttentionOutputs* cells = nullptr) {
  constexpr int64_t kBlock = 16;
  std::vector<int64_t> bounds;  // block b: rows [bounds[b], bounds[b + 1])
  if (cells && cells->pool_cells > 0) {
    bounds.push_back(row0);
    for (int64_t c = 0; c <= cells->pool_cells; ++c)
      if (cells->pool_start[c] > row0 && cells->pool_start[c] < row1) bounds.push_back(cells->pool_start[c]);
    bounds.push_back(row1);
  } else {
    for (int64_t r = row0; r < row1; r += kBlock) bounds.push_back(r);
    bounds.push_back(row1);
  }
  const int64_t blocks = static_cast<int64_t>(bounds.size()) - 1;
  parallel(heads * blocks, [&](int64_t begin, int64_t end, int worker) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t h = job / blocks, k = job % blocks;
      const int64_t b = k % 2 == 0 ? k / 2 : blocks - 1 - k / 2;
      rows(worker, h, bounds[static_cast<size_t>(b)], bounds[static_cast<size_t>(b + 1)]);
    }
  });
}

std::vector<Worker> make_workers(int workers, int64_t T, bool diff) {
  std::vector<Worker> w(static_cast<size_t>(std::max(1, workers)));
  for (Worker& x : w) {
    const size_t rows = static_cast<size_t>(kGroup * (T + 2 * kLanes));
    x.s1.resize(rows);
    x.arow.resize(rows);
    if (diff) x.s2.resize(rows);
  }
  return w;
}

// The k-th smallest (from 0) of n non-negative floats, reordering them: for many, first the 256th part of
// their range of bits that holds it (non-negative floats order as their bits do), then nth_element over
// that part alone (a median's bucket holds thousands of values: nth_element over all of them cost ~10 ns
// each).
float kth_smallest(float* v, size_t n, size_t k) {
  if (n > 2048) {
    uint32_t lo = UINT32_MAX, hi = 0;
    for (size_t i = 0; i < n; ++i) {
      lo = std::min(lo, float_bits(v[i]));
      hi = std::max(hi, float_bits(v[i]));
    }
    int shift = 0;
    while (((hi - lo) >> shift) >= 256) ++shift;
    uint32_t counts[256] = {};
    for (size_t i = 0; i < n; ++i) ++counts[(float_bits(v[i]) - lo) >> shift];
    uint32_t part = 0;
    for (; k >= counts[part]; ++part) k -= counts[part];
    size_t m = 0;  // the part's values to the front
    for (size_t i = 0; i < n; ++i)
      if (((float_bits(v[i]) - lo) >> shift) == part) v[m++] = v[i];
    n = m;
  }
  std::nth_element(v, v + k, v + n);
  return v[k];
}

// The workers' statistics as one ValueStats. With exact_median the median is found among the values of its
// bucket: picked from each worker's `kept` values when it has them (every value it counted), else from
// those it collected when the bucket lies in [window_lo, window_hi], else from the ones
// `collect_bucket(lo, hi)` gathers into the workers' median_values. Workers with `kept` values (top_in_rows
// false: no candidates of their own) have their top-k picked from them too: the values from the bucket of the
// k-th largest up, plus the infinities, which the histogram counts (above) but no pick keeps. The picking
// runs one worker per job on `parallel` (null: here).
template <typename Collect>
ValueStats merge_stats(std::vector<Worker>& ws, bool exact_median, int window_lo, int window_hi,
                       Collect&& collect_bucket, const CpuParallelFor* parallel = nullptr) {
  ValueStats s;
  std::vector<uint64_t> counts(kBuckets, 0);
  double sum = 0;
  std::vector<float> top;
  for (Worker& w : ws) {
    trim_top(w);  // its top k alone: sorting thousands of candidates took longer than the histogram
    for (int b = 0; b < kBuckets; ++b)
      for (int k = 0; k < 4; ++k)
        counts[static_cast<size_t>(b)] += w.hist4[static_cast<size_t>(k * kBuckets + b)];
    sum += w.sum;
    top.insert(top.end(), w.top.data.get(), w.top.data.get() + w.top.size);
  }
  uint64_t n = 0;
  for (uint64_t c : counts) n += c;
  s.count = n;
  if (n == 0) return s;
  s.histogram.below = counts[kBelow];
  s.histogram.above = counts[kAbove];
  for (int b = 0; b < LogHistogram::kBins; ++b)
    s.histogram.counts[static_cast<size_t>(b)] = counts[static_cast<size_t>(b + 1)];
  s.mean = static_cast<float>(sum / static_cast<double>(n));
  s.median = static_cast<float>(s.histogram.quantile(0.5));  // the estimate, unless exact below

  const BucketTable& buckets = bucket_table();
  const float inf = std::numeric_limits<float>::infinity();
  // The median's bucket: the lower median, rank (n + 1) / 2 from the bottom.
  const uint64_t rank = (n + 1) / 2;
  uint64_t below = 0;
  int b = kBelow;
  for (; b < kAbove; ++b) {
    if (below + counts[static_cast<size_t>(b)] >= rank) break;
    below += counts[static_cast<size_t>(b)];
  }
  const float lo = buckets.lower[static_cast<size_t>(b)], hi = buckets.lower[static_cast<size_t>(b + 1)];
  const bool kept = !ws.empty() && !ws.front().top_in_rows;  // the top-k is picked here too
  if (exact_median && !kept && (b < window_lo || b > window_hi))
    collect_bucket(lo, hi);  // not collected yet: a pass for it
  // The top-k's lowest bucket, when it is picked here.
  int tb = kAbove;
  for (uint64_t above = 0; tb > kBelow && above + counts[static_cast<size_t>(tb)] < ValueStats::kTopK; --tb)
    above += counts[static_cast<size_t>(tb)];
  const float top_lo = buckets.lower[static_cast<size_t>(tb)];
  auto pick = [&](int64_t w0, int64_t w1, int) {
    for (int64_t k = w0; k < w1; ++k) {
      Worker& w = ws[static_cast<size_t>(k)];
      w.picked_median.size = w.picked_top.size = 0;
      const float* v = kept ? w.kept : w.median_values.data.get();
      const int64_t count = kept ? w.kept_n : static_cast<int64_t>(w.median_values.size);
      for (int64_t at = 0; at < count; at += kStatsChunk) {  // a chunk read once from memory, picked twice
        const int64_t m = std::min(kStatsChunk, count - at);
        if (exact_median) collect(v + at, m, lo, hi, w.picked_median);
        if (kept) collect(v + at, m, top_lo, inf, w.picked_top);
      }
    }
  };
  const int64_t workers = static_cast<int64_t>(ws.size());
  if ((exact_median || kept) && parallel && workers > 1)
    (*parallel)(workers, pick);
  else if (exact_median || kept)
    pick(0, workers, 0);

  if (kept) {
    const float huge = buckets.lower[static_cast<size_t>(kAbove)];
    uint64_t finite_above = 0;
    for (const Worker& w : ws) {
      if (w.picked_top.size == 0) continue;
      const float* t = w.picked_top.data.get();
      top.insert(top.end(), t, t + w.picked_top.size);
      finite_above +=
          static_cast<uint64_t>(std::count_if(t, t + w.picked_top.size, [&](float x) { return x >= huge; }));
    }
    const uint64_t infinite = counts[static_cast<size_t>(kAbove)] - finite_above;
    top.insert(top.end(), static_cast<size_t>(std::min<uint64_t>(infinite, ValueStats::kTopK)), inf);
  }
  std::sort(top.begin(), top.end(), std::greater<float>());
  top.resize(std::min<size_t>(top.size(), std::min<uint64_t>(ValueStats::kTopK, n)));
  s.top = std::move(top);
  if (!exact_median) return s;
  ValueBuffer values;  // the median bucket's values
  for (const Worker& w : ws) {
    if (w.picked_median.size == 0) continue;  // (its buffer may never have been allocated)
    values.reserve_more(w.picked_median.size);
    std::memcpy(values.data.get() + values.size, w.picked_median.data.get(),
                w.picked_median.size * sizeof(float));
    values.size += w.picked_median.size;
  }
  const size_t k = static_cast<size_t>(rank - below - 1);
  if (k >= values.size)
    return s;  // NaN or infinite values in the median's bucket (not collected): the estimate
  s.median = kth_smallest(values.data.get(), values.size, k);
  return s;
}

// A whole array's statistics (value_stats_cpu) in chunks, with vectors of each instruction set's width.
template <typename V>
__attribute__((always_inline)) inline void stats_of(Worker& w, const float* values, int64_t n) {
  for (int64_t at = 0; at < n; at += kStatsChunk)
    accumulate_stats<V>(w, bucket_table(), values + at, std::min(kStatsChunk, n - at));
}
__attribute__((target("avx512f"))) void stats_avx512(Worker& w, const float* v, int64_t n) {
  stats_of<v16>(w, v, n);
}
__attribute__((target("avx2,fma"))) void stats_avx2(Worker& w, const float* v, int64_t n) {
  stats_of<v8>(w, v, n);
}
void stats_plain(Worker& w, const float* v, int64_t n) {
  stats_of<v4>(w, v, n);
}

// How many logits the statistics count: the visible keys of every row from stats_from on, every head and
// component.
uint64_t stats_entries(const CpuAttentionInputs& in, const CpuAttentionOutputs& out) {
  uint64_t n = 0;
  for (int64_t i = std::max(out.row0, out.stats_from); i < out.row1; ++i)
    n += static_cast<uint64_t>(in.window > 0 ? std::min<int64_t>(i + 1, in.window) : i + 1);
  return n * static_cast<uint64_t>(in.heads) * (in.q2 ? 2u : 1u);
}

// Up to this many values, the exact median's pass collects all of them (4 bytes each) instead of sampling
// first where the median lies.
constexpr uint64_t kCollectAll = uint64_t{1} << 22;

// The input's keys transposed for the pass, made once per input (component 2: empty for the baseline).
const std::vector<float>& keys_of(const CpuAttentionInputs& in, bool second) {
  std::shared_ptr<const std::vector<float>>& slot = second ? in.k2t : in.k1t;
  if (!slot && second && in.k2 && in.k2 == in.k1) {  // DIFF V2: both components read the same keys
    keys_of(in, false);
    slot = in.k1t;
  }
  if (!slot)
    slot = std::make_shared<const std::vector<float>>(
        second && !in.k2 ? std::vector<float>{}
                         : transposed(second ? in.k2 : in.k1, in.kv_heads, in.T, in.d));
  return *slot;
}

}  // namespace

bool set_cpu_isa(CpuIsa isa) {
  const CpuIsa widest = widest_isa();
  if (isa == CpuIsa::Auto) isa = widest;
  if (static_cast<int>(isa) < static_cast<int>(widest)) return false;  // the CPU lacks it
  g_isa = static_cast<int>(isa);
  return true;
}

const char* cpu_isa_name() {
  const CpuIsa isa = current_isa();
  return isa == CpuIsa::Avx512 ? "AVX-512" : isa == CpuIsa::Avx2 ? "AVX2" : "x86-64";
}

CpuIsa cpu_isa() {
  return current_isa();
}

int log_bucket(float v) {
  return bucket_of(bucket_table(), std::fabs(v));
}

std::pair<std::vector<float>, std::vector<float>> cpu_logit_steps(const CpuAttentionInputs& in, int workers,
                                                                  const CpuParallelFor& parallel) {
  if (in.bits <= 0 || in.bits >= 32) return {};
  if (in.q_row0 != 0) throw Error("quantized attention logits need every query row (q_row0 is not 0)");
  const bool diff = in.q2 != nullptr;
  const std::vector<float>& k1t = keys_of(in, false);
  const std::vector<float>& k2t = keys_of(in, true);
  std::vector<Worker> ws = make_workers(workers, in.T, diff);
  for (Worker& w : ws) w.amax.assign(static_cast<size_t>(2 * in.heads), 0.0f);
  CpuAttentionOutputs none;
  std::vector<int> slots(static_cast<size_t>(in.heads), -1);
  RowArgs args{&in, &none, k1t.data(), diff ? k2t.data() : nullptr, slots.data(), &bucket_table(), 2,
               0,   0,     1};
  for_each_block(in.heads, 0, in.T, parallel, [&](int worker, int64_t h, int64_t r0, int64_t r1) {
    attention_rows(args, ws[worker], h, r0, r1);
  });
  const float levels = static_cast<float>(std::pow(2.0, in.bits - 1) - 1);
  std::vector<float> step1(static_cast<size_t>(in.heads)), step2(diff ? step1.size() : 0);
  for (int64_t h = 0; h < in.heads; ++h) {
    float m1 = 0, m2 = 0;
    for (const Worker& w : ws) {
      m1 = std::max(m1, w.amax[static_cast<size_t>(2 * h)]);
      m2 = std::max(m2, w.amax[static_cast<size_t>(2 * h + 1)]);
    }
    step1[static_cast<size_t>(h)] = std::max(m1, 1e-30f) / levels;
    if (diff) step2[static_cast<size_t>(h)] = std::max(m2, 1e-30f) / levels;
  }
  return {step1, step2};
}

void attention_cpu(const CpuAttentionInputs& in, CpuAttentionOutputs& out, int workers,
                   const CpuParallelFor& parallel) {
  const bool diff = in.q2 != nullptr;
  if (out.row0 < in.q_row0)
    throw Error("attention_cpu: rows from " + std::to_string(out.row0) + " asked, the queries start at row " +
                std::to_string(in.q_row0));
  if (in.bits > 0 && in.bits < 32 && out.step1.empty())
    std::tie(out.step1, out.step2) = cpu_logit_steps(in, workers, parallel);
  const std::vector<float>& k1t = keys_of(in, false);
  const std::vector<float>& k2t = keys_of(in, true);
  std::vector<int> slots(static_cast<size_t>(in.heads), -1);
  for (size_t k = 0; k < out.map_heads.size(); ++k)
    slots[static_cast<size_t>(out.map_heads[k])] = static_cast<int>(k);
  const BucketTable& buckets = bucket_table();
  std::vector<Worker> ws = make_workers(workers, in.T, diff);
  RowArgs args{&in, &out, k1t.data(), diff ? k2t.data() : nullptr, slots.data(), &buckets, 0, 0, 0, 1};
  auto run = [&]() {
    for_each_block(
        in.heads, out.row0, out.row1, parallel,
        [&](int worker, int64_t h, int64_t r0, int64_t r1) { attention_rows(args, ws[worker], h, r0, r1); },
        &out);
  };
  // An exact median: a first, sampling pass over every 32nd of the rows (their logits only) says where the
  // median lies, and the full pass keeps the values within a bin of it; a second pass over every row is
  // left for the rare case where the median falls outside.
  constexpr int kWindow = 1;
  int window_lo = 0, window_hi = -1;  // the buckets the full pass collects
  const uint64_t counted = out.logit_stats && out.exact_median ? stats_entries(in, out) : 0;
  if (out.logit_stats && out.exact_median && counted <= kCollectAll) {
    // Small maps: the full pass keeps every value (a few MB at most) and no pass samples. At a few hundred
    // tokens the sampling pass alone cost half the logits' work (every 8th row computes its group's).
    window_lo = kBelow;
    window_hi = kAbove;
    args.median_lo = buckets.lower[static_cast<size_t>(kBelow)];
    args.median_hi = buckets.lower[static_cast<size_t>(kAbove + 1)];
    for (Worker& w : ws) {
      w.median_values.reserve_more(counted / ws.size() + static_cast<size_t>(in.T) + 16);
      w.top_in_rows = false;  // the top-k is picked from those values at the end
    }
  } else if (out.logit_stats && out.exact_median) {
    args.mode = 3;
    args.sample_stride = std::max<int64_t>(1, (out.row1 - out.row0) / 32);
    run();
    std::vector<uint64_t> sample(kBuckets, 0);
    uint64_t total = 0;
    for (const Worker& w : ws)
      for (int b = 0; b < kBuckets; ++b) sample[static_cast<size_t>(b)] += w.sample[static_cast<size_t>(b)];
    for (uint64_t c : sample) total += c;
    if (total > 0) {
      uint64_t below = 0;
      int b = kBelow;
      for (; b < kAbove && below + sample[static_cast<size_t>(b)] < (total + 1) / 2; ++b)
        below += sample[static_cast<size_t>(b)];
      window_lo = std::max(kBelow, b - kWindow);
      window_hi = std::min(kAbove, b + kWindow);
      args.median_lo = buckets.lower[static_cast<size_t>(window_lo)];
      args.median_hi = buckets.lower[static_cast<size_t>(window_hi + 1)];
    }
  }
  args.mode = 0;
  run();
  if (!out.logit_stats) return;

  if (!ws.front().top_in_rows)  // collect-all: every counted value is in median_values
    for (Worker& w : ws) {
      w.kept = w.median_values.data.get();
      w.kept_n = static_cast<int64_t>(w.median_values.size);
    }
  *out.logit_stats = merge_stats(
      ws, out.exact_median, window_lo, window_hi,
      [&](float lo, float hi) {
        for (Worker& w : ws) w.median_values.size = 0;
        args.mode = 1;
        args.median_lo = lo;
        args.median_hi = hi;
        run();
      },
      &parallel);
}

ValueStats value_stats_cpu(const float* values, int64_t n, bool exact_median) {
  std::vector<Worker> ws(1);
  Worker& w = ws[0];
  w.top_in_rows = false;
  const CpuIsa isa = current_isa();
  (isa == CpuIsa::Avx512 ? stats_avx512 : isa == CpuIsa::Avx2 ? stats_avx2 : stats_plain)(w, values, n);
  w.kept = values;  // the median's bucket and the top-k picked from the array itself
  w.kept_n = n;
  return merge_stats(ws, exact_median, kBelow, kAbove, [](float, float) {});
}

}  // namespace difflens
