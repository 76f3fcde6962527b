// Tile-by-tile pooled attention on the GPU. One thread per (query, key) entry of a 16 x 16 tile; entries are
// recomputed from q, k and the row log-sum-exp (the row is never stored), then added into their cell.
#include "core/cuda/pooled_attention.h"

#include <cuda_runtime.h>

namespace difflens::cuda {
namespace {

constexpr int kTile = 16;

__device__ bool visible(int i, int j, int window) {
  return j <= i && (window <= 0 || i - j < window);
}

__device__ float dot(const float* a, const float* b, int d) {
  float s = 0;
  for (int e = 0; e < d; ++e) s += a[e] * b[e];
  return s;
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

// One block of 256 threads per (head, row): a two-pass max / sum-of-exp over the row's visible keys.
__global__ void row_lse_kernel(const float* q, const float* k, float* lse, int H, int Hkv, int T, int d,
                               int window) {
  const int h = blockIdx.y, i = blockIdx.x;
  if (h >= H || i >= T) return;
  const int kv = h / (H / Hkv);
  const float* qi = q + (static_cast<size_t>(h) * T + i) * d;
  __shared__ float red[256];
  float m = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x)
    if (visible(i, j, window)) m = fmaxf(m, dot(qi, k + (static_cast<size_t>(kv) * T + j) * d, d));
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float row_max = red[0];
  __syncthreads();
  float z = 0;
  for (int j = threadIdx.x; j <= i; j += blockDim.x)
    if (visible(i, j, window)) z += expf(dot(qi, k + (static_cast<size_t>(kv) * T + j) * d, d) - row_max);
  red[threadIdx.x] = z;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) lse[static_cast<size_t>(h) * T + i] = row_max + logf(red[0]);
}

__global__ void pooled_kernel(PooledAttentionArgs a, bool diff) {
  const int h = blockIdx.z;
  const int i = blockIdx.y * kTile + threadIdx.y, j = blockIdx.x * kTile + threadIdx.x;
  if (h >= a.H || i >= a.T || j >= a.T || blockIdx.x > blockIdx.y)
    return;  // tiles above the diagonal: future
  if (!visible(i, j, a.window) && j > i) return;
  const int kv = h / (a.H / a.Hkv);
  const size_t cell = (static_cast<size_t>(h) * a.P + a.bin[i]) * a.P + a.bin[j];
  float p1 = 0, p2 = 0;  // hidden (window) entries count as 0, like the CPU pooling of the exact map
  if (visible(i, j, a.window)) {
    p1 = expf(dot(a.q1 + (static_cast<size_t>(h) * a.T + i) * a.d,
                  a.k1 + (static_cast<size_t>(kv) * a.T + j) * a.d, a.d) -
              a.lse1[static_cast<size_t>(h) * a.T + i]);
    if (diff)
      p2 = expf(dot(a.q2 + (static_cast<size_t>(h) * a.T + i) * a.d,
                    a.k2 + (static_cast<size_t>(kv) * a.T + j) * a.d, a.d) -
                a.lse2[static_cast<size_t>(h) * a.T + i]);
  }
  if (diff) {
    atomicAdd(a.sum1 + cell, p1);
    atomic_max_magnitude(a.best1 + cell, p1);
    atomicAdd(a.sum2 + cell, p2);
    atomic_max_magnitude(a.best2 + cell, p2);
    const float lambda = a.lambda_rows ? a.lambda_rows[static_cast<size_t>(h) * a.T + i] : a.lambda;
    const float v = p1 - lambda * p2;
    atomicAdd(a.suma + cell, v);
    atomic_max_magnitude(a.besta + cell, v);
  } else {
    atomicAdd(a.suma + cell, p1);
    atomic_max_magnitude(a.besta + cell, p1);
  }
}

}  // namespace

int row_lse(const float* q, const float* k, float* lse, int H, int Hkv, int T, int d, int window) {
  row_lse_kernel<<<dim3(T, H), 256>>>(q, k, lse, H, Hkv, T, d, window);
  const cudaError_t e = cudaGetLastError();
  return e != cudaSuccess ? static_cast<int>(e) : static_cast<int>(cudaDeviceSynchronize());
}

int pooled_attention(const PooledAttentionArgs& args, bool diff) {
  const int tiles = (args.T + kTile - 1) / kTile;
  pooled_kernel<<<dim3(tiles, tiles, args.H), dim3(kTile, kTile)>>>(args, diff);
  const cudaError_t e = cudaGetLastError();
  return e != cudaSuccess ? static_cast<int>(e) : static_cast<int>(cudaDeviceSynchronize());
}

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace difflens::cuda
