// Long-prompt attention on the GPU without T x T maps (pooled_attention.h). One thread per query row, 128
// rows a block (one head each); keys pass through shared memory 32 at a time and every thread reads the same
// key (a broadcast). Each row's query lives in registers, zero-padded to the kernel's width D. Pass 2 keeps a
// row's running sums and largest entries of the key cell it is in; at each key cell's end a warp whose rows
// share one row cell adds its 32 rows into the cell with one atomic per value (rows in different cells: one
// per row), so the atomics are per row cell and key cell, not per entry. The statistics' buckets are counted
// in shared memory; each warp keeps the kTopK largest |logits| it saw in a shared list (a value enters when
// it beats the list's smallest and the caller's floor, so after the first kTopK few do).
// From logits a matrix product wrote (AttentionRows::s1), the same kernels read each block's tile of logits
// ([128 rows, 32 keys], coalesced, padded against bank conflicts) instead of computing dot products, and each
// block takes kSplitKeys keys of its rows: pass 1 writes each block's partial log-sum-exp and largest |logit|
// per row, which a third kernel combines.
#include "core/cuda/pooled_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace difflens::cuda {
namespace {

constexpr int kRows = 128;  // query rows per block, one per thread
constexpr int kWarps = kRows / 32;
constexpr int kKeys = 32;        // keys per shared-memory tile
constexpr int kPad = kKeys + 1;  // a tile of logits' row stride in shared memory (no bank conflicts)
constexpr unsigned kAll = 0xffffffffu;

__device__ __forceinline__ bool visible(int i, int j, int window) {
  return j <= i && (window <= 0 || i - j < window);
}

// Keys [t0, t0 + kKeys) of group kv into shared memory, D floats each, zero past d and past `last`.
template <int D>
__device__ void load_keys(float* dst, const float* k, int kv, int T, int d, int t0, int last) {
  for (int x = threadIdx.x; x < kKeys * D; x += blockDim.x) {
    const int jj = x / D, e = x % D, j = t0 + jj;
    dst[x] = (j <= last && e < d) ? k[(static_cast<size_t>(kv) * T + j) * d + e] : 0.0f;
  }
}

template <int D>
__device__ void load_query(float (&q)[D], const float* src, int h, int i, int T, int d, bool active) {
#pragma unroll
  for (int e = 0; e < D; ++e) q[e] = (active && e < d) ? src[(static_cast<size_t>(h) * T + i) * d + e] : 0.0f;
}

// q · k with k in shared memory (16-byte aligned: D is a multiple of 4), in order of e as the CPU's dot.
template <int D>
__device__ __forceinline__ float dot(const float (&q)[D], const float* k) {
  const float4* k4 = reinterpret_cast<const float4*>(k);
  float s = 0;
#pragma unroll
  for (int e = 0; e < D / 4; ++e) {
    const float4 v = k4[e];
    s = fmaf(q[4 * e], v.x, s);
    s = fmaf(q[4 * e + 1], v.y, s);
    s = fmaf(q[4 * e + 2], v.z, s);
    s = fmaf(q[4 * e + 3], v.w, s);
  }
  return s;
}

// The block's rows and keys: tiles are launched last-first, so the rows with the most keys start first.
// Keys [kb, ke] (none when kb > ke): from the first key any row of the block sees to its last row; from
// logits, the block's split of them (blockIdx.z).
struct BlockRows {
  int h, kv, first, last, i, kb, ke;
  bool active;
  __device__ BlockRows(const AttentionRows& a) {
    h = blockIdx.y;
    kv = h / (a.H / a.Hkv);
    first = a.row0 + (gridDim.x - 1 - blockIdx.x) * kRows;
    last = min(a.row0 + a.rows, first + kRows) - 1;
    i = first + threadIdx.x;
    active = i <= last;
    kb = a.window > 0 ? max(0, first - a.window + 1) : 0;
    ke = last;
    if (a.s1) {
      const int split = a.split > 0 ? a.split : kSplitKeys;
      kb = max(kb, a.key0 + static_cast<int>(blockIdx.z) * split);
      ke = min(ke, a.key0 + (static_cast<int>(blockIdx.z) + 1) * split - 1);
    }
  }
};

// The logits of the block's rows against keys [t0, t0 + kKeys) (up to ke) into shared memory, kPad floats a
// row, zero elsewhere. Each warp reads 32 consecutive keys of one row.
template <bool DIFF>
__device__ void load_logits(float* st1, float* st2, const AttentionRows& a, const BlockRows& r, int t0) {
  for (int x = threadIdx.x; x < kRows * kKeys; x += blockDim.x) {
    const int row = x / kKeys, jj = x % kKeys, i = r.first + row, j = t0 + jj;
    const bool in = i <= r.last && j <= r.ke;
    const size_t at = (static_cast<size_t>(r.h) * a.rows + (i - a.row0)) * a.ld + (j - a.key0);
    st1[row * kPad + jj] = in ? a.s1[at] : 0.0f;
    if (DIFF) st2[row * kPad + jj] = in ? a.s2[at] : 0.0f;
  }
}

// A block's tiles: of keys (q · k computed per entry, each row's query in registers) or of logits.
template <int D, bool DIFF, bool LOGITS>
struct Tiles {
  float q1[D], q2[D];
  float *t1, *t2;
  __device__ Tiles(const AttentionRows& a, const BlockRows& r, float* shared) {
    t1 = shared;
    t2 = shared + (LOGITS ? kRows * kPad : kKeys * D);
    if (LOGITS) return;
    load_query<D>(q1, a.q1, r.h, r.i, a.T, a.d, r.active);
    if (DIFF) load_query<D>(q2, a.q2, r.h, r.i, a.T, a.d, r.active);
  }
  __device__ void load(const AttentionRows& a, const BlockRows& r, int t0) {
    if (LOGITS) {
      load_logits<DIFF>(t1, t2, a, r, t0);
    } else {
      load_keys<D>(t1, a.k1, r.kv, a.T, a.d, t0, r.ke);
      if (DIFF) load_keys<D>(t2, a.k2, r.kv, a.T, a.d, t0, r.ke);
    }
  }
  __device__ float s1(int jj) const { return LOGITS ? t1[threadIdx.x * kPad + jj] : dot<D>(q1, t1 + jj * D); }
  __device__ float s2(int jj) const { return LOGITS ? t2[threadIdx.x * kPad + jj] : dot<D>(q2, t2 + jj * D); }
};

__device__ __forceinline__ void online(float& m, float& z, float s) {
  if (s > m) {
    z = z * expf(m - s) + 1.0f;
    m = s;
  } else {
    z += expf(s - m);
  }
}

template <int D, bool DIFF, bool LOGITS>
__global__ void __launch_bounds__(kRows) lse_kernel(RowLseArgs a) {
  extern __shared__ float4 shared4[];
  const BlockRows r(a);
  Tiles<D, DIFF, LOGITS> tiles(a, r, reinterpret_cast<float*>(shared4));
  float m1 = -INFINITY, z1 = 0, m2 = -INFINITY, z2 = 0, mx = 0;
  for (int t0 = r.kb; t0 <= r.ke; t0 += kKeys) {
    __syncthreads();
    tiles.load(a, r, t0);
    __syncthreads();
    const int n = min(kKeys, r.ke - t0 + 1);
    for (int jj = 0; jj < n; ++jj) {
      if (!r.active || !visible(r.i, t0 + jj, a.window)) continue;
      const float s1 = tiles.s1(jj);
      online(m1, z1, s1);
      mx = fmaxf(mx, fabsf(s1));
      if (DIFF) {
        const float s2 = tiles.s2(jj);
        online(m2, z2, s2);
        mx = fmaxf(mx, fabsf(s2));
      }
    }
  }
  if (!r.active) return;
  if (LOGITS) {  // this block's part of the row: -inf (and 0) where it saw no key of it
    const size_t plane = static_cast<size_t>(a.H) * a.rows;
    const size_t at = blockIdx.z * plane + static_cast<size_t>(r.h) * a.rows + (r.i - a.row0);
    const size_t parts = static_cast<size_t>(gridDim.z) * plane;
    a.scratch[at] = z1 > 0 ? m1 + logf(z1) : -INFINITY;
    if (DIFF) a.scratch[parts + at] = z2 > 0 ? m2 + logf(z2) : -INFINITY;
    a.scratch[(DIFF ? 2 : 1) * parts + at] = mx;
    return;
  }
  const size_t at = static_cast<size_t>(r.h) * a.T + r.i;
  a.lse1[at] = m1 + logf(z1);
  if (DIFF) a.lse2[at] = m2 + logf(z2);
  if (a.max_abs) a.max_abs[at] = mx;
}

// From logits: each row's partial log-sum-exps and largest |logit| of its `splits` blocks combined.
__global__ void combine_kernel(RowLseArgs a, int splits, bool diff) {
  const size_t plane = static_cast<size_t>(a.H) * a.rows;
  const size_t x = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (x >= plane) return;
  const int h = static_cast<int>(x / a.rows), row = static_cast<int>(x % a.rows);
  const size_t parts = static_cast<size_t>(splits) * plane;
  auto lse_of = [&](const float* p) {
    float m = -INFINITY;
    for (int s = 0; s < splits; ++s) m = fmaxf(m, p[s * plane + x]);
    float z = 0;
    for (int s = 0; s < splits; ++s) {
      const float v = p[s * plane + x];
      if (v > -INFINITY) z += expf(v - m);
    }
    return m + logf(z);
  };
  const size_t at = static_cast<size_t>(h) * a.T + a.row0 + row;
  a.lse1[at] = lse_of(a.scratch);
  if (diff) a.lse2[at] = lse_of(a.scratch + parts);
  if (a.max_abs) {
    const float* p = a.scratch + (diff ? 2 : 1) * parts;
    float mx = 0;
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, p[s * plane + x]);
    a.max_abs[at] = mx;
  }
}

__device__ __forceinline__ float larger(float best, float v) {
  return fabsf(v) > fabsf(best) ? v : best;
}

// Keeps the value of largest magnitude at `addr` (ties: the one already there).
__device__ void atomic_max_magnitude(float* addr, float v) {
  int* p = reinterpret_cast<int*>(addr);
  int old = *p;
  while (fabsf(v) > fabsf(__int_as_float(old))) {
    const int seen = atomicCAS(p, old, __float_as_int(v));
    if (seen == old) break;
    old = seen;
  }
}

// A row's running sums and largest entries in the current key cell.
struct CellAccumulator {
  float s1 = 0, b1 = 0, s2 = 0, b2 = 0, sa = 0, ba = 0;
  bool touched = false;
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(kAll, v, off);
  return v;
}
__device__ __forceinline__ float warp_larger(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = larger(v, __shfl_xor_sync(kAll, v, off));
  return v;
}

// Adds the warp's accumulators of key cell kc into the outputs and clears them. Called by all 32 lanes.
template <bool DIFF>
__device__ void flush(const PooledAttentionArgs& a, CellAccumulator& c, int slot, int row_cell, int kc) {
  const unsigned has = __ballot_sync(kAll, c.touched);
  if (has == 0) return;
  const int lane = threadIdx.x % 32, leader = __ffs(has) - 1;
  const int lead_cell = __shfl_sync(kAll, row_cell, leader);
  const bool one_cell = __ballot_sync(kAll, c.touched && row_cell != lead_cell) == 0;
  auto add = [&](int rc, const CellAccumulator& v) {
    const size_t cell = (static_cast<size_t>(slot) * a.P + rc) * a.P + kc;
    if (DIFF) {
      atomicAdd(a.sum1 + cell, v.s1);
      atomic_max_magnitude(a.best1 + cell, v.b1);
      atomicAdd(a.sum2 + cell, v.s2);
      atomic_max_magnitude(a.best2 + cell, v.b2);
    }
    atomicAdd(a.suma + cell, v.sa);
    atomic_max_magnitude(a.besta + cell, v.ba);
  };
  if (one_cell) {
    CellAccumulator w;
    if (DIFF) {
      w.s1 = warp_sum(c.s1);
      w.b1 = warp_larger(c.b1);
      w.s2 = warp_sum(c.s2);
      w.b2 = warp_larger(c.b2);
    }
    w.sa = warp_sum(c.sa);
    w.ba = warp_larger(c.ba);
    if (lane == leader) add(lead_cell, w);
  } else if (c.touched) {
    add(row_cell, c);
  }
  c = CellAccumulator();
}

// Offers each lane's |logit| v to the warp's list of its kTopK largest (shared memory). list_min, the list's
// smallest value, is the same in every lane. Called by all 32 lanes; lanes with nothing to offer pass -1.
__device__ void offer(float* list, float& list_min, float v, float floor_value) {
  unsigned want = __ballot_sync(kAll, v > list_min && v >= floor_value);
  const int lane = threadIdx.x % 32;
  while (want) {
    const int src = __ffs(want) - 1;
    want &= want - 1;
    const float x = __shfl_sync(kAll, v, src);
    if (!(x > list_min)) continue;
    int at = kTopK;  // the first slot holding the smallest value
    for (int s = lane; s < kTopK; s += 32)
      if (list[s] == list_min) at = min(at, s);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) at = min(at, __shfl_xor_sync(kAll, at, off));
    if (lane == 0) list[at] = x;
    __syncwarp();
    float m = INFINITY;
    for (int s = lane; s < kTopK; s += 32) m = fminf(m, list[s]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) m = fminf(m, __shfl_xor_sync(kAll, m, off));
    list_min = m;
    __syncwarp();
  }
}

// LogHistogram's bucket of |l| in float: log10, minus kLogMin, times the bins a decade, floored, clamped to
// [-1, kBins], plus one (LogHistogram::add works in double: a value within float rounding of an edge may land
// in the bucket beside it).
__device__ __forceinline__ int bucket(float v) {
  float b = floorf((log10f(v) - static_cast<float>(kLogMin)) * static_cast<float>(kBinsPerDecade));
  b = fminf(fmaxf(b, -1.0f), static_cast<float>(kBins));
  return static_cast<int>(b) + 1;
}

template <int D, bool DIFF, bool LOGITS>
__global__ void __launch_bounds__(kRows) pooled_kernel(PooledAttentionArgs a) {
  extern __shared__ float4 shared4[];
  __shared__ int key_cell[kKeys];
  __shared__ unsigned hist[kHistBuckets];
  __shared__ float top[kWarps][kTopK];
  const BlockRows r(a);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool stats = a.hist != nullptr;
  const int slot = a.head_slot ? a.head_slot[r.h] : -1;
  const bool pool = slot >= 0;  // the same for the whole block
  if (stats) {
    for (int x = threadIdx.x; x < kHistBuckets; x += blockDim.x) hist[x] = 0;
    for (int x = threadIdx.x; x < kWarps * kTopK; x += blockDim.x) top[x / kTopK][x % kTopK] = -1.0f;
  }
  Tiles<D, DIFF, LOGITS> tiles(a, r, reinterpret_cast<float*>(shared4));
  const size_t at = static_cast<size_t>(r.h) * a.T + r.i;
  const float lse1 = r.active ? a.lse1[at] : 0.0f;
  const float lse2 = DIFF && r.active ? a.lse2[at] : 0.0f;
  const float lambda = DIFF && a.lambda_rows ? (r.active ? a.lambda_rows[at] : 0.0f) : a.lambda;
  const int row_cell = r.active && pool ? a.bin[r.i] : -1;
  const bool row_stats = stats && r.active && r.i >= a.stats_from;
  float list_min = -1.0f;
  double abs_sum = 0;
  CellAccumulator c;
  int kc = -1;
  for (int t0 = r.kb; t0 <= r.ke; t0 += kKeys) {
    const int n = min(kKeys, r.ke - t0 + 1);
    __syncthreads();
    tiles.load(a, r, t0);
    if (pool && static_cast<int>(threadIdx.x) < n) key_cell[threadIdx.x] = a.bin[t0 + threadIdx.x];
    __syncthreads();
    for (int jj = 0; jj < n; ++jj) {
      if (pool && key_cell[jj] != kc) {  // the same key for every thread of the block
        if (kc >= 0) flush<DIFF>(a, c, slot, row_cell, kc);
        kc = key_cell[jj];
      }
      const bool vis = r.active && visible(r.i, t0 + jj, a.window);
      float s1 = 0, s2 = 0;
      if (vis) {
        s1 = tiles.s1(jj);
        if (DIFF) s2 = tiles.s2(jj);
        if (pool) {
          const float p1 = expf(s1 - lse1);
          if (DIFF) {
            const float p2 = expf(s2 - lse2), v = p1 - lambda * p2;
            c.s1 += p1;
            c.b1 = larger(c.b1, p1);
            c.s2 += p2;
            c.b2 = larger(c.b2, p2);
            c.sa += v;
            c.ba = larger(c.ba, v);
          } else {
            c.sa += p1;
            c.ba = larger(c.ba, p1);
          }
          c.touched = true;
        }
      }
      if (stats) {
        const bool counted = vis && row_stats;
        float v1 = -1.0f, v2 = -1.0f;
        if (counted) {
          v1 = fabsf(s1);
          if (isnan(v1)) v1 = 0.0f;
          abs_sum += v1;
          atomicAdd(&hist[bucket(v1)], 1u);
          if (DIFF) {
            v2 = fabsf(s2);
            if (isnan(v2)) v2 = 0.0f;
            abs_sum += v2;
            atomicAdd(&hist[bucket(v2)], 1u);
          }
        }
        offer(top[warp], list_min, v1, a.top_floor);
        if (DIFF) offer(top[warp], list_min, v2, a.top_floor);
      }
    }
  }
  if (pool && kc >= 0) flush<DIFF>(a, c, slot, row_cell, kc);
  if (!stats) return;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) abs_sum += __shfl_xor_sync(kAll, abs_sum, off);
  if (lane == 0 && abs_sum != 0) atomicAdd(a.abs_sum, abs_sum);
  __syncthreads();
  for (int x = threadIdx.x; x < kHistBuckets; x += blockDim.x)
    if (hist[x]) atomicAdd(a.hist + x, static_cast<unsigned long long>(hist[x]));
  const size_t block = (static_cast<size_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  for (int s = lane; s < kTopK; s += 32) a.top[(block * kWarps + warp) * kTopK + s] = top[warp][s];
}

// The kernels' width for components of width d (0: none).
int width_for(int d, bool diff) {
  if (d <= 0) return 0;
  if (d <= 16) return 16;
  if (d <= 32) return 32;
  if (d <= 64) return 64;
  if (d <= 128 && !diff) return 128;
  return 0;
}

// Makes `device` current for its lifetime (-1: leaves the current one), then restores the previous one.
struct DeviceScope {
  int previous = -1;
  explicit DeviceScope(int device) {
    if (device < 0 || cudaGetDevice(&previous) != cudaSuccess || previous == device) {
      previous = -1;
      return;
    }
    cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous >= 0) cudaSetDevice(previous);
  }
};

bool valid(const AttentionRows& a) {
  // From logits: keys from the first that row0 sees (or earlier) to the rows' last.
  const int first_key = a.window > 0 ? std::max(0, a.row0 - a.window + 1) : 0;
  if (a.s1 && (a.key0 < 0 || a.key0 > first_key || a.ld < 0 || a.key0 + a.ld < a.row0 + a.rows)) return false;
  return a.H > 0 && a.Hkv > 0 && a.H % a.Hkv == 0 && a.T > 0 && a.row0 >= 0 && a.rows >= 0 &&
         a.row0 + a.rows <= a.T;
}

// Blocks a launch has along its keys (1 unless it reads logits).
int splits_of(const AttentionRows& a) {
  const int split = a.split > 0 ? a.split : kSplitKeys;
  return a.s1 ? std::max(1, (a.row0 + a.rows - a.key0 + split - 1) / split) : 1;
}

// The two kernels, each instantiated for the widths below and for DIFF or not.
struct LseKernel {
  template <int D, bool DIFF, bool LOGITS>
  static void run(const RowLseArgs& a, dim3 grid, size_t shared, cudaStream_t stream) {
    lse_kernel<D, DIFF, LOGITS><<<grid, kRows, shared, stream>>>(a);
  }
};
struct PooledKernel {
  template <int D, bool DIFF, bool LOGITS>
  static void run(const PooledAttentionArgs& a, dim3 grid, size_t shared, cudaStream_t stream) {
    pooled_kernel<D, DIFF, LOGITS><<<grid, kRows, shared, stream>>>(a);
  }
};

// Checks the rows, then launches Kernel over their blocks of kRows rows, one head each (from logits: and
// kSplitKeys keys each), on args.device, with shared memory for a tile of keys of each component at the
// kernel width that takes d (from logits: a tile of logits of each component, whatever d).
template <typename Kernel, typename Args>
int launch(const Args& a, bool diff) {
  if (!valid(a)) return static_cast<int>(cudaErrorInvalidValue);
  if (a.rows == 0) return 0;
  const int width = a.s1 ? 16 : width_for(a.d, diff);
  if (width == 0 || (a.s1 && diff && !a.s2)) return static_cast<int>(cudaErrorInvalidValue);
  const DeviceScope scope(a.device);
  const dim3 grid((a.rows + kRows - 1) / kRows, a.H, splits_of(a));
  const size_t tile = a.s1 ? static_cast<size_t>(kRows) * kPad : static_cast<size_t>(kKeys) * width;
  const size_t shared = sizeof(float) * tile * (diff ? 2 : 1);
  const auto stream = static_cast<cudaStream_t>(a.stream);
  if (a.s1) {
    if (diff)
      Kernel::template run<16, true, true>(a, grid, shared, stream);
    else
      Kernel::template run<16, false, true>(a, grid, shared, stream);
    return static_cast<int>(cudaGetLastError());
  }
  auto go = [&](auto w) {
    constexpr int D = decltype(w)::value;
    if (diff)
      Kernel::template run<D, true, false>(a, grid, shared, stream);
    else
      Kernel::template run<D, false, false>(a, grid, shared, stream);
  };
  switch (width) {
    case 16:
      go(std::integral_constant<int, 16>{});
      break;
    case 32:
      go(std::integral_constant<int, 32>{});
      break;
    case 64:
      go(std::integral_constant<int, 64>{});
      break;
    default:
      go(std::integral_constant<int, 128>{});
      break;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

bool supports(int d, bool diff) {
  return width_for(d, diff) > 0;
}

size_t top_slots(const AttentionRows& a) {
  return static_cast<size_t>((a.rows + kRows - 1) / kRows) * static_cast<size_t>(a.H) *
         static_cast<size_t>(splits_of(a)) * kWarps * kTopK;
}

size_t lse_scratch_floats(const AttentionRows& a, bool diff) {
  if (!a.s1) return 0;
  return static_cast<size_t>(splits_of(a)) * static_cast<size_t>(a.H) * static_cast<size_t>(a.rows) *
         (diff ? 3 : 2);
}

int row_lse(const RowLseArgs& a, bool diff) {
  if (a.s1 && !a.scratch) return static_cast<int>(cudaErrorInvalidValue);
  const int code = launch<LseKernel>(a, diff);
  if (code != 0 || !a.s1 || a.rows == 0) return code;
  const size_t rows = static_cast<size_t>(a.H) * static_cast<size_t>(a.rows);
  const DeviceScope scope(a.device);
  combine_kernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, static_cast<cudaStream_t>(a.stream)>>>(
      a, splits_of(a), diff);
  return static_cast<int>(cudaGetLastError());
}

int pooled_attention(const PooledAttentionArgs& a, bool diff) {
  return launch<PooledKernel>(a, diff);
}

int synchronize(int device) {
  const DeviceScope scope(device);
  return static_cast<int>(cudaDeviceSynchronize());
}

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace difflens::cuda
